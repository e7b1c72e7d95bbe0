"""Each way a Docker app ends badly raises its own class, on a real engine, through the
operator's own steps (not deferred): prepare, submit, follow, finish."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from torchx_provider.errors import (
    AppCancelledError,
    AppConfigurationError,
    AppFailedError,
    AppTimeoutError,
    RejectedConfigurationError,
    SubmissionError,
    UserCodeError,
)
from torchx_provider.operators import TorchXDockerOperator
from torchx_provider.schedulers.docker import create_scheduler
from torchx_provider.specs.api import AppState

pytestmark = pytest.mark.docker

IMAGE = "torchx-provider/busybox:latest"


class Log:
    """The operator's logger, kept in a list."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def _add(self, msg: str, *args: Any, **_: Any) -> None:
        self.lines.append(msg % args if args else msg)

    info = warning = error = exception = debug = _add


class Operator(TorchXDockerOperator):
    recorded: Log

    @property
    def log(self) -> Any:
        return self.recorded


class TI(SimpleNamespace):
    def __init__(self) -> None:
        super().__init__(
            dag_id="failures",
            task_id="t",
            run_id=f"r-{secrets.token_hex(4)}",
            map_index=-1,
            try_number=1,
            max_tries=0,
            start_date=None,
        )
        self.xcoms: dict[str, Any] = {}
        self.started = time.monotonic()

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value


@pytest.fixture
def run(docker_engine: Any, network: str) -> Iterator[Callable[..., tuple[Any, TI, Log]]]:
    """``run(script, **operator_kwargs)``: run one replica of ``sh -c script`` as a task;
    returns what the task raised (or returned), its TI and its log. Its app is deleted."""
    apps: list[str] = []

    def run_task(
        script: str,
        *,
        image: str = IMAGE,
        resource: dict[str, Any] | None = None,
        during: Callable[[str], None] | None = None,
        replicas: int = 1,
        **kwargs: Any,
    ) -> tuple[Any, TI, Log]:
        role: dict[str, Any] = {
            "name": "trainer",
            "image": image,
            "entrypoint": "sh",
            "args": ["-c", script],
            "num_replicas": replicas,
        }
        if resource is not None:
            role["resource"] = resource
        op = Operator(
            task_id="t",
            app={"name": "failing", "roles": [role]},
            cfg={"network": network},
            poll_interval=0.5,
            deferrable=False,
            **kwargs,
        )
        op.recorded = Log()
        ti = TI()
        watcher = None
        if during is not None:
            watcher = threading.Thread(target=lambda: during_app(ti, during), daemon=True)
            watcher.start()
        try:
            outcome: Any = op.execute({"ti": ti, "task_state_store": None})  # type: ignore[arg-type]
        except Exception as e:
            outcome = e
        if watcher is not None:
            watcher.join(30)
        if "app_id" in ti.xcoms:
            apps.append(ti.xcoms["app_id"])
        return outcome, ti, op.recorded

    yield run_task
    with create_scheduler("cleanup") as scheduler:
        for app_id in apps:
            scheduler.delete(app_id)


def during_app(ti: TI, act: Callable[[str], None]) -> None:
    """Once the task has pushed its app id and the app runs, call ``act(app_id)``."""
    deadline = time.monotonic() + 60
    while "app_id" not in ti.xcoms and time.monotonic() < deadline:
        time.sleep(0.05)
    app_id = ti.xcoms["app_id"]
    with create_scheduler("outside") as scheduler:
        while time.monotonic() < deadline:
            desc = scheduler.describe(app_id)
            if desc is not None and desc.state == AppState.RUNNING:
                break
            time.sleep(0.1)
        act(app_id)


def test_a_replica_exiting_3_is_a_user_code_error(run: Any) -> None:
    error, ti, log = run("echo starting; echo 'ValueError: no' >&2; exit 3")
    assert type(error) is UserCodeError, error
    assert (error.state, error.role, error.replica_id, error.exit_code, error.reason) == (
        "FAILED",
        "trainer",
        0,
        3,
        "Error",
    )
    assert "first failed replica: trainer/0 failed: exit code 3 (Error)" in str(error)
    [replica] = ti.xcoms["replicas"]
    assert (replica["exit_code"], replica["reason"], replica["failure"]) == (3, "Error", "user")
    assert replica["root_cause"] is True and replica["restarts"] == 0
    assert any(ln.startswith("try 1 follows TorchX app local_docker://") for ln in log.lines)


def test_a_python_traceback_is_the_errors_own_line(run: Any) -> None:
    script = (
        "echo 'Traceback (most recent call last):'; "
        "echo '  File \"train.py\", line 3, in <module>'; "
        "echo 'KeyError: batch'; exit 1"
    )
    error, ti, _ = run(script)
    assert type(error) is UserCodeError
    assert "first failed replica: trainer/0 failed: exit code 1 (Error: KeyError: batch)" in str(
        error
    )
    assert ti.xcoms["replicas"][0]["message"] == "KeyError: batch"


def test_a_replica_over_its_memory_limit_is_a_user_code_error_oomkilled(run: Any) -> None:
    """The engine here enforces memory limits (cgroups): ``tail`` holds the whole of a
    newline-free stream, so 256 MiB of zeros exceed the 32 MiB the role asks for."""
    error, ti, _ = run(
        "head -c 256m /dev/zero | tail",
        resource={"cpu": 1, "gpu": 0, "memMB": 32},
    )
    assert type(error) is UserCodeError, error
    assert (error.reason, error.exit_code) == ("OOMKilled", 137)
    assert ti.xcoms["replicas"][0]["reason"] == "OOMKilled"
    assert "exit code 137 (OOMKilled)" in str(error)
    row(
        "oom-killed",
        "a replica killed for exceeding its memory limit (OOMKilled, a real cgroup limit)",
        "UserCodeError naming the replica and OOMKilled",
        error,
        ti,
    )


#: three ranks of a DDP-like job: rank 2 raises first; the others are torn down about half a
#: second later, as torchrun's agent does, with a traceback of their own and exit code 1 (the
#: code every failing container of a torchrun job exits with), often in the same second
DDP_SCRIPT = (
    'if [ "$TORCHX_REPLICA_IDX" = 2 ]; then sleep 1; '
    "echo 'Traceback (most recent call last):'; "
    "echo '  File \"train.py\", line 41, in step'; "
    "echo 'ValueError: batch 7 has NaN loss'; exit 1; fi; "
    "sleep 1.5; echo 'Traceback (most recent call last):'; "
    "echo '  File \"torch/distributed/elastic/agent/server/api.py\", line 8, in _invoke_run'; "
    "echo 'torch.distributed.elastic.multiprocessing.api.SignalException: "
    "Process 41 got signal: 15'; exit 1"
)


def test_the_rank_that_failed_first_is_the_root_cause_with_its_python_error(run: Any) -> None:
    """Every rank fails with exit code 1 and a traceback; the error, the failure summary and
    the ``replicas`` XCom name rank 2, which failed first, and show its own Python error."""
    error, ti, log = run(DDP_SCRIPT, replicas=3)
    assert type(error) is UserCodeError, error
    summary = "\n".join(log.lines)
    assert "trainer/2" in summary and "ValueError: batch 7 has NaN loss" in summary, summary
    assert (error.role, error.replica_id, error.exit_code) == ("trainer", 2, 1), error
    assert error.replica_message == "ValueError: batch 7 has NaN loss", error.replica_message
    assert (
        "first failed replica: trainer/2 failed: exit code 1 "
        "(Error: ValueError: batch 7 has NaN loss)" in str(error)
    ), error
    causes = [r for r in ti.xcoms["replicas"] if r["root_cause"]]
    assert [(r["role"], r["replica_id"]) for r in causes] == [("trainer", 2)], ti.xcoms
    assert sorted(r["exit_code"] for r in ti.xcoms["replicas"]) == [1, 1, 1]
    row(
        "ddp-root-cause",
        "DDP-like job of 3 ranks: rank 2 raises, the others are torn down with a traceback of"
        " their own; every rank exits 1",
        "the failure names rank 2 (the first to fail) and its Python error",
        error,
        ti,
    )


def row(row_id: str, fault: str, expected: str, error: Exception, ti: TI) -> None:
    """One row of the reliability table (docs/reliability.md): the class raised, and where
    it named the root cause; orphans are the app's containers still running."""
    from reliability_results import outcome_row, record_row

    assert isinstance(error, AppFailedError)
    with create_scheduler("row") as scheduler:
        desc = scheduler.describe(ti.xcoms["app_id"])
    running = (
        0
        if desc is None
        else sum(
            1 for r in desc.roles_statuses for rep in r.replicas if rep.state == AppState.RUNNING
        )
    )
    outcome = (
        f"{type(error).__name__} naming {error.role}/{error.replica_id} "
        f"(exit code {error.exit_code}, {error.reason})"
    )
    record_row(
        outcome_row(
            row_id,
            "Docker: " + fault,
            expected,
            outcome,
            lines=False,
            orphans=running,
            duplicates=0,
            seconds=time.monotonic() - ti.started,
        )
    )


def test_an_image_the_engine_does_not_have_is_a_configuration_error(run: Any) -> None:
    """Named by an id the engine does not have: nothing to pull it from."""
    error, _, _ = run("true", image="sha256:" + "0" * 64)
    assert isinstance(error, RejectedConfigurationError), error
    assert isinstance(error, AppConfigurationError) and "is not on the Docker engine" in str(error)


def test_an_image_the_registry_does_not_have_is_a_configuration_error(
    run: Any, local_registry: Any
) -> None:
    """The session's local registry answers "manifest unknown"."""
    image = local_registry.repo(f"torchx-provider/missing-{secrets.token_hex(3)}") + ":1"
    started = time.monotonic()
    error, _, _ = run("true", image=image)
    took = time.monotonic() - started
    assert isinstance(error, RejectedConfigurationError), error
    assert "pulling it failed" in str(error)
    # the image and the registry's own words, decided by the table every backend shares
    text = str(error)
    assert image in text and ("manifest unknown" in text or "not found" in text), text
    print(f"registry without the image: {type(error).__name__} {took:.1f} s after the task began")


def test_a_registry_that_cannot_be_reached_is_not_called_a_configuration_error(
    run: Any,
) -> None:
    """Nothing listens on port 1: it may be back on a retry, so no subclass is guessed."""
    error, _, _ = run("true", image="localhost:1/torchx-provider/missing:1")
    assert isinstance(error, SubmissionError) and not isinstance(error, AppConfigurationError)


def test_a_cancel_from_outside_is_an_app_cancelled_error(run: Any) -> None:
    def cancel(app_id: str) -> None:
        with create_scheduler("someone-else") as scheduler:
            scheduler.cancel(app_id)

    error, ti, log = run("echo up; sleep 60", during=cancel)
    assert type(error) is AppCancelledError, (error, log.lines)
    assert error.state == "CANCELLED" and error.app_id == ti.xcoms["app_id"]


def test_follow_timeout_is_an_app_timeout_error(run: Any) -> None:
    started = time.monotonic()
    error, ti, _ = run("echo up; sleep 60", follow_timeout=3)
    assert type(error) is AppTimeoutError, error
    assert time.monotonic() - started < 30
    assert error.app_id == ti.xcoms["app_id"]
    with create_scheduler("check") as scheduler:
        desc = scheduler.describe(ti.xcoms["app_id"])
    assert desc is not None and desc.state == AppState.CANCELLED  # on_kill_action=cancel
