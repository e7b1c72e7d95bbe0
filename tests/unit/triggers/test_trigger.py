"""TorchXJobTrigger and the follow loop, against the in-memory ``fake`` backend."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import pytest

import torchx_fakes
from task_log import TaskLog as ListLog
from torchx_fakes import submit, trigger_args
from torchx_provider import errors
from torchx_provider.operators.finishing import failure_error
from torchx_provider.schedulers.logs import LogCursor, advance, merge_cursors
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import EventKind, JobEvent
from torchx_provider.triggers.follow import JobFollower, LogSelection
from torchx_provider.triggers.job import JobTriggerArgs, TorchXJobTrigger


def test_serialize_is_the_args_and_rebuilds_the_same_trigger() -> None:
    args = trigger_args(
        "a-1",
        conn_id="my_conn",
        log_replicas=["trainer/0"],
        log_cursors={"trainer/0": LogCursor().to_dict()},
        task_instance={"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1},
        outage_budget=120.0,
        deadline=1_700_000_000.0,
    )
    trigger = TorchXJobTrigger.from_args(args)
    classpath, kwargs = trigger.serialize()
    assert classpath == "torchx_provider.triggers.job.TorchXJobTrigger"
    assert set(kwargs) == {f for f in JobTriggerArgs.__dataclass_fields__}
    assert "client_kwargs" not in kwargs and "secret_keys" not in kwargs
    rebuilt = TorchXJobTrigger(**kwargs)
    assert rebuilt.args == args
    assert rebuilt.serialize() == (classpath, kwargs)
    assert json.loads(json.dumps(kwargs)) == kwargs


async def test_an_older_trigger_row_still_loads_and_follows_with_its_client_kwargs(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows written by the previous version carry the resolved client kwargs, no conn_id."""
    app_id = submit()
    old_row = {
        "scheduler": "fake",
        "app_id": app_id,
        "client_kwargs": {"token": "s3cr3t", "base_url": "tcp://x:2376"},
        "poll_interval": 0.001,
        "log_replicas": None,
        "log_cursors": {},
        "cancel_on_kill": True,
        "task_instance": None,
        "secret_keys": ["token"],
    }
    trigger = TorchXJobTrigger(**old_row)
    assert trigger.args.conn_id is None
    _, kwargs = trigger.serialize()
    assert "s3cr3t" not in json.dumps(kwargs) and "s3cr3t" not in repr(trigger)
    made: list[dict[str, Any]] = []

    def spy(**client_kwargs: Any) -> torchx_fakes.FakeAsyncClient:
        made.append(client_kwargs)
        return torchx_fakes.FakeAsyncClient(**client_kwargs)

    monkeypatch.setattr(torchx_fakes, "create_async_client", spy)
    [event] = [e async for e in trigger.run()]
    assert JobEvent.from_payload(event.payload).succeeded
    assert made == [{"token": "s3cr3t", "base_url": "tcp://x:2376"}]


def test_unknown_kwargs_are_refused() -> None:
    with pytest.raises(TypeError, match="unknown argument"):
        TorchXJobTrigger(scheduler="fake", app_id="a", bogus=1)


async def test_follows_to_success_with_every_line_of_every_replica(fake_cluster: Any) -> None:
    app_id = submit(lines=5, ticks=3, replicas=3)
    log = ListLog()
    follower = JobFollower(torchx_fakes.FakeAsyncClient(), app_id, log=log, poll_interval=0.001)
    event = await follower.run()
    assert event.kind == EventKind.FINISHED and event.state == AppState.SUCCEEDED
    for rid in range(3):
        mine = [ln for ln in log.replica_lines() if ln.startswith(f"[worker/{rid}]")]
        assert mine == [f"[worker/{rid}] worker {rid} line {i}" for i in range(5)]
    assert any("-> SUCCEEDED" in ln for ln in log.lines)
    assert [r.exit_code for r in event.replicas] == [0, 0, 0]
    assert set(event.log_cursors) == {"worker/0", "worker/1", "worker/2"}


async def test_log_selection_limits_forwarding(fake_cluster: Any) -> None:
    app_id = submit(lines=2, replicas=3)
    log = ListLog()
    await JobFollower(
        torchx_fakes.FakeAsyncClient(),
        app_id,
        log=log,
        poll_interval=0.001,
        selection=LogSelection.parse("worker/1"),
    ).run()
    assert {ln.split("]")[0] for ln in log.replica_lines()} == {"[worker/1"}


async def test_failure_carries_state_message_and_exit_codes(fake_cluster: Any) -> None:
    app_id = submit(outcome="FAILED", fail_replicas="worker/1")
    event = await JobFollower(
        torchx_fakes.FakeAsyncClient(), app_id, log=ListLog(), poll_interval=0.001
    ).run()
    assert event.state == AppState.FAILED and event.message == "replica failed"
    assert [(r.replica_id, r.state, r.exit_code) for r in event.replicas] == [
        (0, AppState.SUCCEEDED, 0),
        (1, AppState.FAILED, 1),
    ]


async def test_a_replica_that_raised_but_had_not_ended_is_the_root_cause(
    fake_cluster: Any,
) -> None:
    """Seen on the real node under Volcano: worker/0's torchrun failed first on the lost
    connection, Volcano failed the job, and worker/1 -- whose rank raised -- was still being
    stopped (RUNNING) at the follow's last describe. The task's error names worker/1 and its
    own error, as a ``UserCodeError``; the summary leads with it."""
    app_id = submit(
        outcome="FAILED",
        fail_replicas="worker/0",
        peer_lost_replicas="worker/0",
        traceback_replicas="worker/1",
        unended_replicas="worker/1",
    )
    log = ListLog()
    event = await JobFollower(
        torchx_fakes.FakeAsyncClient(), app_id, log=log, poll_interval=0.001
    ).run()
    assert event.state == AppState.FAILED and event.root_cause == "worker/1", event
    assert [(r.key, r.state) for r in event.replicas] == [
        ("worker/0", AppState.FAILED),
        ("worker/1", AppState.RUNNING),
    ]
    error = failure_error(event)
    assert type(error) is errors.UserCodeError, error
    assert (error.role, error.replica_id, error.exit_code) == ("worker", 1, None)
    assert error.replica_message == "ValueError: worker 1 got a bad batch"
    assert "first failed replica: worker/1 failed: its log shows its error; still RUNNING" in str(
        error
    )
    heads = [ln for ln in log.lines if ln.startswith("::group::")]
    assert heads[0].startswith("::group::worker/1 failed first: its log shows its error"), heads
    assert heads[1].startswith("::group::worker/0 failed: exit code 1 (RuntimeError:"), heads
    # without worker/1's own error, the replica that failed is the root cause
    app_id = submit(
        outcome="FAILED",
        fail_replicas="worker/0",
        peer_lost_replicas="worker/0,worker/1",
        unended_replicas="worker/1",
    )
    event = await JobFollower(
        torchx_fakes.FakeAsyncClient(), app_id, log=ListLog(), poll_interval=0.001
    ).run()
    assert event.root_cause == "worker/0", event
    assert [r.message for r in event.replicas][1] == ""


async def test_short_outages_are_retried(fake_cluster: Any) -> None:
    app_id = submit()
    fake_cluster.outages = 2
    log = ListLog()
    event = await JobFollower(
        torchx_fakes.FakeAsyncClient(), app_id, log=log, poll_interval=0.001
    ).run()
    assert event.succeeded
    assert sum("backend unreachable" in ln for ln in log.lines) == 2
    assert any("reachable again" in ln for ln in log.lines)


async def test_a_vanished_app_ends_with_an_error_event(fake_cluster: Any) -> None:
    event = await JobFollower(
        torchx_fakes.FakeAsyncClient(), "nope-1", log=ListLog(), poll_interval=0.001
    ).run()
    assert event.kind == EventKind.ERROR and "does not exist" in event.message


async def deleted_once_seen(fake_cluster: Any, outages: int = 0) -> JobEvent:
    """Follow an app until it is seen, then delete it (after ``outages`` describes that
    fail) and return the follow's end."""
    app_id = submit(ticks=100_000)
    follower = JobFollower(
        torchx_fakes.FakeAsyncClient(), app_id, log=ListLog(), poll_interval=0.001
    )
    running = asyncio.create_task(follower.run())
    for _ in range(5000):  # until the follower saw the app once
        if follower.state is not None:
            break
        await asyncio.sleep(0.001)
    assert follower.state in (AppState.PENDING, AppState.RUNNING)
    fake_cluster.outages = outages
    fake_cluster.apps[app_id].deleted = True
    return await asyncio.wait_for(running, timeout=5)


async def test_an_app_deleted_before_it_finished_failed_on_the_platform(
    fake_cluster: Any,
) -> None:
    # A user's delete, a clean-up: not this task, which cancels only as its follow ends.
    event = await deleted_once_seen(fake_cluster)
    assert event.kind == EventKind.FINISHED and event.state == AppState.FAILED
    assert "removed from the backend before it finished" in event.message
    assert {(r.state, r.reason, r.failure) for r in event.replicas} == {
        (AppState.FAILED, "RemovedFromOutside", "infrastructure")
    }
    error = failure_error(event)
    assert type(error) is errors.InfrastructureError, error
    assert error.reason == "RemovedFromOutside" and event.root_cause == f"{error.role}/0"


async def test_an_app_gone_while_no_follow_ran_has_an_unknown_outcome(fake_cluster: Any) -> None:
    """Last seen RUNNING by an earlier follow (the checkpoint's state), gone at the resumed
    follow's first describe: it may have succeeded and been removed by a TTL meanwhile, so
    the end says the outcome is unknown (still the platform's failure: a retry runs it
    again), not that it was removed before it finished."""
    from torchx_provider.triggers.timeline import Timeline

    app_id = submit(ticks=100_000)
    fake_cluster.apps[app_id].deleted = True
    log = ListLog()
    # no line read yet (no cursors): its replicas are known by the stored timeline
    stored = {"version": 1, "origin": 1.0, "now": 5.0, "app": {"phase": "running"}}
    stored["replicas"] = [
        {"role": "echo", "id": 0, "events": [[1.0, "running"]]},
        {"role": "echo", "id": 1, "events": [[1.0, "running"], [4.0, "succeeded", 0, ""]]},
    ]
    event = await JobFollower(
        torchx_fakes.FakeAsyncClient(),
        app_id,
        log=log,
        poll_interval=0.001,
        state=AppState.RUNNING,
        timeline=Timeline.from_dict(stored),
    ).run()
    assert event.kind == EventKind.FINISHED and event.state == AppState.FAILED
    assert "its outcome is unknown" in event.message, event.message
    assert "last seen RUNNING before the follow lost sight of it" in event.message
    assert "removed from the backend before it finished" not in event.message
    assert any("while the follow could not see it" in line for line in log.lines), log.lines
    # echo/1 was seen succeed: it is not said removed
    assert [(r.key, r.reason) for r in event.replicas] == [("echo/0", "RemovedFromOutside")]
    error = failure_error(event)
    assert type(error) is errors.InfrastructureError, error
    assert (error.role, error.replica_id, error.reason) == ("echo", 0, "RemovedFromOutside")


async def test_an_app_gone_after_an_outage_has_an_unknown_outcome(fake_cluster: Any) -> None:
    """Seen running, then the backend unreachable for a while, then the app gone: it may
    have ended and been removed meanwhile, as for a follow resumed after a restart."""
    event = await deleted_once_seen(fake_cluster, outages=3)
    assert event.state == AppState.FAILED
    assert "its outcome is unknown" in event.message, event.message
    assert type(failure_error(event)) is errors.InfrastructureError


async def test_an_app_deleted_by_this_tasks_kill_is_said_cancelled_by_it(
    fake_cluster: Any,
) -> None:
    # The operator's on_kill on the worker cancels (a cancel that deletes) while the follow
    # runs there: the app was taken by this task, not from outside.
    app_id = submit(ticks=100_000)
    killed = [False]
    follower = JobFollower(
        torchx_fakes.FakeAsyncClient(),
        app_id,
        log=ListLog(),
        poll_interval=0.001,
        killed=lambda: killed[0],
    )
    running = asyncio.create_task(follower.run())
    for _ in range(5000):  # until the follower saw the app once
        if follower.state is not None:
            break
        await asyncio.sleep(0.001)
    killed[0] = True
    fake_cluster.apps[app_id].deleted = True
    event = await asyncio.wait_for(running, timeout=5)
    assert event.kind == EventKind.FINISHED and event.state == AppState.CANCELLED, event
    assert "cancelled by this task as it was killed" in event.message
    assert "something other than this task" not in event.message
    assert not any(r.reason == "RemovedFromOutside" for r in event.replicas)


async def test_a_resumed_follow_that_finds_its_app_gone_fails_it_on_the_platform(
    fake_cluster: Any,
) -> None:
    # Rebuilt after the app went: it knows the replicas by its log cursors only.
    event = await JobFollower(
        torchx_fakes.FakeAsyncClient(),
        "gone-1",
        log=ListLog(),
        poll_interval=0.001,
        state=AppState.RUNNING,
        cursors={"worker/0": LogCursor(), "worker/1": LogCursor()},
    ).run()
    assert event.kind == EventKind.FINISHED and event.state == AppState.FAILED
    assert [(r.key, r.reason) for r in event.replicas] == [
        ("worker/0", "RemovedFromOutside"),
        ("worker/1", "RemovedFromOutside"),
    ]
    assert type(failure_error(event)) is errors.InfrastructureError


async def test_resuming_from_a_checkpoint_loses_nothing_and_repeats_at_most_two_periods(
    fake_cluster: Any,
) -> None:
    """A follow stopped mid-way (triggerer restart) and rebuilt from its last checkpoint."""
    app_id = submit(lines=40, ticks=20, replicas=2)
    stored: dict[str, LogCursor] = {}

    async def checkpoint(cursors: dict[str, LogCursor], state: AppState | None, *_: Any) -> None:
        stored.clear()
        stored.update(cursors)

    first_log = ListLog()
    first = JobFollower(
        torchx_fakes.FakeAsyncClient(),
        app_id,
        log=first_log,
        poll_interval=0.001,
        checkpoint=checkpoint,
        checkpoint_every=0.002,
    )
    task = asyncio.create_task(first.run())
    for _ in range(10_000):  # until about 30 lines were forwarded
        if len(first_log.replica_lines()) >= 30:
            break
        await asyncio.sleep(0.001)
    task.cancel()  # the triggerer goes away
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stored, "cursors were checkpointed"

    second_log = ListLog()
    event = await JobFollower(
        torchx_fakes.FakeAsyncClient(),
        app_id,
        log=second_log,
        poll_interval=0.001,
        cursors=merge_cursors({}, stored),
        checkpoint=checkpoint,
        checkpoint_every=0.002,
    ).run()
    assert event.succeeded
    for rid in range(2):
        prefix = f"[worker/{rid}]"
        before = [ln for ln in first_log.replica_lines() if ln.startswith(prefix)]
        after = [ln for ln in second_log.replica_lines() if ln.startswith(prefix)]
        expected = [f"{prefix} worker {rid} line {i}" for i in range(40)]
        # nothing lost: the union, in order, is every line
        assert sorted(set(before) | set(after), key=expected.index) == expected
        repeated = set(before) & set(after)
        # the fake writes 2 lines per replica per describe (about one per millisecond):
        # what two 2 ms checkpoint periods forwarded may repeat, not everything
        assert len(repeated) <= 12 and len(repeated) < len(before)
        assert after == expected[len(before) - len(repeated) :]


async def test_trigger_yields_one_event_and_closes_its_client(fake_cluster: Any) -> None:
    app_id = submit()
    closed = torchx_fakes.FakeAsyncClient.closed
    trigger = TorchXJobTrigger.from_args(trigger_args(app_id))
    events = [e async for e in trigger.run()]
    assert len(events) == 1
    assert JobEvent.from_payload(events[0].payload).succeeded
    assert torchx_fakes.FakeAsyncClient.closed == closed + 1


async def test_on_kill_cancels_and_cleanup_does_not(fake_cluster: Any) -> None:
    app_id = submit(ticks=1000)
    trigger = TorchXJobTrigger.from_args(trigger_args(app_id))
    await trigger.cleanup()
    assert fake_cluster.cancelled == []
    await trigger.on_kill()
    assert fake_cluster.cancelled == [app_id]
    assert fake_cluster.apps[app_id].state() == AppState.CANCELLED

    kept = submit(ticks=1000)
    await TorchXJobTrigger.from_args(trigger_args(kept, cancel_on_kill=False)).on_kill()
    assert kept not in fake_cluster.cancelled


async def test_on_kill_reads_what_the_replicas_say_as_they_stop(fake_cluster: Any) -> None:
    """A user's kill cancels the trigger's follow, then ``on_kill`` cancels the app: the lines
    its replicas write as they stop (a checkpoint saved on SIGTERM) reach the task log, read
    on from where the follow left off (no line twice)."""
    app_id = submit(ticks=1000, lines=4000, replicas=2, last_words="checkpoint saved on SIGTERM")
    trigger = TorchXJobTrigger.from_args(trigger_args(app_id))
    log = ListLog()
    trigger._log = log  # the task log
    run = asyncio.ensure_future(trigger.run().__anext__())
    for _ in range(1000):  # until the follow forwarded some of replica 1's lines
        if len(log.of("worker/1")) >= 10:
            break
        await asyncio.sleep(0.01)
    run.cancel()  # the triggerer stops the trigger for the user's action
    with pytest.raises(asyncio.CancelledError):
        await run
    await trigger.on_kill()
    assert fake_cluster.cancelled == [app_id]
    for replica in ("worker/0", "worker/1"):
        lines = log.of(replica)
        assert lines[-1].endswith("checkpoint saved on SIGTERM"), lines[-3:]
        assert len(lines) == len(set(lines)), "a line forwarded twice"
    assert any(f"app {app_id}: RUNNING -> CANCELLED" in ln for ln in log.lines), log.lines[-5:]


async def test_the_follow_never_blocks_the_event_loop(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No callback of the loop spends 50 ms of CPU (work that belongs in a thread), and none
    holds the loop for half a second of wall time (a blocking call).

    The CPU is the loop thread's own: on a loaded machine a callback can wait for a core
    for longer than 50 ms without doing anything wrong (57 ms seen under Python 3.14's debug
    mode with both cores busy). Wall time is not: a machine busy with other work can keep
    the runnable loop thread off both cores for half a second (seen once, under Python 3.14
    beside two other test processes). A blocking call holds the loop in every follow, so a
    follow that had such a callback is followed again, and the test fails when each of
    three had one."""
    loop = asyncio.get_running_loop()
    loop.set_debug(True)  # (it also refuses loop calls from other threads)
    loop.slow_callback_duration = 3600.0  # (measured below, with each callback's CPU)
    busy: list[tuple[float, str]] = []
    held: list[tuple[float, float, str]] = []
    run = asyncio.events.Handle._run

    def timed(handle: asyncio.events.Handle) -> None:
        began, began_wall = time.thread_time(), time.perf_counter()
        try:
            run(handle)
        finally:
            used = time.thread_time() - began
            wall = time.perf_counter() - began_wall
            if used > 0.05:
                busy.append((round(used, 3), repr(handle)[:200]))
            elif wall > 0.5:
                held.append((round(wall, 3), round(used, 3), repr(handle)[:200]))

    monkeypatch.setattr(asyncio.events.Handle, "_run", timed)
    held_in_each: list[list[tuple[float, float, str]]] = []
    for _ in range(3):
        held.clear()
        app_id = submit(lines=200, ticks=10, replicas=4)
        trigger = TorchXJobTrigger.from_args(trigger_args(app_id))
        [event] = [e async for e in trigger.run()]
        assert JobEvent.from_payload(event.payload).succeeded
        assert not busy, busy
        if not held:
            break
        held_in_each.append(list(held))
    else:
        pytest.fail(f"each follow held the loop (wall s, CPU s, callback): {held_in_each}")
    monkeypatch.undo()


async def test_trigger_resumes_from_and_stores_its_xcom_checkpoint(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuilt trigger starts from the cursors its predecessor stored in the XCom."""
    from torchx_provider import compat
    from torchx_provider.triggers.job import CHECKPOINT_XCOM_KEY, checkpoint_value

    store: dict[tuple[str, str], Any] = {}

    async def aget_one(key: str, *, run_id: str, **scope: Any) -> Any:
        return store.get((key, run_id))

    async def aset(key: str, value: Any, *, run_id: str, **scope: Any) -> None:
        store[(key, run_id)] = json.loads(json.dumps(value))

    monkeypatch.setattr(compat, "xcom_get_one", aget_one)
    monkeypatch.setattr(compat, "xcom_set", aset)

    app_id = submit(lines=6, ticks=3, replicas=1)
    app = fake_cluster.apps[app_id]
    # the predecessor forwarded lines 0-3 (timestamps: two lines per second)
    app.ticks = 2
    _, cursor = advance(LogCursor(), app.lines("worker", 0))
    app.ticks = 0
    store[(CHECKPOINT_XCOM_KEY, "r")] = checkpoint_value(app_id, {"worker/0": cursor})

    ti = {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1}
    trigger = TorchXJobTrigger.from_args(trigger_args(app_id, task_instance=ti))
    log = ListLog()
    monkeypatch.setattr(TorchXJobTrigger, "log", log)
    [event] = [e async for e in trigger.run()]
    assert JobEvent.from_payload(event.payload).succeeded
    assert log.replica_lines() == ["[worker/0] worker 0 line 4", "[worker/0] worker 0 line 5"]
    stored = store[(CHECKPOINT_XCOM_KEY, "r")]
    assert stored["app_id"] == app_id
    assert LogCursor.from_dict(stored["cursors"]["worker/0"]).seen_at_since == 2


async def test_on_kill_outlives_airflows_cancels_of_it(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow 3.3.2's triggerer cancels the trigger's task again at each turn of its loop
    (about a second) while ``on_kill`` runs: the kill must still cancel the app and say so,
    however slowly Airflow answers what state the task is in."""
    from airflow.sdk.execution_time import task_runner

    class Comms:
        async def asend(self, msg: Any) -> Any:
            await asyncio.sleep(0.3)  # a loaded API server

            class Reply:
                task_states = {"r": {"t": "failed"}}

            return Reply()

    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", Comms(), raising=False)
    app_id = submit(ticks=1000)
    ti = {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1}
    trigger = TorchXJobTrigger.from_args(trigger_args(app_id, task_instance=ti))
    log = ListLog()
    trigger._log = log
    killing = asyncio.ensure_future(trigger.on_kill())
    await asyncio.sleep(0.05)
    killing.cancel()  # the runner's next turn
    with pytest.raises(asyncio.CancelledError):
        await killing
    assert app_id not in fake_cluster.cancelled
    for _ in range(200):
        if any("task killed; cancelled app" in ln for ln in log.lines):
            break
        await asyncio.sleep(0.01)
    assert fake_cluster.cancelled == [app_id], log.lines
    assert any(f"task killed; cancelled app {app_id}" in ln for ln in log.lines), log.lines


async def test_a_kill_whose_cancel_fails_says_so_and_raises_nothing(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_id = submit(ticks=1000)
    trigger = TorchXJobTrigger.from_args(trigger_args(app_id))
    log = ListLog()
    trigger._log = log

    async def refused(self: Any, app_id: str) -> None:
        raise RuntimeError("403 Forbidden")

    monkeypatch.setattr(torchx_fakes.FakeAsyncClient, "cancel", refused)
    await trigger.on_kill()
    said = [ln for ln in log.lines if "could not be cancelled" in ln]
    assert said == [
        f"task killed, but app {app_id} could not be cancelled (RuntimeError: 403 Forbidden): "
        "cancel it with the handle in the task's XCom"
    ], log.lines


async def test_a_users_kill_begins_in_the_follow_even_if_airflow_never_calls_on_kill(
    fake_cluster: Any,
) -> None:
    """Airflow 3.3.2 awaits a log call between its cancel of the trigger and ``on_kill``; its
    next cancel can land there, and ``on_kill`` never runs. The follow, cancelled with
    Airflow's user-action message, begins the kill itself; ``on_kill`` joins the same kill."""
    from airflow.jobs import triggerer_job_runner

    from torchx_provider.triggers.job import USER_ACTION_CANCEL

    # Airflow 3.3 names the message; 3.1 and 3.2 kill no trigger (no on_kill, no message)
    if hasattr(triggerer_job_runner, "_ON_CANCEL_TIMEOUT"):
        assert USER_ACTION_CANCEL == triggerer_job_runner._USER_ACTION_CANCEL_MSG
    app_id = submit(ticks=1000)
    trigger = TorchXJobTrigger.from_args(trigger_args(app_id))
    log = ListLog()
    trigger._log = log
    run = asyncio.ensure_future(trigger.run().__anext__())
    for _ in range(500):
        if trigger._follower is not None:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    run.cancel(USER_ACTION_CANCEL)
    with pytest.raises(asyncio.CancelledError):
        await run
    for _ in range(300):  # no on_kill
        if fake_cluster.cancelled:
            break
        await asyncio.sleep(0.01)
    assert fake_cluster.cancelled == [app_id], log.lines[-5:]
    await trigger.on_kill()  # joins it: no second cancel
    assert fake_cluster.cancelled == [app_id]
    assert sum(f"task killed; cancelled app {app_id}" in ln for ln in log.lines) == 1
    # a cancel without the message (a shutdown, a move) begins nothing
    kept = submit(ticks=1000)
    other = TorchXJobTrigger.from_args(trigger_args(kept))
    run = asyncio.ensure_future(other.run().__anext__())
    await asyncio.sleep(0.1)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    await asyncio.sleep(0.1)
    assert kept not in fake_cluster.cancelled


async def airflow_run_trigger(trigger: TorchXJobTrigger, log: ListLog) -> None:
    """Airflow 3.3.2's ``TriggerRunner.run_trigger``, in short: the trigger's log is the task
    log until this task has ended (the triggerer then closes it)."""
    from torchx_provider.triggers.job import USER_ACTION_CANCEL

    try:
        async for _ in trigger.run():
            pass
    except asyncio.CancelledError as e:
        if e.args and e.args[0] == USER_ACTION_CANCEL:
            log.info("Trigger cancelled by user action, invoking on_kill")
            await asyncio.sleep(0)  # Airflow awaits its own log call here
            with contextlib.suppress(asyncio.CancelledError):  # Airflow swallows it
                await asyncio.wait_for(trigger.on_kill(), timeout=30)
        raise
    finally:
        log.info("trigger completed")


async def test_a_users_kill_keeps_the_trigger_and_its_log_through_airflows_repeated_cancels(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow 3.3.2 cancels a killed trigger again at every turn of its loop until it has
    ended, then closes its log. The trigger ends only once the kill is done: the app's cancel
    (slow here, as on a loaded machine) and the ranks' last words are in the task log when it
    does, and every client it made is closed, though closing is slower than Airflow's turn.
    A shutdown's cancel meanwhile ends it at once, saying the kill may not end."""
    from torchx_provider.triggers.job import USER_ACTION_CANCEL

    real_cancel = torchx_fakes.FakeAsyncClient.cancel
    real_close = torchx_fakes.FakeAsyncClient.close
    real_init = torchx_fakes.FakeAsyncClient.__init__
    made: list[Any] = []
    held: list[asyncio.Event] = []  # a cancel waits for each of these before it is done

    async def slow_cancel(self: Any, app_id: str) -> None:
        await asyncio.sleep(0.6)
        for gate in held:
            await gate.wait()
        await real_cancel(self, app_id)

    async def slow_close(self: Any) -> None:
        await asyncio.sleep(0.25)  # more than two turns of the runner's loop
        await real_close(self)

    def counted_init(self: Any, **kwargs: Any) -> None:
        made.append(self)
        real_init(self, **kwargs)

    monkeypatch.setattr(torchx_fakes.FakeAsyncClient, "cancel", slow_cancel)
    monkeypatch.setattr(torchx_fakes.FakeAsyncClient, "close", slow_close)
    monkeypatch.setattr(torchx_fakes.FakeAsyncClient, "__init__", counted_init)

    async def killed(app_id: str, recancel: str | None) -> list[str]:
        trigger = TorchXJobTrigger.from_args(trigger_args(app_id))
        log = ListLog()
        trigger._log = log
        task = asyncio.ensure_future(airflow_run_trigger(trigger, log))
        for _ in range(1000):  # until the follow forwarded some of replica 1's lines
            if len(log.of("worker/1")) >= 10:
                break
            await asyncio.sleep(0.01)
        task.cancel(USER_ACTION_CANCEL)
        for _ in range(600):  # the runner's loop, a turn every 0.1 s here
            if task.done():
                break
            await asyncio.sleep(0.1)
            task.cancel(recancel)
        assert task.done(), f"the trigger did not end within 60 s of its kill: {log.lines[-5:]}"
        with pytest.raises(asyncio.CancelledError):
            await task
        return list(log.lines)  # what the task log got: the trigger's log is closed

    app_id = submit(ticks=1000, lines=400, replicas=2, last_words="checkpoint saved on SIGTERM")
    closed_before = torchx_fakes.FakeAsyncClient.closed
    lines = await killed(app_id, USER_ACTION_CANCEL)
    for _ in range(100):  # a close cut by a cancel would never end
        if torchx_fakes.FakeAsyncClient.closed - closed_before == len(made):
            break
        await asyncio.sleep(0.1)
    assert len(made) >= 2  # the follow's client and the kill's
    assert torchx_fakes.FakeAsyncClient.closed - closed_before == len(made), len(made)
    assert fake_cluster.cancelled == [app_id]
    assert any(f"task killed; cancelled app {app_id}" in ln for ln in lines), lines[-5:]
    for replica in ("worker/0", "worker/1"):
        assert any(
            ln.endswith(f"[{replica}] {replica.replace('/', ' ')} checkpoint saved on SIGTERM")
            for ln in lines
        ), lines[-8:]
    assert lines[-1] == "trigger completed"

    # the triggerer shutting down meanwhile: no wait for the kill. Its cancel is held until
    # the trigger has ended (a trigger that waited for it would never end), however slow the
    # machine is.
    gate = asyncio.Event()
    held.append(gate)
    other = submit(ticks=1000, lines=400, replicas=2)
    lines = await killed(other, "EOF - shutting down")
    # ended with its kill still under way: neither done nor given up
    assert other not in fake_cluster.cancelled
    assert not any("could not be cancelled" in ln for ln in lines), lines[-5:]
    gate.set()
    assert any(
        f"the triggerer is stopping during the kill of app {other}: if it is still running, "
        "cancel it with the handle in the task's XCom" in ln
        for ln in lines
    ), lines[-5:]
    for _ in range(1000):  # (this loop goes on, and the kill with it; a stopping one ends)
        if other in fake_cluster.cancelled:
            break
        await asyncio.sleep(0.01)
    assert other in fake_cluster.cancelled


async def test_a_users_kill_as_the_trigger_begins_is_done_before_it_ends(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled for a user's action while it still loads its follow (its first step, in a
    thread), the trigger cancels the app before it ends, through Airflow's repeated cancels:
    not from ``on_kill``, which the next of them would cut."""
    from torchx_provider.triggers import job
    from torchx_provider.triggers.job import USER_ACTION_CANCEL

    real_module = job._follow_module
    loading = asyncio.Event()
    loop = asyncio.get_running_loop()

    def slow_module() -> Any:
        loop.call_soon_threadsafe(loading.set)
        time.sleep(0.5)
        return real_module()

    real_cancel = torchx_fakes.FakeAsyncClient.cancel

    async def slow_cancel(self: Any, app_id: str) -> None:
        await asyncio.sleep(0.6)  # as on a loaded machine: more than a turn of Airflow's
        await real_cancel(self, app_id)

    monkeypatch.setattr(job, "_follow_module", slow_module)
    monkeypatch.setattr(torchx_fakes.FakeAsyncClient, "cancel", slow_cancel)
    app_id = submit(ticks=1000, lines=10, replicas=1)
    trigger = TorchXJobTrigger.from_args(trigger_args(app_id))
    log = ListLog()
    trigger._log = log
    task = asyncio.ensure_future(airflow_run_trigger(trigger, log))
    await asyncio.wait_for(loading.wait(), 5)
    task.cancel(USER_ACTION_CANCEL)
    while not task.done():  # the runner's loop, a turn every 0.1 s here
        await asyncio.sleep(0.1)
        task.cancel(USER_ACTION_CANCEL)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fake_cluster.cancelled == [app_id]
    said = [ln for ln in log.lines if f"task killed; cancelled app {app_id}" in ln]
    assert said and log.lines.index(said[0]) < log.lines.index("trigger completed"), log.lines


async def test_a_kill_stuck_before_its_cancel_keeps_the_trigger_only_for_its_bound(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kill that never gets an answer (Airflow never tells the task's state) keeps the
    killed trigger for ``KILL_WAIT`` at most, through Airflow's repeated cancels; the task
    log says the trigger stopped waiting."""
    from torchx_provider.triggers import job

    monkeypatch.setattr(job, "KILL_WAIT", 0.6)

    async def never(self: Any) -> tuple[str | None, bool]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(TorchXJobTrigger, "_task_state", never)
    app_id = submit(ticks=1000, lines=40, replicas=2)
    trigger = TorchXJobTrigger.from_args(trigger_args(app_id))
    log = ListLog()
    trigger._log = log
    task = asyncio.ensure_future(airflow_run_trigger(trigger, log))
    for _ in range(500):
        if trigger._follower is not None:
            break
        await asyncio.sleep(0.01)
    started = time.monotonic()
    task.cancel(job.USER_ACTION_CANCEL)
    while not task.done():
        await asyncio.sleep(0.1)
        task.cancel(job.USER_ACTION_CANCEL)
        assert time.monotonic() - started < 5, "the trigger outlived its kill's bound"
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started > 0.5, "it did not wait for the kill"
    assert any(
        f"stopped waiting for the kill of app {app_id} after 1s" in ln for ln in log.lines
    ), log.lines[-4:]
    assert fake_cluster.cancelled == []
    assert trigger._killing is not None
    trigger._killing.cancel()
