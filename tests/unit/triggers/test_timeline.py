"""The app's timeline (:mod:`torchx_provider.triggers.timeline`): phases with their times,
restarts and preemptions, the reasons to wait, the root cause; bounded; carried by the
checkpoint and the event a follow ends with."""

from __future__ import annotations

import json
from typing import Any

import torchx_fakes
from task_log import TaskLog as Log
from torchx_provider.operators.finishing import final_timeline, task_result
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import (
    PAYLOAD_TIMELINE_LIMIT,
    EventKind,
    JobEvent,
    ReplicaRow,
)
from torchx_provider.triggers.follow import JobFollower
from torchx_provider.triggers.job import checkpoint_value
from torchx_provider.triggers.timeline import SIZE_LIMIT, Timeline, merged_timeline


class Wall:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def rows(state: AppState, n: int = 2, **kw: Any) -> list[ReplicaRow]:
    return [ReplicaRow("trainer", i, state, **kw) for i in range(n)]


def events(snap: dict[str, Any], key: str) -> list[list[Any]]:
    role, idx = key.split("/")
    [rep] = [r for r in snap["replicas"] if r["role"] == role and r["id"] == int(idx)]
    return list(rep["events"])


def test_phases_preemption_and_restart_are_kept_with_their_times() -> None:
    wall = Wall()
    t = Timeline(wall)
    t.observe(AppState.PENDING, rows(AppState.PENDING, restarts=0))
    wall.t += 4
    assert t.notice("admitted by ClusterQueue cq", warning=False)
    wall.t += 6
    t.observe(AppState.RUNNING, rows(AppState.RUNNING, restarts=0))
    wall.t += 20  # preempted: the app and its replicas wait again
    t.observe(AppState.PENDING, rows(AppState.PENDING, restarts=0))
    wall.t += 10
    t.observe(AppState.RUNNING, rows(AppState.RUNNING, restarts=0))
    wall.t += 5  # trainer/1's container restarted in place
    again = rows(AppState.RUNNING, restarts=0)
    again[1] = ReplicaRow("trainer", 1, AppState.RUNNING, 137, reason="OOMKilled", restarts=1)
    t.observe(AppState.RUNNING, again)
    wall.t += 5
    t.observe(AppState.SUCCEEDED, rows(AppState.SUCCEEDED, exit_code=0, restarts=1))
    snap = t.snapshot()
    assert snap["app"]["events"] == [
        [0.0, "queued"],
        [4.0, "admitted", "admitted by ClusterQueue cq"],
        [10.0, "running"],
        [30.0, "preempted"],
        [30.0, "queued"],
        [40.0, "running"],
        [50.0, "succeeded"],
    ]
    assert events(snap, "trainer/1") == [
        [0.0, "queued"],
        [10.0, "running"],
        [30.0, "preempted"],
        [30.0, "queued"],
        [40.0, "running"],
        [45.0, "restart", 137, "OOMKilled"],
        [50.0, "succeeded", 0, ""],
    ]
    assert snap["origin"] == 1_700_000_000.0 and snap["now"] == 50.0
    assert next(r for r in snap["replicas"] if r["id"] == 1)["restarts"] == 1


def test_a_preemption_the_backend_counts_before_the_app_waits_again_is_marked_once() -> None:
    """Kueue's eviction count may rise while the job still shows running, and the return to
    waiting come at the next describe: one preemption, one mark (and one in the result)."""
    wall = Wall()
    t = Timeline(wall)
    t.observe(AppState.RUNNING, rows(AppState.RUNNING), preemptions=0)
    wall.t += 10
    t.observe(AppState.RUNNING, rows(AppState.RUNNING), preemptions=1)
    wall.t += 1
    t.observe(AppState.PENDING, rows(AppState.PENDING), preemptions=1)
    wall.t += 10
    t.observe(AppState.RUNNING, rows(AppState.RUNNING), preemptions=1)
    snap = t.snapshot()
    assert [e[1] for e in snap["app"]["events"]] == ["running", "preempted", "queued", "running"]
    assert snap["app"]["preemptions"] == 1
    again = Timeline.from_dict(json.loads(json.dumps(snap)), wall)
    assert again.app_preempted == 1  # what a resumed follow starts from


def test_a_preemption_between_two_describes_is_marked_when_the_follow_learns_of_it() -> None:
    """Preempted and admitted again between two describes (the follow saw it running, then
    running again; the backend counts the preemption): the app's lane has its mark, once,
    and one seen happen is not counted twice."""
    wall = Wall()
    t = Timeline(wall)
    t.observe(AppState.PENDING, rows(AppState.PENDING))
    wall.t += 5
    t.observe(AppState.RUNNING, rows(AppState.RUNNING))
    wall.t += 20  # the backend now counts one preemption
    assert t.observe(AppState.RUNNING, rows(AppState.RUNNING), preemptions=1)
    wall.t += 5
    assert not t.observe(AppState.RUNNING, rows(AppState.RUNNING), preemptions=1)
    wall.t += 5  # a second one the follow sees happen: one more mark
    t.observe(AppState.PENDING, rows(AppState.PENDING), preemptions=2)
    wall.t += 5
    t.observe(AppState.SUCCEEDED, rows(AppState.SUCCEEDED, exit_code=0), preemptions=2)
    snap = t.snapshot()
    assert snap["app"]["events"] == [
        [0.0, "queued"],
        [5.0, "running"],
        [25.0, "preempted"],
        [35.0, "preempted"],
        [35.0, "queued"],
        [40.0, "succeeded"],
    ]
    assert snap["app"]["preemptions"] == 2
    # a follow resumed from the checkpoint counts from where it was
    again = Timeline.from_dict(json.loads(json.dumps(snap)), wall)
    assert not again.observe(AppState.SUCCEEDED, rows(AppState.SUCCEEDED), preemptions=2)
    # a checkpoint written before the count was kept: its marks are the count
    del snap["app"]["preemptions"]
    assert Timeline.from_dict(snap, wall).app_preempted == 2


def test_the_backends_times_place_a_start_and_an_end_seen_late() -> None:
    wall = Wall(1_700_000_000.0)
    t = Timeline(wall)
    t.observe(AppState.PENDING, rows(AppState.PENDING, 1))
    wall.t += 60
    ended = ReplicaRow(
        "trainer",
        0,
        AppState.FAILED,
        3,
        reason="Error",
        started_at="2023-11-14T22:13:30+00:00",  # origin + 10 s
        finished_at="2023-11-14T22:13:50+00:00",  # origin + 30 s
    )
    t.observe(AppState.FAILED, [ended])
    # it started and ended between two describes: placed where the backend says
    assert events(t.snapshot(), "trainer/0") == [
        [0.0, "queued"],
        [10.0, "running"],
        [30.0, "failed", 3, "Error"],
    ]
    assert t.snapshot()["app"]["events"] == [[0.0, "queued"], [10.0, "running"], [30.0, "failed"]]


def test_reasons_to_wait_are_kept_once_newest_last_and_bounded() -> None:
    wall = Wall()
    t = Timeline(wall)
    assert t.wait("quota exhausted in cq")
    wall.t += 1
    assert not t.wait("quota exhausted in cq")  # said again: nothing new
    t.wait("x" * 2000)
    wall.t += 1
    t.wait("quota exhausted in cq")
    waits = t.snapshot()["waits"]
    assert [w[1] for w in waits][-1] == "quota exhausted in cq" and len(waits) == 2
    assert len(waits[0][1]) <= 300
    pulling = ReplicaRow("trainer", 0, AppState.PENDING, reason="InvalidImageName")
    t.observe(AppState.PENDING, [pulling])
    assert t.snapshot()["waits"][-1][1:] == [
        "trainer/0 waits: InvalidImageName (the image name is not valid)",
        "trainer/0",
    ]


def test_a_1000_replica_app_with_10_restarts_each_stays_under_1_mib() -> None:
    wall = Wall()
    t = Timeline(wall)
    n = 1000
    reason = "OOMKilled: the container used more memory than its limit " * 3

    def all_rows(state: AppState, restarts: int, code: int | None = None) -> list[ReplicaRow]:
        return [
            ReplicaRow(
                f"trainer-role-{i % 4}",
                i,
                state,
                code,
                reason=reason if code else "",
                message="m" * 500,
                restarts=restarts,
            )
            for i in range(n)
        ]

    t.observe(AppState.PENDING, all_rows(AppState.PENDING, 0))
    t.notice("admitted by ClusterQueue cq", warning=False)
    for r in range(11):
        wall.t += 30
        t.observe(AppState.RUNNING, all_rows(AppState.RUNNING, r, 137 if r else None))
        wall.t += 30
        t.observe(AppState.RUNNING, all_rows(AppState.FAILED, r, 137))
        wall.t += 30
        t.observe(AppState.PENDING, all_rows(AppState.PENDING, r + 1, 137))
        t.wait(f"waiting for quota {r}: " + "w" * 400)
    t.observe(AppState.FAILED, all_rows(AppState.FAILED, 11, 137))
    t.found_root_cause("trainer-role-1/1", "RuntimeError: CUDA out of memory " * 40, "m" * 900)
    size = len(json.dumps(t.snapshot()))
    assert size < SIZE_LIMIT, size
    snap = t.snapshot()
    assert len(snap["replicas"]) == n
    first = snap["replicas"][0]
    # its first events and its latest ones; those between are counted
    assert [e[1] for e in first["events"][:2]] == ["queued", "running"]
    assert first["events"][-1][1] == "failed" and first["dropped"] > 0
    # the checkpoint that carries it stays under the limit too
    value = checkpoint_value("app", {}, AppState.FAILED, None, snap)
    assert len(json.dumps(value)) < SIZE_LIMIT + 1024


def test_a_snapshot_read_back_goes_on_where_it_was() -> None:
    wall = Wall()
    t = Timeline(wall)
    t.observe(AppState.PENDING, rows(AppState.PENDING))
    wall.t += 10
    t.observe(AppState.RUNNING, rows(AppState.RUNNING))
    stored = json.loads(json.dumps(t.snapshot()))
    wall.t += 10
    again = Timeline.from_dict(stored, wall)
    assert not again.observe(AppState.RUNNING, rows(AppState.RUNNING))  # nothing new
    wall.t += 5
    again.observe(AppState.SUCCEEDED, rows(AppState.SUCCEEDED, exit_code=0))
    assert events(again.snapshot(), "trainer/0")[-1] == [25.0, "succeeded", 0, ""]
    assert again.snapshot()["app"]["events"][-1] == [25.0, "succeeded"]
    assert Timeline.from_dict({"version": 99}).snapshot()["replicas"] == []
    assert Timeline.from_dict({"version": 1, "replicas": [{"role": 1}]}).origin is None


def failed_event(t: Timeline, failed: list[ReplicaRow], **kw: Any) -> JobEvent:
    """The event a follow ends app ``a`` with, FAILED with its ``failed`` replicas, the
    timeline ``t`` having seen them."""
    t.observe(AppState.FAILED, failed)
    return JobEvent(
        kind=EventKind.FINISHED,
        app_id="a",
        state=AppState.FAILED,
        replicas=tuple(failed),
        timeline=t.snapshot(),
        **kw,
    )


def test_the_result_carries_the_timeline_with_its_root_cause() -> None:
    wall = Wall()
    t = Timeline(wall)
    t.observe(AppState.RUNNING, rows(AppState.RUNNING))
    wall.t += 3
    failed = [
        ReplicaRow("trainer", 0, AppState.FAILED, 3, message="Error: boom"),
        ReplicaRow("trainer", 1, AppState.CANCELLED),
    ]
    event = failed_event(t, failed, root_cause="trainer/0", root_error="RuntimeError: boom")
    back = JobEvent.from_payload(json.loads(json.dumps(event.to_payload())))
    assert back.timeline == t.snapshot()
    final = final_timeline(back)
    assert final is not None
    assert final["root_cause"] == {
        "replica": "trainer/0",
        "error": "RuntimeError: boom",
        "message": "Error: boom",
    }
    assert task_result(back, "h")["timeline"] == final
    assert merged_timeline(None, "x", "", ()) is None


def test_a_large_timeline_stays_out_of_the_events_payload() -> None:
    big = {"version": 1, "replicas": [{"role": "r", "id": 0, "events": [[0, "x" * 100]] * 400}]}
    event = JobEvent(EventKind.FINISHED, "a", AppState.SUCCEEDED, timeline=big)
    assert len(json.dumps(big)) > PAYLOAD_TIMELINE_LIMIT
    assert "timeline" not in event.to_payload()


async def test_a_follow_ends_with_the_apps_timeline(fake_cluster: Any) -> None:
    app_id = torchx_fakes.FakeScheduler().submit(
        torchx_fakes.make_app(
            lines=3, ticks=2, replicas=3, outcome="FAILED", fail_replicas="worker/1"
        )
    )
    stored: list[Any] = []

    async def checkpoint(*args: Any) -> None:
        stored.append(args)

    follower = JobFollower(
        torchx_fakes.FakeAsyncClient(),
        app_id,
        log=Log(),
        poll_interval=0.001,
        checkpoint=checkpoint,
        checkpoint_every=0.001,
    )
    event = await follower.run()
    assert event.state is AppState.FAILED and event.timeline is not None
    snap = event.timeline
    assert [r["id"] for r in snap["replicas"]] == [0, 1, 2]
    assert events(snap, "worker/1")[-1][1] == "failed"
    assert snap["app"]["events"][-1][1] == "failed"
    assert snap["root_cause"]["replica"] == "worker/1"
    assert all(len(args) == 3 for args in stored)  # the writer reads the timeline itself


def test_a_trigger_times_the_first_wait_from_the_submission() -> None:
    wall = Wall(1_700_000_100.0)
    t = Timeline(wall)
    assert t.submitted(1_700_000_000.0)
    t.observe(AppState.RUNNING, rows(AppState.RUNNING, 1))
    assert t.snapshot()["app"]["events"] == [[0.0, "queued"], [100.0, "running"]]
    assert not t.submitted(1_700_000_050.0)  # a resumed timeline keeps its own


class XComStore:
    """The XComs of one task instance, in memory, served to the trigger in place of its
    supervisor's (``compat.xcom_get_one`` / ``xcom_set``); ``unreadable``: reads fail."""

    def __init__(self, monkeypatch: Any) -> None:
        from torchx_provider import compat
        from torchx_provider.triggers.job import TorchXJobTrigger

        self.values: dict[str, Any] = {}
        self.unreadable = False
        monkeypatch.setattr(compat, "xcom_get_one", self.get_one)
        monkeypatch.setattr(compat, "xcom_set", self.set)
        monkeypatch.setattr(TorchXJobTrigger, "log", Log())

    async def get_one(self, key: str, **scope: Any) -> Any:
        if self.unreadable:
            raise ConnectionError("supervisor gone")
        return self.values.get(key)

    async def set(self, key: str, value: Any, **scope: Any) -> None:
        self.values[key] = json.loads(json.dumps(value))


async def test_a_trigger_checkpoints_the_timeline_and_a_rebuilt_one_goes_on_with_it(
    fake_cluster: Any, monkeypatch: Any
) -> None:
    from torchx_fakes import submit, trigger_args
    from torchx_provider.triggers.job import CHECKPOINT_XCOM_KEY, TorchXJobTrigger

    store = XComStore(monkeypatch).values
    app_id = submit(lines=4, ticks=2, replicas=2)
    before = {"version": 1, "origin": 1.0, "now": 2.0, "app": {"phase": "queued", "events": []}}
    before["app"]["events"] = [[0.0, "queued"], [1.0, "admitted", "admitted by cq"]]
    store[CHECKPOINT_XCOM_KEY] = checkpoint_value(app_id, {}, AppState.PENDING, None, before)
    ti = {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1}
    trigger = TorchXJobTrigger.from_args(trigger_args(app_id, task_instance=ti))
    [event] = [e async for e in trigger.run()]
    ended = JobEvent.from_payload(event.payload)
    assert ended.succeeded and ended.timeline is not None
    # the predecessor's admission stays; the rebuilt follow's own phases follow it
    app_events = [e[1] for e in ended.timeline["app"]["events"]]
    assert app_events[:2] == ["queued", "admitted"] and app_events[-1] == "succeeded"
    assert ended.timeline["origin"] == 1.0
    stored = store[CHECKPOINT_XCOM_KEY]["timeline"]
    assert [r["id"] for r in stored["replicas"]] == [0, 1]


async def test_a_trigger_resumed_while_its_app_waits_again_times_that_wait_from_its_start(
    fake_cluster: Any, monkeypatch: Any
) -> None:
    """Ran for two hours, preempted, waiting again for 10 s when the triggerer restarted: the
    resumed trigger times that wait (``queue_timeout`` 60 s, per wait) from the preemption,
    not from the submission two hours before: the app is not cancelled at the first
    describe, and runs to its end, with the preemption counted. So too where the checkpoint
    cannot be read (nothing says it never ran). An app that never ran still has its first
    wait timed from the submission."""
    import time

    from torchx_fakes import submit, trigger_args
    from torchx_provider.triggers.job import CHECKPOINT_XCOM_KEY, TorchXJobTrigger

    xcoms = XComStore(monkeypatch)
    store = xcoms.values
    submitted = time.time() - 7200
    ti = {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1}

    async def resumed(app_events: list[list[Any]]) -> tuple[str, JobEvent]:
        app_id = submit(pending=20, ticks=3, replicas=1)
        timeline = {"version": 1, "origin": submitted, "now": 7190.0}
        timeline["app"] = {"phase": "queued", "events": app_events}
        store[CHECKPOINT_XCOM_KEY] = checkpoint_value(app_id, {}, AppState.PENDING, None, timeline)
        args = trigger_args(app_id, task_instance=ti, queue_timeout=60.0, waiting_since=submitted)
        trigger = TorchXJobTrigger.from_args(args)
        [event] = [e async for e in trigger.run()]
        return app_id, JobEvent.from_payload(event.payload)

    ran = [[0.0, "queued"], [5.0, "running"], [7190.0, "preempted"], [7190.0, "queued"]]
    app_id, ended = await resumed(ran)
    assert ended.succeeded, ended.message
    assert app_id not in fake_cluster.cancelled
    # the preemption the previous follow saw is still counted (this backend counts none)
    assert ended.preemptions == 1 and ended.timeline is not None
    assert ended.timeline["app"]["preemptions"] == 1
    xcoms.unreadable = True
    app_id, ended = await resumed(ran)
    assert ended.succeeded, ended.message
    xcoms.unreadable = False
    app_id, ended = await resumed([[0.0, "queued"]])  # it never ran: waited two hours
    assert ended.kind is EventKind.TIMEOUT, ended.message
    assert app_id in fake_cluster.cancelled


def test_a_warning_about_a_running_app_is_no_reason_to_wait() -> None:
    t = Timeline(Wall())
    t.observe(AppState.RUNNING, rows(AppState.RUNNING))
    assert not t.notice("worker/1 failed with no restarts left; stopping the others")
    assert t.snapshot()["waits"] == []


async def test_a_follow_on_the_worker_publishes_its_checkpoint_with_the_timeline(
    fake_cluster: Any,
) -> None:
    from types import SimpleNamespace

    from torchx_provider.operators.finishing import live_checkpoint
    from torchx_provider.operators.following import follow_here
    from torchx_provider.operators.options import Following, Lifecycle

    app_id = torchx_fakes.FakeScheduler().submit(
        torchx_fakes.make_app(lines=3, ticks=2, replicas=2)
    )
    pushed: list[dict[str, Any]] = []
    target = SimpleNamespace(create_async_client=torchx_fakes.FakeAsyncClient)
    following = Following(poll_interval=0.01)
    event = await follow_here(
        target,  # type: ignore[arg-type]
        app_id,
        following,
        Lifecycle(),
        Log(),
        publish=lambda value: pushed.append(json.loads(json.dumps(value))),
    )
    assert event.succeeded and pushed
    assert pushed[-1]["app_id"] == app_id
    assert pushed[-1]["timeline"]["app"]["events"][-1][1] == "succeeded"

    class Refusing:
        def xcom_push(self, **kw: Any) -> None:
            raise RuntimeError("no supervisor")

    log = Log()
    publish = live_checkpoint(Refusing(), log)
    publish({"app_id": "a"})
    publish({"app_id": "a"})
    assert sum("could not store" in line for line in log.lines) == 1


class _TaskInstance:
    def __init__(self, try_number: int) -> None:
        self.try_number = try_number
        self.xcoms: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value


class _Store:
    """Airflow's ``task_state_store``, as a try sees it: JSON values by key."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.kept: dict[str, Any] = {}

    def set(self, key: str, value: Any) -> None:
        if self.refuse:
            raise RuntimeError("the API server refused it")
        self.kept[key] = json.loads(json.dumps(value))


def test_each_try_keeps_its_app_for_the_view_whatever_its_end() -> None:
    """A failed try keeps what the view shows of its app (the XComs it reads) under its own
    try in the task state store, as a succeeded one does: the next try clears the XComs,
    not these. A store that refuses it does not change the try's outcome."""
    import pytest

    from torchx_provider.errors import AppFailedError
    from torchx_provider.operators.finishing import finish
    from torchx_provider.operators.options import Lifecycle
    from torchx_provider.plugins.api import TRY_STORE_PREFIX

    failed = [ReplicaRow("trainer", 0, AppState.FAILED, 1, message="Error: boom")]
    event = failed_event(Timeline(Wall()), failed)
    never: Any = None  # no scheduler is opened: a failed app is kept (delete_succeeded)
    for store, log in ((_Store(), Log()), (_Store(refuse=True), Log())):
        ti = _TaskInstance(try_number=3)
        with pytest.raises(AppFailedError):
            finish(ti, event, "h", Lifecycle(), (None, never), log, store=store)
        if store.refuse:
            assert store.kept == {} and "could not keep try 3's app" in log.lines[-1]
            continue
        kept = store.kept[f"{TRY_STORE_PREFIX}3"]
        assert kept == {
            "app_id": "a",
            "final_state": "FAILED",
            "replicas": json.loads(json.dumps(ti.xcoms["replicas"])),
            "timeline": json.loads(json.dumps(ti.xcoms["timeline"])),
        }
