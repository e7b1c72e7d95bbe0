"""Why a job waits under Kueue, and whether it was preempted, from its Workload. Pure.

Kueue admits a job through a ``Workload`` it makes for it (owned by the job; for an
AppWrapper, by the AppWrapper) and says everything about admission in the Workload's
``status.conditions`` (``kueue.x-k8s.io/v1beta2``, ``apis/kueue/v1beta2/workload_types.go``
of Kueue v0.17.0):

==================  ========  ===============================  ==================================
condition           status    reason                           what the task log says
==================  ========  ===============================  ==================================
``QuotaReserved``   False     ``Pending``                      waits for quota, in Kueue's words
                                                               ("insufficient unused quota for
                                                               cpu in flavor ..."); a message
                                                               naming the queue's "maximum
                                                               capacity" is a request the queue
                                                               can never hold: never admissible
``QuotaReserved``   False     ``Inadmissible``                 cannot be admitted as submitted
                                                               ("LocalQueue X doesn't exist",
                                                               "ClusterQueue X is inactive")
``QuotaReserved``   False     any other                        not admitted, reason and message
``QuotaReserved``   True      ``QuotaReserved``                admitted (quota reserved), as
                                                               an info: the wait is over
``Evicted``         True      ``Preempted``                    preempted (the ``Preempted``
                                                               condition's reason:
                                                               ``InClusterQueue``,
                                                               ``InCohort...``); Kueue names the
                                                               preemptor by UID only, the task
                                                               log names it where it is an app
                                                               followed here
``Evicted``         True      any other                        evicted (``PodsReadyTimeout``,
                                                               ``ClusterQueueStopped``, ...)
==================  ========  ===============================  ==================================

A line about a Workload not admitted adds what its LocalQueue's status says
(:func:`queue_summary`: the pending and admitted counts, or that it is inactive) as they are
when the line is said; the counts are not part of its key.

An eviction is not the end of the job: Kueue suspends it (its pods are removed), requeues
the Workload and admits it again when quota allows. Each reason is keyed by the condition's
status, reason, message and last transition, so that the task log says it once, and again
after it changed (a second preemption is said as well).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from torchx_provider.schedulers.kube.pending import Wait, short
from torchx_provider.schedulers.kube.resources import KUEUE_LOCAL_QUEUES

#: The label that puts a job in a Kueue LocalQueue.
QUEUE_LABEL = KUEUE_LOCAL_QUEUES.label

#: The label Kueue puts on a Workload: the UID of the job it was made for.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
#: Words of a ``Pending`` message about a request larger than the queue can ever hold.
NEVER_FITS = "maximum capacity"
#: Kueue's preemption message names the preemptor as ``(UID: <workload>, JobUID: <job>)``.
_PREEMPTOR = re.compile(r"JobUID: ([0-9a-fA-F-]{8,})")
#: Condition types said, in the order said when they changed at the same time.
_ORDER = ("Evicted", "QuotaReserved")


def queued_job_selector(obj: Mapping[str, Any], live: bool) -> str | None:
    """The label selector of the Workload Kueue made for job ``obj`` while the job is
    Kueue's (it carries the LocalQueue label) and ``live``; else ``None``.

    >>> job = {"metadata": {"uid": "u1", "labels": {"kueue.x-k8s.io/queue-name": "lq"}}}
    >>> queued_job_selector(job, live=True), queued_job_selector(job, live=False)
    ('kueue.x-k8s.io/job-uid=u1', None)
    """
    meta = obj.get("metadata") or {}
    if not live or not (meta.get("labels") or {}).get(QUEUE_LABEL) or not meta.get("uid"):
        return None
    return job_uid_selector(str(meta["uid"]))


def job_uid_selector(uid: str) -> str:
    """The label selector of the Workloads Kueue made for the job of UID ``uid``.

    >>> job_uid_selector("9a0c")
    'kueue.x-k8s.io/job-uid=9a0c'
    """
    return f"{JOB_UID_LABEL}={uid}"


def owner_name(obj: Mapping[str, Any], kind: str) -> str | None:
    """The name of ``obj``'s owner of kind ``kind`` (its controller first), if any.

    >>> owner_name({"metadata": {"ownerReferences": [
    ...     {"kind": "AppWrapper", "name": "aw-1", "controller": True}]}}, "AppWrapper")
    'aw-1'
    """
    owners = (obj.get("metadata") or {}).get("ownerReferences") or ()
    named = [o for o in owners if o.get("kind") == kind and o.get("name")]
    named.sort(key=lambda o: not o.get("controller"))
    return str(named[0]["name"]) if named else None


def _conditions(workload: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in (workload.get("status") or {}).get("conditions") or ()}


def preemptor_uid(message: str) -> str | None:
    """The UID of the job Kueue preempted for, from its ``Preempted`` message.

    >>> preemptor_uid("Preempted to accommodate a workload (UID: w1, JobUID: "
    ...     "0d8e8a1c-1111-2222-3333-444455556666) due to prioritization in the ClusterQueue")
    '0d8e8a1c-1111-2222-3333-444455556666'
    """
    found = _PREEMPTOR.search(message)
    return found.group(1) if found else None


def waits_for_admission(workload: Mapping[str, Any]) -> bool:
    """Whether the Workload has no quota reserved (it waits, or was evicted) and is not
    finished.

    >>> waits_for_admission({"status": {"conditions": [
    ...     {"type": "QuotaReserved", "status": "False", "reason": "Pending"}]}})
    True
    """
    conds = _conditions(workload)
    if (conds.get("Finished") or {}).get("status") == "True":
        return False
    return (conds.get("QuotaReserved") or {}).get("status") != "True"


def never_fits(quota_reserved: Mapping[str, Any]) -> bool:
    """Whether a Workload's ``QuotaReserved`` condition says it asks for more than its
    queue can ever hold (read in Kueue's whole message, not the shortened one said).

    >>> never_fits({"type": "QuotaReserved", "status": "False", "reason": "Pending",
    ...     "message": "current podset request (8) > maximum capacity (4)"})
    True
    """
    return (
        quota_reserved.get("status") == "False"
        and quota_reserved.get("reason") == "Pending"
        and NEVER_FITS in str(quota_reserved.get("message") or "")
    )


#: Words of an ``Inadmissible`` message about a queue that is not there (``LocalQueue X
#: doesn't exist``, ``ClusterQueue X doesn't exist``): Kueue retries it without end.
MISSING_QUEUE = "doesn't exist"


def missing_queue(workload: Mapping[str, Any]) -> str | None:
    """Kueue's words when the Workload cannot be admitted because its LocalQueue (or that
    one's ClusterQueue) does not exist, ``None`` otherwise: a configuration waiting does not
    heal, unless the queue is made (what the start grace allows for).

    >>> missing_queue({"status": {"conditions": [{"type": "QuotaReserved", "status":
    ...     "False", "reason": "Inadmissible", "message": "LocalQueue nope doesn't exist"}]}})
    "Inadmissible: LocalQueue nope doesn't exist"
    """
    if not waits_for_admission(workload):
        return None
    cond = _conditions(workload).get("QuotaReserved") or {}
    message = short(cond.get("message"))
    if cond.get("reason") != "Inadmissible" or MISSING_QUEUE not in message:
        return None
    return f"Inadmissible: {message}"


def evictions(workload: Mapping[str, Any]) -> int:
    """How often Kueue evicted the Workload (preemptions included), as it counts them in
    ``status.schedulingStats.evictions``.

    >>> evictions({"status": {"schedulingStats": {"evictions": [
    ...     {"reason": "Preempted", "count": 2}, {"reason": "PodsReadyTimeout", "count": 1}]}}})
    3
    """
    stats = (workload.get("status") or {}).get("schedulingStats") or {}
    total = 0
    for entry in stats.get("evictions") or ():
        try:
            total += int(entry.get("count") or 0)
        except (TypeError, ValueError):
            continue
    return total


def queue_summary(queue: Mapping[str, Any] | None) -> str:
    """What a LocalQueue's status says of the work waiting in it, as a clause of a waiting
    line (``""``: it says nothing, or it could not be read).

    >>> queue_summary({"metadata": {"name": "lq"}, "status": {"pendingWorkloads": 3,
    ...     "admittedWorkloads": 1}})
    '; LocalQueue lq holds 3 pending workloads, 1 admitted'
    >>> queue_summary({"metadata": {"name": "lq"}, "status": {"conditions": [{"type": "Active",
    ...     "status": "False", "reason": "ClusterQueueIsInactive", "message": "Can't submit"}]}})
    "; LocalQueue lq is inactive: ClusterQueueIsInactive: Can't submit"
    """
    if not queue:
        return ""
    name = str((queue.get("metadata") or {}).get("name") or "?")
    status = queue.get("status") or {}
    active = _conditions(queue).get("Active") or {}
    if active.get("status") == "False":
        reason = str(active.get("reason") or "")
        message = short(active.get("message"))
        return (
            f"; LocalQueue {name} is inactive: {reason}: {message}"
            if message
            else (f"; LocalQueue {name} is inactive: {reason}")
        )
    pending = status.get("pendingWorkloads")
    if not isinstance(pending, int):
        return ""
    admitted = status.get("admittedWorkloads")
    more = f", {admitted} admitted" if isinstance(admitted, int) else ""
    noun = "workload" if pending == 1 else "workloads"
    return f"; LocalQueue {name} holds {pending} pending {noun}{more}"


def local_queue_waits(queue: Mapping[str, Any], job: str) -> list[Wait]:
    """That LocalQueue ``queue`` admits no workload (its ``Active`` condition is false: it
    is stopped, or its ClusterQueue is stopped, inactive or missing), for job ``job`` (its
    uid) that waits in it; ``[]`` while it is active. Said from the LocalQueue itself: when
    a ClusterQueue stops, Kueue updates its LocalQueues at once, but not always the
    Workloads already waiting there, whose last reason (no quota) then stands.

    >>> lq = {"metadata": {"name": "lq"}, "spec": {"clusterQueue": "cq"}, "status": {
    ...     "conditions": [{"type": "Active", "status": "False", "reason":
    ...     "ClusterQueueIsInactive", "message": "Can't submit new workloads to clusterQueue"}]}}
    >>> print(local_queue_waits(lq, "u1")[0].text)  # doctest: +ELLIPSIS
    Kueue LocalQueue lq (ClusterQueue cq) admits no workload: ClusterQueueIsInactive: Can't ...
    """
    active = _conditions(queue).get("Active") or {}
    if active.get("status") != "False":
        return []
    name = str((queue.get("metadata") or {}).get("name") or "?")
    cluster_queue = (queue.get("spec") or {}).get("clusterQueue")
    of = f" (ClusterQueue {cluster_queue})" if cluster_queue else ""
    reason = str(active.get("reason") or "")
    message = short(active.get("message"))
    said = f"{reason}: {message}" if message else reason
    when = str(active.get("lastTransitionTime") or "")
    return [
        Wait(
            f"kueue-localqueue:{name}:{job}:{reason}:{when}",
            f"Kueue LocalQueue {name}{of} admits no workload: {said}; the app waits until an "
            "administrator makes it active again, or cancel it and name another LocalQueue "
            "in run option local_queue",
        )
    ]


def _line(
    workload_name: str,
    kind: str,
    cond: Mapping[str, Any],
    conds: Mapping[str, Any],
    app_of: Callable[[str], str | None],
    queue: Mapping[str, Any] | None,
) -> str | None:
    """The task log's line for one condition, or ``None``: nothing to say."""
    status, reason = cond.get("status"), str(cond.get("reason") or "")
    message = short(cond.get("message"))
    said = f"{reason}: {message}" if message else reason
    what = f"Kueue workload {workload_name}"
    if kind == "QuotaReserved" and status == "False":
        evicted = conds.get("Evicted") or {}
        if evicted.get("status") == "True" and short(evicted.get("message")) == message:
            return None  # the eviction's own words, said with it
        if never_fits(cond):
            return (
                f"{what} can never be admitted: it asks for more than its ClusterQueue can "
                f"ever hold ({said}); change the request or the queue"
            )
        if reason == "Pending":
            return f"{what} waits for quota: {said}{queue_summary(queue)}"
        if reason == "Inadmissible":
            return f"{what} cannot be admitted: {said}{queue_summary(queue)}"
        return f"{what} is not admitted: {said}{queue_summary(queue)}"
    if kind == "QuotaReserved" and status == "True":
        return f"{what} admitted: {said}"
    if kind == "Evicted" and status == "True":
        if reason == "Preempted":
            preempted = conds.get("Preempted") or {}
            detail = short(preempted.get("message")) or message
            how = str(preempted.get("reason") or reason)
            uid = preemptor_uid(detail)
            app = app_of(uid) if uid else None
            by = f" (the preemptor is app {app})" if app else ""
            return (
                f"{what} was preempted: {how}: {detail}{by}; the app is suspended and "
                "requeued, not failed: it runs again once Kueue admits it again"
            )
        return f"{what} was evicted: {said}; the app is suspended and requeued"
    return None


def workload_waits(
    workload: Mapping[str, Any],
    app_of: Callable[[str], str | None] = lambda uid: None,
    queue: Mapping[str, Any] | None = None,
) -> list[Wait]:
    """What the Workload says about admission (see the module docstring), oldest change
    first; ``app_of`` names the app of a job UID, where it is one followed here; a line of
    a Workload not admitted adds what its LocalQueue ``queue`` says (:func:`queue_summary`:
    how much waits there, as it was when the line was said).

    >>> wl = {"metadata": {"name": "appwrapper-a-1", "uid": "w1"}, "status": {"conditions": [
    ...     {"type": "QuotaReserved", "status": "False", "reason": "Inadmissible",
    ...      "message": "LocalQueue nope doesn't exist", "lastTransitionTime": "t1"}]}}
    >>> print(workload_waits(wl)[0].text)
    Kueue workload appwrapper-a-1 cannot be admitted: Inadmissible: LocalQueue nope doesn't exist
    """
    meta = workload.get("metadata") or {}
    name = str(meta.get("name") or "?")
    uid = str(meta.get("uid") or name)
    conds = _conditions(workload)
    if (conds.get("Finished") or {}).get("status") == "True":
        return []
    found: list[tuple[str, int, Wait]] = []
    for rank, kind in enumerate(_ORDER):
        cond = conds.get(kind)
        if not cond:
            continue
        text = _line(name, kind, cond, conds, app_of, queue)
        if text is None:
            continue
        when = str(cond.get("lastTransitionTime") or "")
        key = (
            f"kueue:{uid}:{kind}:{cond.get('status')}:{cond.get('reason')}:{when}:"
            f"{short(cond.get('message'))}"
        )
        admitted = kind == "QuotaReserved" and cond.get("status") == "True"
        found.append((when, rank, Wait(key, text, warning=not admitted)))
    return [wait for _, _, wait in sorted(found, key=lambda f: (f[0], f[1]))]
