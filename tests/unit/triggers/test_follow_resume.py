"""A follow rebuilt later than ``queue_timeout`` after the submission (a triggerer restart, a
trigger moved to another triggerer): no timeout before it has described the app, none on a
state seen before an outage, and state changes stored so that its successor knows the app
ran."""

from __future__ import annotations

from typing import Any

import torchx_fakes
from follow_fakes import Clock, Scripted, follower
from task_log import TaskLog
from torchx_provider.errors import BackendUnavailableError
from torchx_provider.schedulers.logs import LogCursor
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import ErrorKind, EventKind
from torchx_provider.triggers.pacing import CheckpointPacer

HOUR = 3600.0


async def test_a_quiet_running_app_is_not_cancelled_by_a_follow_resumed_without_a_state(
    fake_cluster: Any,
) -> None:
    """It runs at once and writes nothing: the operator's first checkpoint (no state) is the
    only one stored when the follow is rebuilt an hour after the submission."""
    app_id = torchx_fakes.submit(pending=0, ticks=3, lines=0)
    clock = Clock(now=HOUR)
    event = await follower(
        torchx_fakes.FakeAsyncClient(),
        app_id,
        clock,
        state=None,
        queue_timeout=30.0,
        waiting_since=0.0,
    ).run()
    assert event.succeeded, event.message
    assert fake_cluster.cancelled == []


async def test_an_app_that_ended_meanwhile_ends_the_resumed_follow_as_it_ended() -> None:
    """Stored PENDING, resumed an hour after the submission: the app has SUCCEEDED."""
    clock = Clock(now=HOUR)
    client = Scripted(clock, lambda now: AppState.SUCCEEDED)
    event = await follower(
        client, "app-r", clock, state=AppState.PENDING, queue_timeout=30.0, waiting_since=0.0
    ).run()
    assert event.kind == EventKind.FINISHED and event.succeeded, event.message
    assert client.cancels == [] and len(client.described) == 1


async def test_a_resumed_follow_times_a_wait_from_when_it_sees_the_app_waiting() -> None:
    """Running at the first describe of a follow rebuilt without a state, preempted 100 s
    later: the wait is timed from then, not from the submission an hour before."""
    clock = Clock(now=HOUR)
    client = Scripted(clock, lambda now: AppState.RUNNING if now < HOUR + 100 else AppState.PENDING)
    event = await follower(client, "app-r", clock, queue_timeout=30.0, waiting_since=0.0).run()
    assert event.kind == EventKind.TIMEOUT and event.error == ErrorKind.QUEUE
    assert HOUR + 130 <= clock.now < HOUR + 141
    assert client.cancels == ["app-r"]
    assert "waited 30s without running" in event.message


class DownBetween(Scripted):
    """Describes fail with 503 while the clock is in ``[start, end)``."""

    def __init__(self, clock: Clock, script: Any, start: float, end: float) -> None:
        super().__init__(clock, script)
        self.start, self.end = start, end

    async def describe(self, app_id: str) -> Any:
        if self.start <= self.clock() < self.end:
            raise BackendUnavailableError("API server down", status=503)
        return await super().describe(app_id)


async def test_a_queue_timeout_that_falls_in_an_outage_is_decided_on_the_next_describe() -> None:
    """Waiting when the API server went down at 20 s, running by 50 s, seen again at 100 s:
    the queue timeout (60 s) fell in the outage, on a state last seen before it."""
    clock = Clock()

    def ran(now: float) -> AppState:
        if now < 50:
            return AppState.PENDING
        return AppState.RUNNING if now < 200 else AppState.SUCCEEDED

    client = DownBetween(clock, ran, 20.0, 100.0)
    event = await follower(client, "app-o", clock, queue_timeout=60.0, waiting_since=0.0).run()
    assert event.succeeded, event.message
    assert client.cancels == []

    clock = Clock()  # still waiting after the outage: timed out at the first describe after it
    client = DownBetween(clock, lambda now: AppState.PENDING, 20.0, 100.0)
    event = await follower(client, "app-o", clock, queue_timeout=60.0, waiting_since=0.0).run()
    assert event.kind == EventKind.TIMEOUT and event.error == ErrorKind.QUEUE
    assert client.described[-1][0] >= 100.0 and clock.now >= 100.0
    assert client.cancels == ["app-o"]


async def test_a_state_change_is_checkpointed_while_no_log_moves() -> None:
    """Waiting 10 s, then running an hour without a line: the stored progress says RUNNING
    long before the app ends, so that a follow rebuilt meanwhile knows it ran."""
    clock = Clock()

    def quiet(now: float) -> AppState:
        if now < 10:
            return AppState.PENDING
        return AppState.RUNNING if now < HOUR else AppState.SUCCEEDED

    stored: list[tuple[float, AppState | None]] = []

    async def checkpoint(cursors: dict[str, LogCursor], state: AppState | None, *_: Any) -> None:
        stored.append((clock(), state))

    event = await follower(
        Scripted(clock, quiet),
        "app-c",
        clock,
        TaskLog(),
        checkpoint=checkpoint,
        # no pause between turns: on a fake clock the follow's waits count as a write's time
        pacer=CheckpointPacer(min_gap=0.0, share_factor=0.0, clock=clock),
    ).run()
    assert event.succeeded, event.message
    assert any(state is AppState.RUNNING and at < HOUR for at, state in stored), stored
    assert stored[-1][1] is AppState.SUCCEEDED
