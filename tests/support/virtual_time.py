"""Simulated time that passes only when a test moves it on.

:class:`VirtualClock` is a monotonic clock and a sleep for code that takes both as
parameters (the log followers, :class:`~torchx_provider.triggers.follow.JobFollower`). A
sleep waits until the test moves the clock past its end; between moves every task runs
until it waits (:func:`settle`), so a test reads as a timeline -- "a second later the pod
ends" -- and takes no real time, however long the waits it simulates.

Unlike :class:`follow_fakes.Clock`, whose every sleep moves time on at once, a sleep that
loses a race (a timeout that news ends early) moves nothing: only the test does.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: turns of the event loop :func:`settle` gives: far more than any chain of wake-ups here
SETTLE_TURNS = 50


async def settle() -> None:
    """Let every task that can run do so until it waits (no time passes)."""
    for _ in range(SETTLE_TURNS):
        await asyncio.sleep(0)


class VirtualClock:
    """A monotonic clock (call it) and its :meth:`sleep`; time moves only by
    :meth:`advance`, :meth:`until` or :meth:`run`."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        #: every sleep asked for, in seconds
        self.sleeps: list[float] = []
        self._timers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        """Until the clock reads ``seconds`` later (a zero sleep only yields)."""
        self.sleeps.append(seconds)
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._timers, (self.now + seconds, next(self._order), woken))
        await woken

    def next_wake(self) -> float | None:
        """When the earliest sleep still waiting ends (``None``: none waits)."""
        while self._timers and self._timers[0][2].done():
            heapq.heappop(self._timers)  # cancelled: its sleeper gave up
        return self._timers[0][0] if self._timers else None

    async def _move_to(self, when: float) -> None:
        """Time moves to ``when``; each sleep ending by then is woken (in order of its end,
        the tasks it wakes run before the clock moves on)."""
        while (due := self.next_wake()) is not None and due <= when:
            self.now = max(self.now, due)
            while self._timers and self._timers[0][0] <= self.now:
                _, _, woken = heapq.heappop(self._timers)
                if not woken.done():
                    woken.set_result(None)
            await settle()
        self.now = max(self.now, when)
        await settle()

    async def advance(self, seconds: float) -> None:
        """``seconds`` pass: every task runs until it waits first, then each sleep ending
        meanwhile ends in turn."""
        await settle()
        await self._move_to(self.now + seconds)

    async def until(self, done: Callable[[], bool], limit: float = 3600.0) -> None:
        """Until ``done()``: whenever every task waits, time moves to the next end of a
        sleep. Fails when it does not hold within ``limit`` seconds, or when nothing
        sleeps (so no passing of time can bring it)."""
        give_up = self.now + limit
        await settle()
        while not done():
            due = self.next_wake()
            if due is None or due > give_up:
                waited = "nothing sleeps" if due is None else f"the next wake is at {due}"
                raise AssertionError(f"still waiting at {self.now} ({waited})")
            await self._move_to(due)

    async def run(self, awaitable: Awaitable[T], limit: float = 3600.0) -> T:
        """``awaitable``'s result, time moving as :meth:`until` moves it meanwhile."""
        task: asyncio.Future[Any] = asyncio.ensure_future(awaitable)
        try:
            await self.until(task.done, limit)
        finally:
            if not task.done():
                task.cancel()
        result: T = task.result()
        return result
