"""Each way a Docker app ends badly raises its own class, on a real engine, through the
operator's own steps (not deferred): prepare, submit, follow, finish."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from docker_operator_harness import TI, Log, Operator
from torchx_provider.errors import (
    AppCancelledError,
    AppConfigurationError,
    AppFailedError,
    AppTimeoutError,
    InfrastructureError,
    RejectedConfigurationError,
    SubmissionError,
    UserCodeError,
)
from torchx_provider.schedulers.docker import create_scheduler
from torchx_provider.specs.api import AppState

pytestmark = pytest.mark.docker

IMAGE = "torchx-provider/busybox:latest"


def new_ti() -> TI:
    return TI("failures", "t")


@pytest.fixture
def run(docker_engine: Any, network: str) -> Iterator[Callable[..., tuple[Any, TI, Log]]]:
    """``run(script, **operator_kwargs)``: run one replica of ``sh -c script`` as a task
    (``entrypoint`` instead of ``sh``, ``cfg`` beside the network, ``mounts`` as an app
    file writes them, ``ti`` for another try of a task instance); returns what the task
    raised (or returned), its TI and its log. Its app is deleted."""
    apps: list[str] = []

    def run_task(
        script: str,
        *,
        image: str = IMAGE,
        resource: dict[str, Any] | None = None,
        during: Callable[[str], None] | None = None,
        replicas: int = 1,
        entrypoint: str = "sh",
        cfg: dict[str, Any] | None = None,
        mounts: list[str] | None = None,
        ti: TI | None = None,
        **kwargs: Any,
    ) -> tuple[Any, TI, Log]:
        role: dict[str, Any] = {
            "name": "trainer",
            "image": image,
            "entrypoint": entrypoint,
            "args": ["-c", script],
            "num_replicas": replicas,
        }
        if resource is not None:
            role["resource"] = resource
        if mounts is not None:
            role["mounts"] = mounts
        op = Operator(
            task_id="t",
            app={"name": "failing", "roles": [role]},
            cfg={"network": network, **(cfg or {})},
            poll_interval=0.5,
            deferrable=False,
            **kwargs,
        )
        op.recorded = Log()
        ti = ti or new_ti()
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
    assert "exit code 137 (OOMKilled" in str(error), error
    # says memory, and the limit it went over, and how to raise it
    assert "killed for exceeding its memory limit of 32 MiB: raise resource.memMB" in str(error), (
        error
    )
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
    summary = log.text
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
    assert "timed out (follow_timeout=3s) in state RUNNING" in str(error), error
    with create_scheduler("check") as scheduler:
        desc = scheduler.describe(ti.xcoms["app_id"])
    assert desc is not None and desc.state == AppState.CANCELLED  # on_kill_action=cancel


@pytest.mark.parametrize("entrypoint", ["/no/such/binary", "python"])
def test_an_entrypoint_not_in_the_image_is_a_configuration_error(run: Any, entrypoint: str) -> None:
    """The container's init cannot start it: it says so in the log and exits 127."""
    error, ti, _ = run("true", entrypoint=entrypoint)
    assert type(error) is AppConfigurationError, error
    assert (error.role, error.replica_id, error.exit_code, error.reason) == (
        "trainer",
        0,
        127,
        "EntrypointNotFound",
    )
    text = str(error)
    assert f"entrypoint {entrypoint!r} is not in image {IMAGE!r}" in text, text
    assert "No such file or directory" in text, text
    [replica] = ti.xcoms["replicas"]
    assert (replica["reason"], replica["failure"]) == ("EntrypointNotFound", "configuration")


def test_a_command_a_script_does_not_find_stays_a_user_code_error(run: Any) -> None:
    """127 from the script's own shell (``sh: x: not found``) is the code's doing."""
    error, _, _ = run("no-such-command")
    assert type(error) is UserCodeError, error
    assert (error.exit_code, error.reason) == (127, "Error")


def test_a_bind_mount_whose_source_does_not_exist_is_a_configuration_error(run: Any) -> None:
    """The engine refuses to create the container: no retry makes the source appear."""
    source = f"/no/such/dir-{secrets.token_hex(3)}"
    error, ti, _ = run(
        "true",
        replicas=2,
        mounts=["type=bind,src=/tmp,dst=/t", f"type=bind,src={source},dst=/data"],
    )
    assert isinstance(error, RejectedConfigurationError), error
    text = str(error)
    assert f"roles[0].mounts[1] (bind {source} -> /data) of role 'trainer'" in text, text
    assert "does not exist on the Docker host" in text, text
    assert "app_id" not in ti.xcoms  # nothing was left to follow


def test_the_only_container_removed_from_outside_is_an_infrastructure_error(
    run: Any, containers_of: Any
) -> None:
    """``docker rm -f`` of a one-replica app's container: the platform's doing, as when one
    container of several goes (test_docker_removed_replica), not a cancel by the task."""

    def remove(app_id: str) -> None:
        for container in containers_of(app_id):
            container.remove(force=True)

    error, ti, log = run("echo up; sleep 60", during=remove)
    assert type(error) is InfrastructureError, (error, log.lines)
    assert (error.state, error.role, error.replica_id, error.reason) == (
        "FAILED",
        "trainer",
        0,
        "RemovedFromOutside",
    )
    assert "removed by something other than this task" in str(error), error
    [replica] = ti.xcoms["replicas"]
    assert (replica["state"], replica["failure"]) == ("FAILED", "infrastructure")


def test_within_a_second_across_a_seconds_boundary_the_exit_that_is_no_signal_is_first(
    run: Any, containers_of: Any
) -> None:
    """Replica 0 runs ``exit 137`` at 0.75 s past a whole second, replica 1 prints and runs
    ``exit 2`` 0.7 s later, in the next second (the engine's own finish times are checked):
    within a second of each other, so the one not killed by a signal is the root cause."""
    from datetime import datetime

    # both containers run by then, and wait for it (5 s was once too few for the second
    # container on a loaded engine: it began after the whole second, and its exit came late)
    start = int(time.time()) + 12
    script = (
        f"while [ $(date +%s) -lt {start} ]; do usleep 5000; done; "
        'if [ "$TORCHX_REPLICA_IDX" = 0 ]; then usleep 750000; exit 137; fi; '
        "usleep 1450000; echo 'cannot open shard 7'; exit 2"
    )
    error, ti, log = run(script, replicas=2, cfg={"remove": False})
    ends = {}
    for container in containers_of(ti.xcoms["app_id"]):
        at = container.attrs["State"]["FinishedAt"]
        ends[container.attrs["Config"]["Env"].count("TORCHX_REPLICA_IDX=1")] = (
            datetime.fromisoformat(at[:26].rstrip("Z") + "+00:00")
        )
    gap = (ends[1] - ends[0]).total_seconds()
    print(f"replica 1 ended {gap:.3f} s after replica 0: {ends}")
    assert 0 < gap < 1 and ends[0].second != ends[1].second, f"not across a boundary: {ends}"
    assert type(error) is UserCodeError, (error, log.lines)
    assert (error.role, error.replica_id, error.exit_code) == ("trainer", 1, 2), error
    causes = [r["replica_id"] for r in ti.xcoms["replicas"] if r["root_cause"]]
    assert causes == [1], ti.xcoms["replicas"]


def test_a_retry_tells_that_the_earlier_try_s_app_ended_failed_and_keeps_it(
    run: Any, containers_of: Any
) -> None:
    """Try 1's app runs, one of its containers is removed from outside and the other fails:
    try 2 says try 1's app ended FAILED (not that its submission was cut short) and keeps
    its container, as on_finish_action (delete_succeeded) says for a failed app."""
    # replica 0 fails well after replica 1 is removed, even on a loaded engine (at 3 s, the
    # removal once came after it: the first failure was then rightly the user's code)
    script = 'if [ "$TORCHX_REPLICA_IDX" = 0 ]; then sleep 10; exit 1; fi; sleep 14'

    def remove_replica_1(app_id: str) -> None:
        for container in containers_of(app_id):
            if "TORCHX_REPLICA_IDX=1" in container.attrs["Config"]["Env"]:
                container.remove(force=True)

    first, ti, _ = run(script, replicas=2, during=remove_replica_1, retries=1)
    assert isinstance(first, InfrastructureError), first
    old = ti.xcoms["app_id"]
    assert len(containers_of(old)) == 1

    retry = new_ti()
    retry.run_id, retry.try_number, retry.max_tries = ti.run_id, 2, 1
    second, retry, log = run(script, replicas=2, ti=retry, retries=1)
    assert isinstance(second, UserCodeError), (second, log.lines)
    assert retry.xcoms["app_id"] != old
    notices = [ln for ln in log.lines if old in ln]
    assert notices == [f"app {old} of try 1 ended FAILED; left as it is"], log.lines
    assert len(containers_of(old)) == 1  # kept for inspection


#: replica 0 fails after 2 s; replica 1 would run on for half a minute
FAILS_EARLY = (
    'if [ "$TORCHX_REPLICA_IDX" = 0 ]; then sleep 2; echo "ValueError: bad batch"; exit 1; fi; '
    'trap "echo stopped; exit 143" TERM; sleep 30 & wait'
)


def test_a_replica_failed_for_good_stops_the_others_and_ends_the_task(run: Any) -> None:
    """As JobSet's and Volcano's failure policies do: the survivors get SIGTERM (then the
    grace) instead of blocking until their own end."""
    started = time.monotonic()
    error, ti, log = run(FAILS_EARLY, replicas=2)
    took = time.monotonic() - started
    print(f"task ended {took:.1f} s after it began (replica 0 failed at about 2 s)")
    assert type(error) is UserCodeError, (error, log.lines)
    assert (error.role, error.replica_id, error.exit_code) == ("trainer", 0, 1), error
    assert took < 15, f"the task took {took:.1f} s: the survivor was not stopped"
    rows = {r["replica_id"]: r for r in ti.xcoms["replicas"]}
    assert (rows[0]["state"], rows[0]["root_cause"]) == ("FAILED", True)
    assert rows[1]["state"] == "CANCELLED" and "stop_on_failure" in rows[1]["message"], rows
    assert any(
        "trainer/0 failed with no restarts left; stopping its other replicas trainer/1" in ln
        for ln in log.lines
    ), log.lines


def test_with_stop_on_failure_off_the_others_run_to_their_end(run: Any) -> None:
    script = FAILS_EARLY.replace("sleep 30", "sleep 6")
    started = time.monotonic()
    error, ti, _ = run(script, replicas=2, cfg={"stop_on_failure": False})
    took = time.monotonic() - started
    assert type(error) is UserCodeError and error.replica_id == 0, error
    rows = {r["replica_id"]: r for r in ti.xcoms["replicas"]}
    assert rows[1]["state"] == "SUCCEEDED" and took >= 6, (rows, took)
