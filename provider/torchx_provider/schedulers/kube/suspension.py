"""Apps whose object has ``spec.suspend`` (AppWrapper ``v1beta2``, JobSet): Kueue's labels,
and cancel by suspension (pure).

Kueue admits such an object from a LocalQueue: it is created with ``spec.suspend: true`` and
the label :data:`QUEUE_LABEL`, and Kueue sets ``suspend: false`` once quota is reserved (and
back to ``true`` when it preempts it). A workload holds at most :data:`MAX_PODSETS` pod sets;
each role is one.

Cancel (the run option ``cancel_by``, recorded on the object as :data:`ANNOTATION_CANCEL_BY`):
``suspend`` patches ``spec.suspend: true`` and marks the object :data:`ANNOTATION_CANCELLED`
-- its controller deletes the pods and the object stays with its status; ``delete`` removes
it with everything it made (the default under Kueue, which owns ``spec.suspend`` and would
admit a suspended object again).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchx_provider.errors import InvalidOptionError
from torchx_provider.schedulers.kube.request import JsonPatch

#: Kueue's labels: the LocalQueue a job is submitted to, and its WorkloadPriorityClass.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: Kueue admits a workload of at most this many pod sets (its webhooks check it).
MAX_PODSETS = 8

#: What ``cancel_by`` takes: keep the object suspended (its status and conditions stay
#: readable; its controller deletes the pods) or delete it with everything it made.
CANCEL_SUSPEND = "suspend"
CANCEL_DELETE = "delete"
CANCEL_ACTIONS = (CANCEL_SUSPEND, CANCEL_DELETE)
#: The annotation cancel sets (with ``spec.suspend: true``): a suspended object carrying it
#: was cancelled, not preempted or queued.
ANNOTATION_CANCELLED = "torchx.pytorch.org/cancelled"
#: The annotation that records what cancel does to this object (``suspend``/``delete``).
ANNOTATION_CANCEL_BY = "torchx.pytorch.org/cancel-by"


def check_cancel_by(value: str | None) -> None:
    """Refuse a ``cancel_by`` that is neither action."""
    if value is not None and value not in CANCEL_ACTIONS:
        raise InvalidOptionError(
            f"run option cancel_by={value!r}; use one of {list(CANCEL_ACTIONS)}",
            option="cancel_by",
        )


def cancel_action(cancel_by: str | None, local_queue: str | None) -> str:
    """What cancel does: ``cancel_by``, else suspend -- or delete under Kueue."""
    if cancel_by:
        return cancel_by
    return CANCEL_DELETE if local_queue else CANCEL_SUSPEND


def is_cancelled(obj: Mapping[str, Any]) -> bool:
    """Whether cancel suspended this object."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return annotations.get(ANNOTATION_CANCELLED) == "true"


def suspend_patch(obj: Mapping[str, Any]) -> JsonPatch:
    """The JSON patch that cancels by suspension: ``spec.suspend`` and the cancelled mark."""
    key = ANNOTATION_CANCELLED.replace("~", "~0").replace("/", "~1")
    has_annotations = bool((obj.get("metadata") or {}).get("annotations"))
    mark: dict[str, Any] = (
        {"op": "add", "path": f"/metadata/annotations/{key}", "value": "true"}
        if has_annotations
        else {"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION_CANCELLED: "true"}}
    )
    return JsonPatch([mark, {"op": "add", "path": "/spec/suspend", "value": True}])


def cancel_plan(obj: Mapping[str, Any]) -> JsonPatch | None:
    """How to cancel ``obj`` as it recorded: the suspension patch, or ``None`` (delete)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if annotations.get(ANNOTATION_CANCEL_BY, CANCEL_SUSPEND) == CANCEL_SUSPEND:
        return suspend_patch(obj)
    return None
