"""A job that hangs is noticed on a real engine: a replica that goes silent is named a
straggler within ``straggler_after`` + 5 s, the task fails with ``AppStalledError`` within
``stall_timeout`` + 5 s of the last replica's last step, and nothing of the app is left
running. Through the operator's own steps, not deferred (the trigger runs the same follow).

Two apps: busybox replicas that print steps and stop (cheap), and ``dist.ddp`` 2x2 over gloo
in the training image, where one rank sleeps before its ``all_reduce`` and the others block
in the collective (the training tier).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import test_docker_real_training as real_training

from docker_operator_harness import TI, Log, Operator
from torchx_provider.errors import AppStalledError, InfrastructureError
from torchx_provider.schedulers.docker import create_scheduler
from torchx_provider.schedulers.labels import LABEL_APP_ID

pytestmark = [pytest.mark.docker, pytest.mark.slow]

#: the training image, built (or found up to date) once per session
torch_image = real_training.torch_image

IMAGE = "torchx-provider/busybox:latest"
STRAGGLER_AFTER = 5.0
STALL_TIMEOUT = 12.0
#: what the issue allows past each limit
SLACK = 5.0
#: The gloo job's: its replicas print nothing while torch loads and the ranks rendezvous,
#: 10 to 30 s on a loaded 2-core machine, which is silence to the watch like any other.
DDP_STALL_TIMEOUT = 45.0


@pytest.fixture
def run_task(network: str, docker_engine: Any) -> Iterator[Callable[..., tuple[Any, TI, Log]]]:
    """``run_task(**operator_kwargs)``: run a Docker task to its end on the test network;
    returns what it raised (or returned), its TI and its log. The apps are removed after."""
    apps: list[str] = []

    def run(**kwargs: Any) -> tuple[Any, TI, Log]:
        op = Operator(
            task_id="watch",
            cfg={"network": network},
            poll_interval=2.0,
            deferrable=False,
            **{"straggler_after": STRAGGLER_AFTER, "stall_timeout": STALL_TIMEOUT, **kwargs},
        )
        op.recorded = Log()
        ti = TI("progress", "watch")
        try:
            outcome: Any = op.execute({"ti": ti, "task_state_store": None})  # type: ignore[arg-type]
        except Exception as e:
            outcome = e
        if "app_id" in ti.xcoms:
            apps.append(ti.xcoms["app_id"])
        return outcome, ti, op.recorded

    yield run
    with create_scheduler("cleanup") as scheduler:
        for app_id in apps:
            scheduler.delete(app_id)


def running_containers(docker_engine: Any, app_id: str) -> list[str]:
    found = docker_engine.containers.list(filters={"label": f"{LABEL_APP_ID}={app_id}"})
    return [c.name for c in found]


#: replica 1 prints 4 steps and goes silent; replica 0 goes on to step 24, then is silent too
STEPS_THEN_SILENCE = (
    "n=24; if [ ${replica_id} = 1 ]; then n=4; fi; i=0; "
    'while [ $$i -lt $$n ]; do i=$$((i+1)); echo "replica ${replica_id} step $$i"; '
    'sleep 0.5; done; echo "replica ${replica_id} waits for its peer"; sleep 3600'
)


def test_a_silent_replica_is_named_and_a_stalled_app_fails_and_is_cancelled(
    run_task: Any, docker_engine: Any
) -> None:
    started = time.monotonic()
    app = {
        "name": "watch",
        "roles": [
            {
                "name": "w",
                "image": IMAGE,
                "entrypoint": "sh",
                "args": ["-c", STEPS_THEN_SILENCE],
                "num_replicas": 2,
                "resource": {"cpu": 0.2, "gpu": 0, "memMB": 64},
            }
        ],
    }
    outcome, ti, log = run_task(app=app, progress_pattern=r"step (\d+)")
    failed_at = time.monotonic()
    text = log.text
    print(text)
    assert type(outcome) is AppStalledError, (outcome, text)
    assert isinstance(outcome, InfrastructureError)
    assert outcome.stalled == ("w/1",) and (outcome.role, outcome.replica_id) == ("w", 1)

    # named within straggler_after + 5 s of its last step, once, with its last line
    silent_since = log.last("[w/1] replica 1 step 4")
    named = [line for line in log.lines if "w/1 is straggling" in line]
    assert len(named) == 1, text
    assert log.first("w/1 is straggling") - silent_since <= STRAGGLER_AFTER + SLACK, text
    assert "last step 4" in named[0] and "replica 1 waits for its peer" in named[0], named
    # failed within stall_timeout + 5 s of the last step of any replica
    last_step = log.last("[w/0] replica 0 step 24")
    assert failed_at - last_step <= STALL_TIMEOUT + SLACK, (failed_at - last_step, text)
    assert "::group::w/1 stopped first" in text and "[w/1] replica 1 step 4" in text
    # nothing left running
    assert running_containers(docker_engine, ti.xcoms["app_id"]) == []
    rows = {r["replica_id"]: r for r in ti.xcoms["replicas"]}
    assert rows[1]["step"] == 4 and rows[1]["stopped_first"], rows
    assert rows[0]["step"] == 24 and rows[0]["last_line"] == "replica 0 waits for its peer"
    print(f"busybox stall run: {failed_at - started:.1f} s")


# -- real training -------------------------------------------------------------------------

#: local rank 0 of each node prints; rank SLEEPER sleeps before its all_reduce at step
#: STALL_STEP, and the others block in the collective
STALL_DDP = """
import os, sys, time
import torch
import torch.distributed as dist

dist.init_process_group(backend="gloo")
rank, world = dist.get_rank(), dist.get_world_size()
local = int(os.environ["LOCAL_RANK"])
sleeper, stall_step = int(sys.argv[1]), int(sys.argv[2])
for step in range(1, 1000):
    t = torch.ones(4) * rank
    if rank == sleeper and step == stall_step:
        print(f"rank={rank} sleeps before its all_reduce", flush=True)
        time.sleep(3600)
    if local == 0:
        print(f"rank={rank} world_size={world} step={step}", flush=True)
    dist.all_reduce(t)
    time.sleep(0.5)
"""


@pytest.mark.training
def test_a_ddp_rank_sleeping_before_all_reduce_is_named_and_the_job_fails(
    run_task: Any, docker_engine: Any, tmp_path: Path, torch_image: str
) -> None:
    (tmp_path / "stall_ddp.py").write_text(STALL_DDP)
    tmp_path.chmod(0o755)
    started = time.monotonic()
    outcome, ti, log = run_task(
        app="dist.ddp",
        app_args={
            "script": "/opt/stall/stall_ddp.py",
            "script_args": ["2", "6"],  # rank 2, local rank 0 of the second node, at step 6
            "image": torch_image,
            "name": "trainer",
            "j": "2x2",
            "cpu": 1,
            "memMB": 2048,
            "tee": 1,
            "mounts": [f"type=bind,src={tmp_path},dst=/opt/stall,readonly"],
        },
        stall_timeout=DDP_STALL_TIMEOUT,
    )
    failed_at = time.monotonic()
    text = log.text
    print(text)
    assert type(outcome) is AppStalledError, (outcome, text)
    # which node ran rank 2 is the rendezvous' choice: the one whose lines it printed
    [sleeper] = {line[1:].split("]")[0] for line in log.lines if "rank=2 world_size=4" in line}
    [other] = {"trainer/0", "trainer/1"} - {sleeper}
    assert outcome.stalled == (sleeper,), (outcome, text)
    silent_since = log.last("rank=2 world_size=4 step=5")
    assert log.first(f"{sleeper} is straggling") - silent_since <= STRAGGLER_AFTER + SLACK, text
    last_step = log.last("rank=0 world_size=4 step=6")
    assert failed_at - last_step <= DDP_STALL_TIMEOUT + SLACK, (failed_at - last_step, text)
    assert running_containers(docker_engine, ti.xcoms["app_id"]) == []
    rows = {f"trainer/{r['replica_id']}": r for r in ti.xcoms["replicas"]}
    assert (rows[other]["step"], rows[sleeper]["step"]) == (6, 5), rows
    print(f"2x2 gloo stall run: {failed_at - started:.1f} s")
