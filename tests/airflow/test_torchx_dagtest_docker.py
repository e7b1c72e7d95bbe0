"""``dag.test()`` runs of ``TorchXDockerOperator`` on the real Docker engine."""

from __future__ import annotations

import logging
import re
import secrets
import time
from datetime import datetime
from typing import Any

import pytest
from torchx_airflow_helpers import (
    BUSYBOX,
    assert_two_replicas_succeeded,
    crash_after_submit,
    dag_containers,
    remove_containers,
    rendered_fields,
    task_instances,
    xcoms,
)

pytestmark = [pytest.mark.airflow, pytest.mark.docker, pytest.mark.slow]

HEADER = f"""
import datetime
from datetime import timedelta
from airflow.sdk import DAG
from torchx_provider.operators import TorchXDockerOperator

ARGS = {{"schedule": None, "start_date": datetime.datetime(2024, 1, 1)}}
IMAGE = "{BUSYBOX}"


def app(name, script, replicas=2):
    return {{
        "name": name,
        "roles": [{{
            "name": "worker",
            "image": IMAGE,
            "entrypoint": "sh",
            "args": ["-c", script],
            "num_replicas": replicas,
        }}],
    }}
"""

#: each replica prints 5 numbered lines, 0.1 s apart
COUNT = "for i in 0 1 2 3 4; do echo replica $TORCHX_REPLICA_IDX says $i; sleep 0.1; done"


def docker_dag(
    dag_id: str, args: str, operator: str = "TorchXDockerOperator", before: str = ""
) -> str:
    """The source of DAG ``dag_id`` of one task ``train``: ``operator`` with the arguments
    ``args`` (source); ``before`` (source) comes between :data:`HEADER` and the DAG."""
    return (
        HEADER
        + before
        + f"""
with DAG("{dag_id}", **ARGS) as dag:
    {operator}(task_id="train", {args})
"""
    )


def replica_lines(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for who, line in re.findall(r"\[(worker/\d+)\] (replica \d+ says \d+)", text):
        out.setdefault(who, []).append(line)
    return out


def containers_of(client: Any, app_id: str) -> list[Any]:
    return client.containers.list(
        all=True, filters={"label": f"torchx.pytorch.org/app-id={app_id}"}
    )


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_success_on_docker(
    dag_runner: Any, docker_engine: Any, capfd: Any, deferrable: bool
) -> None:
    dag_id = f"docker_success_{deferrable}"
    args = (
        f'app=app("count-{{{{ params.tag }}}}", {COUNT!r}), params={{"tag": "t1"}}, '
        f"deferrable={deferrable}, poll_interval=0.5"
    )
    dag_run = dag_runner.run(dag_id, docker_dag(dag_id, args))
    text = "".join(capfd.readouterr())
    assert task_instances(dag_run)["train"].state == "success"
    got = xcoms(dag_run, "train")
    app_id = got["app_id"]
    assert app_id.startswith("count-t1")
    assert got["app_handle"].startswith("local_docker://")
    assert got["final_state"] == "SUCCEEDED"
    # the deferral's progress XCom is gone with the deferral (pushed before deferring)
    assert "torchx_log_cursors" not in got
    assert_two_replicas_succeeded(got)
    lines = replica_lines(text)
    for rid in (0, 1):
        assert lines[f"worker/{rid}"] == [f"replica {rid} says {i}" for i in range(5)]
    assert rendered_fields(dag_run, "train")["app"]["name"] == "count-t1"
    assert containers_of(docker_engine, app_id) == []  # deleted after success


def test_failure_on_docker(dag_runner: Any, docker_engine: Any, capfd: Any) -> None:
    script = 'echo before; if [ "$TORCHX_REPLICA_IDX" = 1 ]; then exit 3; fi; echo fine'
    args = f'app=app("fails", {script!r}), deferrable=True, poll_interval=0.5'
    dag_run = dag_runner.run("docker_failure", docker_dag("docker_failure", args))
    text = "".join(capfd.readouterr())
    assert task_instances(dag_run)["train"].state == "failed"
    got = xcoms(dag_run, "train")
    assert got["final_state"] == "FAILED"
    assert "torchx_log_cursors" not in got
    assert {r["replica_id"]: r["exit_code"] for r in got["replicas"]} == {0: 0, 1: 3}
    assert [(r["reason"], r["failure"], r["root_cause"]) for r in got["replicas"]] == [
        ("", "", False),
        ("Error", "user", True),
    ]
    assert re.search(r"TorchX app fails-\w+ ended FAILED", text)
    # deferred, the exception raised in execute_complete says it is the user's code
    assert "UserCodeError" in text
    assert "[worker/1] before" in text and "[worker/0] fine" in text
    kept = containers_of(docker_engine, got["app_id"])
    assert len(kept) == 2  # failed apps are kept (on_finish_action=delete_succeeded)
    remove_containers(kept)


@pytest.mark.parametrize(
    ("deferrable", "hide_store", "ended"),
    [(False, False, False), (True, True, False), (True, False, True)],
    ids=["worker-task_state_store", "deferred-labels-only", "deferred-already-succeeded"],
)
def test_retry_reattaches_on_docker(
    dag_runner: Any, docker_engine: Any, capfd: Any, deferrable: bool, hide_store: bool, ended: bool
) -> None:
    """Try 1 dies right after submitting; try 2 follows the same job. With ``hide_store`` the
    task_state_store is hidden from both tries, so only the job's labels can find it. With
    ``ended`` try 2 starts only after the job succeeded: it follows it (every line, its
    result), and does not run it again."""
    dag_id = f"docker_reattach_{deferrable}_{ended}"
    crashing = crash_after_submit(
        "TorchXDockerOperator",
        f"""
    def execute(self, context):
        if {hide_store}:
            context["task_state_store"] = None
        if {ended} and context["ti"].try_number == 2:
            import time
            import docker
            client, deadline = docker.from_env(), time.monotonic() + 60
            label = "airflow.apache.org/dag-id={dag_id}"
            while time.monotonic() < deadline and any(
                c.status != "exited"
                for c in client.containers.list(all=True, filters={{"label": label}})
            ):
                time.sleep(0.2)
        return super().execute(context)
""",
    )
    args = (
        f'app=app("slow", "sleep 3; " + {COUNT!r}), deferrable={deferrable}, retries=1, '
        "retry_delay=timedelta(seconds=0), poll_interval=0.5"
    )
    source = docker_dag(dag_id, args, operator="CrashAfterSubmit", before=crashing)
    dag_run = dag_runner.run(dag_id, source)
    text = "".join(capfd.readouterr())
    ti = task_instances(dag_run)["train"]
    assert ti.state == "success" and ti.try_number == 2
    app_id = xcoms(dag_run, "train")["app_id"]
    assert f"reattaching to app {app_id}" in text
    assert (f"reattaching to app {app_id} of an earlier try: it already succeeded" in text) is (
        ended or f"reattaching to app {app_id} left running" not in text
    )
    assert text.count("submitted app local_docker://") == 1
    lines = replica_lines(text)
    assert lines["worker/0"] == [f"replica 0 says {i}" for i in range(5)]
    assert containers_of(docker_engine, app_id) == []


def test_a_large_submission_logs_its_handle_then_its_progress(
    dag_runner: Any, docker_engine: Any, capfd: Any, caplog: Any
) -> None:
    """The task log names the app before its first container is made, then the creation (the
    engine's lines come through Python logging, which pytest reads apart from stdout)."""
    # the replicas run until removed one by one at the end: 40 containers of one network
    # exiting at once deadlocked Debian's dockerd (its network controller) on a CI machine
    with caplog.at_level(logging.INFO, "torchx_provider.schedulers.docker.engine"):
        args = 'app=app("large", "sleep 600", replicas=40), wait_for_completion=False'
        dag_run = dag_runner.run("docker_large", docker_dag("docker_large", args))
    text = "".join(capfd.readouterr())
    app_id = xcoms(dag_run, "train")["app_id"]
    try:
        assert task_instances(dag_run)["train"].state == "success"
        submitted = re.search(
            rf"^(\S+) .*submitted app local_docker:///{app_id}; creating it", text, re.M
        )
        assert submitted is not None, text
        creating = [
            r
            for r in caplog.records
            if r.getMessage() == f"app {app_id}: creating and starting 40 containers, 16 at a time"
        ]
        assert len(creating) == 1
        assert datetime.fromisoformat(submitted.group(1)).timestamp() <= creating[0].created
        assert any(
            f"app {app_id}: all 40 containers created" in r.getMessage() for r in caplog.records
        )
    finally:
        remove_containers(containers_of(docker_engine, app_id))


def test_only_an_earlier_sessions_containers_of_a_counted_dag_are_removed(
    docker_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counting a DAG's containers removes what an earlier session left under that DAG id,
    and nothing else on the shared engine: another session running now (another Airflow's
    tier, the Docker tests' own tasks) and a user's tasks keep theirs, running or not."""
    import torchx_airflow_helpers

    token = secrets.token_hex(3)
    counted, other = f"counted_{token}", f"someone_else_{token}"

    def make(dag_id: str, script: str) -> Any:
        return docker_engine.containers.run(
            BUSYBOX,
            ["sh", "-c", script],
            labels={"airflow.apache.org/dag-id": dag_id},
            detach=True,
        )

    made = [make(counted, "sleep 600"), make(other, "sleep 600"), make(other, "true")]
    try:
        time.sleep(0.01)
        monkeypatch.setattr(torchx_airflow_helpers, "SESSION_STARTED", time.time())
        ours = make(counted, "sleep 600")
        made.append(ours)
        assert [c.id for c in dag_containers(docker_engine, counted)] == [ours.id]
        # (sparse: listed without inspecting each, which fails with 404 on one another
        # session removes in between)
        left = {c.id for c in docker_engine.containers.list(all=True, sparse=True)}
        assert made[0].id not in left
        assert {made[1].id, made[2].id, ours.id} <= left
        made[1].reload()
        assert made[1].status == "running"
    finally:
        left = {c.id for c in docker_engine.containers.list(all=True, sparse=True)}
        remove_containers([c for c in made if c.id in left])
