"""Volcano (``kubernetes`` backend), the pure translation: AppDef → Job, cancel → Command.

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

The Job's status is read back in :mod:`.state`; the run options are :mod:`.options`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from torchx_provider.errors import AppConfigurationError
from torchx_provider.schedulers.kube import naming
from torchx_provider.schedulers.kube.naming import Placement
from torchx_provider.schedulers.kube.pending import Wait
from torchx_provider.schedulers.kube.pod import (
    ReplicaIdentity,
    RolePodBuilder,
    macro_values,
    object_metadata,
    role_annotation,
)
from torchx_provider.schedulers.kube.request import KubeTranslation
from torchx_provider.schedulers.kube.resources import (
    VOLCANO_COMMAND,
    VOLCANO_JOB,
    VOLCANO_JOB_EVENTS,
    VOLCANO_PODGROUP_EVENTS,
    VOLCANO_QUEUES,
    CustomResource,
    EventsAbout,
    QueuedIn,
)
from torchx_provider.schedulers.kube.volcano.options import VolcanoOpts
from torchx_provider.schedulers.kube.volcano.state import app_phase, describe_job, job_state, phase
from torchx_provider.schedulers.labels import ANNOTATION_ROLE, RANK0_HOST_ENV
from torchx_provider.specs.api import AppDef, AppState, RetryPolicy, Role, is_terminal

BACKEND = "kubernetes"
SCHEDULER_NAME = "volcano"
#: Volcano names pods ``{job}-{task}-{index}``: the index adds two characters to a slug.
NAME_OVERHEAD = 2

_RESTART_ACTION: dict[RetryPolicy, str] = {
    RetryPolicy.APPLICATION: "RestartJob",
    RetryPolicy.REPLICA: "RestartTask",
    # Volcano cannot restart only the tasks of one role: the whole job restarts.
    RetryPolicy.ROLE: "RestartJob",
}
_FAIL_FAST_ACTION = "TerminateJob"
_FAILURE_EVENTS = ("PodFailed", "PodEvicted")


def task_policies(role: Role, required: bool) -> list[dict[str, str]]:
    """The lifecycle policies of one replica's task (see the module docstring)."""
    if role.max_retries > 0:
        action = _RESTART_ACTION[role.retry_policy]
    elif required:
        action = _FAIL_FAST_ACTION
    else:
        return []
    return [{"event": event, "action": action} for event in _FAILURE_EVENTS]


def app_to_volcano_job(app: AppDef, opts: VolcanoOpts, at: Placement) -> dict[str, Any]:
    """The Volcano Job of ``app`` placed ``at`` (pure: same input, same manifest)."""
    namespace, names, ti_key = at.namespace, at.names, at.ti_key
    job, slugs = names.name, names.slugs
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
    meta = object_metadata(job, namespace, app.name, ti_key, opts.labels, opts.annotations)
    return VOLCANO_JOB.manifest(meta, spec)


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


#: Seconds after which a job Volcano has given no status is reported (it gives one to a job
#: it takes up within a second or two).
STATUS_WAIT = 30.0
#: Queue states (``status.state``) in which Volcano admits no new job.
#: https://github.com/volcano-sh/apis/blob/master/pkg/apis/scheduling/v1beta1/types.go
CLOSED_QUEUE_STATES = frozenset({"Closed", "Closing"})


def queue_problem(name: str, queue: Mapping[str, Any] | None) -> AppConfigurationError | None:
    """Why a job cannot be scheduled in Volcano queue ``name`` (``None``: it does not exist);
    ``None`` when it can. Volcano itself leaves such a job without a status, saying why only
    in its controller's log. Raised before anything is submitted: a retry of the task
    unchanged fails the same way (``AppConfigurationError``, as every configuration the
    cluster cannot run).

    >>> str(queue_problem("gpu", None)).startswith("Volcano queue 'gpu' does not exist")
    True
    >>> queue_problem("q", {"status": {"state": "Open"}}) is None
    True
    """
    if queue is None:
        why = (
            f"Volcano queue {name!r} does not exist on this cluster: name an existing queue in "
            "run option queue (kubectl get queues), or ask an administrator to create it"
        )
    else:
        state = closed_state(queue)
        if state is None:
            return None
        why = (
            f"Volcano queue {name!r} is {state} and admits no new job: name another queue in "
            "run option queue, or ask an administrator to open it"
        )
    return AppConfigurationError(f"{why} (nothing was submitted)")


def closed_state(queue: Mapping[str, Any]) -> str | None:
    """The state of a Volcano queue that admits no new job (of :data:`CLOSED_QUEUE_STATES`);
    ``None`` while it admits jobs.

    >>> closed_state({"status": {"state": "Closing"}}), closed_state({"status": {}})
    ('Closing', None)
    """
    state = str((queue.get("status") or {}).get("state") or "")
    return state if state in CLOSED_QUEUE_STATES else None


def closed_queue_wait(name: str, queue: Mapping[str, Any], job: str) -> Wait | None:
    """Why pending job ``job`` (its uid) waits at Volcano queue ``name``: it is closed (or
    closing) and admits no new job; ``None`` while it admits jobs. Volcano itself says
    nothing about it.

    >>> closed_queue_wait("gpu", {"status": {"state": "Closing"}}, "u1").text[:54]
    "Volcano queue 'gpu' is Closing and admits no new job: "
    >>> closed_queue_wait("gpu", {"status": {"state": "Open"}}, "u1") is None
    True
    """
    state = closed_state(queue)
    if state is None:
        return None
    return Wait(
        key=f"volcano-queue/{name}/closed:{job}",  # Closing, then Closed: said once
        text=(
            f"Volcano queue {name!r} is {state} and admits no new job: the job waits until an "
            f"administrator opens it (kubectl get queue {name}), or cancel it and name another "
            "queue in run option queue"
        ),
    )


def podgroup_name(job: Mapping[str, Any]) -> str:
    """The name of the PodGroup Volcano makes for ``job``: ``<job name>-<job uid>``.

    >>> podgroup_name({"metadata": {"name": "j", "uid": "1234"}})
    'j-1234'
    """
    meta = job.get("metadata") or {}
    return f"{meta.get('name')}-{meta.get('uid')}"


class VolcanoTranslation(KubeTranslation):
    """The :class:`KubeTranslation` of the ``kubernetes`` backend."""

    backend = BACKEND
    options = VolcanoOpts
    name_overhead = NAME_OVERHEAD
    resource_type = VOLCANO_JOB

    manifest = staticmethod(app_to_volcano_job)
    describe = staticmethod(describe_job)

    def unclaimed(self, obj: Mapping[str, Any]) -> bool:
        return phase(obj) is None

    event_kinds: Sequence[EventsAbout] = (VOLCANO_PODGROUP_EVENTS, VOLCANO_JOB_EVENTS)
    queues: Sequence[QueuedIn] = (VOLCANO_QUEUES,)

    @staticmethod
    def _unplaced(obj: Mapping[str, Any]) -> bool:
        """Whether the job's pods wait to be placed: it waits, or its restart does (the app
        state is then RUNNING, and why the new pods wait is said all the same)."""
        return phase(obj) == "Pending"

    def reads_queue(self, obj: Mapping[str, Any], owned: Sequence[Mapping[str, Any]]) -> bool:
        # a queue closed after the job was submitted holds it without a word from Volcano
        return self._unplaced(obj)

    def queue_waits(self, obj: Mapping[str, Any], queue: Mapping[str, Any]) -> Sequence[Wait]:
        name = VOLCANO_QUEUES.name(obj)
        meta = obj.get("metadata") or {}
        wait = (
            closed_queue_wait(name, queue, str(meta.get("uid") or meta.get("name")))
            if name
            else None
        )
        return (wait,) if wait is not None else ()

    def event_subjects(self, obj: Mapping[str, Any]) -> Sequence[tuple[EventsAbout, str]]:
        # A job gated at its queue has no pod: Volcano says why only on its PodGroup; pods
        # it cannot create, only on the job.
        if not self._unplaced(obj):
            return ()
        name = str((obj.get("metadata") or {}).get("name") or "")
        return ((VOLCANO_PODGROUP_EVENTS, podgroup_name(obj)), (VOLCANO_JOB_EVENTS, name))

    def stalled(self, obj: Mapping[str, Any], age: float) -> str | None:
        if age < STATUS_WAIT:
            return None
        queue = (obj.get("spec") or {}).get("queue")
        return (
            f"Volcano has given job {(obj.get('metadata') or {}).get('name')!r} no status "
            f"{age:.0f}s after it was created; usually its queue {queue!r} does not exist or "
            "is closed (Volcano says so only in its controller's log): check it with "
            f"`kubectl get queue {queue}`, or name another queue in run option queue"
        )

    def prerequisites(self, body: Mapping[str, Any]) -> Sequence[tuple[QueuedIn, str]]:
        queue = VOLCANO_QUEUES.name(body)
        return ((VOLCANO_QUEUES, queue),) if queue else ()

    def prerequisite_problem(
        self,
        queued: QueuedIn,
        name: str,
        obj: Mapping[str, Any] | None,
        *,
        namespace: str = "",
        others: Sequence[str] | None = None,
    ) -> AppConfigurationError | None:
        return queue_problem(name, obj)

    def pod_templates(self, body: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        for task in (body.get("spec") or {}).get("tasks") or []:
            yield task["template"]

    def app_state(self, obj: Mapping[str, Any]) -> AppState:
        return job_state(app_phase(obj))

    def needs_pods(self, obj: Mapping[str, Any]) -> bool:
        # Pods add exit codes and errors once something ended, and why they wait while the
        # job's pods are unplaced: worth a list call then; not before Volcano took the job
        # up (no pods yet), nor while it runs.
        status = obj.get("status") or {}
        return is_terminal(self.app_state(obj)) or self._unplaced(obj) or bool(status.get("failed"))

    def cancel_plan(self, obj: Mapping[str, Any]) -> tuple[CustomResource, dict[str, Any]] | None:
        return VOLCANO_COMMAND, abort_command(obj)
