"""Follows that begin late. One resumed (a triggerer restart) after every container of its
Docker app was removed from outside: the app failed on the platform
(``InfrastructureError``), as when the follow sees the removal itself, its end saying that
its outcome is unknown (it may have ended before it was removed); it was not cancelled,
since the task did not cancel it. One begun after its short app ended: the time
it ran is the engine's."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

from task_log import TaskLog
from torchx_provider import errors, specs
from torchx_provider.operators.finishing import failure_error
from torchx_provider.schedulers.docker import create_async_client
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import EventKind
from torchx_provider.triggers.follow import JobFollower

pytestmark = pytest.mark.docker

IMAGE = "torchx-provider/busybox:latest"


def sleeper(replicas: int) -> specs.AppDef:
    role = specs.Role(
        name="w",
        image=IMAGE,
        entrypoint="sh",
        args=["-c", "echo up; sleep 120"],
        num_replicas=replicas,
    )
    return specs.AppDef(name="resumed", roles=[role])


async def first_follow_until_running(app_id: str) -> JobFollower:
    """A follow that saw the app run and read its first lines, then was stopped (the
    triggerer shut down); it is returned for its checkpoint (cursors and state)."""
    client = create_async_client()
    follower = JobFollower(client, app_id, log=TaskLog(), poll_interval=0.2)
    running = asyncio.create_task(follower.run())
    try:
        for _ in range(300):
            if follower.state is AppState.RUNNING and len(follower.cursors) == 2:
                break
            await asyncio.sleep(0.1)
        assert follower.state is AppState.RUNNING, follower.state
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await client.close()
    return follower


async def test_a_resumed_follow_of_an_app_removed_from_outside_fails_it_on_the_platform(
    scheduler: Any, cfg: dict[str, Any], containers_of: Any
) -> None:
    app_id = scheduler.submit(sleeper(2), cfg)
    first = await first_follow_until_running(app_id)
    for container in containers_of(app_id):
        container.remove(force=True)  # docker rm -f, while no follow runs
    assert containers_of(app_id) == []

    client = create_async_client()
    log = TaskLog()
    try:
        event = await asyncio.wait_for(
            JobFollower(
                client,
                app_id,
                log=log,
                poll_interval=0.2,
                state=first.state,
                cursors=first.cursors,
            ).run(),
            60,
        )
    finally:
        await client.close()

    # before: CANCELLED ("deleted from the backend before it finished"): AppCancelledError
    assert event.kind == EventKind.FINISHED and event.state == AppState.FAILED, event
    assert [(r.key, r.state, r.reason) for r in event.replicas] == [
        ("w/0", AppState.FAILED, "RemovedFromOutside"),
        ("w/1", AppState.FAILED, "RemovedFromOutside"),
    ]
    error = failure_error(event)
    assert type(error) is errors.InfrastructureError, error
    assert (error.role, error.replica_id, error.reason) == ("w", 0, "RemovedFromOutside")
    assert "not by this task" in log.text
    # it may have ended before it was removed: the end says so instead of guessing
    assert "its outcome is unknown" in event.message, event.message


async def test_an_app_that_ended_before_the_follow_began_ran_as_long_as_the_engine_says(
    scheduler: Any, cfg: dict[str, Any], wait_for: Any
) -> None:
    # A deferral the triggerer takes up after a short app ended: no describe saw it run.
    app = specs.AppDef(
        name="short",
        roles=[specs.Role(name="w", image=IMAGE, entrypoint="sh", args=["-c", "sleep 1"])],
    )
    submitted = time.monotonic()
    app_id = scheduler.submit(app, cfg)
    ended = wait_for(scheduler, app_id)
    assert ended.state == AppState.SUCCEEDED
    await asyncio.sleep(1.0)  # the triggerer's delay

    client = create_async_client()
    whole = time.monotonic() - submitted  # from the submission to the follow
    try:
        event = await asyncio.wait_for(
            JobFollower(
                client, app_id, log=TaskLog(), poll_interval=0.2, waiting_since=submitted
            ).run(),
            60,
        )
    finally:
        await client.close()

    assert event.state == AppState.SUCCEEDED
    # before: running_seconds 0.0, and the whole time counted as waiting
    assert event.running_seconds is not None and 0.9 <= event.running_seconds <= 1.8, event
    # not the whole time since the submission: its run is not counted as waiting
    assert event.queued_seconds is not None, event
    assert event.queued_seconds <= whole - 0.9, (whole, event)
