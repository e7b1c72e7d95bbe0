"""Volcano (``kubernetes`` backend), the pure core: AppDef → Job, Job status → states.

An app becomes one ``batch.volcano.sh/v1alpha1`` Job with **one task per replica**, because
macros (``${replica_id}``) differ per replica while a Volcano task's replicas share one
template. Volcano names each pod ``{job}-{task}-{index}`` (index is always 0 here) and, with
the ``svc`` plugin, gives it that name as hostname under a headless Service named after the
job, and sets ``VC_<TASK>_HOSTS`` (the task name upper-cased, ``-`` → ``_``) in every pod.

Rank 0 (role 0, replica 0): ``${rank0_env}`` is ``VC_<TASK0>_HOSTS`` in every replica but
rank 0 itself, where it is ``TORCHX_RANK0_HOST=localhost`` (a process reaches its own store
at once, before DNS knows its name). Every replica also gets ``TORCHX_RANK0_HOST``.

Retries (``role.max_retries``, ``role.retry_policy``):

============== ============================================================================
policy         on ``PodFailed`` / ``PodEvicted`` of a replica of the role
============== ============================================================================
APPLICATION    ``RestartJob``: every replica restarts
REPLICA        ``RestartTask``: only that replica restarts (its task has one pod)
ROLE           ``RestartJob``: Volcano has no per-role restart, so the whole app restarts
no retries     ``TerminateJob`` for a required replica (the app fails at once instead of
               waiting for peers that hang on collectives); nothing for an optional one
============== ============================================================================

Volcano counts retries per job: ``spec.maxRetry`` is the largest ``max_retries`` of the
roles plus one (Volcano fails a job whose ``retryCount`` reaches ``maxRetry``, counting the
first run). Elastic roles (``min_replicas``): the first ``min_replicas`` tasks have
``minAvailable: 1``, the others 0, and the job's ``minAvailable`` is their sum.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from torchx_provider.errors import InvalidOptionError
from torchx_provider.schedulers.api import DescribeAppResponse
from torchx_provider.schedulers.kube import naming
from torchx_provider.schedulers.kube.options import KubeOpts, kube_run_opts
from torchx_provider.schedulers.kube.pod import (
    PodSettings,
    ReplicaIdentity,
    RolePodBuilder,
    macro_values,
    object_metadata,
    role_annotation,
)
from torchx_provider.schedulers.kube.request import (
    KubeRequest,
    KubeTranslation,
    workspace_builds,
)
from torchx_provider.schedulers.kube.resources import VOLCANO_COMMAND, VOLCANO_JOB, CustomResource
from torchx_provider.schedulers.kube.status import (
    POD_PHASE_STATE,
    ReplicaKey,
    ReplicaRecord,
    assemble,
    pods_by_replica,
    replica_of,
    role_from_template,
    stored_role,
)
from torchx_provider.schedulers.labels import ANNOTATION_ROLE, RANK0_HOST_ENV, TaskInstanceKey
from torchx_provider.specs.api import NONE, AppDef, AppState, RetryPolicy, Role, is_terminal
from torchx_provider.specs.runopts import CfgVal, runopts

log = logging.getLogger(__name__)

BACKEND = "kubernetes"
SCHEDULER_NAME = "volcano"

#: Job phase (``status.state.phase``) → app state.
#: https://github.com/volcano-sh/apis/blob/master/pkg/apis/batch/v1alpha1/job.go
JOB_STATE: dict[str, AppState] = {
    # Waiting in the queue for the scheduler to place minAvailable pods.
    "Pending": AppState.PENDING,
    # Aborted by a user (AbortJob); pods are being released.
    "Aborting": AppState.CANCELLED,
    # Aborted by a user or by error handling; the job is kept and may be resumed.
    "Aborted": AppState.CANCELLED,
    # At least minAvailable pods are running.
    "Running": AppState.RUNNING,
    # Restarting after a failure (RestartJob/RestartTask); pods are being recreated.
    "Restarting": AppState.RUNNING,
    # CompleteJob was issued; pods are being released.
    "Completing": AppState.RUNNING,
    # Every required task succeeded.
    "Completed": AppState.SUCCEEDED,
    # TerminateJob was issued (our fail-fast policy); pods are being released.
    "Terminating": AppState.FAILED,
    # Ended by TerminateJob or an event: the app did not succeed.
    "Terminated": AppState.FAILED,
    # Retries exhausted, or too few tasks succeeded.
    "Failed": AppState.FAILED,
}

#: Task pod phase (the keys of ``status.taskStatusCount[task].phase``) → replica state.
#: Volcano counts the pods of each task by ``pod.status.phase``; one task is one replica here.
TASK_STATE: dict[str, AppState] = dict(POD_PHASE_STATE)

#: Of several phases counted for one task (an old pod and its replacement), the live one wins.
_TASK_PHASE_ORDER = ("Running", "Pending", "Unknown", "Failed", "Succeeded")

_RESTART_ACTION: dict[RetryPolicy, str] = {
    RetryPolicy.APPLICATION: "RestartJob",
    RetryPolicy.REPLICA: "RestartTask",
    # Volcano cannot restart only the tasks of one role: the whole job restarts.
    RetryPolicy.ROLE: "RestartJob",
}
_FAIL_FAST_ACTION = "TerminateJob"
_FAILURE_EVENTS = ("PodFailed", "PodEvicted")


@dataclass(frozen=True)
class VolcanoOpts(KubeOpts):
    """The resolved run options (see :func:`volcano_run_opts` for their help); the shared
    ones come from :class:`KubeOpts`."""

    queue: str
    priority_class: str | None = None
    ttl_seconds_after_finished: int | None = None

    def pod_settings(self) -> PodSettings:
        return replace(super().pod_settings(), priority_class_name=self.priority_class)


def volcano_run_opts() -> runopts:
    """The ``kubernetes`` backend's run options: the shared Kubernetes ones and its own."""
    own = runopts()
    own.add("queue", str, "Volcano queue to schedule the job in", required=True)
    own.add("priority_class", str, "PriorityClass of the job (and its pods)")
    own.add(
        "ttl_seconds_after_finished",
        int,
        "delete the job this many seconds after it finished (default: keep it)",
    )
    return kube_run_opts("job", own)


# ---------------------------------------------------------------------------------------------
# AppDef → Job


def _check_opts(opts: VolcanoOpts) -> None:
    opts.check()
    ttl = opts.ttl_seconds_after_finished
    if ttl is not None and ttl < 0:
        raise InvalidOptionError(
            f"run option ttl_seconds_after_finished must be >= 0, got {ttl}",
            option="ttl_seconds_after_finished",
        )
    if not opts.queue.strip():
        raise InvalidOptionError("run option queue is empty; name a Volcano queue", "queue")


def task_policies(role: Role, required: bool) -> list[dict[str, str]]:
    """The lifecycle policies of one replica's task (see the module docstring)."""
    if role.max_retries > 0:
        action = _RESTART_ACTION[role.retry_policy]
    elif required:
        action = _FAIL_FAST_ACTION
    else:
        return []
    return [{"event": event, "action": action} for event in _FAILURE_EVENTS]


@dataclass(frozen=True)
class VolcanoNames:
    """The job name and one slug per role (its task and container name stem)."""

    job: str
    slugs: list[str]

    @classmethod
    def of(cls, app: AppDef, suffix: str) -> VolcanoNames:
        job = naming.job_name(app.name, suffix)
        budgets = [naming.role_budget(job, r.num_replicas, overhead=2) for r in app.roles]
        return cls(job, naming.role_slugs([r.name for r in app.roles], budgets))


def app_to_job(
    app: AppDef,
    opts: VolcanoOpts,
    *,
    namespace: str,
    suffix: str,
    ti_key: TaskInstanceKey | None = None,
    names: VolcanoNames | None = None,
) -> dict[str, Any]:
    """The Volcano Job of ``app`` (pure: same input, same manifest)."""
    names = names or VolcanoNames.of(app, suffix)
    job, slugs = names.job, names.slugs
    rank0_task = naming.volcano_task_name(slugs[0], 0)
    rank0_host = f"{naming.volcano_pod_name(job, rank0_task)}.{job}"
    rank0_env = naming.volcano_hosts_env(rank0_task)
    settings = opts.pod_settings()

    tasks: list[dict[str, Any]] = []
    min_available = 0
    for role_index, (role, slug) in enumerate(zip(app.roles, slugs, strict=True)):
        builder = RolePodBuilder(role, slug, settings, where=f"roles[{role_index}]")
        ident = ReplicaIdentity(app.name, job, role.name, role_index, ti_key)
        for replica_id in range(role.num_replicas):
            is_rank0 = role_index == 0 and replica_id == 0
            values = macro_values(job, replica_id, RANK0_HOST_ENV if is_rank0 else rank0_env)
            labels, annotations = ident.of(replica_id)
            if replica_id == 0:
                annotations[ANNOTATION_ROLE] = role_annotation(role)
            template = builder.pod(
                values,
                labels=labels,
                annotations=annotations,
                env={RANK0_HOST_ENV: "localhost" if is_rank0 else rank0_host},
            )
            required = role.min_replicas is None or replica_id < role.min_replicas
            min_available += required
            task: dict[str, Any] = {
                "name": naming.volcano_task_name(slug, replica_id),
                "replicas": 1,
                "minAvailable": int(required),
                "template": template,
            }
            policies = task_policies(role, required)
            if policies:
                task["policies"] = policies
            tasks.append(task)

    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER_NAME,
        "queue": opts.queue,
        "minAvailable": min_available,
        "maxRetry": max(r.max_retries for r in app.roles) + 1,
        # env: VC_TASK_INDEX; svc: hostnames, the headless Service and VC_<TASK>_HOSTS.
        # publish-not-ready-addresses: peers resolve each other before readiness probes pass.
        "plugins": {"env": [], "svc": ["--publish-not-ready-addresses"]},
        "tasks": tasks,
    }
    if opts.priority_class:
        spec["priorityClassName"] = opts.priority_class
    if opts.ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = opts.ttl_seconds_after_finished
    return {
        "apiVersion": VOLCANO_JOB.api_version,
        "kind": VOLCANO_JOB.kind,
        "metadata": object_metadata(
            job, namespace, app.name, ti_key, opts.labels, opts.annotations
        ),
        "spec": spec,
    }


# ---------------------------------------------------------------------------------------------
# Job → states


def job_state(phase: str | None, where: str = "") -> AppState:
    """The app state of a job phase; an unknown phase is ``UNKNOWN`` (with a warning)."""
    if not phase:
        return AppState.SUBMITTED  # created, not yet seen by the controller
    state = JOB_STATE.get(phase)
    if state is None:
        log.warning("unknown Volcano job phase %r%s; reporting UNKNOWN", phase, where)
        return AppState.UNKNOWN
    return state


def task_state(counts: Mapping[str, Any] | None) -> AppState | None:
    """The replica state of a task from its ``taskStatusCount`` entry (``None``: no pod)."""
    phases = {k: v for k, v in ((counts or {}).get("phase") or {}).items() if v}
    if not phases:
        return None
    for phase in _TASK_PHASE_ORDER:
        if phase in phases:
            return TASK_STATE[phase]
    return AppState.UNKNOWN


def _phase(job: Mapping[str, Any]) -> str | None:
    return ((job.get("status") or {}).get("state") or {}).get("phase")


def describe_job(
    app_id: str, job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]] = ()
) -> DescribeAppResponse:
    """The app, roles and replicas of a Volcano Job (and, if given, its pods)."""
    status = job.get("status") or {}
    state_info = status.get("state") or {}
    name = str((job.get("metadata") or {}).get("name"))
    app_state = job_state(state_info.get("phase"), f" (job {name})")
    counts = status.get("taskStatusCount") or {}
    pod_index = pods_by_replica(pods)
    roles: dict[str, Role] = {}
    records: list[ReplicaRecord] = []
    for task in (job.get("spec") or {}).get("tasks") or []:
        template = task.get("template") or {}
        meta = template.get("metadata") or {}
        task_name = str(task.get("name"))
        key = replica_of(meta) or ReplicaKey(task_name, -1, 0)
        role = stored_role(meta)
        if role is not None:
            roles.setdefault(key.role, role)
        elif key.role not in roles or roles[key.role].num_replicas == 0:
            roles[key.role] = role_from_template(key.role, template)
        state = task_state(counts.get(task_name))
        pod = pod_index.get(key)
        if state is None:
            state = AppState.PENDING if not is_terminal(app_state) else app_state
            prefer_pod = pod is not None
        else:
            prefer_pod = False
        record = ReplicaRecord(
            key=key,
            state=state,
            hostname=f"{naming.volcano_pod_name(name, task_name)}.{name}",
        )
        records.append(record.with_pod(pod, prefer_pod_state=prefer_pod))
    for role_name, role in roles.items():
        if role.num_replicas == 0:
            role.num_replicas = sum(1 for r in records if r.key.role == role_name)
    role_list, statuses, first_error = assemble(records, roles)
    msg = state_info.get("message") or state_info.get("reason") or NONE
    return DescribeAppResponse(
        app_id=app_id,
        state=app_state,
        num_restarts=restarts(job),
        msg=str(msg),
        structured_error_msg=first_error,
        roles_statuses=statuses,
        roles=role_list,
    )


def restarts(job: Mapping[str, Any]) -> int:
    """How often the job really restarted. Volcano's ``retryCount`` also counts the failure
    that found the retries used up (and failed the job instead of restarting it)."""
    count = int((job.get("status") or {}).get("retryCount") or 0)
    max_retry = int((job.get("spec") or {}).get("maxRetry") or 0)
    return min(count, max(max_retry - 1, 0)) if max_retry else count


def abort_command(job: Mapping[str, Any]) -> dict[str, Any]:
    """The bus Command that aborts ``job`` (what ``vcctl job suspend`` creates): Volcano
    kills the pods and keeps the job, in phase Aborted, for inspection."""
    meta = job.get("metadata") or {}
    target = {
        "apiVersion": VOLCANO_JOB.api_version,
        "kind": VOLCANO_JOB.kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }
    return {
        "apiVersion": VOLCANO_COMMAND.api_version,
        "kind": VOLCANO_COMMAND.kind,
        "metadata": {
            "generateName": f"{meta['name'][:40]}-abortjob-",
            "namespace": meta["namespace"],
            # Owned by the job: deleted with it. (No blockOwnerDeletion: that would need
            # permission on jobs/finalizers.)
            "ownerReferences": [target],
        },
        "action": "AbortJob",
        "target": target,
        "reason": "Cancelled",
        "message": "cancelled through airflow-provider-torchx",
    }


class VolcanoTranslation(KubeTranslation):
    """The :class:`KubeTranslation` of the ``kubernetes`` backend."""

    backend = BACKEND

    def run_opts(self) -> runopts:
        return volcano_run_opts()

    def validate(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> None:
        _check_opts(VolcanoOpts.from_cfg(cfg))

    def request(
        self,
        app: AppDef,
        cfg: Mapping[str, CfgVal],
        *,
        namespace: str,
        suffix: str,
        ti_key: TaskInstanceKey | None = None,
    ) -> KubeRequest:
        opts = VolcanoOpts.from_cfg(cfg)
        names = VolcanoNames.of(app, suffix)
        body = app_to_job(app, opts, namespace=namespace, suffix=suffix, ti_key=ti_key, names=names)
        return KubeRequest(
            resource=VOLCANO_JOB,
            namespace=namespace,
            body=body,
            builds=workspace_builds(app, names.slugs, opts.image_repo),
            validate_spec=opts.validate_spec,
        )

    def read_resources(self) -> Sequence[CustomResource]:
        return (VOLCANO_JOB,)

    def pod_templates(self, body: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        for task in (body.get("spec") or {}).get("tasks") or []:
            yield task["template"]

    def app_state(self, obj: Mapping[str, Any]) -> AppState:
        return job_state(_phase(obj))

    def needs_pods(self, obj: Mapping[str, Any]) -> bool:
        # Pods add exit codes and errors: worth a list call once something ended.
        status = obj.get("status") or {}
        return is_terminal(self.app_state(obj)) or bool(status.get("failed"))

    def describe(
        self, app_id: str, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]
    ) -> DescribeAppResponse:
        return describe_job(app_id, obj, pods)

    def cancel_plan(self, obj: Mapping[str, Any]) -> tuple[CustomResource, dict[str, Any]] | None:
        return VOLCANO_COMMAND, abort_command(obj)
