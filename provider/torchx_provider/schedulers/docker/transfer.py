"""An image pull or push, as the task log tells it: a few lines, not the engine's stream. Pure.

The engine streams one event per layer step and several per second for each layer moving
(``Downloading``/``Extracting``/``Pushing`` with byte counts). :class:`Transfer` takes them
in and says: what the engine says once (``Pulling from library/busybox``, ``Digest: ...``,
``Status: Downloaded newer image ...``), a summary of the layers every
:data:`TRANSFER_INTERVAL` seconds while it lasts, and one line at the end with the time,
the layers and the bytes moved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torchx_provider.schedulers.docker.creation import PROGRESS_INTERVAL

#: Seconds between two summary lines of a transfer that lasts longer than that: the pace
#: of every progress line the Docker backend writes.
TRANSFER_INTERVAL = PROGRESS_INTERVAL

#: A layer's last step when it is done: moved now, or nothing to move.
LAYER_DONE = frozenset({"Pull complete", "Pushed"})
LAYER_PRESENT = frozenset({"Already exists", "Layer already exists"})
#: Steps that move bytes (``progressDetail`` has ``current`` and ``total``).
MOVING = frozenset({"Downloading", "Pushing"})


def megabytes(n: int) -> str:
    """``n`` bytes in megabytes, to a tenth.

    >>> megabytes(1_500_000), megabytes(0)
    ('1.5 MB', '0.0 MB')
    """
    return f"{n / 1e6:.1f} MB"


@dataclass
class Transfer:
    """One pull or push of ``what`` (``pulling busybox:latest``), begun at ``started`` (any
    monotonic clock, the same as the ``now`` given to :meth:`feed` and :meth:`end`).

    >>> t = Transfer("pulling app:1", started=0.0)
    >>> t.feed({"status": "Pulling from team/app", "id": "1"}, 0.1)
    ['pulling app:1: Pulling from team/app']
    >>> t.feed({"status": "Pulling fs layer", "id": "a"}, 0.2)
    []
    >>> t.feed({"status": "Downloading", "id": "a",
    ...         "progressDetail": {"current": 1_000_000, "total": 4_000_000}}, 6.0)
    ['pulling app:1: 0/1 layers, 1.0 of 4.0 MB (6 s)']
    >>> t.feed({"status": "Pull complete", "id": "a"}, 7.0)
    []
    >>> t.end(8.0)
    'pulling app:1: done in 8.0 s: 1 layer, 4.0 MB'
    """

    what: str
    started: float
    interval: float = TRANSFER_INTERVAL
    #: layer id -> its last step
    steps: dict[str, str] = field(default_factory=dict)
    #: layer id -> (bytes moved, its size) as last reported
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    said_at: float | None = None
    #: whether the engine said anything of the transfer (a build's output alone is not one)
    seen: bool = False

    def feed(self, event: Mapping[str, Any], now: float) -> list[str]:
        """The lines ``event`` (one of the engine's, errors excluded) makes the task log say."""
        status = str(event.get("status") or "").strip()
        layer = event.get("id")
        if not status:
            return []
        self.seen = True
        if layer is None or not self._is_layer_step(status):
            return [f"{self.what}: {status}"]
        layer = str(layer)
        self.steps[layer] = status
        detail = event.get("progressDetail") or {}
        if status in MOVING and isinstance(detail, Mapping):
            total = int(detail.get("total") or 0)
            if total > 0:
                self.sizes[layer] = (min(int(detail.get("current") or 0), total), total)
        if status in LAYER_DONE and layer in self.sizes:
            size = self.sizes[layer][1]
            self.sizes[layer] = (size, size)
        if now - (self.started if self.said_at is None else self.said_at) < self.interval:
            return []
        self.said_at = now
        return [f"{self.what}: {self._summary()} ({now - self.started:.0f} s)"]

    def end(self, now: float) -> str:
        """The line that ends a transfer that went through."""
        took = f"{self.what}: done in {now - self.started:.1f} s"
        layers = len(self.steps)
        if not layers:  # the engine had every layer: it names none
            return took
        present = sum(s in LAYER_PRESENT for s in self.steps.values())
        moved = sum(size for _, size in self.sizes.values())
        parts = [f"{layers} layer{'s' if layers != 1 else ''}"]
        if present:
            parts.append(f"{present} already there")
        if moved:
            parts.append(megabytes(moved))
        return f"{took}: {', '.join(parts)}"

    def progress(self, now: float) -> str:
        """How far it got by ``now``, for a transfer cut short.

        >>> t = Transfer("pulling app:1", started=0.0)
        >>> t.progress(3.0)
        'nothing received yet after 3.0 s'
        >>> _ = t.feed({"status": "Downloading", "id": "a",
        ...             "progressDetail": {"current": 1_000_000, "total": 4_000_000}}, 1.0)
        >>> t.progress(3.0)
        '0/1 layers, 1.0 of 4.0 MB after 3.0 s'
        """
        took = f"after {now - self.started:.1f} s"
        if not self.steps:
            said = "the engine named no layer yet" if self.seen else "nothing received yet"
            return f"{said} {took}"
        return f"{self._summary()} {took}"

    def _summary(self) -> str:
        done = sum(s in LAYER_DONE or s in LAYER_PRESENT for s in self.steps.values())
        text = f"{done}/{len(self.steps)} layers"
        if self.sizes:
            current = sum(c for c, _ in self.sizes.values())
            # the whole size once every layer to move has said its own
            moving = [i for i, s in self.steps.items() if s not in LAYER_PRESENT]
            if all(i in self.sizes for i in moving):
                total = sum(t for _, t in self.sizes.values())
                text += f", {current / 1e6:.1f} of {megabytes(total)}"
            else:
                text += f", {megabytes(current)} so far"
        return text

    @staticmethod
    def _is_layer_step(status: str) -> bool:
        """A step of one layer (said in summaries), not a line of the engine's own: the
        latter name the repository, the digest or the outcome (``Pulling from ...``,
        ``Digest: ...``, ``Status: ...``, ``latest: digest: ... size: ...``)."""
        return not (
            status.startswith(("Pulling from ", "Digest:", "Status:", "The push refers to "))
            or ": digest: " in status
        )
