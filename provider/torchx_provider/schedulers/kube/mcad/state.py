"""MCAD AppWrapper status → app and replica states (pure).

MCAD reports pod counts, not replicas: the AppWrapper's ``status.state`` gives the app state
(:data:`JOB_STATE`), and each replica's state is read from its pod.

A pod deleted while its AppWrapper runs (``kubectl delete``, an eviction) is never created
again, and MCAD completes an AppWrapper only once every pod is complete: without requeuing
it stays ``Running`` for ever. So once every other replica's pod has ended, the replicas
without a pod are FAILED, and so is the app (:func:`pods_gone_for_good`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from torchx_provider.schedulers.api import DescribeAppResponse
from torchx_provider.schedulers.kube import status as readback
from torchx_provider.schedulers.kube.pending import Wait, short
from torchx_provider.specs.api import NONE, AppState, is_terminal

#: AppWrapper ``status.state`` → app state (MCAD ``AppWrapperState``).
#: https://github.com/project-codeflare/multi-cluster-app-dispatcher/blob/v1.40.0/pkg/apis/controller/v1beta1/appwrapper.go
JOB_STATE: dict[str, AppState] = {
    # Queued, waiting for MCAD to dispatch it (quota, resources).
    "Pending": AppState.PENDING,
    # Dispatched: its items were created.
    "Running": AppState.RUNNING,
    # Some items with completionstatus completed, pods still pending or running.
    "RunningHoldCompletion": AppState.RUNNING,
    # No pod pending or running any more: SUCCEEDED, or FAILED when a pod failed.
    "Completed": AppState.SUCCEEDED,
    # MCAD failed it (e.g. its dispatch deadline passed).
    "Failed": AppState.FAILED,
    # MCAD gave up and removed its items (requeuings exhausted): the app did not run.
    "Deleted": AppState.FAILED,
}


#: The AppWrapper conditions (``status.conditions[].type``, MCAD ``AppWrapperConditionType``)
#: that say why MCAD holds a queued AppWrapper, when one is the latest -> what it means.
#: The others are routine steps (``Init``, ``Queueing``, ``HeadOfLine``) or say it runs
#: (``Dispatched``, ``Running``, ...): not said.
HOLDING_CONDITIONS: dict[str, str] = {
    # AppWrapperNotRunnable: "Insufficient resources to dispatch AppWrapper." MCAD tries
    # again after its backoff, for as long as the AppWrapper is queued.
    "Backoff": "not dispatched",
    # Chosen to be preempted, or preempted (its items removed) and requeued.
    "PreemptCandidate": "to be preempted",
    "Preempted": "preempted",
}


def holding_waits(obj: Mapping[str, Any]) -> list[Wait]:
    """Why MCAD holds the AppWrapper ``obj``, in MCAD's words, while its latest condition
    is one of :data:`HOLDING_CONDITIONS` (said once per condition, reason and message).

    >>> obj = {"metadata": {"name": "a", "uid": "u"}, "status": {"state": "Pending",
    ...     "conditions": [{"type": "HeadOfLine", "reason": "FrontOfQueue."},
    ...     {"type": "Backoff", "reason": "AppWrapperNotRunnable.",
    ...      "message": "Insufficient resources."}]}}
    >>> print(holding_waits(obj)[0].text)
    MCAD: AppWrapper a not dispatched: AppWrapperNotRunnable: Insufficient resources.
    """
    status = obj.get("status") or {}
    conditions = status.get("conditions") or []
    if not conditions or status.get("state") not in (None, "", "Pending"):
        return []
    latest = conditions[-1]
    kind = str(latest.get("type") or "")
    meaning = HOLDING_CONDITIONS.get(kind)
    if meaning is None:
        return []
    meta = obj.get("metadata") or {}
    reason = str(latest.get("reason") or "").rstrip(".")
    message = short(latest.get("message"))
    said = ": ".join(part for part in (reason, message) if part)
    text = f"MCAD: AppWrapper {meta.get('name')} {meaning}" + (f": {said}" if said else "")
    key = f"mcad:{meta.get('uid') or meta.get('name')}:{kind}:{reason}:{message}"
    return [Wait(key, text)]


def appwrapper_state(status: Mapping[str, Any], where: str = "") -> AppState:
    """The app state of an AppWrapper status; ``Completed`` with a failed pod is ``FAILED``."""
    app_state = readback.app_state_of(JOB_STATE, status.get("state"), "AppWrapper state", where)
    if app_state is AppState.SUCCEEDED and int(status.get("failed") or 0) > 0:
        return AppState.FAILED
    return app_state


#: Why a replica whose pod is gone while its AppWrapper runs failed.
POD_GONE = (
    "its pod was deleted by something other than this task (kubectl delete, an eviction) "
    "while the AppWrapper ran; MCAD does not create it again"
)


def requeues(obj: Mapping[str, Any]) -> bool:
    """Whether MCAD requeues this AppWrapper when fewer of its pods run than it needs
    (``schedulingSpec.minAvailable``; set when the app has retries): it then recovers
    from a deleted pod by itself."""
    spec = (obj.get("spec") or {}).get("schedulingSpec") or {}
    return int(spec.get("minAvailable") or 0) > 0


def pods_gone_for_good(
    app_state: AppState, obj: Mapping[str, Any], states: Sequence[AppState | None]
) -> bool:
    """Whether a running AppWrapper can never complete: some replica has no pod (``None``
    in ``states``, the others' pod states), every other replica's pod has ended, and MCAD
    does not requeue it. MCAD creates the pods all at once when it dispatches, so a pod
    missing after the others ended was deleted, and is never created again."""
    if app_state is not AppState.RUNNING or requeues(obj):
        return False
    podded = [s for s in states if s is not None]
    return len(podded) < len(states) and bool(podded) and all(is_terminal(s) for s in podded)


def pod_items(obj: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The pod templates among an AppWrapper's generic items."""
    items = ((obj.get("spec") or {}).get("resources") or {}).get("GenericItems") or []
    for item in items:
        template = item.get("generictemplate") or {}
        if template.get("kind") == "Pod":
            yield template


def describe_appwrapper(
    app_id: str, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]] = ()
) -> DescribeAppResponse:
    """The app, roles and replicas of an AppWrapper and its pods."""
    status = obj.get("status") or {}
    name = str((obj.get("metadata") or {}).get("name"))
    app_state = appwrapper_state(status, f" (AppWrapper {name})")
    pod_index = readback.pods_by_replica(pods)
    replicas: list[tuple[readback.ReplicaRecord, Mapping[str, Any]]] = []
    pod_states: list[AppState | None] = []
    for template in pod_items(obj):
        key = readback.replica_of(template.get("metadata") or {})
        if key is None:
            continue
        spec = template.get("spec") or {}
        hostname = f"{spec.get('hostname')}.{spec.get('subdomain')}"
        pod = pod_index.get(key)
        # The pod, once there is one, is the replica's state: MCAD counts only pods.
        state = AppState.PENDING if pod is not None or not is_terminal(app_state) else app_state
        record = readback.ReplicaRecord(key, state, hostname).with_pod(pod, prefer_pod_state=True)
        replicas.append((record, template))
        pod_states.append(None if pod is None else record.state)
    conditions = status.get("conditions") or []
    msg = status.get("message") or (conditions[-1].get("message") if conditions else None)
    if pods_gone_for_good(app_state, obj, pod_states):
        gone = [i for i, s in enumerate(pod_states) if s is None]
        for i in gone:
            record, pod_template = replicas[i]
            replicas[i] = (replace(record, state=AppState.FAILED, error=POD_GONE), pod_template)
        app_state = AppState.FAILED
        msg = "; ".join(
            f"{replicas[i][0].key.role}/{replicas[i][0].key.replica_id}: {POD_GONE}" for i in gone
        )
    if app_state is AppState.SUCCEEDED and any(r.state is AppState.FAILED for r, _ in replicas):
        app_state = AppState.FAILED
    restarts = int(status.get("numberOfRequeueings") or 0)
    return readback.describe_app(
        app_id, app_state, replicas, num_restarts=restarts, msg=str(msg or NONE)
    )
