"""Volcano Job status → app and replica states (pure).

A Job's phase gives the app state (:data:`JOB_STATE`, read by :func:`app_phase`); each
task's ``taskStatusCount`` gives its replica's state (:data:`TASK_STATE`; one task is one
replica here), and the task's pod, when it was read, adds exit code, error and restarts.

A restart goes ``Running`` → ``Restarting`` → ``Pending`` → ``Running`` (Volcano v1.14,
``pkg/controllers/job/state/restarting.go``: once the killed pods are gone the job is
``Pending`` until its new pods are placed). That ``Pending`` is part of the restart, not a
return to waiting: ``status.conditions`` (every phase the job went through, in order) tell
it from a job that waits before it ever ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torchx_provider.schedulers.api import DescribeAppResponse
from torchx_provider.schedulers.kube import naming
from torchx_provider.schedulers.kube import status as readback
from torchx_provider.specs.api import NONE, AppState, is_terminal

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
TASK_STATE: dict[str, AppState] = dict(readback.POD_PHASE_STATE)

#: Of several phases counted for one task (an old pod and its replacement), the live one wins.
_TASK_PHASE_ORDER = ("Running", "Pending", "Unknown", "Failed", "Succeeded")


def job_state(phase: str | None, where: str = "") -> AppState:
    """The app state of a job phase; an unknown phase is ``UNKNOWN`` (with a warning)."""
    return readback.app_state_of(JOB_STATE, phase, "Volcano job phase", where)


def task_state(counts: Mapping[str, Any] | None) -> AppState | None:
    """The replica state of a task from its ``taskStatusCount`` entry (``None``: no pod)."""
    phases = {k: v for k, v in ((counts or {}).get("phase") or {}).items() if v}
    if not phases:
        return None
    for phase in _TASK_PHASE_ORDER:
        if phase in phases:
            return TASK_STATE[phase]
    return AppState.UNKNOWN


def phase(job: Mapping[str, Any]) -> str | None:
    """The job's ``status.state.phase``."""
    return ((job.get("status") or {}).get("state") or {}).get("phase")


def app_phase(job: Mapping[str, Any]) -> str | None:
    """The phase the app state is read from: :func:`phase`, but ``Restarting`` for a
    ``Pending`` whose last other phase (``status.conditions``) was ``Restarting``: the
    restarted pods wait to be placed.

    >>> app_phase({"status": {"state": {"phase": "Pending"}, "conditions": [
    ...     {"status": "Running"}, {"status": "Restarting"}, {"status": "Pending"}]}})
    'Restarting'
    >>> app_phase({"status": {"state": {"phase": "Pending"}, "conditions": [
    ...     {"status": "Pending"}, {"status": "Pending"}]}})
    'Pending'
    """
    current = phase(job)
    if current != "Pending":
        return current
    for cond in reversed((job.get("status") or {}).get("conditions") or []):
        before = (cond or {}).get("status")
        if before != "Pending":
            return "Restarting" if before == "Restarting" else current
    return current


def restarts(job: Mapping[str, Any]) -> int:
    """How often the job really restarted. Volcano's ``retryCount`` also counts the failure
    that found the retries used up (and failed the job instead of restarting it)."""
    count = int((job.get("status") or {}).get("retryCount") or 0)
    max_retry = int((job.get("spec") or {}).get("maxRetry") or 0)
    return min(count, max(max_retry - 1, 0)) if max_retry else count


def describe_job(
    app_id: str, job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]] = ()
) -> DescribeAppResponse:
    """The app, roles and replicas of a Volcano Job (and, if given, its pods)."""
    status = job.get("status") or {}
    state_info = status.get("state") or {}
    name = str((job.get("metadata") or {}).get("name"))
    current = app_phase(job)
    app_state = job_state(current, f" (job {name})")
    counts = status.get("taskStatusCount") or {}
    pod_index = readback.pods_by_replica(pods)
    replicas: list[tuple[readback.ReplicaRecord, Mapping[str, Any]]] = []
    for task in (job.get("spec") or {}).get("tasks") or []:
        template = task.get("template") or {}
        task_name = str(task.get("name"))
        key = readback.replica_of(template.get("metadata") or {}) or readback.ReplicaKey(
            task_name, -1, 0
        )
        state = task_state(counts.get(task_name))
        pod = pod_index.get(key)
        # No count for the task yet: its pod, if read, knows more than the job.
        prefer_pod = state is None and pod is not None
        if state is None:
            state = app_state if is_terminal(app_state) else AppState.PENDING
        hostname = f"{naming.volcano_pod_name(name, task_name)}.{name}"
        record = readback.ReplicaRecord(key, state, hostname).with_pod(
            pod, prefer_pod_state=prefer_pod
        )
        replicas.append((record, template))
    msg = (
        state_info.get("message")
        or state_info.get("reason")
        or (
            "Restarting: the restarted replicas wait to be placed"
            if current != state_info.get("phase")
            else NONE
        )
    )
    return readback.describe_app(
        app_id, app_state, replicas, num_restarts=restarts(job), msg=str(msg)
    )
