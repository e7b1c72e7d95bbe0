"""How long an app has waited to run: the clock of ``queue_timeout``; and the time it spent
in each phase, for the task's result. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from torchx_provider.specs.api import AppState, is_terminal
from torchx_provider.timestamps import read_timestamp

if TYPE_CHECKING:
    from torchx_provider.triggers.events import ReplicaRow

#: The states in which an app waits to run (queued, admitted but not started, requeued).
WAITING = frozenset({AppState.SUBMITTED, AppState.PENDING})


@dataclass
class QueueWait:
    """How long an app has waited to run (see the module docstring); times on the follow's
    monotonic clock. ``since``: when the current wait began; ``None`` while the app runs or
    after it ended. A state the backend cannot tell (``UNKNOWN``) leaves it as it is.

    >>> q = QueueWait(timeout=60.0, since=0.0)
    >>> q.expires_at(), q.observe(AppState.RUNNING, 10.0), q.expires_at()
    (60.0, None, None)
    >>> q.observe(AppState.PENDING, 100.0); q.observe(AppState.UNKNOWN, 130.0)
    >>> q.expired(159.0), q.expired(160.0)
    (False, True)
    """

    timeout: float | None
    since: float | None

    def observe(self, state: AppState, now: float) -> None:
        """Take in the app's state at ``now``."""
        if state is AppState.UNKNOWN:
            return
        if state in WAITING:
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

    def timed_out(self, app_id: str, waited: float, what: str, reason: str | None) -> str:
        """Why a follow ended at the timeout: ``waited`` seconds, the app ``what`` (what was
        done to it), and the last ``reason`` the cluster gave for the wait.

        >>> m = QueueWait(60.0, 0.0).timed_out("a1", 61.2, "cancelled", "no quota").split("; ")
        >>> m[0]
        "app 'a1' waited 61s without running (queue_timeout 60s)"
        >>> m[1:]
        ['the app was cancelled', 'the last reason given: no quota']
        """
        message = (
            f"app {app_id!r} waited {duration(waited)} without running (queue_timeout "
            f"{duration(self.timeout or 0.0)}); the app was {what}"
        )
        return message + (f"; the last reason given: {reason}" if reason else "")


def duration(seconds: float) -> str:
    """``42s``; under 10 s with a tenth (``0.3s``)."""
    return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"


@dataclass
class PhaseTimes:
    """Seconds an app spent waiting to run (``queued``) and running (``running``), and how
    often it went back from running to waiting (``returns``: preempted, evicted, requeued),
    as a follow saw it; times on the follow's monotonic clock. ``phase``: ``"queued"``,
    ``"running"`` or ``None`` (not counted: ended, or not seen yet), since ``since``. A state
    the backend cannot tell (``UNKNOWN``) keeps the current phase. ``resumed``: the phase a
    resumed follow's stored state names, until its first state: no time is counted for it,
    but a return to waiting from it is a return like any other.

    >>> t = PhaseTimes(phase="queued", since=0.0)
    >>> t.observe(AppState.RUNNING, 5.0); t.observe(AppState.PENDING, 15.0)
    >>> t.observe(AppState.RUNNING, 18.0); t.observe(AppState.SUCCEEDED, 20.0)
    >>> t.totals(99.0), t.returns
    ((8.0, 12.0), 1)
    """

    queued: float = 0.0
    running: float = 0.0
    returns: int = 0
    phase: str | None = None
    since: float | None = None
    resumed: str | None = None

    def observe(self, state: AppState, now: float) -> None:
        """Take in the app's state at ``now``."""
        if state is AppState.UNKNOWN:
            return
        phase = "queued" if state in WAITING else "running" if state is AppState.RUNNING else None
        before, self.resumed = self.phase or self.resumed, None
        if phase == self.phase:
            return
        self._close(now)
        if phase == "queued" and before == "running":
            self.returns += 1
        self.phase, self.since = phase, (now if phase is not None else None)

    def _close(self, now: float) -> None:
        if self.phase is None or self.since is None:
            return
        spent = max(0.0, now - self.since)
        if self.phase == "queued":
            self.queued += spent
        else:
            self.running += spent
        self.since = now

    def totals(self, now: float) -> tuple[float, float]:
        """``(queued, running)`` seconds up to ``now`` (the current phase included)."""
        queued, running = self.queued, self.running
        if self.phase is not None and self.since is not None:
            spent = max(0.0, now - self.since)
            if self.phase == "queued":
                queued += spent
            else:
                running += spent
        return queued, running


def ran_unseen(
    queued: float, running: float, rows: Iterable[ReplicaRow], now: datetime | None = None
) -> tuple[float, float]:
    """``(queued, running)`` seconds as a follow counted them (:meth:`PhaseTimes.totals`),
    for an app it never saw running: one that ran and ended before the follow's first
    describe (a short app, a deferral the triggerer picked up late) was counted waiting all
    along. Then the backend's own times of its replicas tell how long it ran -- from the
    first start to the last end -- and that much of the wait was running; with ``now`` (the
    wall clock when the follow counted), the time from the last end until ``now`` was no
    wait either (a node's clock ahead of this one's counts as no such time). Unchanged when
    the follow saw it run, or the backend tells no such times.

    >>> from torchx_provider.triggers.events import ReplicaRow
    >>> row = ReplicaRow("w", 0, AppState.SUCCEEDED, 0, started_at="2024-01-01T00:00:00Z",
    ...                  finished_at="2024-01-01T00:00:01.25Z")
    >>> ran_unseen(3.0, 0.0, [row]), ran_unseen(3.0, 2.0, [row]), ran_unseen(3.0, 0.0, [])
    ((1.75, 1.25), (3.0, 2.0), (3.0, 0.0))
    >>> from datetime import timezone
    >>> later = datetime(2024, 1, 1, 0, 0, 31, 250000, tzinfo=timezone.utc)  # 30 s late
    >>> ran_unseen(33.0, 0.0, [row], later)
    (1.75, 1.25)
    """
    if running > 0:
        return queued, running
    starts, ends = [], []
    for row in rows:
        started, finished = read_timestamp(row.started_at), read_timestamp(row.finished_at)
        if started is not None:
            starts.append(started)
        if finished is not None and is_terminal(row.state):
            ends.append(finished)
    if not starts or not ends:
        return queued, running
    ran = (max(ends) - min(starts)).total_seconds()
    if ran <= 0:
        return queued, running
    after = max(0.0, (now - max(ends)).total_seconds()) if now is not None else 0.0
    return max(0.0, queued - ran - after), ran
