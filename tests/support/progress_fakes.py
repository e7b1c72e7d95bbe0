"""An app whose replicas write scripted log lines on a fake clock, for driving the progress
watch of :class:`~torchx_provider.triggers.follow.JobFollower` through simulated hours.

:class:`TickClock` is :class:`follow_fakes.Clock` whose every sleep also wakes the log
streams of :class:`ScriptedLogs`, so that a line scripted at time ``t`` reaches the follow
when the follow's clock passes ``t``, and is seen on that clock (within one of its waits).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

from follow_fakes import Clock
from task_log import TaskLog
from torchx_provider.errors import BackendConfigurationError
from torchx_provider.schedulers.api import AsyncSchedulerClient, DescribeAppResponse
from torchx_provider.schedulers.logs import LogCursor, LogSource, TimestampedLine, advance
from torchx_provider.specs.api import AppState, ReplicaStatus, RoleStatus

BASE = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)


class TickClock(Clock):
    """A fake clock whose sleeps advance it, wake the scripted log streams, and give them a
    few turns of the event loop before the sleeper goes on."""

    def __init__(self, now: float = 0.0) -> None:
        super().__init__(now)
        self._tick = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()
        for _ in range(10):
            await asyncio.sleep(0)

    async def ticked(self) -> None:
        await self._tick.wait()

    async def reached(self, when: float) -> None:
        """Until the clock reads ``when`` or later."""
        while self.now < when:
            await self.ticked()


class TimedLog(TaskLog):
    """A task log that also notes the fake time of each line."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.timed: list[tuple[float, str]] = []

    def info(self, msg: str, *args: Any) -> None:
        super().info(msg, *args)
        self.timed.append((self.clock(), self.lines[-1]))

    warning = info
    error = info

    def when(self, text: str) -> list[float]:
        """The times of the lines holding ``text``."""
        return [t for t, line in self.timed if text in line]


def every(start: float, stop: float, period: float, text: str) -> list[tuple[float, str]]:
    """A line each ``period`` seconds from ``start`` to before ``stop``: ``text`` formatted
    with ``n``, the line's number (from 1)."""
    lines = []
    t, n = start, 1
    while t < stop:
        lines.append((t, text.format(n=n)))
        t += period
        n += 1
    return lines


class ScriptedLogs(AsyncSchedulerClient):
    """One role ``t`` whose replicas (``t/0``, ``t/1``, ...) write ``script[key]``, a list
    of ``(time, text)``; the app waits until ``pending_until``, runs until ``ends_at``, then
    succeeds (or is cancelled, by :meth:`cancel`). Reading the logs of a replica in
    ``refused`` is refused (HTTP 403, as without ``pods/log`` permission)."""

    def __init__(
        self,
        clock: TickClock,
        script: dict[str, list[tuple[float, str]]],
        *,
        ends_at: float,
        pending_until: float = 0.0,
        refused: Iterable[str] = (),
    ) -> None:
        self.clock = clock
        self.script = script
        self.ends_at = ends_at
        self.pending_until = pending_until
        self.refused = set(refused)
        self.cancels: list[str] = []
        self.cancelled_at: float | None = None

    def state(self) -> AppState:
        now = self.clock()
        if self.cancelled_at is not None:
            return AppState.CANCELLED
        if now < self.pending_until:
            return AppState.PENDING
        return AppState.RUNNING if now < self.ends_at else AppState.SUCCEEDED

    async def describe(self, app_id: str) -> DescribeAppResponse:
        state = self.state()
        replicas = [
            ReplicaStatus(id=int(key.split("/")[1]), state=state, role="t", hostname=key)
            for key in sorted(self.script)
        ]
        return DescribeAppResponse(
            app_id=app_id, state=state, roles_statuses=[RoleStatus("t", replicas)]
        )

    async def read_logs(
        self, app_id: str, role_name: str, replica_id: int, cursor: LogCursor
    ) -> tuple[list[TimestampedLine], LogCursor]:
        return advance(cursor, self._written(f"{role_name}/{replica_id}"))

    def _written(self, key: str) -> list[TimestampedLine]:
        now = self.clock()
        return [
            TimestampedLine(BASE + timedelta(seconds=t), text + "\n")
            for t, text in self.script.get(key, [])
            if t <= now and (self.cancelled_at is None or t <= self.cancelled_at)
        ]

    async def follow_logs(
        self, app_id: str, source: LogSource, cursor: LogCursor, ended: asyncio.Event
    ) -> AsyncIterator[tuple[list[TimestampedLine], LogCursor]]:
        if source.key in self.refused:
            raise BackendConfigurationError(
                f'pods "{source.key}" is forbidden: cannot get resource "pods/log"', 403
            )
        while True:
            last = ended.is_set()
            lines, cursor = advance(cursor, self._written(source.key))
            if lines:
                yield lines, cursor
            if last:
                return
            waiter = asyncio.ensure_future(self.clock.ticked())
            done = asyncio.ensure_future(ended.wait())
            try:
                await asyncio.wait({waiter, done}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
                done.cancel()

    async def cancel(self, app_id: str) -> None:
        self.cancels.append(app_id)
        if self.cancelled_at is None:
            self.cancelled_at = self.clock()
