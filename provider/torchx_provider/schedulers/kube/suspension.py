"""Apps whose object has ``spec.suspend`` (AppWrapper ``v1beta2``, JobSet): Kueue's labels,
and cancel by suspension (pure).

Kueue admits such an object from a LocalQueue: it is created with ``spec.suspend: true`` and
the label :data:`QUEUE_LABEL`, and Kueue sets ``suspend: false`` once quota is reserved (and
back to ``true`` when it preempts it). A workload holds at most :data:`MAX_PODSETS` pod sets;
each role is one.

Cancel (the run option ``cancel_by``, recorded on the object as :data:`ANNOTATION_CANCEL_BY`):
``suspend`` patches ``spec.suspend: true`` and marks the object :data:`ANNOTATION_CANCELLED`
-- its controller deletes the pods and the object stays with its status; ``delete`` removes
it with everything it made (the default under Kueue). Kueue owns ``spec.suspend`` of the
objects of a LocalQueue and would admit a suspended one again: a cancel by suspension there
deactivates the object's Workload instead (``spec.active: false``, Kueue's own way to hold
one: it evicts it, suspends the object and never admits it again while it is inactive;
:data:`DEACTIVATE`) and marks the object cancelled; where it cannot (the account may not
patch Workloads, or Kueue has not made one yet) it deletes the object. An object marked
cancelled is ``CANCELLED`` whatever runs it again, so that no later try follows it.

Before an object of a LocalQueue is created, the LocalQueue is read: one that does not exist
is refused (:func:`local_queue_problem`), naming those of the namespace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from torchx_provider.errors import AppConfigurationError, InvalidAppError, InvalidOptionError
from torchx_provider.schedulers.kube.kueue import (
    QUEUE_LABEL,
    local_queue_waits,
    queued_job_selector,
    waits_for_admission,
)
from torchx_provider.schedulers.kube.options import KubeOpts, option
from torchx_provider.schedulers.kube.pending import Wait
from torchx_provider.schedulers.kube.pod import PodSettings
from torchx_provider.schedulers.kube.request import JsonPatch, KubeTranslation, OwnedPatch
from torchx_provider.schedulers.kube.resources import (
    KUEUE_LOCAL_QUEUES,
    KUEUE_WORKLOAD,
    CustomResource,
    QueuedIn,
)
from torchx_provider.specs.api import AppDef, is_terminal

#: Kueue's labels: the LocalQueue a job is submitted to (:data:`.kueue.QUEUE_LABEL`), and
#: its WorkloadPriorityClass.
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


def check_podsets(app: AppDef, holder: str) -> None:
    """Refuse an app of more roles (one pod set each) than Kueue admits in one workload;
    ``holder`` names what would hold them in the error."""
    if len(app.roles) > MAX_PODSETS:
        raise InvalidAppError(
            f"{holder} holds at most {MAX_PODSETS} roles (Kueue's pod set limit); "
            f"this app has {len(app.roles)}",
            "roles",
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


def queued_message(obj: Mapping[str, Any]) -> str:
    """What the task log says of a suspended object that is not cancelled: queued (in its
    Kueue LocalQueue, when it names one) until admitted."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    queue = labels.get(QUEUE_LABEL)
    where = f" in Kueue local queue {queue!r}" if queue else ""
    return f"Suspended: queued{where}, waiting for admission"


def cancelled_mark(obj: Mapping[str, Any]) -> JsonPatch:
    """The JSON patch that marks ``obj`` cancelled (:data:`ANNOTATION_CANCELLED`)."""
    key = ANNOTATION_CANCELLED.replace("~", "~0").replace("/", "~1")
    has_annotations = bool((obj.get("metadata") or {}).get("annotations"))
    mark: dict[str, Any] = (
        {"op": "add", "path": f"/metadata/annotations/{key}", "value": "true"}
        if has_annotations
        else {"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION_CANCELLED: "true"}}
    )
    return JsonPatch([mark])


def suspend_patch(obj: Mapping[str, Any]) -> JsonPatch:
    """The JSON patch that cancels by suspension: ``spec.suspend`` and the cancelled mark."""
    return JsonPatch(
        [*cancelled_mark(obj).ops, {"op": "add", "path": "/spec/suspend", "value": True}]
    )


def cancel_plan(obj: Mapping[str, Any]) -> JsonPatch | None:
    """How to cancel ``obj`` as it recorded: the suspension patch, or ``None`` (delete)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if annotations.get(ANNOTATION_CANCEL_BY, CANCEL_SUSPEND) == CANCEL_SUSPEND:
        return suspend_patch(obj)
    return None


#: The patch that deactivates a Kueue Workload: Kueue evicts it (its job is suspended, its
#: pods removed, its quota freed) and does not admit it again while ``spec.active`` is false.
#: https://kueue.sigs.k8s.io/docs/concepts/workload/#active
DEACTIVATE = JsonPatch([{"op": "add", "path": "/spec/active", "value": False}])


def cancel_hold(obj: Mapping[str, Any]) -> OwnedPatch | None:
    """What a cancel by suspension of ``obj`` does first: deactivate the Workload Kueue made
    for it, while it is Kueue's (its LocalQueue label) -- else Kueue admits the suspended
    object again; ``None`` for an object that is not Kueue's. Once it is deactivated, Kueue
    evicts the Workload and suspends the object itself: the cancel then only marks it
    cancelled (a suspension of its own, racing Kueue's view of a Workload still admitted,
    was seen undone by Kueue for a moment).

    >>> job = {"metadata": {"uid": "u1", "labels": {"kueue.x-k8s.io/queue-name": "lq"}}}
    >>> cancel_hold(job).selector
    'kueue.x-k8s.io/job-uid=u1'
    """
    selector = queued_job_selector(obj, live=True)
    if selector is None:
        return None
    return OwnedPatch(
        KUEUE_WORKLOAD, selector, DEACTIVATE, "deactivate its Kueue Workload", cancelled_mark(obj)
    )


def local_queue_problem(
    name: str, namespace: str, others: Sequence[str] | None
) -> AppConfigurationError:
    """Why an app naming Kueue LocalQueue ``name``, which does not exist in ``namespace``,
    is refused: Kueue would keep it waiting without end. ``others``: the LocalQueues of the
    namespace (``None``: they could not be listed).

    >>> str(local_queue_problem("nope", "ml", ["team-a", "team-b"])).split(": name")[0]
    "Kueue LocalQueue 'nope' does not exist in namespace 'ml' (its LocalQueues: team-a, team-b)"
    """
    if others is None:
        which = f" (kubectl get localqueues -n {namespace})"
    elif others:
        which = f" (its LocalQueues: {', '.join(others)})"
    else:
        which = " (it has none)"
    return AppConfigurationError(
        f"Kueue LocalQueue {name!r} does not exist in namespace {namespace!r}{which}: name "
        f"{'one of them' if others else 'an existing one'} in run option local_queue, or ask "
        "an administrator to create it (nothing was submitted)"
    )


@dataclass(frozen=True, kw_only=True)
class QueuedOpts(KubeOpts):
    """The run options of a backend whose object Kueue may admit and whose cancel may
    suspend it (AppWrapper ``v1beta2``, JobSet); a backend adds its own after these."""

    local_queue: str | None = option(
        str,
        "Kueue LocalQueue to submit to (label kueue.x-k8s.io/queue-name); the {kind} is "
        "created suspended and runs once Kueue admits it",
        name="labelled",
    )
    priority_class: str | None = option(
        str,
        "Kueue WorkloadPriorityClass of the {kind} (label kueue.x-k8s.io/priority-class); "
        "needs local_queue",
        name="labelled",
    )
    pod_priority_class: str | None = option(str, "PriorityClass of the pods", name="subdomain")
    cancel_by: str | None = option(
        str,
        "what cancel does: 'suspend' keeps the {kind} (status, conditions) and removes its "
        "pods, with local_queue deactivating its Kueue Workload so that Kueue does not start "
        "it again; 'delete' removes it all (default: suspend, or delete with local_queue)",
    )

    def check(self) -> None:
        super().check()
        check_cancel_by(self.cancel_by)
        if self.priority_class and not self.local_queue:
            raise InvalidOptionError(
                f"run option priority_class={self.priority_class!r} is a Kueue "
                "WorkloadPriorityClass, which only Kueue reads: set local_queue too, or leave "
                "it out (pod_priority_class sets the pods' PriorityClass)",
                option="priority_class",
            )

    def cancel_action(self) -> str:
        """What cancel does (``cancel_by``, else suspend -- or delete under Kueue, which would
        admit a suspended object again)."""
        return cancel_action(self.cancel_by, self.local_queue)

    def kueue_labels(self) -> dict[str, str]:
        """Kueue's labels of the object: its LocalQueue and its WorkloadPriorityClass, where set."""
        labels: dict[str, str] = {}
        if self.local_queue:
            labels[QUEUE_LABEL] = self.local_queue
        if self.priority_class:
            labels[PRIORITY_LABEL] = self.priority_class
        return labels

    def pod_settings(self) -> PodSettings:
        return replace(super().pod_settings(), priority_class_name=self.pod_priority_class)


class QueuedTranslation(KubeTranslation):
    """What the translations of :class:`QueuedOpts` backends do alike: cancel as the object
    recorded (:func:`cancel_plan`), read Kueue's Workload of the object while it is
    Kueue's and live, and its LocalQueue (how much waits there) while it is not admitted."""

    queues: Sequence[QueuedIn] = (KUEUE_LOCAL_QUEUES,)

    def reads_queue(self, obj: Mapping[str, Any], owned: Sequence[Mapping[str, Any]]) -> bool:
        return any(map(waits_for_admission, owned))

    def owned_selector(self, obj: Mapping[str, Any]) -> str | None:
        """The Workload Kueue made for ``obj``, while it is Kueue's (queue label) and live."""
        return queued_job_selector(obj, not is_terminal(self.app_state(obj)))

    def cancel_plan(
        self, obj: Mapping[str, Any]
    ) -> tuple[CustomResource, dict[str, Any]] | JsonPatch | None:
        return cancel_plan(obj)

    def cancel_hold(self, obj: Mapping[str, Any]) -> OwnedPatch | None:
        return cancel_hold(obj)

    def prerequisites(self, body: Mapping[str, Any]) -> Sequence[tuple[QueuedIn, str]]:
        """The LocalQueue the object names (its label), if any."""
        queue = KUEUE_LOCAL_QUEUES.name(body)
        return ((KUEUE_LOCAL_QUEUES, queue),) if queue else ()

    def prerequisite_problem(
        self,
        queued: QueuedIn,
        name: str,
        obj: Mapping[str, Any] | None,
        *,
        namespace: str = "",
        others: Sequence[str] | None = None,
    ) -> AppConfigurationError | None:
        if obj is not None:
            return None
        return local_queue_problem(name, namespace, others)

    def queue_waits(self, obj: Mapping[str, Any], queue: Mapping[str, Any]) -> Sequence[Wait]:
        """That the LocalQueue admits nothing (stopped, or its ClusterQueue inactive), as
        the LocalQueue's ``Active`` condition says: Kueue may not say it on the Workload."""
        meta = obj.get("metadata") or {}
        return local_queue_waits(queue, str(meta.get("uid") or meta.get("name")))
