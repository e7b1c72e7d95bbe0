"""A fake clock and a scripted backend for driving :class:`JobFollower` through simulated
time: a follow's waits advance the clock instead of sleeping, and the app's state at each
describe is a function of that clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import torchx_fakes
from task_log import TaskLog
from torchx_provider.schedulers.api import DescribeAppResponse, Notice
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.follow import JobFollower


class Clock:
    """A fake monotonic clock whose sleeps advance it (and yield to the loop)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


class Scripted(torchx_fakes.FakeAsyncClient):
    """An app whose state at each describe is ``script(now)`` on the fake clock; it gives a
    reason it waits while it waits, and records describes and cancels."""

    def __init__(self, clock: Clock, script: Callable[[float], AppState]) -> None:
        super().__init__()
        self.clock, self.script = clock, script
        self.cancels: list[str] = []
        #: (time, state) of each describe answered
        self.described: list[tuple[float, AppState]] = []
        self._waiting = False

    async def describe(self, app_id: str) -> Any:
        state = self.script(self.clock())
        self._waiting = state is AppState.PENDING
        self.described.append((self.clock(), state))
        return DescribeAppResponse(app_id=app_id, state=state)

    def take_notices(self) -> list[Notice]:
        if not self._waiting:
            return []
        return [Notice("wait", "pod p is not scheduled: Unschedulable: 2 Insufficient cpu.")]

    async def cancel(self, app_id: str) -> None:
        self.cancels.append(app_id)


def follower(client: Any, app_id: str, clock: Clock, log: Any = None, **kw: Any) -> JobFollower:
    """A follow of ``app_id`` on ``clock`` (polling every 10 s unless told), with no jitter."""
    kw.setdefault("poll_interval", 10.0)
    return JobFollower(
        client,
        app_id,
        log=log or TaskLog(),
        clock=clock,
        sleep=clock.sleep,
        rand=lambda: 0.5,
        **kw,
    )
