"""Real training on the local cluster's real node: ``dist.ddp`` runs ``torchrun`` with 2 nodes
x 2 processes over gloo in real containers (a kubelet on containerd, pod networking, cluster
DNS: tests/cluster/node.sh), submitted and followed as the triggerer follows it, on Volcano
and on JobSet admitted by Kueue.

The node is started for this module and stopped after it: the other tiers keep kwok's fast
nodes to themselves (the node's taint keeps their pods off it). The module runs at the end
of the cluster lane's ``kube2`` part, beside the others: its Kueue apps go to a ClusterQueue
of their own (the cluster's third pair of queues), so the quota the Kueue tiers fill and the
preemptions they count stay theirs.
Each app lands there by the role's pod overlay (the node's label and taint) and runs the image
tests/images/build_torch_image.sh builds, imported into the node's containerd from the
Docker engine (nothing is pulled).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from kueue_objects import queue_options

from docker_engine import open_docker_engine
from kube_apps import one_replica_app, restricted_async_client, submit, wait_state
from local_cluster import NODE_SCRIPT, ON_REAL_NODE
from task_log import TaskLog
from torch_image import (
    TRAIN_SCRIPT,
    assert_trained_2x2,
    build_torch_image,
    keep_task_log,
    step_lines,
)
from torchx_provider import specs
from torchx_provider.components.dist import DDP_PROGRESS_PATTERN, ddp
from torchx_provider.errors import AppStalledError, UserCodeError
from torchx_provider.operators.finishing import failure_error
from torchx_provider.schedulers.kube import appwrapper, jobset, volcano
from torchx_provider.triggers.events import EventKind
from torchx_provider.triggers.follow import JobFollower
from torchx_provider.triggers.progress import ProgressPattern
from torchx_provider.triggers.watch import WatchLimits

pytestmark = [
    pytest.mark.kubernetes,
    pytest.mark.training,
    pytest.mark.slow,
]

#: seconds a 2x2 run may take from submission to its end (35 to 50 s measured on a loaded
#: machine: `import torch` alone takes 10 s there, in torchrun's agent and in each worker)
RUN_TIMEOUT = 240.0


def node_script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(NODE_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def real_node(kube_cluster: Any, skip_or_fail: Callable[[str], NoReturn]) -> Iterator[str]:
    """The real node up, with the training image in its containerd; stopped after the
    module. Yields the image."""
    kube_cluster.skip_unless_local("the real node joins the local cluster")
    if os.geteuid() != 0:
        skip_or_fail("the real node needs root (mounts, cgroups, network devices)")
    engine = open_docker_engine(skip_or_fail)
    engine.close()
    image = build_torch_image(skip_or_fail)
    started = time.monotonic()
    up = node_script("up", timeout=900)
    if up.returncode != 0:
        node_script("down", timeout=120)
        skip_or_fail(f"node.sh up failed: {up.stderr.strip()[-1500:]}")
    imported = node_script("images", image, timeout=600)
    if imported.returncode != 0:
        node_script("down", timeout=120)
        skip_or_fail(f"node.sh images failed: {imported.stderr.strip()[-1500:]}")
    print(f"real node up, {image} in its containerd, in {time.monotonic() - started:.0f} s")
    try:
        yield image
    finally:
        down = node_script("down", timeout=180)
        assert down.returncode == 0, down.stderr[-1500:]


BACKENDS = {"volcano": volcano, "jobset": jobset, "appwrapper": appwrapper}
#: Volcano's queue of the local cluster
VOLCANO = {"queue": "default"}


def training_app(
    image: str,
    *script_args: str,
    j: str = "2x2",
    memMB: int = 2048,
    max_retries: int = 0,
    mounts: list[str] | None = None,
) -> Any:
    app = ddp(
        *script_args,
        script=TRAIN_SCRIPT,
        image=image,
        name="trainer",
        j=j,
        cpu=1,
        memMB=memMB,
        # Debian's torch 1.13 on Python 3.11 takes a tee of one stream only
        tee=1,
        max_retries=max_retries,
        mounts=mounts,
    )
    for role in app.roles:
        role.metadata["kubernetes"] = ON_REAL_NODE
    return app


async def follow(
    kube_cluster: Any,
    backend: Any,
    app_id: str,
    log: TaskLog,
) -> Any:
    """Follow the app to its end as the trigger does (the restricted account)."""
    client = restricted_async_client(backend.create_async_client, kube_cluster)
    try:
        return await asyncio.wait_for(
            JobFollower(client, app_id, log=log, poll_interval=1.0).run(), RUN_TIMEOUT
        )
    finally:
        await client.close()


async def follow_to_step(
    kube_cluster: Any, backend: Any, app_id: str, log: TaskLog, step: int
) -> asyncio.Future[Any]:
    """The follow of the app, started, once a rank reported ``step`` in the task log."""
    followed = asyncio.ensure_future(follow(kube_cluster, backend, app_id, log))
    deadline = time.monotonic() + RUN_TIMEOUT
    while not any(int(m["step"]) >= step for m in step_lines(log.lines)):
        assert not followed.done(), text_of(log)
        assert time.monotonic() < deadline, text_of(log)
        await asyncio.sleep(0.5)
    return followed


@pytest.fixture
def checkpoints() -> Iterator[Path]:
    """A folder of the real node for the pods' checkpoints (mounted by every pod of an app,
    which all run there), removed after the test."""
    folder = Path(tempfile.mkdtemp(prefix="torchx-checkpoint-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def text_of(log: TaskLog) -> str:
    return log.text[-6000:]


#: the lines that tell which rank failed where and how, for a failure's one-line story
STORY = re.compile(r"::group::|rank      :|Error: |SignalException|^app ")


def story_of(log: TaskLog) -> str:
    """A failed run on one line (a test summary shows a message's first line only): the
    app's states, each rank torchrun names, the error lines and the summary's heads."""
    return " | ".join(line.strip()[:160] for line in log.lines if STORY.search(line))


async def run_to_failure(kube_cluster: Any, scheduler: Any, app: Any) -> tuple[Any, TaskLog]:
    """Submit ``app`` to Volcano, follow it to its end: the error the task fails with, and
    the task log."""
    app_id, _ = submit(scheduler, app, **VOLCANO)
    log = TaskLog()
    event = await follow(kube_cluster, volcano, app_id, log)
    error = failure_error(event)
    assert type(error) is UserCodeError, (error, text_of(log))
    return error, log


@pytest.mark.parametrize("name", ["volcano", "jobset", "appwrapper"])
async def test_ddp_2x2_over_gloo_trains_on_real_containers(
    kube_cluster: Any, real_node: str, tracked_scheduler: Any, name: str
) -> None:
    """Volcano, and JobSet and AppWrapper admitted by Kueue: both pods rendezvous through
    the cluster's DNS, every rank reports world size 4 and the same loss, and each rank's
    lines reach the task log under its role and replica, read from the kubelet through the
    API server."""
    backend = BACKENDS[name]
    scheduler = tracked_scheduler(backend.create_scheduler)
    cfg = VOLCANO if name == "volcano" else queue_options(kube_cluster.require_node_kueue())
    started = time.monotonic()
    app_id, _ = submit(scheduler, training_app(real_node, "--steps", "5"), **cfg)
    log = TaskLog()
    event = await follow(kube_cluster, backend, app_id, log)
    assert (event.kind, event.state.name) == (EventKind.FINISHED, "SUCCEEDED"), text_of(log)
    assert_trained_2x2(log.lines, 5)
    keep_task_log(f"kubernetes-{name}-ddp-2x2", log.lines)
    print(f"{name}: 2x2 DDP run, submission to SUCCEEDED in {time.monotonic() - started:.1f} s")


async def test_a_rank_raising_is_the_user_code_error_of_its_replica(
    kube_cluster: Any, real_node: str, tracked_scheduler: Any
) -> None:
    """Rank 3 raises at step 3 and every other rank fails at once on the lost connection (the
    script does not wait to be stopped, as most do not): each node's torchrun names its own
    "Root Cause" (on rank 3's node that can be rank 2's lost peer, both failed in the same
    second), and Volcano may stop rank 3's node before its torchrun printed one. The task's
    error is a ``UserCodeError`` naming rank 3's replica and rank 3's own error, not a lost
    peer's nor a teardown."""
    scheduler = tracked_scheduler(volcano.create_scheduler)
    fail = ("--fail-at-step", "3", "--fail-rank", "3", "--peer-lost-wait", "0")
    app = training_app(real_node, "--steps", "6", *fail)
    error, log = await run_to_failure(kube_cluster, scheduler, app)
    keep_task_log("kubernetes-volcano-failing-rank", log.lines)  # kept whatever the verdict
    text = text_of(log)
    keys = {m["key"] for m in step_lines(log.lines) if m["rank"] == "3"}
    assert len(keys) == 1, (keys, text)
    role, replica = keys.pop().split("/")
    assert (error.role, error.replica_id) == (role, int(replica)), (story_of(log), error)
    # the kubelet's reason, then the Python error from the termination message (the tail of
    # the log: torchrun's failure summary), or from the log before it where that tail tells
    # only a lost peer or a teardown; or, where Volcano failed the job while rank 3's node was
    # still being stopped, the error alone, from its log
    raised = "RuntimeError: rank 3 failed at step 3 as asked"
    assert error.replica_message in (f"Error: {raised}", raised), (
        story_of(log),
        error.replica_message,
    )
    assert type(error) is UserCodeError, (story_of(log), error)
    assert "Root Cause (first observed failure)" in log.text, text


async def test_a_rank_crashing_once_is_restarted_and_resumes_from_its_checkpoint(
    kube_cluster: Any, real_node: str, tracked_scheduler: Any, checkpoints: Path
) -> None:
    """Rank 3 raises at step 3 of the first run only, restarts allowed: Volcano restarts the
    job (new pods); the checkpoint is in a folder of the node every pod mounts; every rank
    resumes from step 2 and the app succeeds. Both incarnations' lines are in the task log,
    once each (the first pods' logs read before Volcano removed them)."""
    scheduler = tracked_scheduler(volcano.create_scheduler)
    app = training_app(
        real_node,
        *("--steps", "5", "--fail-at-step", "3", "--fail-rank", "3", "--fail-once"),
        *("--checkpoint", "/checkpoint/state.pt"),
        mounts=[f"type=bind,src={checkpoints},dst=/checkpoint"],
        max_retries=2,
    )
    app_id, _ = submit(scheduler, app, **VOLCANO)
    log = TaskLog()
    event = await follow(kube_cluster, volcano, app_id, log)
    text = text_of(log)
    assert (event.kind, event.state.name) == (EventKind.FINISHED, "SUCCEEDED"), text
    assert event.num_restarts >= 1, (event, text)
    assert_trained_2x2(log.lines, 5)
    raised = "RuntimeError: rank 3 failed at step 3 as asked"
    assert any(ln.endswith(raised) for ln in log.lines), text
    resumed = re.findall(r"\]:?rank=(\d) resumed from checkpoint at step (\d+)$", log.text, re.M)
    assert sorted(resumed) == [(str(r), "2") for r in range(4)], text
    keep_task_log("kubernetes-volcano-crash-once", log.lines)


async def test_a_kueue_preemption_of_a_running_ddp_jobset_resumes_from_its_checkpoint(
    kube_cluster: Any, real_node: str, tracked_scheduler: Any, checkpoints: Path
) -> None:
    """A DDP JobSet of low priority trains; a higher-priority app needs the quota it holds:
    Kueue preempts it (its pods' SIGTERM reaches every rank, which saves its checkpoint),
    requeues it and admits it again once the other ended. Every rank resumes from the
    checkpoint and the app succeeds: followed throughout, the preemption said, no failure
    (no Airflow retry spent)."""
    kueue = kube_cluster.require_node_kueue()
    scheduler = tracked_scheduler(jobset.create_scheduler)
    steps = 20
    app = training_app(
        real_node,
        *("--steps", str(steps), "--step-seconds", "1", "--checkpoint", "/checkpoint/s.pt"),
        mounts=[f"type=bind,src={checkpoints},dst=/checkpoint"],
    )
    low_id, _ = submit(scheduler, app, **queue_options(kueue, kueue.low_priority))
    log = TaskLog()
    followed = await follow_to_step(kube_cluster, jobset, low_id, log, 3)
    # 3 of the ClusterQueue's 4 CPUs, on a kwok node: the 2 the JobSet holds must go
    high = one_replica_app(kube_cluster, "kq-high", run_seconds=5)
    high.roles[0].resource = specs.Resource(cpu=3, gpu=0, memMB=256)
    submit(scheduler, high, **queue_options(kueue, kueue.high_priority))
    event = await followed
    text = text_of(log)
    assert (event.kind, event.state.name) == (EventKind.FINISHED, "SUCCEEDED"), text
    assert event.preemptions == 1, (event, text)
    assert sum("was preempted" in ln for ln in log.lines) == 1, text
    joined = log.text
    saved = re.findall(r"rank=(\d) step=(\d+) checkpoint saved on SIGTERM", joined)
    assert sorted(r for r, _ in saved) == ["0", "1", "2", "3"], text
    resumed = re.findall(r"rank=(\d) resumed from checkpoint at step (\d+)$", joined, re.M)
    assert sorted(r for r, _ in resumed) == ["0", "1", "2", "3"], text
    # one checkpoint, read by all: every rank goes on from the same step, to the last one
    [(at)] = {int(step) for _, step in resumed}
    assert 3 <= at < steps, text
    # (a step the first run finished as its pods were stopped may be in both runs' lines)
    after = {(int(m["rank"]), int(m["step"])) for m in step_lines(log.lines)}
    assert {x for x in after if x[1] > at} == {
        (r, s) for r in range(4) for s in range(at + 1, steps + 1)
    }, text
    assert all(f"rank={r} done after step {steps}" in joined for r in range(4)), text
    keep_task_log("kubernetes-jobset-kueue-preempted", log.lines)


async def test_a_real_oom_kill_says_memory_the_replica_and_its_limit(
    kube_cluster: Any, real_node: str, tracked_scheduler: Any
) -> None:
    """Each worker allocates 700 MiB under a 1024 MiB limit: the kernel's memory cgroup kills
    one (torchrun reports its SIGKILL), the container is ``OOMKilled``; the task's error is a
    ``UserCodeError`` of the replica, saying memory and the limit it went over."""
    scheduler = tracked_scheduler(volcano.create_scheduler)
    app = training_app(real_node, "--steps", "3", "--alloc-mb", "700", j="1x2", memMB=1024)
    error, _ = await run_to_failure(kube_cluster, scheduler, app)
    assert (error.role, error.replica_id, error.reason) == ("trainer", 0, "OOMKilled"), error
    assert "killed for exceeding its memory limit of 1024 MiB (1Gi): raise resource.memMB" in str(
        error
    ), error


async def test_a_cancel_reaches_the_script_as_sigterm_and_its_last_lines_are_kept(
    kube_cluster: Any, real_node: str, tracked_scheduler: Any
) -> None:
    """The task's cancel (what marking it failed in the UI does): the pods' SIGTERM reaches
    ``torchrun`` and through it every rank, whose "checkpoint saved on SIGTERM" lines reach
    the task log before the follow ends CANCELLED."""
    scheduler = tracked_scheduler(volcano.create_scheduler)
    app = training_app(real_node, "--steps", "120", "--step-seconds", "1")
    app_id, _ = submit(scheduler, app, **VOLCANO)
    log = TaskLog()
    followed = await follow_to_step(kube_cluster, volcano, app_id, log, 3)
    cancelled_at = time.monotonic()
    await asyncio.to_thread(scheduler.cancel, app_id)
    event = await followed
    text = text_of(log)
    assert event.state.name == "CANCELLED", (event, text)
    # the whole log: ``text`` is its tail, for the message (torchrun's tracebacks after the
    # ranks' lines can fill it)
    joined = log.text
    saved = sorted(
        {int(r) for r in re.findall(r"rank=(\d) step=\d+ checkpoint saved on SIGTERM", joined)}
    )
    assert saved == [0, 1, 2, 3], text
    print(f"cancel to CANCELLED: {time.monotonic() - cancelled_at:.1f} s")


#: the limits of the progress watch on a real 2x2 gloo job: its replicas print nothing
#: while torch loads and the ranks rendezvous (10 to 30 s on a loaded 2-core machine)
STRAGGLER_AFTER = 5.0
DDP_STALL_TIMEOUT = 45.0
#: what is allowed past each limit
SLACK = 5.0


async def test_a_rank_hanging_before_all_reduce_is_named_and_the_job_stalls(
    kube_cluster: Any, real_node: str, tracked_scheduler: Any
) -> None:
    """Rank 2 (the first process of one node) sleeps before its all_reduce at step 6 and the
    other ranks block in the collective: the silent node is named a straggler within
    ``straggler_after`` + 5 s of its last step, the follow ends the app stalled within
    ``stall_timeout`` + 5 s of the last step of any node (``AppStalledError`` naming the
    node that stopped first), and the app is cancelled: nothing of it runs on."""
    scheduler = tracked_scheduler(volcano.create_scheduler)
    app = training_app(
        real_node,
        "--steps",
        "500",
        "--step-seconds",
        "0.5",
        "--hang-at-step",
        "6",
        "--hang-rank",
        "2",
    )
    app_id, _ = submit(scheduler, app, **VOLCANO)
    client = restricted_async_client(volcano.create_async_client, kube_cluster)
    log = TaskLog()
    try:
        event = await asyncio.wait_for(
            JobFollower(
                client,
                app_id,
                log=log,
                poll_interval=1.0,
                progress_pattern=ProgressPattern.parse(DDP_PROGRESS_PATTERN),
                watch=WatchLimits(STRAGGLER_AFTER, DDP_STALL_TIMEOUT),
            ).run(),
            RUN_TIMEOUT,
        )
    finally:
        await client.close()
    ended = time.monotonic()
    text = text_of(log)
    error = failure_error(event)
    assert type(error) is AppStalledError, (error, text)
    # which node ran rank 2 is the rendezvous' choice: the one whose lines it printed
    [sleeper] = {ln[1:].split("]")[0] for ln in log.lines if "rank=2 world_size=4" in ln}
    assert error.stalled == (sleeper,), (error, text)

    assert log.first(f"{sleeper} is straggling") - log.last("rank=2 world_size=4 step=5") <= (
        STRAGGLER_AFTER + SLACK
    ), text
    assert ended - log.last("rank=0 step=6 all_reduce") <= DDP_STALL_TIMEOUT + SLACK, text
    # the follow asked Volcano to abort the job (a command its controller takes up)
    assert any("stalled; the app was cancelled" in ln for ln in log.lines), text
    await asyncio.to_thread(
        wait_state, scheduler, app_id, lambda r: r.state.name == "CANCELLED", 60
    )
