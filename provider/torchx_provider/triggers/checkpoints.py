"""A follow's checkpoints: its progress (log cursors, last state, each replica's progress)
stored while it changes.

While progress is made, at most every ``every`` seconds, :class:`Checkpoints` takes the
progress, lets :data:`CHECKPOINT_LATENESS` seconds pass and waits until every line the
process had logged by then reached the task log's writer (the triggerer's supervisor, see
:mod:`~torchx_provider.triggers.delivery`), so that no cursor is stored before the lines it
covers are in the task log; after :data:`DELIVERY_WAIT` seconds it says so (once), and the
checkpoint holds the cursors stored before with the rest of the progress (the state and
the replicas' progress are not held up by a supervisor behind on the log). Then it waits
for a turn of the process's checkpoint writes (:mod:`~torchx_provider.triggers.pacing`),
taking the progress again while it waits, and stores the newest one that can be. A failed
write is tried again after a pause that doubles per failure up to
:data:`CHECKPOINT_BACKOFF` seconds. When the follow ends or is stopped from outside,
:meth:`Checkpoints.final` stores the progress as it is (its cursors once their lines were
read, as above, waiting :data:`FINAL_DELIVERY_WAIT` seconds at most), after the periodic
writes have stopped (none of theirs lands after it).

A follow rebuilt from the stored cursors therefore loses nothing; after a graceful stop it
repeats nothing, after a crash what each replica wrote since the last stored checkpoint.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from torchx_provider.schedulers.logs import LogCursor
from torchx_provider.specs.api import AppState
from torchx_provider.tasklog import TaskLogger
from torchx_provider.triggers.delivery import Delivery
from torchx_provider.triggers.pacing import Aging, CheckpointPacer

#: Seconds between checkpoints of a follow's progress, at least.
CHECKPOINT_EVERY = 1.0
#: Seconds between taking the progress and persisting it.
CHECKPOINT_LATENESS = 0.5
#: Seconds a checkpoint may take before it is given up (and tried again with newer progress).
CHECKPOINT_TIMEOUT = 3.0
#: Seconds a checkpoint waits for the lines its progress covers to reach the task log's
#: writer; then it says so (once per follow) and stores the rest of its progress with the
#: cursors stored before, and tries again after the pause.
DELIVERY_WAIT = 3.0
#: The same for the final checkpoint (a follow that ended or is being stopped).
FINAL_DELIVERY_WAIT = 1.0
#: Seconds between checkpoints at most, after failed ones (which double the pause each).
CHECKPOINT_BACKOFF = 60.0

#: what a checkpoint stores: the cursors, the last state and (a follow's) the replicas'
#: progress (:meth:`~torchx_provider.triggers.progress.ProgressBook.snapshot`)
Progress = tuple[Any, ...]
#: persists ``(cursors, last state, replicas' progress)``
Checkpoint = Callable[
    [dict[str, LogCursor], "AppState | None", "dict[str, dict[str, Any]]"], Awaitable[None]
]


class Checkpoints:
    """The checkpoints of one follow (see the module docstring).

    :param write: persists a progress (called with its parts); ``None``: nothing is stored.
    :param progress: the follow's progress now.
    :param log: where a failed (and a recovered) write is said, once each.
    :param every: seconds between checkpoints.
    :param pacer: whose turns the writes take; the event loop's by default.
    :param delivery: tells when the lines logged reached the task log's writer (on
        ``clock``); the event loop's by default.
    :param stored: the progress already stored (not written again).
    :param clock: monotonic seconds; :param sleep: waits.
    """

    def __init__(
        self,
        write: Checkpoint | None,
        progress: Callable[[], Progress],
        log: TaskLogger,
        *,
        every: float = CHECKPOINT_EVERY,
        pacer: CheckpointPacer | None = None,
        delivery: Delivery | None = None,
        stored: Progress | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.write = write
        self.progress = progress
        self.log = log
        self.every = every
        self.pacer = pacer
        self.delivery = delivery
        self.clock = clock
        self.sleep = sleep
        #: the progress last stored
        self.stored: Progress = stored if stored is not None else progress()
        #: writes failed in a row
        self.failures = 0
        #: whether a checkpoint was put off for lines not yet in the task log (said once)
        self._undelivered_said = False
        self._moved = asyncio.Event()
        self._task: asyncio.Future[None] | None = None

    def moved(self) -> None:
        """The progress changed (lines were written, or the state changed)."""
        self._moved.set()

    def start(self) -> None:
        """Start the periodic checkpoints (until :meth:`stop`)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        """Stop the periodic checkpoints and wait until they stopped (a write of theirs
        under way is cancelled; one already sent lands before anything written after)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def final(self, *, paced: bool = True) -> None:
        """Store the progress as it is now (the follow ended, or is stopped from outside),
        after the periodic checkpoints stopped. ``paced``: in a turn ahead of other follows'
        periodic checkpoints; else at once.

        A follow stopped from outside writes at once: a triggerer shutting down stops
        reading its supervisor's answers before it cancels its triggers, so each write then
        waits out its timeout though the supervisor serves it. Taking turns, one follow's
        final write would make all the others miss theirs."""
        await self.stop()
        if self.write is None:
            return
        progress = self.progress()
        if not await self._delivery().wait(self.clock(), FINAL_DELIVERY_WAIT):
            self.log.warning(
                "the last lines have not all reached the task log's writer; the log cursors "
                "stored before stand (a restart repeats lines, it loses none)"
            )
            progress = self._with_stored_cursors(progress)
        if not paced:
            await self._store(progress)
            return
        try:
            await asyncio.wait_for(
                self._pacer().write(lambda: self._store(progress), final=True),
                CHECKPOINT_TIMEOUT,
            )
        except asyncio.TimeoutError:
            self.log.warning("could not store the final log cursors in time; continuing")

    # -- the periodic writes -------------------------------------------------------------------
    def _pacer(self) -> CheckpointPacer:
        if self.pacer is None:
            self.pacer = CheckpointPacer.current()
        return self.pacer

    def _delivery(self) -> Delivery:
        if self.delivery is None:
            # the event loop's, on its clock; checkpoints on a clock of their own (tests)
            # watch no socket unless given a delivery on that clock
            own = self.clock is not time.monotonic
            self.delivery = Delivery(lambda: [], clock=self.clock) if own else Delivery.current()
        return self.delivery

    async def _loop(self) -> None:
        lateness = min(CHECKPOINT_LATENESS, self.every)
        while self.write is not None:
            await self._moved.wait()
            self._moved.clear()
            delivery = self._delivery()
            taken: Aging[Progress] = Aging(lateness, self.clock, delivery.read_by)
            taken.take(self.progress())
            await self.sleep(lateness)
            if taken.settles_in() > 0:  # a timer may fire a hair early
                await self.sleep(taken.settles_in())
            if not await delivery.wait(taken.oldest_taken_at(), DELIVERY_WAIT):
                self._say_undelivered()
            await self._in_turn(taken)
            await self.sleep(self._pause(lateness))

    def _say_undelivered(self) -> None:
        """The lines the progress covers are not in the task log yet (said once)."""
        if not self._undelivered_said:
            self._undelivered_said = True
            self.log.info(
                "lines logged %.0f s ago have not all reached the task log's writer; "
                "their log cursors are stored once they have",
                DELIVERY_WAIT,
            )

    def _with_stored_cursors(self, progress: Progress) -> Progress:
        """``progress`` with the log cursors stored before (its lines are not all in the
        task log yet): the rest of it (the state, the replicas' progress) is not held up."""
        return (self.stored[0], *progress[1:])

    async def _in_turn(self, taken: Aging[Progress]) -> None:
        """Wait for a turn, taking the progress meanwhile; then store the newest progress
        old enough."""
        written: list[Progress] = []

        async def produce() -> None:
            aged = taken.aged()
            # none whose lines were all read: the rest of the newest, with the cursors stored
            written.append(aged if aged is not None else self._with_stored_cursors(taken.newest()))
            await self._store(written[0])

        turn = asyncio.ensure_future(self._pacer().write(produce))
        try:
            await self._keep_taking(taken, turn)
            await turn
        finally:
            turn.cancel()
        if self.failures or (written and written[0] is not taken.newest()):
            # not stored (tried again after the pause), or progress taken while waiting
            self._moved.set()

    async def _keep_taking(self, taken: Aging[Progress], turn: asyncio.Future[None]) -> None:
        """Until ``turn`` comes: take the progress again whenever it changed and the last
        one taken is old enough (so the turn stores progress at most ``2 * lateness`` old)."""
        while not turn.done():
            settles_in = taken.settles_in()
            if settles_in > 0:
                await _first(turn, asyncio.ensure_future(self.sleep(settles_in)))
                continue
            await _first(turn, asyncio.ensure_future(self._moved.wait()))
            if self._moved.is_set() and not turn.done():
                self._moved.clear()
                taken.take(self.progress())

    def _pause(self, lateness: float) -> float:
        """Seconds until the next checkpoint may be taken: the rest of ``every``; after
        failed writes, doubling per failure up to :data:`CHECKPOINT_BACKOFF`."""
        if self.failures:
            return min(CHECKPOINT_BACKOFF, self.every * 2.0**self.failures)
        return max(0.0, self.every - lateness)

    async def _store(self, progress: Progress) -> None:
        progress = (dict(progress[0]), *progress[1:])
        if self.write is None or progress == self.stored:
            return
        try:
            await asyncio.wait_for(self.write(*progress), CHECKPOINT_TIMEOUT)
        except Exception as e:  # a lost checkpoint only means more repeats after a restart
            self.failures += 1
            if self.failures == 1:
                self.log.warning(
                    "could not store log cursors (%s); trying again later (a triggerer "
                    "restart meanwhile repeats lines from the last stored cursors)",
                    type(e).__name__ if isinstance(e, asyncio.TimeoutError) else e,
                )
            return
        self.stored = progress
        if self.failures:
            self.log.info("log cursors stored again")
        self.failures = 0


async def _first(turn: asyncio.Future[None], other: asyncio.Future[Any]) -> None:
    """Wait until ``turn`` or ``other`` is done; ``other`` is cancelled either way."""
    try:
        await asyncio.wait({turn, other}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        other.cancel()
