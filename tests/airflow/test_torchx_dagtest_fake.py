"""``dag.test()`` runs of the operators on the in-memory ``fake`` backend: the Airflow face's
own logic (XComs, templating, reattach, bad inputs) with real Airflow, without a cluster."""

from __future__ import annotations

import re
from typing import Any

import pytest
from torchx_airflow_helpers import crash_after_submit, rendered_fields, task_instances, xcoms

pytestmark = pytest.mark.airflow

HEADER = """
import datetime
import torchx_fakes
from airflow.sdk import DAG
from torchx_provider.operators import TorchXOperator

ARGS = {"schedule": None, "start_date": datetime.datetime(2024, 1, 1)}
"""


def fake_dag(dag_id: str, app: str, deferrable: bool, extra: str = "") -> str:
    """The source of DAG ``dag_id``: one ``TorchXOperator`` ``train`` of the ``fake`` backend
    running ``app`` (Python source), polling every 0.05 s; ``extra`` adds operator arguments
    (``timedelta`` is imported)."""
    return (
        HEADER
        + f"""
from datetime import timedelta

with DAG("{dag_id}", **ARGS) as dag:
    TorchXOperator(
        task_id="train",
        app={app},
        scheduler="fake",
        deferrable={deferrable},
        poll_interval=0.05,
        {extra}
    )
"""
    )


def replica_lines(output: str) -> list[str]:
    return re.findall(r"\[(worker/\d+)\] (worker \d+ line \d+)", output)


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_success_logs_xcoms_and_cleanup(
    dag_runner: Any, fake_cluster: Any, capfd: Any, deferrable: bool
) -> None:
    dag_id = f"fake_success_{deferrable}"
    app = "torchx_fakes.make_app(replicas=3, lines=4)"
    dag_run = dag_runner.run(dag_id, fake_dag(dag_id, app, deferrable))
    out = capfd.readouterr()
    assert task_instances(dag_run)["train"].state == "success"
    lines = replica_lines(out.out + out.err)
    for rid in range(3):
        mine = [text for who, text in lines if who == f"worker/{rid}"]
        assert mine == [f"worker {rid} line {i}" for i in range(4)]
    [app_id] = fake_cluster.submitted
    got = xcoms(dag_run, "train")
    assert got["app_id"] == app_id
    assert got["app_handle"] == f"fake:///{app_id}"
    assert got["final_state"] == "SUCCEEDED"
    # each replica's progress: its last line and when it was written (no step: the fake
    # app's lines match no progress pattern)
    progress = [
        {k: row.pop(k) for k in ("last_line", "last_line_at", "step", "step_at", "stopped_first")}
        for row in got["replicas"]
    ]
    for i, seen in enumerate(progress):
        assert seen["last_line"] == f"worker {i} line 3", progress
        assert seen["last_line_at"].startswith("2024-05-01T"), progress
        assert (seen["step"], seen["step_at"], seen["stopped_first"]) == (None, "", False)
    assert got["replicas"] == [
        {
            "role": "worker",
            "replica_id": i,
            "state": "SUCCEEDED",
            "exit_code": 0,
            "reason": "",
            "failure": "",
            "message": "",
            "restarts": None,
            "host": f"worker-{i}",
            "root_cause": False,
        }
        for i in range(3)
    ]
    assert got["return_value"]["state"] == "SUCCEEDED"
    assert got["torchx_job_url"] == f"https://fake.example/apps/{app_id}"
    assert fake_cluster.deleted == [app_id]  # on_finish_action=delete_succeeded


def test_failure_raises_with_the_replica_table(
    dag_runner: Any, fake_cluster: Any, capfd: Any
) -> None:
    app = 'torchx_fakes.make_app(outcome="FAILED", fail_replicas="worker/1")'
    dag_run = dag_runner.run("fake_failure", fake_dag("fake_failure", app, deferrable=True))
    out = capfd.readouterr()
    text = out.out + out.err
    assert task_instances(dag_run)["train"].state == "failed"
    assert re.search(
        r"TorchX app echo-\w+ ended FAILED: replica failed; first failed replica: "
        r"worker/1 failed: exit code 1 \(no reason given\)",
        text,
    )
    # the task log ends the follow with the failed replica's last lines, folded
    assert "::group::worker/1 failed: exit code 1 (no reason given) — last 4 lines" in text
    assert re.search(r"worker\s+1\s+FAILED\s+1", text)
    got = xcoms(dag_run, "train")
    assert got["final_state"] == "FAILED"
    assert got["replicas"][1] == {
        "role": "worker",
        "replica_id": 1,
        "state": "FAILED",
        "exit_code": 1,
        "reason": "",
        "failure": "",
        "message": "",
        "restarts": None,
        "host": "worker-1",
        "root_cause": True,
        # its progress: its last line (the fake app prints no step)
        "last_line": "worker 1 line 3",
        "last_line_at": got["replicas"][1]["last_line_at"],
        "step": None,
        "step_at": "",
        "stopped_first": False,
    }
    # the fake backend tells no kind of failure: the base class, never a guess
    assert "AppFailedError" in text
    assert fake_cluster.deleted == []  # failed apps are kept for inspection


def test_templates_are_rendered_into_the_app(dag_runner: Any, fake_cluster: Any) -> None:
    dag_run = dag_runner.run(
        "fake_templates",
        HEADER
        + """
with DAG("fake_templates", **ARGS) as dag:
    TorchXOperator(
        task_id="train",
        app={
            "name": "hello",
            "metadata": {"fake.ticks": "1"},
            "roles": [{
                "name": "worker",
                "image": "{{ params.image }}",
                "entrypoint": "echo",
                "args": ["{{ dag_run.conf['msg'] }}", "{{ task.task_id }}"],
                "env": {"RUN": "{{ run_id }}"},
            }],
        },
        app_name="app-{{ params.suffix }}",
        cfg={"queue": "{{ params.queue }}"},
        params={"image": "busybox:1.36", "suffix": "x1", "queue": "gpu"},
        scheduler="fake",
        poll_interval=0.05,
    )
""",
        run_conf={"msg": "hi there"},
    )
    assert task_instances(dag_run)["train"].state == "success"
    [app] = fake_cluster.apps.values()
    role = app.app.roles[0]
    assert app.app.name == "app-x1"
    assert role.image == "busybox:1.36"
    assert role.args == ["hi there", "train"]
    assert role.env == {"RUN": dag_run.run_id}
    assert app.cfg["queue"] == "gpu"
    rendered = rendered_fields(dag_run, "train")
    assert rendered["app"]["name"] == "app-x1"
    assert rendered["app"]["roles"][0]["args"] == ["hi there", "train"]


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_a_backend_added_through_the_table_only_runs(
    dag_runner: Any, airflow_db: Any, deferrable: bool
) -> None:
    """A backend is one row: registering it (no module dictionary patched) is all it takes
    for ``TorchXOperator(scheduler=...)`` to run it, deferred or not; unregistered, it is gone."""
    import torchx_fakes
    from torchx_provider.backends import get_backend, register_backend, unregister_backend
    from torchx_provider.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError):
        get_backend("fake")
    cluster = torchx_fakes.reset()
    register_backend(torchx_fakes.FAKE_BACKEND)
    try:
        dag_id = f"fake_table_{deferrable}"
        dag_run = dag_runner.run(dag_id, fake_dag(dag_id, "torchx_fakes.make_app()", deferrable))
    finally:
        unregister_backend("fake")
        torchx_fakes.reset()
    assert task_instances(dag_run)["train"].state == "success"
    [app_id] = cluster.submitted
    assert xcoms(dag_run, "train")["final_state"] == "SUCCEEDED"
    assert cluster.deleted == [app_id]
    with pytest.raises(InvalidOptionError, match="unknown scheduler 'fake'"):
        get_backend("fake")


CRASHING = (
    HEADER
    + """
from datetime import timedelta
"""
    + crash_after_submit("TorchXOperator")
    + """

with DAG("DAG_ID", **ARGS) as dag:
    CrashAfterSubmit(
        task_id="train",
        app=torchx_fakes.make_app(),
        scheduler="fake",
        deferrable=DEFERRABLE,
        reattach=REATTACH,
        retries=1,
        retry_delay=timedelta(seconds=0),
        poll_interval=0.05,
    )
"""
)


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_a_retry_reattaches_to_the_running_app(
    dag_runner: Any, fake_cluster: Any, capfd: Any, deferrable: bool
) -> None:
    dag_id = f"fake_reattach_{deferrable}"
    source = CRASHING.replace("DAG_ID", dag_id).replace("DEFERRABLE", str(deferrable))
    dag_run = dag_runner.run(dag_id, source.replace("REATTACH", "True"))
    out = capfd.readouterr()
    ti = task_instances(dag_run)["train"]
    assert ti.state == "success" and ti.try_number == 2
    [app_id] = fake_cluster.submitted  # one job for the task instance, not two
    assert f"reattaching to app {app_id}" in out.out + out.err
    app = fake_cluster.apps[app_id]
    assert app.ti_key is not None and app.ti_key.try_number == 1
    assert (app.ti_key.dag_id, app.ti_key.task_id) == (dag_id, "train")
    assert xcoms(dag_run, "train")["app_id"] == app_id


def test_without_reattach_the_old_app_is_cancelled_first(
    dag_runner: Any, fake_cluster: Any
) -> None:
    source = CRASHING.replace("DAG_ID", "fake_noreattach").replace("DEFERRABLE", "False")
    dag_run = dag_runner.run("fake_noreattach", source.replace("REATTACH", "False"))
    assert task_instances(dag_run)["train"].state == "success"
    first, second = fake_cluster.submitted
    assert fake_cluster.cancelled == [first]
    assert fake_cluster.apps[second].ti_key.try_number == 2


def test_bad_inputs_fail_at_once_without_retries_or_submission(
    dag_runner: Any, fake_cluster: Any, capfd: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_BAD_KUBE",
        '{"conn_type": "torchx_kubernetes", "extra": {"kube_config_path": "%s"}}'
        % (tmp_path / "missing-kubeconfig"),
    )
    dag_run = dag_runner.run(
        "fake_bad_inputs",
        HEADER
        + """
from torchx_provider.operators import TorchXKubernetesOperator

APP = torchx_fakes.make_app()
with DAG(
    "fake_bad_inputs",
    **ARGS,
    default_args={"retries": 3},
) as dag:
    TorchXOperator(task_id="bad_scheduler", app=APP, scheduler="volcanoo")
    TorchXOperator(task_id="bad_cfg", app=APP, scheduler="fake", cfg={"queu": "x"})
    TorchXOperator(task_id="bad_component", app="dist.nope", app_args={}, scheduler="fake")
    TorchXOperator(task_id="no_connection", app=APP, scheduler="fake", conn_id="absent")
    TorchXKubernetesOperator(task_id="bad_kubeconfig", app=APP, conn_id="bad_kube")
    NUL_ENV = torchx_fakes.make_app()
    NUL_ENV.roles[0].env = {"TOKEN": "s3cr\\x00t"}
    TorchXOperator(task_id="nul_env", app=NUL_ENV, scheduler="fake")
    CPU = torchx_fakes.make_app()
    CPU.roles[0].resource.cpu, CPU.roles[0].resource.memMB = -1, 64
    TorchXOperator(task_id="cpu_minus_one", app=CPU, scheduler="fake")
    TorchXOperator(task_id="app_args_number", app="utils.echo", app_args=5, scheduler="fake")
    TorchXOperator(task_id="app_name_number", app=APP, app_name=5, scheduler="fake")
""",
    )
    text = "".join(capfd.readouterr())
    tis = task_instances(dag_run)
    assert {t: ti.state for t, ti in tis.items()} == dict.fromkeys(tis, "failed")
    assert all(ti.try_number == 1 for ti in tis.values()), "bad inputs are not retried"
    assert fake_cluster.submitted == []
    for message in (
        "unknown scheduler 'volcanoo'; use one of",
        "unknown run option",
        "unknown component 'dist.nope'",
        "connection 'absent' does not exist",
        "cannot read kubeconfig file (kube_config_path)",
        "roles[0].env.TOKEN: the value holds a NUL character",
        "roles[0].resource.cpu: must be >= 0, got -1",
        "app_args: app_args must be a dict",
        "app_name: app_name must be a string",
    ):
        assert message in text, message
    assert text.count("(nothing was submitted)") >= 9
    assert "s3cr" not in text  # an env value is never shown


@pytest.mark.parametrize(
    "timeout",
    ["follow_timeout=1.5", "execution_timeout=timedelta(seconds=2)"],
    ids=["follow_timeout", "execution_timeout"],
)
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_a_timeout_cancels_the_job_and_fails_the_task(
    dag_runner: Any, fake_cluster: Any, capfd: Any, deferrable: bool, timeout: str
) -> None:
    """Airflow does not apply execution_timeout to a deferred task: the follow does."""
    dag_id = f"fake_timeout_{deferrable}_{timeout.split('=')[0]}"
    app = "torchx_fakes.make_app(ticks=100_000)"
    dag_run = dag_runner.run(dag_id, fake_dag(dag_id, app, deferrable, extra=f"{timeout},"))
    text = "".join(capfd.readouterr())
    assert task_instances(dag_run)["train"].state == "failed"
    [app_id] = fake_cluster.submitted
    assert app_id in fake_cluster.cancelled
    if deferrable or "follow_timeout" in timeout:
        assert f"TorchX app {app_id} timed out" in text
