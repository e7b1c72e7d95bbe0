"""A replica's container removed from outside (``docker rm -f``) while the app runs, on a
real engine: the follow ends FAILED naming the removed replica -- it never waits for a
container that no longer exists. By default the other replica is stopped at once (the run
option ``stop_on_failure``); without it, the follow ends once that replica has finished."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from task_log import TaskLog
from torchx_provider.errors import InfrastructureError
from torchx_provider.operators.finishing import failure_error
from torchx_provider.schedulers.docker import create_async_client
from torchx_provider.schedulers.labels import LABEL_REPLICA_ID
from torchx_provider.specs.api import AppDef, AppState, Role
from torchx_provider.triggers.events import EventKind
from torchx_provider.triggers.follow import JobFollower

pytestmark = pytest.mark.docker

IMAGE = "torchx-provider/busybox:latest"
#: seconds replica 0 runs on after replica 1's container is removed
SURVIVOR_RUNS_ON = 3.0
#: seconds the follow may take to end once replica 0 has exited (a poll or two)
ENDS_WITHIN = 5.0


async def test_a_removed_replica_ends_the_follow_failed_naming_it(
    scheduler: Any, cfg: dict[str, Any], containers_of: Any
) -> None:
    # Replica 0 waits for the file the test writes once replica 1 is gone, then exits 0;
    # replica 1 would run for a minute. The default remove=True, as in a real task.
    script = (
        'echo "w/$TORCHX_REPLICA_IDX started"; '
        'if [ "$TORCHX_REPLICA_IDX" = 0 ]; then '
        "  while [ ! -f /tmp/go ]; do sleep 0.1; done; echo 'w/0 done'; exit 0; "
        "fi; sleep 60"
    )
    role = Role("w", image=IMAGE, entrypoint="sh", args=["-c", script], num_replicas=2)
    app = AppDef("removed", [role])
    app_id = scheduler.submit(app, {**cfg, "stop_on_failure": False})
    client = create_async_client()
    log = TaskLog()
    loop = asyncio.get_running_loop()
    follow = asyncio.ensure_future(JobFollower(client, app_id, log=log, poll_interval=10.0).run())
    try:
        for _ in range(400):  # both replicas run and their logs are followed
            if (log.of("w/0"), log.of("w/1")) == (["w/0 started"], ["w/1 started"]):
                break
            assert not follow.done(), log.lines
            await asyncio.sleep(0.05)
        assert log.of("w/1") == ["w/1 started"], log.lines
        by_replica = {c.labels[LABEL_REPLICA_ID]: c for c in containers_of(app_id)}
        await asyncio.to_thread(by_replica["1"].remove, force=True)
        await asyncio.sleep(SURVIVOR_RUNS_ON)
        assert not follow.done(), f"ended while replica 0 still ran: {log.lines}"
        await asyncio.to_thread(by_replica["0"].exec_run, ["touch", "/tmp/go"])
        exited = loop.time()
        done, _ = await asyncio.wait({follow}, timeout=30)
        assert done, f"the follow still waited 30 s after replica 0 exited: {log.lines}"
        took = loop.time() - exited
        event = follow.result()
    finally:
        follow.cancel()
        await client.close()

    assert (event.kind, event.state) == (EventKind.FINISHED, AppState.FAILED), (event, log.lines)
    assert took < ENDS_WITHIN, f"the follow ended {took:.1f} s after replica 0 exited"
    assert "w/1" in event.message and "removed" in event.message, event.message
    assert "other than this task" in event.message, event.message
    rows = {r.key: r for r in event.replicas}
    assert (rows["w/0"].state, rows["w/0"].exit_code) == (AppState.SUCCEEDED, 0)
    assert rows["w/1"].state == AppState.FAILED and "removed" in rows["w/1"].message
    # the task fails with InfrastructureError: a retry can help
    error = failure_error(event)
    assert isinstance(error, InfrastructureError), error
    assert (error.role, error.replica_id, error.reason) == ("w", 1, "RemovedFromOutside")
    assert log.of("w/0") == ["w/0 started", "w/0 done"], log.lines
    assert any(ln.startswith("::group::w/1 failed") for ln in log.lines), log.lines
    # The scheduler (the sync path) says the same; what remains of the app is kept.
    desc = scheduler.describe(app_id)
    assert desc is not None and desc.state == AppState.FAILED, desc
    assert "w/1" in desc.msg
    assert [c.labels[LABEL_REPLICA_ID] for c in containers_of(app_id)] == ["0"]


async def test_by_default_a_removed_replica_stops_the_other_at_once(
    scheduler: Any, cfg: dict[str, Any], containers_of: Any
) -> None:
    script = 'echo "w/$TORCHX_REPLICA_IDX started"; sleep 60'
    role = Role("w", image=IMAGE, entrypoint="sh", args=["-c", script], num_replicas=2)
    app_id = scheduler.submit(AppDef("removed", [role]), cfg)
    client = create_async_client()
    log = TaskLog()
    loop = asyncio.get_running_loop()
    follow = asyncio.ensure_future(JobFollower(client, app_id, log=log, poll_interval=10.0).run())
    try:
        for _ in range(400):
            if (log.of("w/0"), log.of("w/1")) == (["w/0 started"], ["w/1 started"]):
                break
            await asyncio.sleep(0.05)
        by_replica = {c.labels[LABEL_REPLICA_ID]: c for c in containers_of(app_id)}
        await asyncio.to_thread(by_replica["1"].remove, force=True)
        removed = loop.time()
        done, _ = await asyncio.wait({follow}, timeout=30)
        assert done, f"the follow still waited 30 s after replica 1 was removed: {log.lines}"
        took = loop.time() - removed
        event = follow.result()
    finally:
        follow.cancel()
        await client.close()
    print(f"the follow ended {took:.1f} s after replica 1 was removed")
    assert took < ENDS_WITHIN + 2, f"the follow ended {took:.1f} s after the removal"
    assert (event.kind, event.state) == (EventKind.FINISHED, AppState.FAILED), event
    rows = {r.key: r for r in event.replicas}
    assert rows["w/1"].reason == "RemovedFromOutside" and rows["w/0"].state == AppState.CANCELLED
    error = failure_error(event)
    assert isinstance(error, InfrastructureError) and error.replica_id == 1, error
    assert any("w/1 failed with no restarts left" in ln for ln in log.lines), log.lines
