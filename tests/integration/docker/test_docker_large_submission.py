"""A large local_docker app on a real engine: a submitter killed partway leaves nothing once
the next try has run, a cancel stops a submission in progress, and an app its network
cannot hold is refused before anything is made."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from torchx_provider.errors import InvalidAppError, SubmissionError
from torchx_provider.schedulers.labels import LABEL_APP_ID
from torchx_provider.specs.api import AppDef, Role

pytestmark = [pytest.mark.docker, pytest.mark.slow]

IMAGE = "torchx-provider/busybox:latest"
PROVIDER = Path(__file__).resolve().parents[3] / "provider"

#: Try 1 of task ``big`` on a worker: dry run, print the app id, create the containers.
SUBMITTER = """
import logging, sys
from torchx_provider.schedulers.docker import create_scheduler
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.specs.api import AppDef, Role

logging.basicConfig(level=logging.INFO, format="%(message)s")
network, run_id, replicas = sys.argv[1], sys.argv[2], int(sys.argv[3])
scheduler = create_scheduler("test")
role = Role("sleeper", image=sys.argv[4], entrypoint="sleep", args=["600"], num_replicas=replicas)
key = TaskInstanceKey("docker_big", "big", run_id, try_number=1)
info = scheduler.submit_dryrun(AppDef("big", [role]), {"network": network}, ti_key=key)
print(info.request.app_id, flush=True)
scheduler.schedule(info)
"""


#: Try 2 of task ``big``: the operator's preparation and submit-or-reattach step; prints
#: the app id it goes on with, whether it reattached, and its log, as JSON.
NEXT_TRY = """
import json, sys
from types import SimpleNamespace
from torchx_provider.operators import TorchXDockerOperator

network, run_id, image = sys.argv[1:4]
lines = []
class Log:
    def info(self, msg, *args):
        lines.append(msg % args)
    warning = info

class Operator(TorchXDockerOperator):
    @property
    def log(self):
        return Log()

role = {"name": "sleeper", "image": image, "entrypoint": "sleep", "args": ["600"],
        "num_replicas": 2}
op = Operator(task_id="big", app={"name": "big", "roles": [role]}, cfg={"network": network},
              retries=1)
ti = SimpleNamespace(dag_id="docker_big", task_id="big", run_id=run_id, map_index=-1,
                     try_number=2, max_tries=1)
context = {"ti": ti, "task_state_store": None}
plan = op.prepare(context)
app_id, reattached = op.submit_or_reattach(plan, context)
plan.scheduler.close()
print(json.dumps({"app_id": app_id, "reattached": reattached, "log": lines}))
"""


def sleepers(replicas: int) -> AppDef:
    return AppDef(
        "big",
        [Role("sleeper", image=IMAGE, entrypoint="sleep", args=["600"], num_replicas=replicas)],
    )


def wait_until(what: str, check: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {timeout} s")
        time.sleep(0.1)


def settled(count: Callable[[], int]) -> int:
    """``count()`` once it has not changed for a second (requests in flight at the engine
    when their sender died still complete)."""
    last = -1
    while (now := count()) != last:
        last = now
        time.sleep(1)
    return last


@pytest.fixture
def count(docker_engine: Any) -> Callable[[str], int]:
    """``count(app_id)``: the app's containers on the engine (one list call, without
    inspecting each: some may be going away)."""

    def containers(app_id: str) -> int:
        filters = {"label": f"{LABEL_APP_ID}={app_id}"}
        return len(docker_engine.api.containers(all=True, filters=filters))

    return containers


@pytest.fixture
def removed_at_end(docker_engine: Any) -> Iterator[list[str]]:
    """App ids whose containers are removed after the test, whatever it left."""
    app_ids: list[str] = []
    yield app_ids
    for app_id in app_ids:
        filters = {"label": f"{LABEL_APP_ID}={app_id}"}
        for c in docker_engine.api.containers(all=True, filters=filters):
            with contextlib.suppress(docker.errors.APIError):  # gone, or going
                docker_engine.api.remove_container(c["Id"], force=True)


def test_a_worker_killed_during_a_large_submission_leaves_nothing_once_the_next_try_ran(
    network: str,
    count: Callable[[str], int],
    removed_at_end: list[str],
    tmp_path: Path,
) -> None:
    run_id = f"manual__{secrets.token_hex(4)}"
    worker = subprocess.Popen(
        [sys.executable, "-c", SUBMITTER, network, run_id, "600", IMAGE],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(PROVIDER)},
    )
    try:
        assert worker.stdout is not None
        old = worker.stdout.readline().strip()
        submitted = time.monotonic()
        removed_at_end.append(old)
        assert old.startswith("big-"), old
        # Partway: some containers made, and late enough for a progress line (every 5 s).
        wait_until(
            "40 containers after 7 s",
            lambda: count(old) >= 40 and time.monotonic() - submitted >= 7,
        )
    finally:
        worker.send_signal(signal.SIGKILL)  # no handler, no clean-up: a lost worker
        _, stderr = worker.communicate(timeout=30)
    left = settled(lambda: count(old))
    assert 40 <= left < 600, (left, stderr)
    # The worker said what it was doing while it did it.
    assert f"app {old}: creating and starting 600 containers, 16 at a time" in stderr
    assert f"app {old}: " in stderr and " of 600 containers created and started (" in stderr

    # Try 2 of the same task instance, on another worker: what the operator does before it
    # follows anything.
    next_try = subprocess.run(
        [sys.executable, "-c", NEXT_TRY, network, run_id, IMAGE],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(PROVIDER), "AIRFLOW_HOME": str(tmp_path)},
        timeout=300,
    )
    assert next_try.returncode == 0, next_try.stderr
    got = json.loads(next_try.stdout.splitlines()[-1])
    new, lines = got["app_id"], got["log"][1:]  # after "backend local_docker, client ..."
    removed_at_end.append(new)
    assert not got["reattached"] and new != old
    assert count(old) == 0  # removed, not adopted: its gang lacked replicas
    assert count(new) == 2
    assert lines[0].startswith(f"removing app {old}: an earlier try's submission of it was cut ")
    assert "of its 600 containers exist" in lines[0] and "submitting anew" in lines[0]
    assert lines[1] == f"submitted app local_docker:///{new}; creating it"


def test_a_cancel_stops_a_submission_in_progress_and_removes_what_it_made(
    scheduler: Any, cfg: dict[str, Any], count: Callable[[str], int], removed_at_end: list[str]
) -> None:
    info = scheduler.submit_dryrun(sleepers(200), cfg)
    app_id = info.request.app_id
    removed_at_end.append(app_id)
    outcome: list[BaseException] = []

    def submit() -> None:
        try:
            scheduler.schedule(info)
        except BaseException as e:
            outcome.append(e)

    submitter = threading.Thread(target=submit)
    submitter.start()
    wait_until("10 containers", lambda: count(app_id) >= 10)
    scheduler.cancel(app_id)  # returns at once; the submission removes what it made
    submitter.join(timeout=120)
    assert not submitter.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], SubmissionError), outcome
    assert f"the submission of app '{app_id}' was stopped after" in str(outcome[0])
    assert count(app_id) == 0
    assert scheduler.describe(app_id) is None


def test_an_app_larger_than_its_network_holds_is_refused_before_anything_is_made(
    scheduler: Any, docker_engine: Any, count: Callable[[str], int]
) -> None:
    name = f"torchx-test-small-{secrets.token_hex(3)}"
    ipam = {"Driver": "default", "Config": [{"Subnet": "10.231.7.0/28"}]}
    net = docker_engine.api.create_network(name, driver="bridge", ipam=ipam)
    try:
        info = scheduler.submit_dryrun(sleepers(20), {"network": name})
        with pytest.raises(InvalidAppError) as e:
            scheduler.schedule(info)
        assert e.value.field == "roles[0].num_replicas"
        assert f"has 20 replicas but Docker network '{name}' holds at most 13" in str(e.value)
        assert count(info.request.app_id) == 0
    finally:
        docker_engine.api.remove_network(net["Id"])
