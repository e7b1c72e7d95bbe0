"""Why a container waits to start, and what that means: one rule for the kind of failure it
is, whether waiting can heal it, and the few words the task log adds. Pure.

Kubernetes retries a container that cannot start without end, and says why in its
``state.waiting.reason``. Each reason the provider knows is read here, once:

* a pull (``ErrImagePull``, ``ImagePullBackOff``, ``InvalidImageName``, ...): by the image
  table every backend shares (:func:`~torchx_provider.schedulers.images.pull_verdict`),
  from the kubelet's message;
* any other: by :data:`CONTAINER_WAITS`.

Both the replica's status (:mod:`~torchx_provider.schedulers.kube.status`: its failure kind,
and whether it is told) and the task log's lines about it
(:mod:`~torchx_provider.triggers.summary`) read :func:`waiting_verdict`, so a reason cannot
have a kind without words or words without a kind.

>>> waiting_verdict("CrashLoopBackOff").kind.value
'user'
>>> waiting_verdict("ContainerCreating") is None
True
"""

from __future__ import annotations

from dataclasses import dataclass

from torchx_provider.failures import FailureKind
from torchx_provider.schedulers.images import PULL_REASON, PULL_REASONS_BY_MESSAGE, pull_verdict


@dataclass(frozen=True)
class WaitVerdict:
    """What a container waiting for a reason means: the ``kind`` of failure it is when the
    app gives up on it, whether it is ``final`` (waiting cannot heal it: the app fails at
    once), and ``why`` in a few words for the task log."""

    kind: FailureKind
    final: bool
    why: str


#: A container's ``state.waiting.reason`` that is not about its image -> what it means.
CONTAINER_WAITS: dict[str, WaitVerdict] = {
    # a Secret or ConfigMap it names does not exist, or a key in it: made later, it starts
    "CreateContainerConfigError": WaitVerdict(
        FailureKind.CONFIGURATION,
        False,
        "a Secret or ConfigMap it names (or a key in one) is missing",
    ),
    # started, exited, and restarted too often: its own code fails
    "CrashLoopBackOff": WaitVerdict(
        FailureKind.USER,
        False,
        "its container keeps exiting and is restarted with a growing delay",
    ),
}

#: Every reason to wait that :func:`waiting_verdict` knows.
WAITING_REASONS = frozenset(CONTAINER_WAITS) | frozenset(PULL_REASON) | PULL_REASONS_BY_MESSAGE


def waiting_verdict(reason: str, message: str = "", image: str = "") -> WaitVerdict | None:
    """What a container waiting for ``reason`` with ``message`` (its kubelet's words) to run
    ``image`` means; ``None`` for a reason not in :data:`WAITING_REASONS` (a container being
    created: nothing to tell).

    >>> v = waiting_verdict("ErrImagePull", 'failed to resolve reference "r/x:1": not found')
    >>> v.kind.value, v.final
    ('configuration', True)
    """
    pull = pull_verdict(reason, message, image)
    if pull is not None:
        return WaitVerdict(pull.kind, pull.final, pull.why)
    return CONTAINER_WAITS.get(reason)
