"""Real training on a real engine: ``dist.ddp`` runs ``torchrun`` with 2 nodes x 2 processes
over gloo, in the image tests/images/build_torch_image.sh builds (Debian's torch 1.13, CPU),
through the operator's own steps (not deferred): prepare, submit, follow, finish.

The example script dags_examples/apps/train_ddp.py trains a tiny model; every rank prints its
rank, the world size and the all-reduced loss of each step.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import pytest

from docker_operator_harness import TI, Log, Operator
from torch_image import (
    TRAIN_SCRIPT,
    assert_trained_2x2,
    build_torch_image,
    keep_task_log,
    step_lines,
)
from torchx_provider.errors import UserCodeError
from torchx_provider.schedulers.docker import create_scheduler

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.training]

STEPS = 5


@pytest.fixture(scope="session")
def torch_image(docker_engine: Any, skip_or_fail: Callable[[str], NoReturn]) -> str:
    """The training image, built (or found up to date) by the build script."""
    return build_torch_image(skip_or_fail)


def new_ti() -> TI:
    return TI("training", "train")


@pytest.fixture
def train(torch_image: str, network: str) -> Iterator[Callable[..., tuple[Any, TI, Log]]]:
    """``train(*script_args, env=..., max_retries=...)``: run ``dist.ddp`` 2x2 of the example
    script as a task; returns what the task raised (or returned), its TI and its log."""
    apps: list[str] = []

    def run_task(
        *script_args: str, env: dict[str, str] | None = None, max_retries: int = 0
    ) -> tuple[Any, TI, Log]:
        op = Operator(
            task_id="train",
            app="dist.ddp",
            app_args={
                "script": TRAIN_SCRIPT,
                "script_args": list(script_args),
                "image": torch_image,
                "name": "trainer",
                "j": "2x2",
                "cpu": 1,
                "memMB": 2048,
                # Debian's torch 1.13 on Python 3.11 takes a tee of one stream only
                "tee": 1,
                "env": env or {},
                "max_retries": max_retries,
            },
            cfg={"network": network},
            poll_interval=0.5,
            deferrable=False,
        )
        op.recorded = Log()
        ti = new_ti()
        try:
            outcome: Any = op.execute({"ti": ti, "task_state_store": None})  # type: ignore[arg-type]
        except Exception as e:
            outcome = e
        if "app_id" in ti.xcoms:
            apps.append(ti.xcoms["app_id"])
        return outcome, ti, op.recorded

    yield run_task
    with create_scheduler("cleanup") as scheduler:
        for app_id in apps:
            scheduler.delete(app_id)


def test_ddp_2x2_over_gloo_trains_with_the_same_loss_on_every_rank(train: Any) -> None:
    started = time.monotonic()
    outcome, ti, log = train("--steps", str(STEPS))
    text = log.text
    assert not isinstance(outcome, Exception), (outcome, text)
    assert ti.xcoms["final_state"] == "SUCCEEDED", ti.xcoms

    assert_trained_2x2(log.lines, STEPS)
    keep_task_log("docker-ddp-2x2", log.lines)
    print(f"2x2 DDP run: {time.monotonic() - started:.1f} s")


def test_a_rank_raising_at_step_3_is_the_user_code_error_of_its_replica(train: Any) -> None:
    """Rank 3 raises at step 3: torchrun's own failure summary on its node names it as the
    root cause; the task fails with a ``UserCodeError`` naming that node's replica and the
    Python error line, not the teardown (SIGTERM) of the other ranks."""
    started = time.monotonic()
    outcome, ti, log = train("--steps", "6", "--fail-at-step", "3", "--fail-rank", "3")
    text = log.text
    assert type(outcome) is UserCodeError, (outcome, text)
    # the replica that ran rank 3, from its step lines
    keys = {m["key"] for m in step_lines(log.lines) if m["rank"] == "3"}
    assert len(keys) == 1, (keys, text)
    role, replica = keys.pop().split("/")
    assert (outcome.role, outcome.replica_id) == (role, int(replica)), (outcome, text)
    assert outcome.replica_message == "RuntimeError: rank 3 failed at step 3 as asked", (
        outcome.replica_message,
        text,
    )
    assert "Root Cause (first observed failure)" in text, text
    # rank 2 shares the failing node: torchrun stopped it (SIGTERM) after it saved its step
    assert f"[{role}/{replica}] [0]:rank=2 step=2 checkpoint saved on SIGTERM" in log.lines, text
    causes = [r for r in ti.xcoms["replicas"] if r["root_cause"]]
    assert [(r["role"], r["replica_id"]) for r in causes] == [(role, int(replica))], ti.xcoms
    keep_task_log("docker-failing-rank", log.lines)
    print(f"failing-rank run: {time.monotonic() - started:.1f} s")


def test_a_rank_crashing_once_is_restarted_and_resumes_from_its_checkpoint(train: Any) -> None:
    """Rank 3 raises at step 3 of the first run only, restarts allowed: Docker restarts each
    failed container in place (its file system, and the checkpoint in it, kept); every rank
    resumes from step 2 and the app succeeds. Both incarnations' lines are in the task log,
    once each: every rank's steps 1 to 5 once, the failure once, each rank's resume once."""
    started = time.monotonic()
    # a restart of the node holding the rendezvous store can fail the other node's new
    # torchrun once more: restarts enough for that
    outcome, ti, log = train(
        "--steps",
        str(STEPS),
        "--fail-at-step",
        "3",
        "--fail-rank",
        "3",
        "--fail-once",
        max_retries=3,
    )
    text = log.text
    assert not isinstance(outcome, Exception), (outcome, text)
    assert ti.xcoms["final_state"] == "SUCCEEDED", (ti.xcoms, text)
    assert_trained_2x2(log.lines, STEPS)
    raised = [
        ln for ln in log.lines if ln.endswith("RuntimeError: rank 3 failed at step 3 as asked")
    ]
    assert raised, text
    resumed = sorted(
        re.findall(r"\]:?rank=(\d) resumed from checkpoint at step (\d+)$", text, re.M)
    )
    assert resumed == [(str(r), "2") for r in range(4)], text
    assert outcome["num_restarts"] >= 1, outcome
    keep_task_log("docker-crash-once", log.lines)
    print(f"crash-once run: {time.monotonic() - started:.1f} s")
