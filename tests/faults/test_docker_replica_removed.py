"""Reliability row for the Docker backend: one replica's container removed while it runs.

A 2-replica app whose replicas print a numbered line every 0.25 s is followed with the
trigger's follow loop (:class:`JobFollower` over the real :class:`DockerAsyncClient`) at the
trigger's default ``poll_interval``. A few seconds in, replica 1's container is removed from
outside (``docker rm -f``, as a user or a clean-up script would); replica 0 runs on to its
end (the app runs with ``stop_on_failure=False``: by default the removal would stop replica
0 at once, which ``tests/integration/docker/test_docker_failure_classes.py`` checks). The
engine never creates a removed container again: the follow must end ``FAILED`` within a
poll of replica 0's end, naming replica 1 and saying it was removed by something other than
the task -- no hang -- with every line replica 0 printed in the task log once.

Replica 1's log went with its container: its lines are not counted ("lines lost" compares
the task log with what replica 0's container printed, read from the engine afterwards).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import pytest
from docker_rows import assert_none_lost_or_left, compare, numbered_app, printed_by, row_result

from task_log import TaskLog
from torchx_provider.schedulers.docker import create_async_client, create_scheduler
from torchx_provider.schedulers.labels import LABEL_APP_ID, LABEL_REPLICA_ID
from torchx_provider.schedulers.logs import parse_timestamp
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import EventKind
from torchx_provider.triggers.follow import JobFollower

pytestmark = [pytest.mark.docker, pytest.mark.slow]

#: numbered lines per replica, one every 0.25 s
LINES = 40
#: seconds from submission to the removal of replica 1's container
FAULT_AT = 4.0
#: the trigger's default poll interval
POLL_INTERVAL = 10.0
#: seconds the follow may take to end once replica 0 has exited: within a poll
ENDS_WITHIN = POLL_INTERVAL


@pytest.fixture(scope="module")
def engine(skip_or_fail: Callable[[str], NoReturn]) -> Iterator[Any]:
    """A ``docker.DockerClient`` for the test engine (its image built if missing)."""
    from docker_engine import open_docker_engine

    client = open_docker_engine(skip_or_fail)
    yield client
    client.close()


async def test_docker_replica_removed_row(engine: Any, reliability: Any) -> None:
    started = time.monotonic()
    url = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    scheduler = create_scheduler("faults", base_url=url)
    # kept after they exit: what replica 0 printed is read from the engine afterwards
    app_id = scheduler.submit(
        numbered_app("replica-removed", LINES), {"remove": False, "stop_on_failure": False}
    )
    client = create_async_client(base_url=url)
    log = TaskLog()

    def container(replica: str) -> Any:
        found = engine.containers.list(all=True, filters={"label": f"{LABEL_APP_ID}={app_id}"})
        return next(c for c in found if c.labels[LABEL_REPLICA_ID] == replica)

    async def remove_replica_1() -> None:
        await asyncio.sleep(FAULT_AT)
        await asyncio.to_thread(lambda: container("1").remove(force=True))

    injector = asyncio.create_task(remove_replica_1())
    try:
        event = await asyncio.wait_for(
            JobFollower(client, app_id, log=log, poll_interval=POLL_INTERVAL).run(), 180
        )
        ended = time.time()
        await injector
    finally:
        injector.cancel()
        await client.close()
    try:
        survivor = container("0")
        exited = parse_timestamp(survivor.attrs["State"]["FinishedAt"]).timestamp()
        printed = printed_by(url, app_id)
    finally:
        scheduler.delete(app_id)
        scheduler.close()
    seen = compare(log.lines, printed)
    result = row_result(
        row_id="docker-replica-removed",
        fault="Docker: one replica's container removed (docker rm -f) while it runs "
        "(stop_on_failure=False)",
        expected="FAILED naming the removed replica within a poll of the other's end; "
        "every line of the other",
        event=event,
        printed=printed,
        seen=seen,
        seconds=time.monotonic() - started,
        ended_after_survivor=round(ended - exited, 1),
        notes="the removed replica's log went with its container: its lines are not counted",
    )
    try:
        assert (event.kind, event.state) == (EventKind.FINISHED, AppState.FAILED), (
            result,
            log.lines[-30:],
        )
        assert "worker/1" in event.message and "other than this task" in event.message, event
        assert ended - exited < ENDS_WITHIN, result
        assert list(printed.lines) == ["worker/0"] and printed.total == LINES, result
        assert_none_lost_or_left(seen, printed, result)
        result["ok"] = True
    finally:
        reliability(result)
