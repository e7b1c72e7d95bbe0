"""Hold a frozen triggerer's lines until Airflow has had time to take its triggers back.

A triggerer that stops running for longer than Airflow's health-check threshold (frozen by
SIGSTOP, a paused VM, a loop blocked) has its triggers handed to another triggerer. When it
runs again, Airflow cancels its copies within a heartbeat or two; until then a copy would
forward, a second time, every line it finds waiting, which the other triggerer has already
forwarded. So one ticker per event loop notes when the loop last ran, and a log pump that
finds the loop was away longer than the threshold holds its lines for :data:`HOLD` seconds
first: a copy that is no longer ours is cancelled before it repeats anything, and one that
still is writes its lines a few seconds late. Nothing is lost either way: the lines a
cancelled copy held are read again by the triggerer that owns the trigger, from its
checkpoint.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from torchx_provider.perloop import PerLoop

#: how often the loop's ticker runs (s)
TICK = 1.0
#: how long lines are held after the loop was away too long (s): Airflow's triggerer checks
#: its triggers' assignment on every loop of its own, about once a second
HOLD = 10.0
#: away longer than this (s), when Airflow's setting cannot be read (its default)
DEFAULT_THRESHOLD = 30.0


def health_check_threshold() -> float:
    """Airflow's ``[triggerer] triggerer_health_check_threshold``: how long a triggerer may
    be silent before its triggers move to another."""
    try:
        from airflow.configuration import conf

        return conf.getfloat("triggerer", "triggerer_health_check_threshold", fallback=30.0)
    except Exception:  # not in Airflow (tests, a bare asyncio.run): its default
        return DEFAULT_THRESHOLD


class LoopWatch:
    """When this event loop last ran (a ticker every :data:`TICK` seconds), and when it came
    back from being away longer than ``threshold``.

    :param clock: a monotonic clock (it goes on while the process is stopped).
    """

    def __init__(
        self,
        threshold: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        hold: float = HOLD,
    ) -> None:
        self.threshold = threshold
        self.clock = clock
        self.sleep = sleep
        self.hold = hold
        self.last_tick = clock()
        #: when the loop was found back from a long absence (``None``: never)
        self.back_at: float | None = None
        self._ticker: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the ticker (once; it runs as long as the loop)."""
        if self._ticker is None or self._ticker.done():
            self.last_tick = self.clock()
            self._ticker = asyncio.ensure_future(self._tick())

    async def _tick(self) -> None:
        while True:
            await self.sleep(TICK)
            self.note()

    def note(self) -> None:
        """The loop runs now: if it was away too long, it is back from that now."""
        now = self.clock()
        if now - self.last_tick > self.threshold:
            self.back_at = now
        self.last_tick = now

    def came_back(self) -> float | None:
        """When (``clock``) the loop last came back from being away longer than the
        threshold, ``None``: never. Looked at now, so a caller that runs before the ticker
        after a freeze sees that freeze."""
        self.note()
        return self.back_at

    def holding_for(self) -> float:
        """How much longer lines are to be held (0: not held)."""
        self.note()
        if self.back_at is None:
            return 0.0
        return max(0.0, self.back_at + self.hold - self.clock())

    async def wait_if_back(self) -> None:
        """Return at once, unless the loop came back from a long absence less than
        :attr:`hold` seconds ago: then only when that time is up (or cancelled)."""
        left = self.holding_for()
        while left > 0:
            await self.sleep(left)
            left = self.holding_for()


def _make() -> LoopWatch:
    watch = LoopWatch(health_check_threshold())
    watch.start()
    return watch


#: the running loop's watch, started on first use
LOOP_WATCH: PerLoop[LoopWatch] = PerLoop(_make)
