"""Log pumps: a source that fails is retried from its cursor, a 401 gets fresh credentials,
and the end waits for every source."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import torchx_fakes
from task_log import TaskLog as Log
from torchx_provider.errors import BackendUnavailableError
from torchx_provider.schedulers.api import AsyncSchedulerClient
from torchx_provider.schedulers.logs import LogCursor, LogSource, TimestampedLine
from torchx_provider.triggers.follow import JobFollower
from torchx_provider.triggers.logpump import WRITE_SLICE, LogPumps

BASE = datetime(2024, 5, 1, tzinfo=timezone.utc)


class Flaky(AsyncSchedulerClient):
    """Serves lines 0..n-1 of one source; fails with ``errors`` (one per call) first."""

    def __init__(self, n: int, errors: list[Exception]) -> None:
        self.n = n
        self.errors = errors
        self.starts: list[LogCursor] = []

    async def describe(self, app_id: str) -> Any:
        return None

    async def read_logs(self, *a: Any) -> Any:
        raise AssertionError("not used")

    async def cancel(self, app_id: str) -> None:
        return None

    async def follow_logs(
        self, app_id: str, source: LogSource, cursor: LogCursor, ended: asyncio.Event
    ) -> AsyncIterator[tuple[list[TimestampedLine], LogCursor]]:
        self.starts.append(cursor)
        start = 0 if cursor.since is None else int((cursor.since - BASE).total_seconds()) + 1
        for i in range(start, self.n):
            line = TimestampedLine(BASE + timedelta(seconds=i), f"line {i}\n")
            cursor = cursor.after(line)
            yield [line], cursor
            if i == 2 and self.errors:
                raise self.errors.pop(0)
        await ended.wait()


async def pumped(client: Any, log: Log, cursors: dict[str, LogCursor], seconds: float) -> LogPumps:
    """Pump source ``t/0`` of ``client`` into ``log`` (retrying after 1 ms at first) for
    ``seconds``, then finish: the pumps."""
    pumps = LogPumps(lambda: client, "app", log, cursors, retry_base=0.001)
    pumps.start([LogSource("t", 0)])
    await asyncio.sleep(seconds)
    await pumps.finish(5)
    return pumps


def lines_of_t0(log: Log) -> list[str]:
    return [ln for ln in log.lines if ln.startswith("[t/0]")]


async def test_a_failing_source_is_retried_from_its_cursor_and_said_once() -> None:
    client = Flaky(6, [BackendUnavailableError("node down"), BackendUnavailableError("again")])
    log = Log()
    cursors: dict[str, LogCursor] = {}
    pumps = await pumped(client, log, cursors, seconds=0.2)
    assert lines_of_t0(log) == [f"[t/0] line {i}" for i in range(6)]
    assert sum("cannot be read" in ln for ln in log.lines) == 1
    assert "logs of t/0 readable again" in log.lines
    assert cursors["t/0"].since == BASE + timedelta(seconds=5)
    assert client.starts[0].since is None
    assert client.starts[1].since == BASE + timedelta(seconds=2)
    assert list(pumps.tails["t/0"])[-1] == "line 5"


async def test_a_401_asks_for_fresh_credentials_then_reads_on() -> None:
    client = Flaky(4, [BackendUnavailableError("expired", status=401)])
    asked: list[int] = []

    async def reconnect() -> bool:
        asked.append(1)
        return True

    log = Log()
    pumps = LogPumps(lambda: client, "app", log, {}, retry_base=5.0, reconnect=reconnect)
    pumps.start([LogSource("t", 0)])
    await asyncio.sleep(0.05)
    await pumps.finish(5)
    assert asked == [1]
    assert [ln for ln in log.lines if ln.startswith("[t/0]")] == [
        f"[t/0] line {i}" for i in range(4)
    ]
    assert not any("cannot be read" in ln for ln in log.lines)


async def test_finish_gives_up_on_a_source_that_keeps_failing_after_the_end() -> None:
    class Broken(Flaky):
        async def follow_logs(self, *a: Any) -> AsyncIterator[Any]:
            raise BackendUnavailableError("gone")
            yield

    log = Log()
    pumps = LogPumps(lambda: Broken(0, []), "app", log, {}, retry_base=0.001)
    pumps.start([LogSource("t", 0)])
    await pumps.finish(1)  # (no answer is an outage: ridden out until finish's bound)
    assert pumps.unread == {"t/0"}


async def test_the_tries_of_an_outage_before_the_end_do_not_use_up_the_final_ones() -> None:
    """The engine was down for a while (many failed tries), the app ended meanwhile: once
    it answers again, the source's last lines are read, not given up at once."""

    class DownThenBack(Flaky):
        errors_after_end: list[int]

        async def follow_logs(
            self, app_id: str, source: LogSource, cursor: LogCursor, ended: asyncio.Event
        ) -> AsyncIterator[tuple[list[TimestampedLine], LogCursor]]:
            if not ended.is_set():
                raise BackendUnavailableError("engine down")
            if not self.errors_after_end:  # the first try after the end fails too
                self.errors_after_end.append(1)
                raise BackendUnavailableError("engine still down")
            async for item in super().follow_logs(app_id, source, cursor, ended):
                yield item

    client = DownThenBack(3, [])
    client.errors_after_end = []
    log = Log()
    pumps = await pumped(client, log, {}, seconds=0.3)  # many failed tries while the app runs
    assert pumps.unread == set()
    assert lines_of_t0(log) == [f"[t/0] line {i}" for i in range(3)]


async def test_an_error_no_translation_knew_is_said_and_retried_not_a_silent_end() -> None:
    """A client library's own error (here a broken chunked response) must not end one
    replica's lines quietly: it is named once and the source is read on from its cursor."""
    client = Flaky(6, [RuntimeError("Connection broken: IncompleteRead(0 bytes read)")])
    log = Log()
    cursors: dict[str, LogCursor] = {}
    pumps = await pumped(client, log, cursors, seconds=0.2)
    assert lines_of_t0(log) == [f"[t/0] line {i}" for i in range(6)]
    warned = [ln for ln in log.lines if "cannot be read" in ln]
    assert len(warned) == 1 and "RuntimeError: Connection broken" in warned[0], log.lines
    assert not pumps.unread


class LevelLog:
    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []

    def info(self, msg: str, *args: Any) -> None:
        self.said.append(("info", msg % args))

    def warning(self, msg: str, *args: Any) -> None:
        self.said.append(("warning", msg % args))


async def test_a_notice_is_said_once_at_its_level() -> None:
    log = LevelLog()
    pumps = LogPumps(lambda: Flaky(0, []), "app", log, {})
    pumps.say_once("wait", "waits for quota")
    pumps.say_once("admitted", "admitted", warning=False)
    pumps.say_once("admitted", "admitted", warning=False)
    assert log.said == [("warning", "waits for quota"), ("info", "admitted")]


class OneBigBatch(Flaky):
    """Serves lines 0..n-1 of one source as one batch, then waits for the app's end."""

    async def follow_logs(
        self, app_id: str, source: LogSource, cursor: LogCursor, ended: asyncio.Event
    ) -> AsyncIterator[tuple[list[TimestampedLine], LogCursor]]:
        self.starts.append(cursor)
        start = 0 if cursor.since is None else int((cursor.since - BASE).total_seconds()) + 1
        batch = [
            TimestampedLine(BASE + timedelta(seconds=i), f"line {i}\n")
            for i in range(start, self.n)
        ]
        for line in batch:
            cursor = cursor.after(line)
        if batch:
            yield batch, cursor
        await ended.wait()


async def test_a_pump_stopped_amid_a_big_batch_keeps_the_cursor_of_what_it_wrote(
    monkeypatch: Any,
) -> None:
    """Stopped (a kill, a shutdown) while it yields amid a big batch, the pump writes the
    batch whole and keeps the cursor after it: a reader going on from its cursors (the kill's
    last lines, a resumed follow) writes none of it again."""
    from torchx_provider.triggers import logpump

    monkeypatch.setattr(logpump, "YIELD_EVERY", 0.0)  # a yield after every slice
    client = OneBigBatch(20 * logpump.WRITE_SLICE, [])
    log = Log()
    cursors: dict[str, LogCursor] = {}
    pumps = LogPumps(lambda: client, "app", log, cursors, retry_base=0.001)
    pumps.start([LogSource("t", 0)])
    for _ in range(1000):  # until the pump is amid its batch
        if lines_of_t0(log):
            break
        await asyncio.sleep(0)
    written = len(lines_of_t0(log))
    assert 0 < written < client.n, written
    await pumps.close()
    assert len(lines_of_t0(log)) == client.n
    assert cursors["t/0"].since == BASE + timedelta(seconds=client.n - 1)
    # read on from the cursors: nothing more, nothing twice
    client.n += 3
    again = await pumped(client, log, cursors, seconds=0.05)
    assert lines_of_t0(log) == [f"[t/0] line {i}" for i in range(client.n)]
    assert list(again.tails["t/0"]) == ["line 320", "line 321", "line 322"]


class BigBatchApp(torchx_fakes.FakeAsyncClient):
    """The fake backend, each replica's log served as one batch of ``n`` lines."""

    n = 20 * WRITE_SLICE

    async def follow_logs(
        self, app_id: str, source: LogSource, cursor: LogCursor, ended: asyncio.Event
    ) -> AsyncIterator[tuple[list[TimestampedLine], LogCursor]]:
        batch = [TimestampedLine(BASE + timedelta(seconds=i), f"line {i}\n") for i in range(self.n)]
        for line in batch:
            cursor = cursor.after(line)
        yield batch, cursor
        await ended.wait()


async def test_a_follow_stopped_amid_a_big_batch_stores_the_cursor_after_what_it_wrote(
    fake_cluster: Any, monkeypatch: Any
) -> None:
    """Stopped from outside (a user's action, a move to another triggerer) while a pump writes
    a big batch, the follow stores its cursors once the pumps have stopped: the stored cursor
    is after the batch, which was written whole, so a follow resumed from it writes none of
    it again."""
    from torchx_provider.triggers import logpump

    monkeypatch.setattr(logpump, "YIELD_EVERY", 0.0)  # a yield after every slice
    app_id = torchx_fakes.submit(replicas=1, lines=0, ticks=100_000)
    stored: list[dict[str, LogCursor]] = []

    async def checkpoint(cursors: dict[str, LogCursor], *_: Any) -> None:
        stored.append(dict(cursors))

    log = Log()
    follower = JobFollower(
        BigBatchApp(),
        app_id,
        log=log,
        poll_interval=0.001,
        checkpoint=checkpoint,
        checkpoint_every=3600.0,
    )
    run = asyncio.ensure_future(follower.run())
    for _ in range(10_000):  # until the pump is amid its batch
        if log.of("worker/0"):
            break
        await asyncio.sleep(0)
    assert 0 < len(log.of("worker/0")) < BigBatchApp.n, len(log.of("worker/0"))
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert log.of("worker/0") == [f"line {i}" for i in range(BigBatchApp.n)]
    assert stored and stored[-1]["worker/0"].since == BASE + timedelta(seconds=BigBatchApp.n - 1), (
        stored[-1:]
    )
