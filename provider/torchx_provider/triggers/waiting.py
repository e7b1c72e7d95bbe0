"""How long an app has waited to run: the clock of ``queue_timeout``. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from torchx_provider.specs.api import AppState


@dataclass
class QueueWait:
    """How long an app has waited to run (see the module docstring); times on the follow's
    monotonic clock. ``since``: when the current wait began; ``None`` while the app runs or
    after it ended.

    >>> q = QueueWait(timeout=60.0, since=0.0)
    >>> q.expires_at(), q.observe(AppState.RUNNING, 10.0), q.expires_at()
    (60.0, None, None)
    >>> q.observe(AppState.PENDING, 100.0); q.expired(159.0), q.expired(160.0)
    (False, True)
    """

    timeout: float | None
    since: float | None

    def observe(self, state: AppState, now: float) -> None:
        """Take in the app's state at ``now``."""
        if state in (AppState.SUBMITTED, AppState.PENDING):
            if self.since is None:
                self.since = now  # waiting again: preempted, evicted, requeued
        else:
            self.since = None

    def expires_at(self) -> float | None:
        if self.timeout is None or self.since is None:
            return None
        return self.since + self.timeout

    def expired(self, now: float) -> bool:
        at = self.expires_at()
        return at is not None and now >= at
