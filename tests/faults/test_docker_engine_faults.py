"""Reliability rows for the Docker backend: faults of the engine's endpoint.

The :mod:`fault_proxy` listens on a unix socket of its own in front of the test engine's
socket; a 2-replica app whose replicas print a numbered line every 0.25 s is submitted
straight to the engine and followed with the trigger's follow loop (:class:`JobFollower`
over the real :class:`DockerAsyncClient`) through the proxy, at the trigger's default
``poll_interval``. A few seconds in, the proxy resets every connection, answers every
request 503 (as a socket proxy or TLS gateway whose engine is away) or stalls every
response, for 5 s. The follow must ride it out: ``SUCCEEDED``, every line the containers
printed (read from the engine afterwards) in the task log once, no container left running.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from docker_rows import assert_none_lost_or_left, compare, numbered_app, printed_by, row_result

from task_log import TaskLog
from torchx_provider.schedulers.docker import create_async_client, create_scheduler
from torchx_provider.specs.api import AppState, is_terminal
from torchx_provider.triggers.events import EventKind
from torchx_provider.triggers.follow import JobFollower

pytestmark = [pytest.mark.docker, pytest.mark.slow]

#: numbered lines per replica, one every 0.25 s
LINES = 60
#: seconds from submission to the fault, and how long it lasts
FAULT_AT, FAULT_FOR = 4.0, 5.0
#: the trigger's default poll interval
POLL_INTERVAL = 10.0
KINDS = {
    "reset": "every connection reset",
    "503": "every request answered 503",
    "stall": "every response stalled",
}


@pytest.fixture(scope="module")
def engine_url(skip_or_fail: Callable[[str], NoReturn]) -> str:
    """The test engine's unix socket URL (its image built if missing)."""
    from docker_engine import open_docker_engine

    open_docker_engine(skip_or_fail).close()
    url = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not url.startswith("unix://"):
        skip_or_fail(f"the engine's fault proxy sits on a unix socket; DOCKER_HOST is {url}")
    return url


@pytest.fixture
def engine_proxy(engine_url: str) -> Iterator[Any]:
    from fault_proxy import FaultProxy

    # a short path: a unix socket's path is limited to 108 bytes
    with tempfile.TemporaryDirectory(prefix="txp-", dir="/tmp") as tmp:
        proxy = FaultProxy(
            upstream_unix=engine_url.removeprefix("unix://"),
            listen_unix=str(Path(tmp) / "engine.sock"),
        ).start()
        try:
            yield proxy
        finally:
            proxy.stop()


@pytest.mark.parametrize("kind", list(KINDS))
async def test_docker_engine_fault_row(
    kind: str, engine_url: str, engine_proxy: Any, reliability: Any
) -> None:
    started = time.monotonic()
    scheduler = create_scheduler("faults", base_url=engine_url)
    # kept after they exit: what they printed is read from the engine afterwards
    app_id = scheduler.submit(numbered_app("engine-faults", LINES), {"remove": False})
    client = create_async_client(base_url=engine_proxy.url)
    log = TaskLog()

    async def fault() -> None:
        await asyncio.sleep(FAULT_AT)
        engine_proxy.set_fault(kind)
        try:
            await asyncio.sleep(FAULT_FOR)
        finally:
            engine_proxy.clear()

    injector = asyncio.create_task(fault())
    try:
        event = await asyncio.wait_for(
            JobFollower(client, app_id, log=log, poll_interval=POLL_INTERVAL).run(), 180
        )
        await injector
    finally:
        injector.cancel()
        await client.close()
    try:
        printed = printed_by(engine_url, app_id)  # read from the engine, not the proxy
        state = scheduler.describe(app_id)
        assert state is not None and is_terminal(state.state), state
    finally:
        scheduler.delete(app_id)
        scheduler.close()
    seen = compare(log.lines, printed)
    result = row_result(
        row_id=f"docker-{kind}-5s",
        fault=f"Docker engine's endpoint: {KINDS[kind]} for {FAULT_FOR:.0f} s",
        expected="followed to the end",
        event=event,
        printed=printed,
        seen=seen,
        seconds=time.monotonic() - started,
        injected=dict(sorted(Counter(k for _, k, _ in engine_proxy.injected).items())),
        notes="a fault proxy on a unix socket in front of the engine's",
    )
    try:
        assert engine_proxy.injected, "the fault was never applied to a request"
        assert (event.kind, event.state) == (EventKind.FINISHED, AppState.SUCCEEDED), (
            result,
            log.lines[-30:],
        )
        assert printed.total == 2 * LINES, result
        assert_none_lost_or_left(seen, printed, result)
        result["ok"] = True
    finally:
        reliability(result)
