"""The queue clock: a state the backend cannot tell leaves it as it is, and a follow resumed
as RUNNING counts a return to waiting like any other."""

from __future__ import annotations

from follow_fakes import Clock, Scripted, follower
from task_log import TaskLog
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import ErrorKind, EventKind
from torchx_provider.triggers.waiting import PhaseTimes, QueueWait


def test_unknown_leaves_the_queue_clock_as_it_is() -> None:
    wait = QueueWait(timeout=30.0, since=0.0)
    wait.observe(AppState.UNKNOWN, 10.0)
    wait.observe(AppState.PENDING, 20.0)
    assert wait.since == 0.0 and wait.expired(30.0)
    running = QueueWait(timeout=30.0, since=None)
    running.observe(AppState.UNKNOWN, 10.0)
    assert running.since is None


async def test_an_app_flipping_between_pending_and_unknown_times_out() -> None:
    """A Volcano phase this version does not know, every other describe: the wait runs on,
    and the flips are not logged as transitions."""
    clock = Clock()

    def flipping(now: float) -> AppState:
        if now >= 2000:
            return AppState.SUCCEEDED
        return AppState.UNKNOWN if int(now // 10) % 2 else AppState.PENDING

    client = Scripted(clock, flipping)
    log = TaskLog()
    event = await follower(client, "app-u", clock, log, queue_timeout=30.0).run()
    assert event.kind == EventKind.TIMEOUT and event.error == ErrorKind.QUEUE, event.message
    assert 30.0 <= clock.now < 41.0 and client.cancels == ["app-u"]
    assert sum("UNKNOWN" in ln for ln in log.lines) <= 1, log.lines
    assert not any("-> UNKNOWN" in ln or "UNKNOWN ->" in ln for ln in log.lines)
    assert event.state is AppState.PENDING


async def test_a_first_state_the_backend_cannot_tell_is_no_sign_that_the_app_ran() -> None:
    """Stored UNKNOWN (all a previous follow saw): the first wait still counts from the
    submission."""
    clock = Clock(now=100.0)
    client = Scripted(clock, lambda now: AppState.PENDING)
    event = await follower(
        client, "app-u", clock, state=AppState.UNKNOWN, queue_timeout=30.0, waiting_since=0.0
    ).run()
    assert event.error == ErrorKind.QUEUE and clock.now == 100.0


def test_a_phase_count_resumed_as_running_counts_a_return_to_waiting() -> None:
    times = PhaseTimes(resumed="running")
    times.observe(AppState.PENDING, 5.0)
    times.observe(AppState.RUNNING, 25.0)
    assert times.returns == 1 and times.totals(30.0) == (20.0, 5.0)


async def test_a_follow_resumed_as_running_that_finds_the_app_waiting_counts_a_return() -> None:
    clock = Clock()

    def requeued(now: float) -> AppState:
        if now < 50:
            return AppState.PENDING
        return AppState.RUNNING if now < 100 else AppState.SUCCEEDED

    log = TaskLog()
    event = await follower(
        Scripted(clock, requeued), "app-p", clock, log, state=AppState.RUNNING
    ).run()
    assert event.succeeded, event.message
    assert event.preemptions == 1
    assert (event.queued_seconds, event.running_seconds) == (50.0, 50.0)
    [back] = [ln for ln in log.lines if "RUNNING -> PENDING" in ln]
    assert "back to waiting" in back


async def test_an_app_that_ended_before_a_late_follow_did_not_wait_after_its_end() -> None:
    """Submitted at 0, waited 2 s, ran 1 s; the follow's first describe comes 40 s after the
    submission (a triggerer that took the deferral up late): 2 s waiting and 1 s running, not
    the 39 s since it started counted as waiting."""
    from datetime import datetime, timezone

    from torchx_provider.schedulers.api import DescribeAppResponse
    from torchx_provider.specs.api import ReplicaStatus, RoleStatus
    from torchx_provider.triggers.timeline import Timeline

    submitted_wall = 1_700_000_000.0
    clock = Clock(40.0)

    def at(seconds: float) -> datetime:
        return datetime.fromtimestamp(submitted_wall + seconds, timezone.utc)

    class EndedLongAgo(Scripted):
        async def describe(self, app_id: str) -> DescribeAppResponse:
            replica = ReplicaStatus(
                0, AppState.SUCCEEDED, "w", "h", exit_code=0, started_at=at(2), finished_at=at(3)
            )
            return DescribeAppResponse(
                app_id=app_id,
                state=AppState.SUCCEEDED,
                roles_statuses=[RoleStatus("w", [replica])],
            )

    client = EndedLongAgo(clock, lambda now: AppState.SUCCEEDED)
    timeline = Timeline(wall=lambda: submitted_wall + clock.now)
    event = await follower(client, "app-s", clock, waiting_since=0.0, timeline=timeline).run()
    assert event.succeeded, event.message
    assert (event.queued_seconds, event.running_seconds) == (2.0, 1.0)
