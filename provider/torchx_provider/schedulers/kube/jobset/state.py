"""JobSet status → app and replica states (pure).

The JobSet controller counts Jobs, not pods: ``status.replicatedJobsStatus`` says per role
(one replicatedJob of one Job) whether its Job is active, ready (every pod ready or
succeeded), succeeded or failed; ``status.conditions`` say whether the JobSet completed,
failed or is suspended, and ``status.restarts`` how often it was recreated. The app state is
the row of :data:`PHASE_STATE` that :func:`jobset_phase` reads from those; each replica's
state is read from its pod, found by the Job's completion index (of a restarted JobSet, the
newest pod: each restart makes new pods, labelled ``jobset.sigs.k8s.io/restart-attempt``).
Conditions not named here (``StartupPolicyInProgress``/``Completed``, a newer controller's)
change no state: the table reads only ``Completed``, ``Failed`` and ``spec.suspend``.

Source: kubernetes-sigs/jobset v0.11.1, ``api/jobset/v1alpha2/jobset_types.go`` (conditions,
status) and ``pkg/controllers/jobset_controller.go`` (how the counts are made).
https://github.com/kubernetes-sigs/jobset/blob/v0.11.1/pkg/controllers/jobset_controller.go
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from torchx_provider.schedulers.api import DescribeAppResponse
from torchx_provider.schedulers.kube import status as readback
from torchx_provider.schedulers.kube.indexed import describe_indexed
from torchx_provider.schedulers.kube.suspension import is_cancelled, queued_message
from torchx_provider.specs.api import AppState

#: The label the JobSet controller puts on its Jobs and their pods: the restart they belong
#: to (``status.restarts`` when they were made).
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"

#: The phase :func:`jobset_phase` reads from a JobSet → app state. No phase (not reconciled
#: yet) is ``SUBMITTED`` (:func:`~torchx_provider.schedulers.kube.status.app_state_of`).
PHASE_STATE: dict[str, AppState] = {
    # Condition Completed=True (terminalState Completed): the success policy is met.
    "Completed": AppState.SUCCEEDED,
    # Condition Failed=True (terminalState Failed): restarts used up (ReachedMaxRestarts), a
    # FailJobSet rule matched, or a Job failed with no restart left.
    "Failed": AppState.FAILED,
    # Cancelled by this provider (the cancelled mark; ``cancel_by=suspend``): its Jobs are
    # suspended and its pods removed -- and it stays cancelled whatever starts it again.
    "Cancelled": AppState.CANCELLED,
    # Deleted (deletionTimestamp): its Jobs and pods are being removed.
    "Terminating": AppState.CANCELLED,
    # ``spec.suspend`` and not cancelled: queued until Kueue admits it, or preempted by
    # Kueue and queued again.
    "Suspended": AppState.PENDING,
    # Jobs created, no role's pods all ready yet (pods pending, images pulling, or the
    # roles waiting for the one before them with start_order=in_order), nothing ended yet.
    "Starting": AppState.PENDING,
    # Recreating its Jobs after a failure (``status.restarts`` > 0, no role's pods all
    # ready): a restart of a running app, not a return to waiting (as Volcano's
    # ``Restarting``).
    "Restarting": AppState.RUNNING,
    # A replica's pod ended (failed or succeeded) and no role's pods are all ready: the
    # controller has yet to restart, fail or complete the JobSet. It ran: not waiting.
    "Ending": AppState.RUNNING,
    # Some role's pods are all ready or succeeded.
    "Running": AppState.RUNNING,
}


def conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The status conditions by type."""
    return {str(c.get("type")): c for c in status.get("conditions") or []}


def _true(cond: Mapping[str, Any] | None) -> bool:
    return bool(cond) and str((cond or {}).get("status")) == "True"


def _restarts(status: Mapping[str, Any]) -> int:
    try:
        return int(status.get("restarts") or 0)
    except (TypeError, ValueError):
        return 0


def ended_pods(obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a pod of the JobSet's current restart (its :data:`RESTART_ATTEMPT_LABEL`
    is ``status.restarts``; a pod without it counts) has ended, failed or succeeded."""
    current = str(_restarts(obj.get("status") or {}))
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(RESTART_ATTEMPT_LABEL, current) != current:
            continue
        if _pod_ended(pod):
            return True
    return False


def _pod_ended(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` has ended: its phase says so, or -- a pod that is never restarted in
    place (``restartPolicy: Never``, as the provider writes it) -- every container of it has
    terminated. A kubelet reports the containers terminated before the phase (which waits
    for the pod's sandbox to stop: about a second, more on a busy node)."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Failed", "Succeeded"):
        return True
    if (pod.get("spec") or {}).get("restartPolicy") != "Never":
        return False
    containers = status.get("containerStatuses") or []
    return bool(containers) and all("terminated" in (c.get("state") or {}) for c in containers)


def jobset_phase(obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]] = ()) -> str:
    """The key of :data:`PHASE_STATE` for a JobSet (``""``: not reconciled yet), with its
    ``pods`` where they were read (they tell an app that ran from one that starts).

    A JobSet whose roles are not all ready is ``Starting`` (waiting) only before anything
    of it ran: once it restarts (``status.restarts``) or a pod of its current restart ended,
    it is a running app that restarts or ends (``Restarting``, ``Ending``), never a return
    to waiting. A JobSet Kueue admits again after a preemption, having restarted before, is
    ``Restarting`` from its admission (the status does not tell the two apart).
    """
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    by_type = conditions(status)
    terminal = status.get("terminalState")
    if terminal == "Completed" or _true(by_type.get("Completed")):
        return "Completed"
    if terminal == "Failed" or _true(by_type.get("Failed")):
        return "Failed"
    if meta.get("deletionTimestamp"):
        return "Terminating"
    if is_cancelled(obj):
        return "Cancelled"
    if (obj.get("spec") or {}).get("suspend"):
        return "Suspended"
    jobs = status.get("replicatedJobsStatus")
    if not status or jobs is None:
        return ""
    if any(int(j.get("ready") or 0) + int(j.get("succeeded") or 0) > 0 for j in jobs):
        return "Running"
    if _restarts(status) > 0:
        return "Restarting"
    if ended_pods(obj, pods):
        return "Ending"
    return "Starting"


def jobset_state(
    obj: Mapping[str, Any], where: str = "", pods: Sequence[Mapping[str, Any]] = ()
) -> AppState:
    """The app state of a JobSet (with its ``pods``, where read: :func:`jobset_phase`)."""
    return readback.app_state_of(PHASE_STATE, jobset_phase(obj, pods), "JobSet phase", where)


def status_message(obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]] = ()) -> str:
    """What the task log shows: the phase and the condition that explains it."""
    phase = jobset_phase(obj, pods) or "not reconciled yet"
    status = obj.get("status") or {}
    by_type = conditions(status)
    if phase == "Cancelled":
        return "Cancelled: suspended; its pods are removed"
    if phase == "Suspended":
        return queued_message(obj)
    if phase == "Ending":
        return "Ending: a replica ended; the JobSet controller restarts, fails or completes it"
    for kind in ("Failed", "Completed"):
        cond = by_type.get(kind)
        if _true(cond) and cond:
            detail = cond.get("message") or cond.get("reason") or ""
            return f"{phase}: {detail}".rstrip(": ")
    restarts = _restarts(status)
    if restarts:
        # restarts after a disruption (restart_on_disruption) do not count against maxRestarts
        counted = int(status.get("restartsCountTowardsMax") or 0)
        free = f", {restarts - counted} after a disruption" if counted < restarts else ""
        return f"{phase}: restarted {restarts} time{'s' if restarts > 1 else ''}{free}"
    return phase


def replicated_jobs(obj: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The replicatedJobs of a JobSet (one per role)."""
    yield from (obj.get("spec") or {}).get("replicatedJobs") or []


def pod_templates(obj: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The pod template of every role's Job."""
    for rjob in replicated_jobs(obj):
        yield rjob["template"]["spec"]["template"]


def pod_hostname(jobset: str, replicated_job: str, index: int) -> str:
    """The hostname of replica ``index`` of a role: its Job is ``{jobset}-{rjob}-0`` (one Job
    per role) and an Indexed Job's pod is named by host ``{job}-{index}``."""
    return f"{jobset}-{replicated_job}-0-{index}"


def _hostnames(jobset: str, replicated_job: str, subdomain: str) -> Callable[[int], str]:
    return lambda index: f"{pod_hostname(jobset, replicated_job, index)}.{subdomain}"


def describe_jobset(
    app_id: str, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]] = ()
) -> DescribeAppResponse:
    """The app, roles and replicas of a JobSet and its pods."""
    status = obj.get("status") or {}
    name = str((obj.get("metadata") or {}).get("name"))
    subdomain = ((obj.get("spec") or {}).get("network") or {}).get("subdomain") or name
    app_state = jobset_state(obj, f" (JobSet {name})", pods)
    jobs = [
        (rjob["template"]["spec"], _hostnames(name, str(rjob["name"]), subdomain))
        for rjob in replicated_jobs(obj)
    ]
    return describe_indexed(
        app_id,
        app_state,
        jobs,
        pods,
        num_restarts=_restarts(status),
        msg=status_message(obj, pods),
        suspended=bool((obj.get("spec") or {}).get("suspend")),
    )
