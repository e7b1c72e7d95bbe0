"""Reading replicas back: pods and pod templates → roles and replica statuses.

Both Kubernetes backends describe an app the same way: each replica is found by the labels
and annotations written when it was created (never by splitting object names), its state
comes from the backend's own table, and the pod -- when there is one -- adds the exit code,
the error text and the restart count. :func:`describe_app` turns those records (and the
templates they were made from) into the roles and role statuses of a
:class:`~torchx_provider.schedulers.api.DescribeAppResponse`; a backend contributes only how
it finds its replicas and their states.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from torchx_provider.failures import (
    MESSAGE_LIMIT,
    FailureKind,
    bounded,
    exit_failure,
    oom_words,
    python_error,
)
from torchx_provider.schedulers.api import DescribeAppResponse
from torchx_provider.schedulers.kube.pod import ANNOTATION_DEFAULT_CONTAINER, ANNOTATION_ROLE_NAME
from torchx_provider.schedulers.labels import (
    ANNOTATION_ROLE,
    LABEL_REPLICA_ID,
    LABEL_ROLE_INDEX,
    LABEL_ROLE_NAME,
    stored_json,
)
from torchx_provider.schedulers.waiting_reasons import WAITING_REASONS, waiting_verdict
from torchx_provider.specs.api import (
    NONE,
    AppState,
    ReplicaStatus,
    Role,
    RoleStatus,
    is_terminal,
)
from torchx_provider.timestamps import read_timestamp

log = logging.getLogger(__name__)

#: Pod phase → replica state. https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/
POD_PHASE_STATE: dict[str, AppState] = {
    # Accepted, but a container is not running yet (scheduling, image pull).
    "Pending": AppState.PENDING,
    # Bound to a node and a container is running (or starting or restarting).
    "Running": AppState.RUNNING,
    # Every container exited 0 and none will restart.
    "Succeeded": AppState.SUCCEEDED,
    # Every container ended, at least one with a non-zero code or killed by the system.
    "Failed": AppState.FAILED,
    # The node stopped reporting the pod.
    "Unknown": AppState.UNKNOWN,
}


# -- why a replica failed ------------------------------------------------------------------------
# The exception a failed app raises is its first failed replica's kind
# (:func:`torchx_provider.failures.error_class`). A pod's kind is read, in this order, from:
# its ``DisruptionTarget`` condition (the platform's own word that it ended the pod), its
# ``status.reason``, its container's ``state.waiting.reason`` (it never started), its
# container's ``state.terminated.reason`` (and its exit code, when its process ended). A
# reason no table knows gives no kind: the app fails with the base class, never a guessed
# subclass. A Kueue preemption suspends the workload rather than failing a pod, and never
# reaches these tables.

#: ``status.conditions[type=DisruptionTarget].reason`` (condition ``True``) -> kind.
#: https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions
DISRUPTION_FAILURE: dict[str, FailureKind] = {
    # the scheduler preempted it for a pod of higher priority
    "PreemptionByScheduler": FailureKind.INFRASTRUCTURE,
    # the kubelet ended it: node-pressure eviction, graceful node shutdown
    "TerminationByKubelet": FailureKind.INFRASTRUCTURE,
    # an API-initiated eviction: a node drain, a descheduler
    "EvictionByEvictionAPI": FailureKind.INFRASTRUCTURE,
    # a NoExecute taint it does not tolerate: the node is unreachable or being taken out
    "DeletionByTaintManager": FailureKind.INFRASTRUCTURE,
    # the pod garbage collector: its node is gone
    "DeletionByPodGC": FailureKind.INFRASTRUCTURE,
}

#: A failed pod's ``status.reason`` -> kind.
POD_REASON_FAILURE: dict[str, FailureKind] = {
    # node-pressure eviction by the kubelet (memory, disk, PIDs of the node, not the pod's
    # own limit: that is the container's OOMKilled)
    "Evicted": FailureKind.INFRASTRUCTURE,
    # the node stopped reporting and the pod was written off
    "NodeLost": FailureKind.INFRASTRUCTURE,
    # graceful node shutdown ("Terminated", "Shutdown" by kubelet version)
    "Terminated": FailureKind.INFRASTRUCTURE,
    "Shutdown": FailureKind.INFRASTRUCTURE,
    # the kubelet could not admit it after the scheduler placed it (a device plugin gone,
    # resources taken meanwhile)
    "UnexpectedAdmissionError": FailureKind.INFRASTRUCTURE,
}

# The main container's ``state.waiting.reason`` (it could not start as asked): its kind, and
# whether waiting can heal it (:attr:`PodFailure.final`), are the one rule every reader of a
# waiting reason shares (:func:`~torchx_provider.schedulers.waiting_reasons.waiting_verdict`:
# a pull by the image table, from the kubelet's message; a Secret missing; a crash loop).

#: The main container's ``state.terminated.reason`` when its process ended -> whether the
#: runtime says its memory limit killed it. The kind is the exit's, by the rule every backend
#: shares (:func:`~torchx_provider.failures.exit_failure`): a SIGKILL or SIGTERM (137/143)
#: the pod's status does not explain has none.
EXIT_REASONS: dict[str, bool] = {
    # killed for exceeding its own memory limit (the role's resource.memMB)
    "OOMKilled": True,
    # exited non-zero, or died of a signal
    "Error": False,
}

#: The main container's ``state.terminated.reason`` -> kind.
TERMINATED_FAILURE: dict[str, FailureKind] = {
    # the runtime could not start it: its entrypoint is not in the image, a bad mount
    "ContainerCannotRun": FailureKind.CONFIGURATION,
    "StartError": FailureKind.CONFIGURATION,
}


@dataclass(frozen=True)
class PodFailure:
    """Why a pod failed (or cannot start): the reason read, the kind (``None``: none known),
    and, for a container that waits, whether waiting cannot heal it (``final``: an image
    that can never be pulled) and the kubelet's ``message``; for a disruption, the
    condition's ``message`` and when it was set (``at``)."""

    reason: str
    kind: FailureKind | None
    final: bool = False
    message: str = ""
    at: str = ""


def pod_failure(pod: Mapping[str, Any], container: Mapping[str, Any]) -> PodFailure:
    """Why ``pod`` ended, from its conditions, reason and the main ``container``'s status,
    by the tables above (in their order)."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            reason = str(condition.get("reason") or "")
            if reason:
                return PodFailure(
                    reason,
                    DISRUPTION_FAILURE.get(reason),
                    message=" ".join(str(condition.get("message") or "").split()),
                    at=str(condition.get("lastTransitionTime") or ""),
                )
    reason = str(status.get("reason") or "")
    if reason:
        return PodFailure(reason, POD_REASON_FAILURE.get(reason))
    cstate = container.get("state") or {}
    waits = cstate.get("waiting") or {}
    waiting = str(waits.get("reason") or "")
    message = " ".join(str(waits.get("message") or "").split())
    verdict = waiting_verdict(waiting, message, str(container.get("image") or ""))
    if verdict is not None:
        return PodFailure(waiting, verdict.kind, verdict.final, message)
    terminated = cstate.get("terminated") or (container.get("lastState") or {}).get("terminated")
    reason = str((terminated or {}).get("reason") or "")
    if reason in EXIT_REASONS:
        code = (terminated or {}).get("exitCode")
        kind = exit_failure(code if isinstance(code, int) else None, EXIT_REASONS[reason])
        return PodFailure(reason, kind)
    if reason:
        return PodFailure(reason, TERMINATED_FAILURE.get(reason))
    return PodFailure(waiting, None)


#: The label the Job controller puts on each pod of an Indexed Job: its completion index. Pods
#: of one Job share a template, so where a backend runs a role as an Indexed Job (AppWrapper
#: ``v1beta2``) this index, not ``LABEL_REPLICA_ID``, is the replica id.
#: https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode
JOB_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True)
class ReplicaKey:
    """Which replica an object belongs to, as stored in its labels and annotations."""

    role: str
    role_index: int
    replica_id: int


def app_state_of(
    table: Mapping[str, AppState], value: str | None, what: str, where: str = ""
) -> AppState:
    """The app state of a controller's status ``value`` by its backend's ``table``.

    No value yet means the controller has not seen the object: ``SUBMITTED``. A value the
    table does not know (a newer controller) is ``UNKNOWN``, with a warning naming ``what``,
    the raw value and ``where`` (the object) -- never a ``KeyError``.
    """
    if not value:
        return AppState.SUBMITTED
    state = table.get(str(value))
    if state is None:
        log.warning("unknown %s %r%s; reporting UNKNOWN", what, value, where)
        return AppState.UNKNOWN
    return state


def replica_of(metadata: Mapping[str, Any]) -> ReplicaKey | None:
    """The replica an object (pod or pod template) belongs to, or ``None`` if not ours; a pod
    of an Indexed Job without ``LABEL_REPLICA_ID`` is replica :data:`JOB_INDEX_LABEL`."""
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    role = annotations.get(ANNOTATION_ROLE_NAME) or labels.get(LABEL_ROLE_NAME)
    try:
        replica_id = int(labels.get(LABEL_REPLICA_ID) or labels[JOB_INDEX_LABEL])
        role_index = int(labels.get(LABEL_ROLE_INDEX, -1))
    except (KeyError, TypeError, ValueError):
        return None
    if not role:
        return None
    return ReplicaKey(str(role), role_index, replica_id)


def stored_role(metadata: Mapping[str, Any]) -> Role | None:
    """The role kept in an object's ``ANNOTATION_ROLE``, if any and readable."""
    from torchx_provider.specs.serialization import role_from_dict

    return stored_json((metadata.get("annotations") or {}).get(ANNOTATION_ROLE), role_from_dict)


def role_from_template(name: str, template: Mapping[str, Any]) -> Role:
    """A partial role read from a pod template, for objects without ``ANNOTATION_ROLE``."""
    containers = (template.get("spec") or {}).get("containers") or [{}]
    main = containers[0]
    command = list(main.get("command") or [])
    return Role(
        name=name,
        image=str(main.get("image") or ""),
        entrypoint=command[0] if command else "",
        args=command[1:],
        num_replicas=0,
    )


@dataclass(frozen=True)
class PodDetails:
    """What a pod tells about its replica."""

    state: AppState
    exit_code: int | None
    hostname: str
    error: str
    restarts: int
    reason: str = ""
    failure: FailureKind | None = None
    finished_at: datetime | None = None
    #: its container waits for a reason waiting cannot heal (:attr:`PodFailure.final`)
    cannot_start: bool = False
    #: when its container last started (``None``: not yet, or not told)
    started_at: datetime | None = None


def termination_message(text: str) -> str:
    """What a terminated container says of its end (bounded): with terminationMessagePolicy
    FallbackToLogsOnError, as the provider writes it, the tail of its log (torchrun's failure
    summary, for a ``dist.ddp`` replica). When that tail holds a Python traceback, its error
    line says it best (as a log tail does on every backend: :func:`python_error`).

    >>> tail = ["…====", "  traceback : Traceback (most recent call last):",
    ...     "      raise RuntimeError('x')", "  RuntimeError: rank 3 failed", "====="]
    >>> termination_message("\\n".join(tail))
    'RuntimeError: rank 3 failed'
    >>> termination_message("allocating 1024 MiB")
    'allocating 1024 MiB'
    """
    return bounded(python_error(text.splitlines()) or text)


#: a Kubernetes quantity of bytes, as the API server stores it (``1Gi``, ``256Mi``, ``1G``)
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)([KMGTPE]i|[kMGTPE])?$")
_FACTOR = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_FACTOR.update({f"{u}i": 1024 ** (i + 1) for i, u in enumerate("KMGTPE")})


def memory_words(quantity: str) -> str:
    """A memory limit as ``resource.memMB`` counts it (MiB), with the quantity the API server
    stored where that reads otherwise (it writes ``1024Mi`` as ``1Gi``).

    >>> memory_words("1Gi"), memory_words("256Mi"), memory_words("1G"), memory_words("2x")
    ('1024 MiB (1Gi)', '256 MiB', '953.7 MiB (1G)', '2x')
    """
    m = _QUANTITY.match(quantity.strip())
    if m is None:
        return quantity
    mib = float(m.group(1)) * _FACTOR[m.group(2) or ""] / 2**20
    words = f"{mib:.0f} MiB" if mib.is_integer() else f"{mib:.1f} MiB"
    return words if quantity == f"{mib:.0f}Mi" else f"{words} ({quantity})"


def container_oom_words(spec: Mapping[str, Any], container: str | None) -> str:
    """What an ``OOMKilled`` container is told (:func:`~torchx_provider.failures.oom_words`),
    with the memory limit its spec gives, where it gives one.

    >>> container_oom_words({"containers": [{"name": "main", "resources": {"limits": {"memory":
    ...     "256Mi"}}}]}, "main")
    'killed for exceeding its memory limit of 256 MiB: raise resource.memMB'
    """
    containers = spec.get("containers") or []
    found = next((c for c in containers if c.get("name") == container), None)
    limit = (((found or {}).get("resources") or {}).get("limits") or {}).get("memory")
    return oom_words(memory_words(str(limit)) if limit else "")


def pod_details(pod: Mapping[str, Any]) -> PodDetails:
    """State, exit code, hostname and error text of a pod (a dict as the API returns it)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    container = (metadata.get("annotations") or {}).get(ANNOTATION_DEFAULT_CONTAINER)
    statuses = status.get("containerStatuses") or []
    cstatus: Mapping[str, Any] = next(
        (s for s in statuses if container is None or s.get("name") == container),
        statuses[0] if statuses else {},
    )
    state = POD_PHASE_STATE.get(str(status.get("phase")), AppState.UNKNOWN)
    terminated = (cstatus.get("state") or {}).get("terminated") or {}
    exit_code = terminated.get("exitCode")
    error = NONE
    if terminated and exit_code not in (None, 0):
        reason = terminated.get("reason") or "Error"
        message = termination_message(terminated.get("message") or "")
        if reason == "OOMKilled":
            # the limit's words first, whole: the termination message gives up its start
            words = container_oom_words(spec, cstatus.get("name"))
            rest = bounded(message, MESSAGE_LIMIT - len(words) - 2) if message else ""
            message = f"{words}; {rest}" if rest else words
        error = f"{reason}: {message}" if message else str(reason)
    elif state is AppState.FAILED and status.get("reason"):
        message = bounded(status.get("message") or "")
        error = f"{status['reason']}: {message}" if message else str(status["reason"])
    # read whatever the phase: a backend may call the replica failed from its job's state
    # before the pod's phase says so (:func:`assemble` keeps it for failed replicas only)
    failure = pod_failure(pod, cstatus)
    if error == NONE and failure.message and failure.reason in WAITING_REASONS:
        # why it does not start, in the kubelet's words (an image it cannot pull: the
        # registry's answer)
        error = f"{failure.reason}: {bounded(failure.message)}"
    elif error == NONE and failure.reason in DISRUPTION_FAILURE:
        # the platform is ending it ("Eviction API: evicting"); said before its container
        # ends, and all there is when its pod is deleted before it is seen failed
        message = bounded(failure.message)
        error = f"{failure.reason}: {message}" if message else failure.reason
    hostname = spec.get("hostname") or ""
    if hostname and spec.get("subdomain"):
        hostname = f"{hostname}.{spec['subdomain']}"
    return PodDetails(
        state=state,
        exit_code=int(exit_code) if exit_code is not None else None,
        hostname=hostname or str(status.get("podIP") or ""),
        error=error,
        restarts=int(cstatus.get("restartCount") or 0),
        reason=failure.reason,
        failure=failure.kind,
        # a pod the platform ends: when it said so, until its container's end is known
        finished_at=read_timestamp(terminated.get("finishedAt")) or read_timestamp(failure.at),
        cannot_start=failure.final,
        started_at=read_timestamp(
            terminated.get("startedAt")
            or ((cstatus.get("state") or {}).get("running") or {}).get("startedAt")
        ),
    )


def telling(details: PodDetails) -> bool:
    """Whether a pod's ``details`` tell how its replica ended, and are worth keeping after
    the pod is gone: it failed with an exit code, or the platform marked it for disruption
    (a ``DisruptionTarget`` of :data:`DISRUPTION_FAILURE`, whatever its phase: the API
    server marks a pod it evicts, then deletes it)."""
    failed = details.state is AppState.FAILED and details.exit_code is not None
    return failed or details.reason in DISRUPTION_FAILURE


def pods_by_replica(pods: Iterable[Mapping[str, Any]]) -> dict[ReplicaKey, Mapping[str, Any]]:
    """Our pods by replica; of several pods for one replica, the newest wins."""
    out: dict[ReplicaKey, Mapping[str, Any]] = {}
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp"))):
        key = replica_of(pod.get("metadata") or {})
        if key is not None:
            out[key] = pod
    return out


@dataclass(frozen=True)
class ReplicaRecord:
    """One replica as a backend sees it, before it becomes a :class:`ReplicaStatus`."""

    key: ReplicaKey
    state: AppState
    hostname: str = ""
    exit_code: int | None = None
    error: str = NONE
    restarts: int | None = None
    reason: str = ""
    failure: FailureKind | None = None
    finished_at: datetime | None = None
    cannot_start: bool = False
    started_at: datetime | None = None

    def with_pod(self, pod: Mapping[str, Any] | None, prefer_pod_state: bool) -> ReplicaRecord:
        """This record completed by its pod's details (state too if ``prefer_pod_state``)."""
        if pod is None:
            return self
        d = pod_details(pod)
        return replace(
            self,
            state=d.state if prefer_pod_state else self.state,
            hostname=d.hostname or self.hostname,
            exit_code=d.exit_code,
            error=d.error,
            restarts=d.restarts,
            reason=d.reason,
            failure=d.failure,
            finished_at=d.finished_at,
            cannot_start=d.cannot_start,
            started_at=d.started_at,
        )


def told(record: ReplicaRecord) -> bool:
    """Whether a replica's reason is worth telling: it failed, or it is not finished and its
    container waits for a reason of
    :data:`~torchx_provider.schedulers.waiting_reasons.WAITING_REASONS` (an image it cannot
    pull, a Secret missing, a crash loop), which Kubernetes keeps retrying without failing
    it."""
    if record.state == AppState.FAILED:
        return True
    return not is_terminal(record.state) and record.reason in WAITING_REASONS


def assemble(
    records: Sequence[ReplicaRecord], roles: Mapping[str, Role]
) -> tuple[list[Role], list[RoleStatus], str]:
    """Roles (stored ones, else counted from the records), role statuses in role-index and
    replica-id order, and the first replica error (or ``NONE``)."""
    order: dict[str, int] = {}
    by_role: dict[str, list[ReplicaRecord]] = {}
    for r in records:
        order.setdefault(r.key.role, r.key.role_index if r.key.role_index >= 0 else len(order))
        by_role.setdefault(r.key.role, []).append(r)
    names = sorted(by_role, key=lambda n: (order[n], n))
    out_roles: list[Role] = []
    statuses: list[RoleStatus] = []
    first_error = NONE
    for name in names:
        recs = sorted(by_role[name], key=lambda r: r.key.replica_id)
        role = roles.get(name) or Role(name=name, num_replicas=len(recs))
        out_roles.append(role)
        replicas = []
        for r in recs:
            if first_error == NONE and r.error != NONE:
                first_error = f"{name}/{r.key.replica_id}: {r.error}"
            replicas.append(
                ReplicaStatus(
                    id=r.key.replica_id,
                    state=r.state,
                    role=name,
                    hostname=r.hostname,
                    structured_error_msg=r.error,
                    exit_code=r.exit_code,
                    num_restarts=r.restarts,
                    reason=r.reason if told(r) else "",
                    failure=r.failure.value if r.failure is not None and told(r) else None,
                    finished_at=r.finished_at,
                    cannot_start=r.cannot_start and told(r) and not is_terminal(r.state),
                    started_at=r.started_at,
                )
            )
        statuses.append(RoleStatus(role=name, replicas=replicas))
    return out_roles, statuses, first_error


def roles_of(replicas: Iterable[tuple[ReplicaKey, Mapping[str, Any]]]) -> dict[str, Role]:
    """The role of each role name among ``(replica, pod template)`` pairs: the role stored in
    a template's ``ANNOTATION_ROLE``, else one read from the role's first template, its
    ``num_replicas`` counted from the pairs."""
    roles: dict[str, Role] = {}
    first_template: dict[str, Mapping[str, Any]] = {}
    counts: Counter[str] = Counter()
    for key, template in replicas:
        counts[key.role] += 1
        if key.role in roles:  # a stored role was read: the others are not read again
            continue
        stored = stored_role(template.get("metadata") or {})
        if stored is not None:
            roles.setdefault(key.role, stored)
        else:
            first_template.setdefault(key.role, template)
    for name, template in first_template.items():
        roles.setdefault(name, role_from_template(name, template))
    for name, role in roles.items():
        if role.num_replicas == 0:
            role.num_replicas = counts[name]
    return roles


def describe_app(
    app_id: str,
    state: AppState,
    replicas: Sequence[tuple[ReplicaRecord, Mapping[str, Any]]],
    *,
    num_restarts: int,
    msg: str,
) -> DescribeAppResponse:
    """The response of an app in ``state`` whose replicas are ``(record, pod template)``
    pairs; the first replica error is its structured error."""
    roles = roles_of((record.key, template) for record, template in replicas)
    role_list, statuses, first_error = assemble([record for record, _ in replicas], roles)
    return DescribeAppResponse(
        app_id=app_id,
        state=state,
        num_restarts=num_restarts,
        msg=msg,
        structured_error_msg=first_error,
        roles_statuses=statuses,
        roles=role_list,
    )
