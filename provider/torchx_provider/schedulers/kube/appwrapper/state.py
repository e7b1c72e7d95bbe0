"""AppWrapper ``v1beta2`` status → app and replica states (pure).

The AppWrapper's ``status.phase`` gives the app state (:data:`PHASE_STATE`), its
``status.conditions`` the message (why it waits, why it is unhealthy), and
``status.resettingCount`` how often it restarted. The controller counts pods, not replicas:
each replica's state is read from its pod, found by the Indexed Job's completion index.

Source: project-codeflare/appwrapper v1.2.1, ``api/v1beta2/appwrapper_types.go`` (phases,
conditions, annotations) and ``internal/controller/appwrapper/appwrapper_controller.go``
(the transitions).
https://github.com/project-codeflare/appwrapper/blob/v1.2.1/internal/controller/appwrapper/appwrapper_controller.go
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from torchx_provider.schedulers.api import DescribeAppResponse
from torchx_provider.schedulers.kube import status as readback
from torchx_provider.schedulers.kube.indexed import describe_indexed
from torchx_provider.schedulers.kube.suspension import (
    ANNOTATION_CANCEL_BY,
    ANNOTATION_CANCELLED,
    is_cancelled,
    queued_message,
)
from torchx_provider.specs.api import AppState

__all__ = [
    "ANNOTATION_CANCELLED",
    "ANNOTATION_CANCEL_BY",
    "appwrapper_state",
    "describe_appwrapper",
    "is_cancelled",
    "pod_templates",
    "status_message",
]

#: ``status.phase`` → app state. The empty phase (not reconciled yet) is ``SUBMITTED``
#: (:func:`~torchx_provider.schedulers.kube.status.app_state_of`).
PHASE_STATE: dict[str, AppState] = {
    # No components deployed; ``spec.suspend`` is true: queued until Kueue (or whoever owns
    # suspend) admits it, or preempted and requeued.
    "Suspended": AppState.PENDING,
    # Admitted (suspend false): the controller is creating the components; pods follow.
    # (Resuming after a reset -- ``Unhealthy`` still true -- is a restart of a running app:
    # :func:`appwrapper_state` reads it as ``Resetting``.)
    "Resuming": AppState.PENDING,
    # Components deployed; pods pending or running (PodsReady says whether all are up).
    "Running": AppState.RUNNING,
    # A failure is being retried: components deleted, recreated after the retry pause
    # (``resettingCount`` was incremented).
    "Resetting": AppState.RUNNING,
    # Suspend set while deployed (Kueue preemption): components are being deleted, then it
    # waits in Suspended for admission again.
    "Suspending": AppState.PENDING,
    # Every expected pod succeeded, none pending, running or failed.
    "Succeeded": AppState.SUCCEEDED,
    # Retries used up, a terminal exit code, a failed or missing component.
    "Failed": AppState.FAILED,
    # Deleted (deletionTimestamp): its components are being removed.
    "Terminating": AppState.CANCELLED,
}

#: Condition types, in the order their message explains the state best.
#: ``Unhealthy`` (why it failed or resets), ``PodsReady`` (all pods up), ``QuotaReserved``
#: (admitted or not), ``ResourcesDeployed`` (components exist).
CONDITION_ORDER = ("Unhealthy", "PodsReady", "QuotaReserved", "ResourcesDeployed")

#: Phases in which a cancelled AppWrapper (:data:`ANNOTATION_CANCELLED`) is ``CANCELLED``.
_CANCELLABLE_PHASES = ("", "Suspended", "Suspending", "Resuming", "Running", "Resetting")


def restarting(status: Mapping[str, Any]) -> bool:
    """Whether an AppWrapper in ``Resuming`` comes back from a reset (a failure retried:
    its ``Unhealthy`` condition is still true) rather than from admission (the controller
    sets ``Unhealthy`` false when it leaves ``Suspended``).

    >>> restarting({"phase": "Resuming", "conditions": [{"type": "Unhealthy",
    ...     "status": "True", "reason": "FoundFailedPods"}]})
    True
    """
    unhealthy = conditions(status).get("Unhealthy") or {}
    return status.get("phase") == "Resuming" and unhealthy.get("status") == "True"


def appwrapper_state(obj: Mapping[str, Any], where: str = "") -> AppState:
    """The app state of an AppWrapper; one cancelled by suspension is ``CANCELLED``, one
    resuming after a reset is restarting (``RUNNING``, as in ``Resetting``), not waiting."""
    status = obj.get("status") or {}
    phase = status.get("phase")
    if is_cancelled(obj) and (phase or "") in _CANCELLABLE_PHASES:
        return AppState.CANCELLED
    if restarting(status):
        return PHASE_STATE["Resetting"]
    return readback.app_state_of(PHASE_STATE, phase, "AppWrapper phase", where)


def conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The status conditions by type."""
    return {str(c.get("type")): c for c in status.get("conditions") or []}


def status_message(obj: Mapping[str, Any]) -> str:
    """What the task log shows: the phase and the condition that explains it. A suspended
    AppWrapper without quota is queued (for Kueue, in its local queue)."""
    status = obj.get("status") or {}
    phase = status.get("phase") or "not reconciled yet"
    if is_cancelled(obj):
        return f"{phase}: cancelled (suspended; its pods are removed)"
    by_type = conditions(status)
    if phase == "Suspended" and (obj.get("spec") or {}).get("suspend"):
        return queued_message(obj)
    unhealthy = by_type.get("Unhealthy") or {}
    if unhealthy.get("status") == "True":
        detail = unhealthy.get("message") or unhealthy.get("reason") or ""
        return f"{phase}: unhealthy: {detail}".rstrip(": ")
    for kind in CONDITION_ORDER[1:]:
        cond = by_type.get(kind)
        if cond and cond.get("message"):
            return f"{phase}: {kind}={cond.get('status')}: {cond['message']}"
    return str(phase)


def job_components(obj: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The Job templates among an AppWrapper's components (one per role)."""
    for component in (obj.get("spec") or {}).get("components") or []:
        template = component.get("template") or {}
        if template.get("kind") == "Job":
            yield template


def pod_templates(obj: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The pod template of every role's Job."""
    for job in job_components(obj):
        yield job["spec"]["template"]


def describe_appwrapper(
    app_id: str, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]] = ()
) -> DescribeAppResponse:
    """The app, roles and replicas of an AppWrapper and its pods."""
    name = str((obj.get("metadata") or {}).get("name"))
    app_state = appwrapper_state(obj, f" (AppWrapper {name})")

    def hostnames(job: Mapping[str, Any]) -> Callable[[int], str]:
        subdomain = (job["spec"]["template"].get("spec") or {}).get("subdomain")
        return lambda index: f"{job['metadata']['name']}-{index}.{subdomain}"

    jobs = [(job["spec"], hostnames(job)) for job in job_components(obj)]
    restarts = int((obj.get("status") or {}).get("resettingCount") or 0)
    return describe_indexed(
        app_id,
        app_state,
        jobs,
        pods,
        num_restarts=restarts,
        msg=status_message(obj),
        suspended=bool((obj.get("spec") or {}).get("suspend")),
    )
