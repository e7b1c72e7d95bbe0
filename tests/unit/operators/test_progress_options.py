"""``stall_timeout``, ``straggler_after`` and ``progress_pattern``: checked when the DAG is
parsed, the app's pattern settled at submission, carried to the trigger, and the worker's
follow stopped by a stall on the fake backend."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import torchx_fakes
from torchx_provider.components import dist
from torchx_provider.errors import AppStalledError, InfrastructureError, InvalidOptionError
from torchx_provider.operators import Following, TorchXOperator
from torchx_provider.operators.options import progress_following, split_progress_pattern
from torchx_provider.specs.api import AppState
from torchx_provider.specs.metadata import PROGRESS_METADATA_KEY
from torchx_provider.triggers.events import ErrorKind, EventKind, JobEvent
from torchx_provider.triggers.job import JobTriggerArgs, TorchXJobTrigger, checkpoint_value
from torchx_provider.triggers.progress import ProgressPattern

APP = {
    "name": "hello",
    "roles": [{"name": "echo", "image": "busybox", "entrypoint": "echo", "args": ["hi"]}],
}


def test_the_options_are_checked_when_the_dag_is_parsed() -> None:
    f = Following.build(
        stall_timeout=timedelta(minutes=10), straggler_after=90, progress_pattern=r"step (\d+)"
    )
    assert (f.stall_timeout, f.straggler_after, f.progress_pattern) == (600.0, 90.0, r"step (\d+)")
    assert Following.build().stall_timeout is None
    with pytest.raises(InvalidOptionError, match="stall_timeout must be a positive"):
        TorchXOperator(task_id="t", app=APP, scheduler="fake", stall_timeout=0)
    with pytest.raises(InvalidOptionError, match="straggler_after must be a positive"):
        TorchXOperator(task_id="t", app=APP, scheduler="fake", straggler_after=-5)
    with pytest.raises(InvalidOptionError, match="progress_pattern='step' has no group"):
        TorchXOperator(task_id="t", app=APP, scheduler="fake", progress_pattern="step")


def test_the_pattern_comes_from_the_operator_then_cfg_then_the_app() -> None:
    app = dist.ddp(script="train.py", j="2x2")
    assert app.metadata[PROGRESS_METADATA_KEY] == dist.DDP_PROGRESS_PATTERN
    assert ProgressPattern.parse(dist.DDP_PROGRESS_PATTERN).step("rank=1 step=3 loss=0.4") == 3
    assert progress_following(Following(), None, app).progress_pattern == dist.DDP_PROGRESS_PATTERN
    assert progress_following(Following(), "s=(\\d+)", app).progress_pattern == "s=(\\d+)"
    mine = Following(progress_pattern="it (\\d+)")
    assert progress_following(mine, "s=(\\d+)", app) is mine
    assert progress_following(Following(), None, object()).progress_pattern is None
    cfg, pattern = split_progress_pattern({"queue": "q", "progress_pattern": r"step (\d+)"})
    assert (cfg, pattern) == ({"queue": "q"}, r"step (\d+)")
    with pytest.raises(InvalidOptionError, match=r"cfg\['progress_pattern'\]"):
        split_progress_pattern({"progress_pattern": "("})


def _ti() -> Any:
    class TI:
        dag_id, task_id, run_id, map_index, try_number, start_date = "d", "t", "r", -1, 1, None

        def xcom_push(self, key: str, value: Any) -> None:
            self.pushed = getattr(self, "pushed", {})
            self.pushed[key] = value

    return TI()


def test_a_deferred_task_hands_the_settled_options_to_its_trigger(fake_cluster: Any) -> None:
    try:
        from airflow.sdk.exceptions import TaskDeferred
    except ImportError:  # Airflow 3.1
        from airflow.exceptions import TaskDeferred  # type: ignore[no-redef]

    op = TorchXOperator(
        task_id="t",
        app=APP,
        scheduler="fake",
        cfg={"queue": "q", "progress_pattern": r"epoch \d+ step (\d+)"},
        deferrable=True,
        stall_timeout=timedelta(minutes=30),
        straggler_after=120,
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(torchx_fakes.task_context(_ti()))
    trigger = deferred.value.trigger
    assert isinstance(trigger, TorchXJobTrigger)
    args = trigger.args
    assert (args.stall_timeout, args.straggler_after) == (1800.0, 120.0)
    assert args.progress_pattern == r"epoch \d+ step (\d+)"
    [app_id] = fake_cluster.submitted
    assert fake_cluster.apps[app_id].cfg["queue"] == "q"
    assert "progress_pattern" not in fake_cluster.apps[app_id].cfg
    # a stored trigger row is rebuilt as it was
    assert JobTriggerArgs.from_kwargs(trigger.serialize()[1]) == args
    # the pattern rides along for a deferral again, which has no app to read it from
    assert deferred.value.kwargs["progress_pattern"] == r"epoch \d+ step (\d+)"


def test_a_stall_fails_a_deferred_task_with_app_stalled_error(fake_cluster: Any) -> None:
    op = TorchXOperator(task_id="t", app=APP, scheduler="fake", stall_timeout=60)
    event = JobEvent(
        EventKind.TIMEOUT,
        "app-1",
        AppState.RUNNING,
        "no replica of app app-1 moved for 61s (stall_timeout 60s); stopped first: echo/0 "
        "(quiet 70s); the app was cancelled",
        error=ErrorKind.STALL,
        stalled=("echo/0",),
        root_cause="echo/0",
        progress={"echo/0": {"last_line": "step 3", "last_line_at": "", "step": 3}},
    )
    ti = _ti()
    ti.xcom_pull = lambda **kw: None
    with pytest.raises(AppStalledError) as e:
        op.execute_complete(torchx_fakes.task_context(ti), event.to_payload(), app_id="app-1")
    assert isinstance(e.value, InfrastructureError) and e.value.stalled == ("echo/0",)
    assert "stopped first: echo/0" in str(e.value)


def test_the_checkpoint_holds_the_progress() -> None:
    value = checkpoint_value("a", {}, AppState.RUNNING, {"t/0": {"step": 4, "last_line": "x"}})
    assert value["progress"] == {"t/0": {"step": 4, "last_line": "x"}}
    assert "progress" not in checkpoint_value("a", {})


def test_the_retry_policy_retries_a_stall() -> None:
    sdk = pytest.importorskip("airflow.sdk")
    if not hasattr(sdk, "ExceptionRetryPolicy"):
        pytest.skip("Airflow before 3.3 has no retry policies")
    from airflow.sdk import RetryAction

    from torchx_provider.retry import RETRY_INFRASTRUCTURE_ONLY

    stalled = AppStalledError("hung", app_id="a", state="RUNNING", stalled=("t/1",))
    action = RETRY_INFRASTRUCTURE_ONLY.evaluate(stalled, try_number=1, max_tries=4).action
    assert action == RetryAction.DEFAULT


async def test_a_rebuilt_trigger_keeps_the_progress_its_predecessor_stored(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deferred path: a trigger rebuilt on another triggerer reads the progress from the
    checkpoint XCom, keeps a step no new line changed, and stores the progress again."""
    import json

    from task_log import TaskLog
    from torchx_provider import compat
    from torchx_provider.schedulers.logs import LogCursor, advance
    from torchx_provider.triggers.job import CHECKPOINT_XCOM_KEY

    store: dict[str, Any] = {}

    async def aget_one(key: str, **scope: Any) -> Any:
        return store.get(key)

    async def aset(key: str, value: Any, **scope: Any) -> None:
        store[key] = json.loads(json.dumps(value))

    monkeypatch.setattr(compat, "xcom_get_one", aget_one)
    monkeypatch.setattr(compat, "xcom_set", aset)
    app_id = torchx_fakes.submit(lines=6, ticks=3, replicas=1)
    app = fake_cluster.apps[app_id]
    app.ticks = 2  # the predecessor forwarded lines 0-3
    _, cursor = advance(LogCursor(), app.lines("worker", 0))
    app.ticks = 0
    before = {"worker/0": {"last_line": "step 7 done", "last_line_at": "", "step": 7}}
    store[CHECKPOINT_XCOM_KEY] = checkpoint_value(
        app_id, {"worker/0": cursor}, AppState.RUNNING, before
    )
    ti = {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1}
    args = torchx_fakes.trigger_args(
        app_id, task_instance=ti, progress_pattern=r"step (\d+)", stall_timeout=3600.0
    )
    monkeypatch.setattr(TorchXJobTrigger, "log", TaskLog())
    [event] = [e async for e in TorchXJobTrigger.from_args(args).run()]
    done = JobEvent.from_payload(event.payload)
    assert done.succeeded, done.message
    assert done.progress["worker/0"]["step"] == 7  # no new line reported a step
    assert done.progress["worker/0"]["last_line"] == "worker 0 line 5"
    assert store[CHECKPOINT_XCOM_KEY]["progress"]["worker/0"]["step"] == 7
