"""Progress from the followed lines, stragglers named and stalls ended, on a fake clock: a
follow through hours of a scripted app takes milliseconds."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from follow_fakes import follower
from progress_fakes import ScriptedLogs, TickClock, TimedLog, every
from torchx_provider import errors
from torchx_provider.operators.finishing import failure_error, replica_results
from torchx_provider.schedulers.logs import LogCursor
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import ErrorKind, EventKind, JobEvent, ReplicaRow
from torchx_provider.triggers.pacing import CheckpointPacer
from torchx_provider.triggers.progress import ProgressPattern, progress_from_json
from torchx_provider.triggers.selection import LogSelection
from torchx_provider.triggers.watch import WatchLimits

STEP = ProgressPattern.parse(r"step (\d+)")


async def test_a_job_that_prints_a_step_every_few_minutes_is_not_stalled() -> None:
    """Rank 0 prints a step every 4 minutes and nothing between; rank 1 prints nothing
    after its start, for two hours: no stall at a 5-minute stall_timeout, and rank 1 (which
    reports no step) is no straggler."""
    clock = TickClock()
    script = {
        "t/0": every(5.0, 7200.0, 240.0, "step {n}"),
        "t/1": [(1.0, "rank 1 started"), (2.0, "rank 1 joined the group")],
    }
    client = ScriptedLogs(clock, script, ends_at=7200.0)
    log = TimedLog(clock)
    event = await follower(
        client,
        "app-s",
        clock,
        log,
        progress_pattern=STEP,
        watch=WatchLimits(straggler_after=120.0, stall_timeout=300.0),
    ).run()
    assert event.succeeded, event.message
    assert not client.cancels
    assert not [ln for ln in log.lines if "straggling" in ln or "moved for" in ln], log.lines
    assert event.progress["t/0"]["step"] == 30 and event.progress["t/0"]["last_line"] == "step 30"
    assert event.progress["t/1"]["step"] is None
    assert event.progress["t/1"]["last_line"] == "rank 1 joined the group"
    assert event.progress["t/1"]["last_line_at"] == "2024-05-01T10:00:02.000000Z"


async def test_without_a_pattern_any_line_moves_a_replica() -> None:
    clock = TickClock()
    script = {"t/0": every(0.0, 3600.0, 50.0, "working {n}")}
    client = ScriptedLogs(clock, script, ends_at=3600.0)
    event = await follower(
        client, "app-l", clock, TimedLog(clock), watch=WatchLimits(stall_timeout=60.0)
    ).run()
    assert event.succeeded and not client.cancels


@pytest.mark.parametrize(
    "how",
    [
        pytest.param({"refused": ["t/0", "t/1"]}, id="logs refused (no pods/log permission)"),
        pytest.param({"selection": LogSelection(())}, id="log_replicas selects none"),
    ],
)
async def test_an_app_whose_logs_cannot_be_read_is_never_stalled_and_that_is_said_once(
    how: dict[str, Any],
) -> None:
    clock = TickClock()
    script = {"t/0": every(0.0, 3600.0, 10.0, "step {n}"), "t/1": []}
    client = ScriptedLogs(clock, script, ends_at=3600.0, refused=how.get("refused", ()))
    log = TimedLog(clock)
    kw = {"selection": how["selection"]} if "selection" in how else {}
    event = await follower(
        client,
        "app-r",
        clock,
        log,
        progress_pattern=STEP,
        watch=WatchLimits(straggler_after=30.0, stall_timeout=60.0),
        **kw,
    ).run()
    assert event.succeeded, event.message
    assert not client.cancels and clock.now >= 3600.0
    off = [ln for ln in log.lines if "stall and straggler detection are off" in ln]
    assert len(off) == 1, log.lines
    assert off[0].startswith("app app-r: ")
    assert not [ln for ln in log.lines if "straggling" in ln]


async def test_a_straggler_is_named_once_said_again_when_it_changes_and_when_it_moves() -> None:
    """t/1 stops at step 10 (t=100) while t/0 goes on; it prints a warning at t=150 and
    moves again at t=200."""
    clock = TickClock()
    slow = [*every(10.0, 101.0, 10.0, "step {n}"), (150.0, "warning: the data loader waits")]
    slow += [(t, f"step {n}") for n, t in enumerate(range(200, 400, 10), start=11)]
    script = {"t/0": every(10.0, 400.0, 10.0, "step {n}"), "t/1": slow}
    client = ScriptedLogs(clock, script, ends_at=400.0)
    log = TimedLog(clock)
    event = await follower(
        client,
        "app-g",
        clock,
        log,
        progress_pattern=STEP,
        watch=WatchLimits(straggler_after=30.0),
    ).run()
    assert event.succeeded, event.message
    named = [(t, ln) for t, ln in log.timed if "t/1 is straggling" in ln]
    assert len(named) == 1, log.lines
    at, line = named[0]
    # quiet since t=100: named by straggler_after (30 s) plus at most one wait of the follow
    assert 130.0 <= at <= 135.0, at
    assert "no progress for 30s while its peers went on" in line
    assert "last step 10" in line and "'step 10'" in line
    again = log.when("t/1 is still straggling")
    assert len(again) == 1 and 150.0 <= again[0] <= 160.0, log.lines
    [still] = [ln for ln in log.lines if "t/1 is still straggling" in ln]
    assert "last step 10" in still and "'warning: the data loader waits'" in still
    moves = [ln for ln in log.lines if "t/1 moves again" in ln]
    assert moves == ["t/1 moves again (step 11) after 100s without progress"], log.lines
    assert 200.0 <= log.when("t/1 moves again")[0] <= 210.0
    assert not [ln for ln in log.lines if "t/0 is" in ln]


async def test_a_stall_cancels_the_app_and_names_the_replica_that_stopped_first() -> None:
    """Waiting ten minutes is no stall; then t/1 stops at step 11, t/0 at step 12: no
    replica moves for stall_timeout, the app is cancelled and t/1 is named."""
    clock = TickClock()
    script = {
        "t/0": every(605.0, 716.0, 10.0, "step {n}"),
        "t/1": [*every(605.0, 706.0, 10.0, "step {n}"), (706.5, "waiting for t/0")],
    }
    client = ScriptedLogs(clock, script, ends_at=10_000.0, pending_until=600.0)
    log = TimedLog(clock)
    event = await follower(
        client,
        "app-h",
        clock,
        log,
        progress_pattern=STEP,
        watch=WatchLimits(straggler_after=30.0, stall_timeout=120.0),
    ).run()
    assert event.kind == EventKind.TIMEOUT and event.error == ErrorKind.STALL, event.message
    assert client.cancels == ["app-h"]
    # t/0's last step at 715, seen by the follow within one of its waits (10 s): stalled
    # stall_timeout after that
    assert 835.0 <= clock.now <= 840.0, clock.now
    assert event.stalled == ("t/1",) and event.root_cause == "t/1"
    assert "stopped first: t/1 (quiet" in event.message and "the app was cancelled" in event.message
    # the task log shows each replica's last lines, the one that stopped first leading
    first = log.lines.index(next(ln for ln in log.lines if ln.startswith("::group::t/1")))
    assert "stopped first" in log.lines[first] and "last step 11" in log.lines[first]
    assert log.lines[first + 1 : first + 7] == [
        "[t/1] step 8",
        "[t/1] step 9",
        "[t/1] step 10",
        "[t/1] step 11",
        "[t/1] waiting for t/0",
        "::endgroup::",
    ]
    assert any(ln.startswith("::group::t/0 stopped: no progress for 120s") for ln in log.lines)

    error = failure_error(event)
    assert isinstance(error, errors.AppStalledError)
    assert isinstance(error, errors.InfrastructureError)
    assert error.stalled == ("t/1",) and (error.role, error.replica_id) == ("t", 1)
    assert str(error).startswith("TorchX app app-h stalled: no replica of app app-h moved")
    rows = {r["replica_id"]: r for r in replica_results(event)}
    assert rows[1]["stopped_first"] and rows[1]["root_cause"] and rows[1]["step"] == 11
    assert not rows[0]["stopped_first"] and rows[0]["step"] == 12
    assert rows[1]["last_line"] == "waiting for t/0"
    # the event travels to the worker and back unchanged
    assert JobEvent.from_payload(event.to_payload()) == event


async def test_a_stall_with_keep_leaves_the_app_running() -> None:
    clock = TickClock()
    client = ScriptedLogs(clock, {"t/0": [(1.0, "step 1")]}, ends_at=10_000.0)
    event = await follower(
        client,
        "app-k",
        clock,
        progress_pattern=STEP,
        cancel_on_timeout=False,
        watch=WatchLimits(stall_timeout=60.0),
    ).run()
    assert event.error == ErrorKind.STALL and not client.cancels
    assert "left running (on_kill_action=keep)" in event.message


async def test_a_resumed_follow_keeps_the_progress_and_does_not_count_the_time_it_was_away() -> (
    None
):
    """The first follow stops at t=300 (a triggerer going away) and stores its progress;
    the next starts at t=5000, long after both replicas' last lines (t=250): no stall for
    the time no follow was running, and t/1's step is the stored one."""
    clock = TickClock()
    script = {
        "t/0": [*every(10.0, 251.0, 10.0, "step {n}"), *every(5300.0, 6000.0, 20.0, "step {n}")],
        "t/1": [*every(10.0, 251.0, 10.0, "step {n}"), *every(5300.0, 6000.0, 60.0, "saving")],
    }
    client = ScriptedLogs(clock, script, ends_at=6000.0)
    stored: list[tuple[dict[str, LogCursor], AppState | None, dict[str, Any]]] = []

    async def checkpoint(
        cursors: dict[str, LogCursor], state: AppState | None, progress: dict[str, Any]
    ) -> None:
        stored.append((cursors, state, progress))

    first = follower(
        client,
        "app-c",
        clock,
        progress_pattern=STEP,
        checkpoint=checkpoint,
        pacer=CheckpointPacer(min_gap=0.0, share_factor=0.0, clock=clock),
        watch=WatchLimits(stall_timeout=600.0),
    )
    task = asyncio.ensure_future(first.run())
    await clock.reached(300.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    cursors, state, progress = stored[-1]
    assert state is AppState.RUNNING
    assert progress["t/1"]["step"] == 25 and progress["t/1"]["last_line"] == "step 25"

    clock.now = 5000.0  # the next follow starts long after the last line
    log = TimedLog(clock)
    event = await follower(
        client,
        "app-c",
        clock,
        log,
        cursors=cursors,
        state=state,
        progress=progress_from_json(progress),
        progress_pattern=STEP,
        watch=WatchLimits(stall_timeout=600.0),
    ).run()
    assert event.succeeded, event.message
    assert not client.cancels
    assert log.of("t/0")[0] == "step 1" and log.of("t/1") == ["saving"] * 12
    assert event.progress["t/1"]["step"] == 25 and event.progress["t/1"]["last_line"] == "saving"
    assert event.progress["t/0"]["step"] == 35


async def test_a_resumed_follow_finds_a_stall_from_when_it_started() -> None:
    """Resumed at t=5000 on an app whose replicas stay silent: stalled at 5000 +
    stall_timeout, not at once."""
    clock = TickClock(now=5000.0)
    client = ScriptedLogs(clock, {"t/0": [(10.0, "step 3")]}, ends_at=1e9)
    stored = {"t/0": {"last_line": "step 3", "last_line_at": "", "step": 3, "step_at": ""}}
    event = await follower(
        client,
        "app-d",
        clock,
        state=AppState.RUNNING,
        cursors={"t/0": LogCursor.from_dict({"since": "2024-05-01T10:00:10Z", "seen_at_since": 1})},
        progress=progress_from_json(stored),
        progress_pattern=STEP,
        watch=WatchLimits(stall_timeout=600.0),
    ).run()
    assert event.error == ErrorKind.STALL and 5600.0 <= clock.now <= 5610.0
    assert event.progress["t/0"]["step"] == 3


def test_a_pattern_is_checked_where_it_is_given() -> None:
    assert ProgressPattern.parse(r"it (?P<step>\d+)/(\d+)").step("it 3/10") == 3
    with pytest.raises(errors.InvalidOptionError, match="has no group"):
        ProgressPattern.parse(r"step \d+")
    with pytest.raises(errors.InvalidOptionError, match="not a regular expression"):
        ProgressPattern.parse(r"step (\d+")


def test_time_a_log_could_not_be_read_is_no_silence() -> None:
    """A replica's quiet starts again once its log is read after a failed read (its node
    was unreachable): it is not stalled for what could not be seen; while a read fails,
    nothing is decided."""
    clock = TickClock(now=1000.0)
    client = ScriptedLogs(clock, {"t/0": [], "t/1": []}, ends_at=1e9)

    def watching(failed_at: dict[str, float], unreadable: set[str]) -> tuple[str, ...]:
        f = follower(client, "app-u", clock, watch=WatchLimits(stall_timeout=600.0))
        f.seen.state = AppState.RUNNING
        f.seen.rows = (ReplicaRow("t", 0, AppState.RUNNING), ReplicaRow("t", 1, AppState.RUNNING))
        f._running_since = {"t/0": 0.0, "t/1": 0.0}
        f.progress.moved = {"t/0": 100.0, "t/1": 100.0}
        f.pumps.failed_at.update(failed_at)
        f.pumps._unreadable.update(unreadable)
        return f._watch_replicas()

    assert watching({}, set()) == ("t/0", "t/1")  # both quiet for 900 s: stalled
    assert watching({"t/1": 950.0}, set()) == ()  # t/1's log read again at 950
    assert watching({}, {"t/1"}) == ()  # t/1's log cannot be read now


def test_time_the_triggerer_was_frozen_is_no_silence() -> None:
    """The replicas' last lines at t=100 and t=150, and the follow's loop back at t=950 from
    a freeze (the triggerer stopped; the lines written meanwhile not read yet): no stall at
    t=1000 with a 600 s stall_timeout, and none due before t=1550; without the freeze, the
    app is stalled. Still silent at t=1600, it is stalled, t/0 named as the replica that
    stopped first."""
    clock = TickClock(now=1000.0)
    client = ScriptedLogs(clock, {"t/0": [], "t/1": []}, ends_at=1e9)

    def watching(back: float | None) -> Any:
        f = follower(
            client, "app-f", clock, watch=WatchLimits(stall_timeout=600.0), loop_back=lambda: back
        )
        f.seen.state = AppState.RUNNING
        f.seen.rows = (ReplicaRow("t", 0, AppState.RUNNING), ReplicaRow("t", 1, AppState.RUNNING))
        f._running_since = {"t/0": 0.0, "t/1": 0.0}
        f.progress.moved = {"t/0": 100.0, "t/1": 150.0}
        return f._watch_replicas(), f._watch_due

    assert watching(None)[0] == ("t/0",)
    assert watching(950.0) == ((), 1550.0)
    assert watching(300.0)[0] == ("t/0",)  # a freeze long before is no excuse
    clock.now = 1600.0
    assert watching(950.0)[0] == ("t/0",)
