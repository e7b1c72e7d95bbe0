"""Logs (since, until, regex, tail, streams) and the async client, on a real engine."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from torchx_provider.errors import UnknownAppError
from torchx_provider.schedulers.docker import create_async_client
from torchx_provider.schedulers.logs import LogCursor
from torchx_provider.specs.api import AppDef, AppState, Role, is_terminal

pytestmark = pytest.mark.docker

IMAGE = "torchx-provider/busybox:latest"
SCRIPT = "echo a; sleep 0.2; echo err >&2; sleep 0.2; echo b; sleep 0.2; printf c"


def test_log_iter_tail_streams_regex_since_until(
    scheduler: Any, cfg: dict[str, Any], wait_for: Any
) -> None:
    app = AppDef("logs", [Role("log", image=IMAGE, entrypoint="sh", args=["-c", SCRIPT])])
    app_id = scheduler.submit(app, {**cfg, "remove": False})

    # Following from the start returns once the replica has ended; every line ends with \n.
    assert list(scheduler.log_iter(app_id, "log", 0, should_tail=True)) == [
        "a\n",
        "err\n",
        "b\n",
        "c\n",
    ]
    assert wait_for(scheduler, app_id).state == AppState.SUCCEEDED
    assert list(scheduler.log_iter(app_id, "log", 0, streams="stdout")) == ["a\n", "b\n", "c\n"]
    assert list(scheduler.log_iter(app_id, "log", 0, streams="stderr")) == ["err\n"]
    assert list(scheduler.log_iter(app_id, "log", 0, streams="combined", regex="^[bc]")) == [
        "b\n",
        "c\n",
    ]

    # The engine's timestamps of each line, through the async client's reader.
    async_client = create_async_client()
    lines, _ = asyncio.run(async_client.read_logs(app_id, "log", 0, LogCursor()))
    stamps = {line.text: line.timestamp for line in lines}
    assert list(stamps) == ["a\n", "err\n", "b\n", "c\n"]
    b = stamps["b\n"]
    assert list(scheduler.log_iter(app_id, "log", 0, since=b)) == ["b\n", "c\n"]
    assert list(scheduler.log_iter(app_id, "log", 0, until=b)) == ["a\n", "err\n", "b\n"]
    assert list(scheduler.log_iter(app_id, "log", 0, since=stamps["err\n"], until=b)) == [
        "err\n",
        "b\n",
    ]


async def test_async_client_follows_reads_and_cancels(scheduler: Any, cfg: dict[str, Any]) -> None:
    client = create_async_client()
    try:
        script = "for i in 1 2 3 4 5 6; do echo line $i; done; sleep 60"
        app = AppDef("follow", [Role("r", image=IMAGE, entrypoint="sh", args=["-c", script])])
        app_id = scheduler.submit(app, cfg)

        cursor = LogCursor()
        seen: list[str] = []
        for _ in range(100):
            new, cursor = await client.read_logs(app_id, "r", 0, cursor)
            seen += [line.text for line in new]
            if len(seen) == 6:
                break
            await asyncio.sleep(0.1)
        assert seen == [f"line {i}\n" for i in range(1, 7)]
        # Resuming from the cursor gives nothing twice; from the 4th line, the rest.
        assert (await client.read_logs(app_id, "r", 0, cursor))[0] == []
        lines, _ = await client.read_logs(app_id, "r", 0, LogCursor())
        # lines the engine read in one chunk share a timestamp: the cursor after the 4th
        # line counts those of its timestamp up to it
        ts = lines[3].timestamp
        at_4th = LogCursor(ts, sum(1 for line in lines[:4] if line.timestamp == ts))
        rest, _ = await client.read_logs(app_id, "r", 0, at_4th)
        assert [line.text for line in rest] == ["line 5\n", "line 6\n"]

        desc = await client.describe(app_id)
        assert desc is not None and desc.state == AppState.RUNNING
        await client.cancel(app_id)
        for _ in range(100):
            desc = await client.describe(app_id)
            if desc is not None and is_terminal(desc.state):
                break
            await asyncio.sleep(0.1)
        assert desc is not None and desc.state == AppState.CANCELLED
        await client.cancel(app_id)  # idempotent

        # remove (default): reading the finished replica's log to its end removes the app.
        await client.read_logs(app_id, "r", 0, cursor)
        assert await client.describe(app_id) is None

        assert await client.describe("never-submitted-0000") is None
        await client.cancel("never-submitted-0000")
        with pytest.raises(UnknownAppError):
            await client.read_logs("never-submitted-0000", "r", 0, LogCursor())
    finally:
        await client.close()


def test_tail_outlasts_the_client_timeout(docker_engine: Any, cfg: dict[str, Any]) -> None:
    # A replica that says nothing for longer than the client's timeout is still followed.
    from torchx_provider.schedulers.docker import create_scheduler

    # (submitted with the default timeout: creating and starting a container on a loaded
    # engine can take longer than the second the follow's client waits)
    submitter = create_scheduler("quiet")
    scheduler = create_scheduler("quiet", timeout=1)
    app = AppDef(
        "quiet", [Role("q", image=IMAGE, entrypoint="sh", args=["-c", "sleep 2; echo done"])]
    )
    app_id = submitter.submit(app, cfg)
    try:
        assert list(scheduler.log_iter(app_id, "q", 0, should_tail=True)) == ["done\n"]
        assert scheduler.describe(app_id) is None  # followed to the end: removed
    finally:
        submitter.delete(app_id)
        submitter.close()
        scheduler.close()
