"""Why an app waits, in the cluster's own words. Pure.

A pod that does not run yet says why in its status: the scheduler's ``PodScheduled=False``
condition (``Unschedulable``: "0/3 nodes are available: 3 Insufficient cpu."), or a
container's ``state.waiting`` (``ErrImagePull``, ``ImagePullBackOff``,
``CreateContainerConfigError``, ...). :func:`pod_waits` reads both from the pods the follow
already has (the shared watches' cache): no request of its own. The replica's own container
is left out: its waiting reason is the replica's (the follow says it from the replica rows,
:func:`~torchx_provider.triggers.summary.waiting_notes`); init containers and sidecars are
said here. A Volcano job gated at its queue has no pod at all: its scheduler says why in
Events on the job's PodGroup, and pods it cannot create in Events on the job, which
:func:`event_waits` reads (from the namespace's shared
Events watch, or one list per describe on the worker). Each reason comes with a key
that changes when the reason does, so that the task log says each one once.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from torchx_provider.schedulers.kube.pod import ANNOTATION_DEFAULT_CONTAINER

#: Waiting reasons that are only a container starting normally: not said.
ROUTINE_WAITS = frozenset({"ContainerCreating", "PodInitializing"})
#: Longest message kept from a condition or a waiting state.
MESSAGE_CHARS = 500


@dataclass(frozen=True)
class Wait:
    """One reason a pod waits: ``key`` identifies the pod and the reason (said once per
    key), ``text`` is the line for the task log; ``warning=False``: the wait is over (an
    admission), said as an info."""

    key: str
    text: str
    warning: bool = True


def short(message: Any) -> str:
    """``message`` on one line, at most :data:`MESSAGE_CHARS` long."""
    text = " ".join(str(message or "").split())
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."


def _said(reason: str, message: Any) -> str:
    message = short(message)
    return f"{reason}: {message}" if message else reason


def _main_container(pod: Mapping[str, Any]) -> str | None:
    """The replica's own container: the pod's default container, else its first."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    named = annotations.get(ANNOTATION_DEFAULT_CONTAINER)
    if named:
        return str(named)
    containers = (pod.get("spec") or {}).get("containers") or ()
    return str(containers[0].get("name")) if containers else None


def pod_waits(pods: Iterable[Mapping[str, Any]]) -> list[Wait]:
    """Why each pending pod of ``pods`` waits (pods that run or ended say nothing).

    >>> pod = {"metadata": {"name": "job-w-0", "uid": "u1"}, "status": {"phase": "Pending",
    ...     "conditions": [{"type": "PodScheduled", "status": "False",
    ...     "reason": "Unschedulable", "message": "0/2 nodes are available: 2 Insufficient cpu."}]}}
    >>> [w.text for w in pod_waits([pod])]
    ['pod job-w-0 is not scheduled: Unschedulable: 0/2 nodes are available: 2 Insufficient cpu.']
    """
    waits: list[Wait] = []
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase", "Pending") != "Pending":
            continue
        meta = pod.get("metadata") or {}
        name = str(meta.get("name") or "?")
        uid = str(meta.get("uid") or name)
        for cond in status.get("conditions") or ():
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                reason = str(cond.get("reason") or "Unschedulable")
                message = cond.get("message")
                waits.append(
                    Wait(
                        f"pending:{uid}:scheduled:{reason}:{short(message)}",
                        f"pod {name} is not scheduled: {_said(reason, message)}",
                    )
                )
        main = _main_container(pod)
        statuses = [
            *(status.get("initContainerStatuses") or ()),
            *(cs for cs in status.get("containerStatuses") or () if cs.get("name") != main),
        ]
        for cs in statuses:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            why = str(waiting.get("reason") or "")
            if not why or why in ROUTINE_WAITS:
                continue
            container = str(cs.get("name") or "?")
            waits.append(
                Wait(
                    f"pending:{uid}:{container}:{why}",
                    f"pod {name} container {container} waits: {_said(why, waiting.get('message'))}",
                )
            )
    return waits


def _when(event: Mapping[str, Any]) -> str:
    """When an Event last happened, as its RFC 3339 text (sorts as time does)."""
    series = event.get("series") or {}
    return str(
        event.get("lastTimestamp")
        or series.get("lastObservedTime")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or ""
    )


#: A Kubernetes API error as a Go controller prints it (``%+v`` of a ``StatusError``): the
#: words are its ``Message``; the rest, with a pointer that changes every time, is noise.
_GO_STATUS_ERROR = re.compile(
    r'&errors\.StatusError\{ErrStatus:v1\.Status\{.*?Message:"((?:[^"\\]|\\.)*)".*?\}\}'
)
#: A Go pointer printed in a message (``(0xc000a1b2c0)``): different at every retry.
_GO_POINTER = re.compile(r"\(?0x[0-9a-f]{6,}\)?")
#: What client-go's event correlator puts before a message it has seen often.
COMBINED = "(combined from similar events): "


def readable(message: str) -> str:
    r"""``message`` without what a Go controller's printing of an API error adds to its
    words: the error's own ``Message``, unquoted, stands for it; pointers go, and the mark
    client-go puts on an Event it repeats often (:data:`COMBINED`).

    >>> readable('Error creating pods: [failed to create pod p, err: &errors.StatusError{'
    ...     'ErrStatus:v1.Status{Status:"Failure", Message:"pods \\"p\\" is forbidden: '
    ...     'exceeded quota: q", Reason:"Forbidden", Details:(*v1.StatusDetails)(0xc000a1b2c0), '
    ...     'Code:403}}]')
    'Error creating pods: [failed to create pod p, err: pods "p" is forbidden: exceeded quota: q]'
    """
    text = _GO_STATUS_ERROR.sub(lambda m: m.group(1).replace('\\"', '"'), message)
    return _GO_POINTER.sub("", text.removeprefix(COMBINED))


#: Words of an Event that says only that a job waits, not why (Volcano's gang summary,
#: written in the same instant as the reason, e.g. queue quota): of Events of one instant,
#: these come first, so that the reason is said last (the one a queue timeout names).
VAGUE_EVENTS = ("tasks in gang unschedulable",)


def _specific(event: Mapping[str, Any]) -> bool:
    """Whether an Event says why a job waits (not only that it does: :data:`VAGUE_EVENTS`)."""
    message = str(event.get("message") or event.get("note") or "")
    return not any(words in message for words in VAGUE_EVENTS)


def event_waits(
    events: Iterable[Mapping[str, Any]], routine: Collection[str] = frozenset()
) -> list[Wait]:
    """Why a job waits, from the Events its controllers wrote on the objects that gate it (a
    Volcano PodGroup: queue quota, gang not ready; a Volcano job: pods it cannot create),
    oldest first (of one instant, the most specific last: :data:`VAGUE_EVENTS`); Events of
    a ``routine`` reason say nothing.

    Each distinct ``(reason, message)`` of an object is one reason, whatever its count: a
    scheduler repeats the same Event every cycle, and the task log says it once.

    >>> event = {"involvedObject": {"kind": "PodGroup", "name": "job-1-u1", "uid": "pg1"},
    ...     "reason": "Unschedulable", "count": 7,
    ...     "message": "queue resource quota insufficient: insufficient cpu"}
    >>> [w.text for w in event_waits([event])]
    ['PodGroup job-1-u1 waits: Unschedulable: queue resource quota insufficient: insufficient cpu']
    >>> event_waits([{**event, "reason": "Scheduled"}], routine={"Scheduled"})
    []
    """
    waits: dict[str, Wait] = {}
    for event in sorted(events, key=lambda e: (_when(e), _specific(e))):
        involved = event.get("involvedObject") or {}
        reason = str(event.get("reason") or "")
        message = short(readable(str(event.get("message") or event.get("note") or "")))
        if (not reason and not message) or reason in routine:
            continue
        kind = str(involved.get("kind") or "object")
        name = str(involved.get("name") or "?")
        uid = str(involved.get("uid") or name)
        key = f"pending:{uid}:event:{reason}:{message}"
        if key not in waits:
            waits[key] = Wait(key, f"{kind} {name} waits: {_said(reason or 'Event', message)}")
    return list(waits.values())
