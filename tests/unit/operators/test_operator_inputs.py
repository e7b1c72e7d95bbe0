"""Operator inputs: option objects, app sources, cfg handling, provider metadata."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import torchx_fakes
from torchx_provider.errors import (
    AppFailedError,
    AppLostError,
    AppTimeoutError,
    InvalidAppError,
    InvalidOptionError,
)
from torchx_provider.operators import (
    Following,
    Lifecycle,
    OnFinishAction,
    TorchXDockerOperator,
    TorchXKubernetesOperator,
    TorchXMCADOperator,
    TorchXOperator,
)
from torchx_provider.operators.app_source import resolve_app
from torchx_provider.provider_info import get_provider_info
from torchx_provider.specs.serialization import to_dict


class _TaskInstance:
    """What the operator reads of its task instance, and where its XCom pushes go."""

    dag_id, task_id, run_id, map_index, start_date = "d", "t", "r", -1, None

    def __init__(self, try_number: int = 1, pushed: dict[str, Any] | None = None) -> None:
        self.try_number = try_number
        self.pushed = {} if pushed is None else pushed

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def wrong(value: object) -> Any:
    """``value``, given on purpose where its type is not the one declared."""
    return value


APP = {
    "name": "hello",
    "roles": [{"name": "echo", "image": "busybox", "entrypoint": "echo", "args": ["hi"]}],
}


def test_lifecycle_and_following_are_checked() -> None:
    lc = Lifecycle.build(on_finish_action="DELETE", on_kill_action="keep")
    assert lc.on_finish_action == OnFinishAction.DELETE and lc.deletes(False)
    assert Lifecycle().deletes(True) and not Lifecycle().deletes(False)
    with pytest.raises(InvalidOptionError, match="on_finish_action='remove' is not one of"):
        Lifecycle.build(on_finish_action="remove")
    with pytest.raises(InvalidOptionError, match="poll_interval must be a positive"):
        Following.build(poll_interval=0)
    assert Following.build(log_replicas="trainer/0, ps").log_replicas == ("trainer/0", "ps")
    assert Following.build(log_replicas=[]).log_replicas == ()


def test_app_sources(tmp_path: Path) -> None:
    (tmp_path / "app.yaml").write_text(
        "name: '{{ x }}'\nroles:\n  - name: r\n    image: busybox\n    entrypoint: echo\n"
    )
    app = resolve_app(
        "app.yaml",
        search_paths=[str(tmp_path)],
        render_text=lambda t: t.replace("{{ x }}", "rendered"),
    )
    assert app.name == "rendered"
    (tmp_path / "app.json").write_text(json.dumps(APP))
    assert resolve_app(str(tmp_path / "app.json")).name == "hello"
    assert resolve_app(APP, app_name="renamed").name == "renamed"
    assert resolve_app(json.dumps(APP)).roles[0].name == "echo"
    ddp = resolve_app("dist.ddp", {"j": "2x2", "script": "train.py"})
    assert ddp.roles[0].num_replicas == 2


@pytest.mark.parametrize(
    ("source", "args", "message"),
    [
        ("dist.nope", {}, "unknown component 'dist.nope'"),
        ("dist.ddp", {"bogus": 1}, "bad arguments for component 'dist.ddp'"),
        (APP, {"j": "1"}, "app_args only apply to a component name"),
        ("missing.yaml", None, "app file 'missing.yaml' not found"),
        ({"name": "x", "roles": [{"name": "r", "num_replica": 2}]}, None, "num_replica"),
    ],
)
def test_bad_app_sources(source: Any, args: Any, message: str) -> None:
    with pytest.raises(InvalidAppError, match=message):
        resolve_app(source, args)


def test_appdef_inputs_become_templatable_dicts() -> None:
    app = torchx_fakes.make_app()
    op = TorchXOperator(task_id="t", app=app, scheduler="fake", deferrable=False)
    assert op.app == to_dict(app)
    assert {"app", "app_args", "cfg", "app_name"} <= set(op.template_fields)


def test_dag_facing_classes_fix_their_scheduler() -> None:
    assert TorchXKubernetesOperator(task_id="a", app=APP).scheduler == "kubernetes"
    assert TorchXMCADOperator(task_id="b", app=APP).scheduler == "kubernetes_mcad"
    assert TorchXDockerOperator(task_id="c", app=APP).scheduler == "local_docker"


def test_deferrable_defaults_to_the_airflow_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    assert TorchXOperator(task_id="t", app=APP, scheduler="fake").following.deferrable is True


def test_cfg_string_form_and_connection_defaults(fake_cluster: Any) -> None:
    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.operators.submission import merge_cfg

    opts = torchx_fakes.FakeScheduler().run_opts()
    row = torchx_fakes.FAKE_BACKEND
    target = BackendTarget("fake", cfg_defaults={"queue": "cpu", "namespace": "ml"})
    merged = merge_cfg("queue=gpu,priority=3", opts, target, row)
    assert merged == {"queue": "gpu", "namespace": "ml", "priority": 3}
    with pytest.raises(InvalidOptionError, match=r"unknown run option.*queu"):
        merge_cfg("queu=x", opts, target, row)


def test_provider_info_matches_airflows_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    import airflow

    schema_path = Path(airflow.__file__).parent / "provider_info.schema.json"
    info = get_provider_info()
    jsonschema.validate(info, json.loads(schema_path.read_text()))
    assert {c["connection-type"] for c in info["connection-types"]} == {
        "torchx_kubernetes",
        "torchx_docker",
    }
    assert info["extra-links"] == ["torchx_provider.links.TorchXJobLink"]
    streams = info["config"]["torchx"]["options"]["max_log_streams"]
    from torchx_provider.schedulers.streams import MAX_STREAMS

    assert streams["default"] == str(MAX_STREAMS) and streams["type"] == "integer"


def test_importing_the_operators_loads_no_client_library() -> None:
    loaded = torchx_fakes.modules_loaded_by("import torchx_provider.operators")
    clients = sorted(
        m for m in loaded if m.split(".")[0] in ("kubernetes", "kubernetes_asyncio", "docker")
    )
    assert clients == []


def test_on_kill_cancels_unless_keep(fake_cluster: Any) -> None:
    scheduler = torchx_fakes.FakeScheduler()
    context = torchx_fakes.task_context(object())
    op = TorchXOperator(task_id="t", app=APP, scheduler="fake")
    op.on_kill()  # nothing submitted yet: nothing to do
    app_id, _ = op.submit_or_reattach(torchx_fakes.plan_for(scheduler, run_id="r1"), context)
    op.on_kill()
    assert fake_cluster.cancelled == [app_id]

    op = TorchXOperator(task_id="t", app=APP, scheduler="fake", on_kill_action="keep")
    kept, _ = op.submit_or_reattach(torchx_fakes.plan_for(scheduler, run_id="r2"), context)
    op.on_kill()
    assert kept != app_id and kept not in fake_cluster.cancelled


def test_a_kill_on_the_worker_whose_cancel_deletes_the_app_is_said_as_this_tasks(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Followed on the worker, killed there (``on_kill`` from Airflow's SIGTERM handler) with
    a cancel that deletes the app: the try ends saying this task cancelled it, not that
    something else removed it."""
    import threading

    from torchx_provider.errors import AppCancelledError

    monkeypatch.setattr(
        torchx_fakes.FakeScheduler, "_cancel_existing", torchx_fakes.FakeScheduler._delete_existing
    )

    TI = _TaskInstance

    op = TorchXOperator(
        task_id="t",
        app=torchx_fakes.make_app(ticks=1_000_000),
        scheduler="fake",
        deferrable=False,
        poll_interval=0.01,
    )
    ended: list[BaseException] = []

    def run() -> None:
        try:
            op.execute(torchx_fakes.task_context(TI()))
        except BaseException as e:
            ended.append(e)

    worker = threading.Thread(target=run)
    worker.start()
    for _ in range(500):
        if fake_cluster.apps and any(a.ticks for a in fake_cluster.apps.values()):
            break
        threading.Event().wait(0.01)
    op.on_kill()
    worker.join(timeout=20)
    assert not worker.is_alive()
    assert len(ended) == 1 and type(ended[0]) is AppCancelledError, ended
    assert "cancelled by this task as it was killed" in str(ended[0])
    assert fake_cluster.deleted == [op._app_id]


def test_a_kill_while_the_new_handle_is_stored_cancels_the_app(fake_cluster: Any) -> None:
    """The app exists once ``schedule`` returned: a kill while its handle is being written
    to ``task_state_store`` (a call to Airflow's API server) cancels it."""
    op = TorchXOperator(task_id="t", app=APP, scheduler="fake")

    class KilledWhileStoring:
        def get(self, key: str) -> Any:
            return None

        def set(self, key: str, value: Any) -> None:
            op.on_kill()  # Airflow's SIGTERM handler, in the thread that is storing

    context = torchx_fakes.task_context(object(), task_state_store=KilledWhileStoring())
    plan = torchx_fakes.plan_for(torchx_fakes.FakeScheduler())
    app_id, _ = op.submit_or_reattach(plan, context)
    assert fake_cluster.cancelled == [app_id]


def test_job_url_from_the_backend_or_the_connection_template(fake_cluster: Any) -> None:
    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.operators.submission import SubmissionPlan, job_url
    from torchx_provider.schedulers.labels import TaskInstanceKey

    scheduler = torchx_fakes.FakeScheduler()
    app = torchx_fakes.make_app()
    app_id = scheduler.submit(app)
    target = BackendTarget(
        "fake",
        client_kwargs={"namespace": "ml"},
        job_url_template="https://ui.example/{namespace}/{app_name}/{app_id}",
    )
    plan = SubmissionPlan(
        target, scheduler, app, {}, scheduler.submit_dryrun(app), TaskInstanceKey("d", "t", "r")
    )
    assert job_url(plan, app_id, "") == f"https://fake.example/apps/{app_id}"  # backend's own
    assert job_url(plan, "gone-1", "") == "https://ui.example/ml/echo/gone-1"  # template


def test_a_retry_searches_every_namespace_the_tasks_jobs_may_live_in(fake_cluster: Any) -> None:
    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.operators.submission import SubmissionPlan, live_apps
    from torchx_provider.schedulers.labels import TaskInstanceKey

    scheduler = torchx_fakes.FakeScheduler()
    app = torchx_fakes.make_app(ticks=100)
    key = TaskInstanceKey("d", "t", "r")
    app_id = scheduler.schedule(scheduler.submit_dryrun(app, ti_key=key))

    def plan(cfg: dict[str, Any], conn_namespace: str | None) -> SubmissionPlan:
        kwargs = {"namespace": conn_namespace} if conn_namespace else {}
        target = BackendTarget("fake", client_kwargs=kwargs)
        return SubmissionPlan(target, scheduler, app, cfg, scheduler.submit_dryrun(app), key)

    import logging

    log = logging.getLogger("test")
    assert live_apps(plan({"namespace": "team"}, "ml"), None, log).resumable == [app_id]
    assert live_apps(plan({"namespace": "ml"}, "ml"), None, log).resumable == [app_id]
    assert live_apps(plan({}, None), None, log).resumable == [app_id]
    assert fake_cluster.searched == [["team", "ml"], ["ml"], []]


def test_the_rows_operator_run_options_fill_what_nobody_set(fake_cluster: Any) -> None:
    import dataclasses

    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.operators.submission import merge_cfg

    opts = torchx_fakes.FakeScheduler().run_opts()
    row = dataclasses.replace(torchx_fakes.FAKE_BACKEND, operator_run_options={"priority": 7})
    none = BackendTarget("fake")
    assert merge_cfg(None, opts, none, row) == {"priority": 7}
    assert merge_cfg({"priority": 1}, opts, none, row) == {"priority": 1}  # the task's wins
    conn = BackendTarget("fake", cfg_defaults={"priority": 2})
    assert merge_cfg(None, opts, conn, row) == {"priority": 2}  # so does the connection's
    with pytest.raises(InvalidOptionError, match="cfg must be a dict"):
        merge_cfg(wrong(3), opts, none, row)


def test_airflows_deferral_timeout_cancels_the_job_before_failing(fake_cluster: Any) -> None:
    """The backstop: Airflow's ``defer(timeout=...)`` fired before the trigger's deadline."""
    try:
        from airflow.sdk.exceptions import TaskDeferralTimeout
    except ImportError:  # Airflow 3.1
        from airflow.exceptions import TaskDeferralTimeout  # type: ignore[no-redef]

    scheduler = torchx_fakes.FakeScheduler()
    app_id = scheduler.submit(torchx_fakes.make_app(ticks=100))

    class TI:
        task_id, map_index = "t", -1

        def xcom_pull(self, *, task_ids: str, key: str, map_indexes: int) -> Any:
            assert (task_ids, key, map_indexes) == ("t", "app_handle", -1)
            return f"fake:///{app_id}"

    timeout = ("__fail__", {"error": "Trigger timeout"})
    kept = TorchXOperator(task_id="t", app=APP, scheduler="fake", on_kill_action="keep")
    with pytest.raises(AppTimeoutError) as e:
        kept.resume_execution(*timeout, torchx_fakes.task_context(TI()))
    assert isinstance(e.value.__cause__, TaskDeferralTimeout) and e.value.app_id == app_id
    assert fake_cluster.cancelled == []
    op = TorchXOperator(task_id="t", app=APP, scheduler="fake")
    with pytest.raises(AppTimeoutError):
        op.resume_execution(*timeout, torchx_fakes.task_context(TI()))
    assert fake_cluster.cancelled == [app_id]
    # the trigger failed: the app may still run, a retry reattaches
    with pytest.raises(AppLostError, match="Trigger failure") as lost:
        op.resume_execution(
            "__fail__", {"error": "Trigger failure"}, torchx_fakes.task_context(TI())
        )
    assert lost.value.app_id == app_id and not isinstance(lost.value, AppFailedError)
    assert fake_cluster.cancelled == [app_id]  # not cancelled again


def test_outage_budget_and_follow_timeout_are_checked() -> None:
    op = TorchXOperator(
        task_id="t", app=APP, scheduler="fake", outage_budget=30, follow_timeout=timedelta(hours=1)
    )
    assert (op.following.outage_budget, op.following.follow_timeout) == (30.0, 3600.0)
    assert TorchXOperator(task_id="u", app=APP, scheduler="fake").following.outage_budget == 600.0
    for name in ("outage_budget", "follow_timeout"):
        with pytest.raises(InvalidOptionError, match=f"{name} must be a positive"):
            TorchXOperator(task_id="v", app=APP, scheduler="fake", **{name: 0})


def test_a_cleared_task_does_not_reattach_to_the_job_of_a_try_before_the_clear(
    fake_cluster: Any,
) -> None:
    """Airflow's rule: clearing sets max_tries to the current try plus ``retries``, so the
    first try since the clear is ``max_tries - retries + 1``. Jobs of earlier tries are
    superseded (the user asked for a new run); those of later tries are retries' to resume."""
    import logging

    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.operators.submission import (
        SubmissionPlan,
        first_try_since_clear,
        live_apps,
    )
    from torchx_provider.schedulers.labels import TaskInstanceKey

    scheduler = torchx_fakes.FakeScheduler()
    app = torchx_fakes.make_app(ticks=100)
    before = scheduler.schedule(
        scheduler.submit_dryrun(app, ti_key=TaskInstanceKey("d", "t", "r", try_number=1))
    )
    key = TaskInstanceKey("d", "t", "r", try_number=2)
    plan = SubmissionPlan(
        BackendTarget("fake"), scheduler, app, {}, scheduler.submit_dryrun(app), key
    )
    log = logging.getLogger("test")

    class TI:
        try_number, max_tries = 2, 1  # retries=1, never cleared: try 2 is a retry

    assert first_try_since_clear(TI, 1) == 1
    assert live_apps(plan, None, log, first_try_since_clear(TI, 1)).resumable == [before]
    TI.max_tries = 2  # cleared during try 1: max_tries = 1 + retries
    apps = live_apps(plan, None, log, first_try_since_clear(TI, 1))
    assert (apps.resumable, apps.superseded) == ([], [before])
    assert first_try_since_clear(object(), 1) == 1  # a task instance that does not say


def test_an_event_about_another_app_is_set_aside_and_the_try_defers_again(
    fake_cluster: Any,
) -> None:
    """A trigger of a try before a clear can still be running in a triggerer and fire into
    the new try's deferral: its event names the earlier app, so the new try follows its own
    app again instead of ending with the earlier one's outcome."""
    try:
        from airflow.sdk.exceptions import TaskDeferred
    except ImportError:  # Airflow 3.1
        from airflow.exceptions import TaskDeferred  # type: ignore[no-redef]

    from torchx_provider.specs import AppState
    from torchx_provider.triggers.events import EventKind, JobEvent

    pushed: dict[str, Any] = {}

    def TI() -> _TaskInstance:
        return _TaskInstance(try_number=2, pushed=pushed)

    def event(app_id: str, state: AppState) -> dict[str, Any]:
        return JobEvent(EventKind.FINISHED, app_id, state).to_payload()

    op = TorchXOperator(task_id="t", app=APP, scheduler="fake")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute_complete(
            torchx_fakes.task_context(TI()),
            event("earlier-try-app", AppState.CANCELLED),
            app_id="this-try-app",
        )
    again = deferred.value
    assert again.method_name == "execute_complete"
    assert again.kwargs == {"app_id": "this-try-app"}
    assert again.trigger.serialize()[1]["app_id"] == "this-try-app"
    assert pushed == {}  # nothing of the earlier app's outcome recorded
    result = op.execute_complete(
        torchx_fakes.task_context(TI()),
        event("this-try-app", AppState.SUCCEEDED),
        app_id="this-try-app",
    )
    assert result["state"] == "SUCCEEDED" and pushed["final_state"] == "SUCCEEDED"
    # an event from before the app id rode along (a deferral of an older version) is kept
    op.execute_complete(
        torchx_fakes.task_context(TI()),
        event("any-app", AppState.SUCCEEDED),
    )


def test_a_follow_refused_as_configured_fails_the_task_as_a_configuration_error(
    fake_cluster: Any,
) -> None:
    """Credentials, permissions and certificates do not heal by waiting: the task fails with
    AppConfigurationError (which a retry policy tells apart); a lost backend stays a plain
    failure that a retry may heal."""
    from torchx_provider.errors import AppConfigurationError
    from torchx_provider.specs import AppState
    from torchx_provider.triggers.events import ErrorKind, EventKind, JobEvent

    TI = _TaskInstance

    op = TorchXOperator(task_id="t", app=APP, scheduler="fake")
    refused = JobEvent(
        EventKind.ERROR, "a", AppState.RUNNING, "jobs is forbidden", error=ErrorKind.CONFIGURATION
    )
    with pytest.raises(AppConfigurationError, match="as configured: jobs is forbidden") as e:
        op.execute_complete(torchx_fakes.task_context(TI()), refused.to_payload(), app_id="a")
    assert e.value.app_id == "a"
    lost = JobEvent(EventKind.ERROR, "a", AppState.RUNNING, "backend unreachable for 600s")
    with pytest.raises(AppLostError, match="lost track") as e2:
        op.execute_complete(torchx_fakes.task_context(TI()), lost.to_payload(), app_id="a")
    assert (e2.value.app_id, e2.value.state) == ("a", "RUNNING")


def test_a_timeout_names_the_option_that_set_the_deadline_and_its_value(
    fake_cluster: Any,
) -> None:
    """The deferral carries which limit is the earlier (``follow_timeout=3s`` here, not the
    hour of ``execution_timeout``), and the timeout's error names it."""
    from datetime import timedelta

    try:
        from airflow.sdk.exceptions import TaskDeferred
    except ImportError:  # Airflow 3.1
        from airflow.exceptions import TaskDeferred  # type: ignore[no-redef]

    from torchx_provider.errors import AppTimeoutError
    from torchx_provider.specs import AppState
    from torchx_provider.triggers.events import EventKind, JobEvent

    TI = _TaskInstance

    op = TorchXOperator(
        task_id="t",
        app=APP,
        scheduler="fake",
        deferrable=True,
        follow_timeout=3,
        execution_timeout=timedelta(hours=1),
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(torchx_fakes.task_context(TI()))
    kwargs = deferred.value.kwargs
    assert kwargs["deadline_cause"] == "follow_timeout=3s", kwargs
    timeout = JobEvent(
        EventKind.TIMEOUT, kwargs["app_id"], AppState.RUNNING, "the app was cancelled"
    )
    with pytest.raises(AppTimeoutError) as e:
        op.execute_complete(torchx_fakes.task_context(TI()), timeout.to_payload(), **kwargs)
    assert f"TorchX app {kwargs['app_id']} timed out (follow_timeout=3s) in state RUNNING" in str(
        e.value
    )


# ---------------------------------------------------------------------------------------------
# Bad inputs: one table, each refused before anything is submitted, naming the field


def _app_with(**role: Any) -> dict[str, Any]:
    """``APP`` with role 0's fields changed."""
    return {**APP, "roles": [{**APP["roles"][0], **role}]}


class _TI:
    dag_id, task_id, run_id, map_index, try_number = "dag", "t", "run", -1, 1


def _component(name: str, args: Any) -> dict[str, Any]:
    return {"app": name, "app_args": args}


#: (row id, operator arguments, the field the failure names)
BAD_TASK_INPUTS: list[tuple[str, dict[str, Any], str]] = [
    ("app_name object", {"app_name": object()}, "app_name"),
    ("app_name number", {"app_name": 42}, "app_name"),
    ("app_name NUL", {"app_name": "a\x00b"}, "app_name"),
    ("app_args object", _component("utils.echo", object()), "app_args"),
    ("app_args number", _component("utils.echo", 5), "app_args"),
    ("app_args key not a string", _component("utils.echo", {1: "x"}), "app_args"),
    ("app_args list for a string", _component("utils.echo", {"msg": ["a"]}), "app_args.msg"),
    ("app_args positional wrong", _component("utils.echo", ["hi", 2.5]), "app_args.image"),
    ("app_args *args not a list", _component("utils.sh", {"args": 5}), "app_args.args"),
    ("app_args *args item a number", _component("utils.sh", {"args": ["a", 1]}), "app_args.args"),
    (
        "app_args cpu -1",
        _component("utils.sh", {"args": ["a"], "cpu": -1}),
        "roles[0].resource.cpu",
    ),
    ("env value NUL", {"app": _app_with(env={"A": "s3cr\x00t"})}, "roles[0].env.A"),
    ("env name with =", {"app": _app_with(env={"A=B": "1"})}, "roles[0].env"),
    ("cpu -1", {"app": _app_with(resource={"cpu": -1, "memMB": 64})}, "roles[0].resource.cpu"),
    ("args item NUL", {"app": _app_with(args=["h\x00i"])}, "roles[0].args[0]"),
    ("image NUL", {"app": _app_with(image="busy\x00box")}, "roles[0].image"),
]


@pytest.mark.parametrize(
    ("kwargs", "field"), [r[1:] for r in BAD_TASK_INPUTS], ids=[r[0] for r in BAD_TASK_INPUTS]
)
def test_bad_task_inputs_fail_at_once_naming_the_field(
    fake_cluster: Any, kwargs: dict[str, Any], field: str
) -> None:
    """Each fails the task without retries (Airflow's fail exception), before anything is
    submitted, with one message that starts with the field."""
    from torchx_provider.compat import fail_exception

    op = TorchXOperator(task_id="t", scheduler="fake", **{"app": APP, **kwargs})
    with pytest.raises(fail_exception()) as info:
        op.prepare(torchx_fakes.task_context(_TI()))
    message = str(info.value)
    assert message.startswith(f"{field}: ") and message.endswith("(nothing was submitted)")
    assert "s3cr" not in message  # an env value is never shown
    assert fake_cluster.submitted == []


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"wait_for_completion": "false"}, "wait_for_completion"),
        ({"reattach": 0}, "reattach"),
        ({"deferrable": "yes"}, "deferrable"),
        ({"session_name": "team/a"}, "session_name"),
        ({"session_name": "a b"}, "session_name"),
        ({"session_name": 5}, "session_name"),
        ({"poll_interval": 1e12}, "poll_interval"),
        ({"outage_budget": 10**10}, "outage_budget"),
        ({"follow_timeout": timedelta(days=365 * 20)}, "follow_timeout"),
        ({"log_replicas": 5}, "log_replicas"),
        ({"log_replicas": ["trainer", 0]}, "log_replicas"),
    ],
)
def test_bad_operator_options_are_refused_when_the_dag_is_parsed(
    kwargs: dict[str, Any], option: str
) -> None:
    with pytest.raises(InvalidOptionError) as info:
        TorchXOperator(task_id="t", app=APP, scheduler="fake", **kwargs)
    assert info.value.option == option and str(info.value).startswith(option)
