"""The checkpoint writes of one triggerer process, taking turns.

A follow stores its progress (log cursors, last state) as an XCom, and in a triggerer every
such write goes through the triggerer's supervisor, which serves the requests of all the
process's triggers one at a time: many follows writing on their own schedules would keep it
busy, and every other request of every trigger (events, connections) would wait behind them.

So the writes of one event loop take turns (:class:`CheckpointPacer`): one at a time, first
come first served, with a pause after each that is at least :data:`MIN_GAP` seconds and at
least :data:`SHARE_FACTOR` times as long as the write took. Checkpoints thus take at most
``1 / (1 + SHARE_FACTOR)`` of the supervisor's time, and slow down by themselves when it is
slow. The final write of a follow that ended goes before periodic ones and skips the pause.
``benchmarks/bench_checkpoints.py`` measures what this buys.

:class:`Aging` holds a follow's progress while it waits for its turn, so that the write
stores the newest progress that has been taken long enough ago.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from torchx_provider.perloop import PerLoop

#: Seconds between the end of one checkpoint write and the start of the next, at least.
MIN_GAP = 0.02
#: The pause after a write is at least this many times as long as the write took.
SHARE_FACTOR = 2.0

T = TypeVar("T")


@dataclass(eq=False)
class CheckpointPacer:
    """One checkpoint write at a time per event loop (see the module docstring);
    ``clock`` (monotonic seconds) and ``sleep`` (waits) are replaced in tests."""

    min_gap: float = MIN_GAP
    share_factor: float = SHARE_FACTOR
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
    _busy: bool = field(default=False, init=False)
    _next: float = field(default=float("-inf"), init=False)
    _final: deque[asyncio.Future[None]] = field(default_factory=deque, init=False)
    _periodic: deque[asyncio.Future[None]] = field(default_factory=deque, init=False)

    @classmethod
    def current(cls) -> CheckpointPacer:
        """The pacer of the running event loop (made on first use)."""
        return _PACERS.get()

    @property
    def waiting(self) -> int:
        """Writes waiting for their turn."""
        return sum(not f.done() for q in (self._final, self._periodic) for f in q)

    @property
    def busy(self) -> bool:
        """Whether a write has the turn."""
        return self._busy

    @property
    def next_turn(self) -> float:
        """When (on :attr:`clock`) the next periodic write may start."""
        return self._next

    async def write(self, produce: Callable[[], Awaitable[None]], *, final: bool = False) -> None:
        """Wait for a turn (``final``: ahead of periodic writes, without the pause), then
        await ``produce()``, called only then so that it writes the newest progress."""
        await self._acquire(final)
        try:
            if not final:
                delay = self._next - self.clock()
                if delay > 0:
                    await self.sleep(delay)
            started = self.clock()
            try:
                await produce()
            finally:
                ended = self.clock()
                self._next = ended + max(self.min_gap, (ended - started) * self.share_factor)
        finally:
            self._release()

    async def _acquire(self, final: bool) -> None:
        if not self._busy and not self._final and not self._periodic:
            self._busy = True
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._final if final else self._periodic
        queue.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release()  # handed the turn as it was cancelled: pass it on
            elif turn in queue:  # (a release may have dropped it already)
                queue.remove(turn)
            raise

    def _release(self) -> None:
        for queue in (self._final, self._periodic):
            while queue:
                turn = queue.popleft()
                if not turn.done():
                    turn.set_result(None)  # the turn passes on: still busy
                    return
        self._busy = False


_PACERS: PerLoop[CheckpointPacer] = PerLoop(CheckpointPacer)


class Aging(Generic[T]):
    """Snapshots of a follow's progress; :meth:`aged` is the newest one that can be stored:
    taken at least ``lateness`` seconds ago, and before ``read_by()`` (the last moment at
    which everything the process had logged had reached the task log's writer, see
    :mod:`~torchx_provider.triggers.delivery`; always, by default)."""

    def __init__(
        self,
        lateness: float,
        clock: Callable[[], float] = time.monotonic,
        read_by: Callable[[], float] | None = None,
    ) -> None:
        self.lateness = lateness
        self.clock = clock
        self.read_by = read_by or (lambda: float("inf"))
        self._taken: deque[tuple[float, T]] = deque()

    def take(self, value: T) -> None:
        now = self.clock()
        # of the snapshots that can be stored, only the newest can still be the one stored
        if len(self._taken) >= 2:
            read_by = self.read_by()
            while len(self._taken) >= 2 and self._storable(self._taken[1][0], now, read_by):
                self._taken.popleft()
        self._taken.append((now, value))

    def settles_in(self) -> float:
        """Seconds until the newest snapshot is old enough (0: it is)."""
        if not self._taken:
            return 0.0
        return max(0.0, self._taken[-1][0] + self.lateness - self.clock())

    def __len__(self) -> int:
        """Snapshots kept (of those that can be stored, only the newest is)."""
        return len(self._taken)

    def oldest_taken_at(self) -> float:
        """When (on ``clock``) the oldest snapshot kept was taken."""
        if not self._taken:
            raise LookupError("no snapshot taken")
        return self._taken[0][0]

    def newest(self) -> T:
        if not self._taken:
            raise LookupError("no snapshot taken")
        return self._taken[-1][1]

    def aged(self) -> T | None:
        """The newest snapshot that can be stored; ``None`` while none can."""
        if not self._taken:
            raise LookupError("no snapshot taken")
        now, read_by = self.clock(), self.read_by()
        for taken_at, value in reversed(self._taken):
            if self._storable(taken_at, now, read_by):
                return value
        return None

    def _storable(self, taken_at: float, now: float, read_by: float) -> bool:
        # (the sum, as in settles_in: a difference can round the other way)
        return taken_at + self.lateness <= now and taken_at < read_by
