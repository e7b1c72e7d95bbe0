"""Following one Docker replica's log: the follower stops once the replica's container is
gone (removed from outside), whether or not the app has ended -- the engine never creates
it again, so there is nothing more to wait for. Its pauses advance a fake clock (the engine
is read in threads, so time moves at each sleep rather than when a test says)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

from follow_fakes import Clock
from torchx_provider.errors import UnknownAppError
from torchx_provider.schedulers.docker import logstream
from torchx_provider.schedulers.docker.logstream import ContainerLogFollower
from torchx_provider.schedulers.docker.state import ContainerInfo
from torchx_provider.schedulers.logs import LogCursor, LogSource, TimestampedLine
from torchx_provider.schedulers.streams import StreamSlots

APP_ID = "app-abcd1234"
RUNNING = ContainerInfo(id="c1", name=f"{APP_ID}-w-1", status="running")
LINE = TimestampedLine(datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc), "w/1 started\n")


class Engine:
    """``replica`` answers from ``answers`` in turn (the last one for good); an exception
    is raised."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.looks = 0

    def replica(self, app_id: str, role: str, replica_id: int) -> ContainerInfo:
        self.looks += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def mark_drained(self, app_id: str, role: str, replica_id: int) -> None:
        raise AssertionError("a removed replica's log is never read to its end")


class Follower(ContainerLogFollower):
    """Its stream gives ``lines`` and ends, or raises ``error`` (no engine needed)."""

    lines: list[TimestampedLine] = []
    error: BaseException | None = None

    async def _stream(
        self, container: ContainerInfo, cursor: LogCursor, *, follow: bool
    ) -> AsyncIterator[tuple[list[TimestampedLine], LogCursor]]:
        if self.error is not None:
            raise self.error
        yield self.lines, cursor.after(self.lines[-1]).at(container.id)


async def follow(follower: ContainerLogFollower) -> list[list[TimestampedLine]]:
    """Every batch, once the follow has ended (within 5 s, though the app never ends)."""

    async def run() -> list[list[TimestampedLine]]:
        return [lines async for lines, _ in follower.follow(LogCursor())]

    StreamSlots.use(StreamSlots())  # a cap of its own: Airflow's setting is not read
    return await asyncio.wait_for(run(), 5)


def follower(engine: Engine, clock: Clock | None = None) -> Any:
    """A follower of replica w/1 whose pauses are ``clock``'s sleeps."""
    sleep = (clock or Clock()).sleep
    source = LogSource("w", 1)
    return Follower(engine, APP_ID, source, asyncio.Event(), sleep=sleep)  # type: ignore[arg-type]


async def test_a_replica_without_a_container_is_not_waited_for() -> None:
    engine = Engine(UnknownAppError(APP_ID))
    assert await follow(follower(engine)) == []
    assert engine.looks == 1


async def test_a_container_removed_while_followed_ends_its_follow() -> None:
    """Its stream ended (the engine closes it with the container); the next look finds
    no container: the follow ends, its lines forwarded, the app still running."""
    engine = Engine(RUNNING, UnknownAppError(APP_ID))
    clock = Clock()
    f = follower(engine, clock)
    f.lines = [LINE]
    assert await follow(f) == [[LINE]]
    assert engine.looks == 2
    assert clock.sleeps == [logstream.RECHECK]  # one pause between the looks


async def test_a_container_removed_as_its_log_is_opened_ends_its_follow_quietly() -> None:
    """Removed between the look and the opening of its log (a 404): no error for the
    caller to report and retry."""
    f = follower(Engine(RUNNING))
    f.error = UnknownAppError(APP_ID)
    assert await follow(f) == []
