"""Why a job waits reaches the task log, in the cluster's words, on the real API server and
schedulers, followed from the triggerer's shared watches: a replica too large for any node
(the AppWrapper controller makes its pod; kube-scheduler cannot place it), and a Volcano job
over its queue's quota (no pod at all: Volcano says why in Events on the job's PodGroup),
a Volcano job whose pods a namespace's ResourceQuota refuses (Volcano says why in Events on
the job), a Volcano job whose queue is closed while it waits there (Volcano says nothing; the
Queue's state does, to an account that may read it), an MCAD AppWrapper too large to
dispatch (MCAD says why in its conditions)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from rbac_accounts import Accounts

from kube_apps import one_replica_app, restricted_async_client, submit, tracked
from task_log import TaskLog
from torchx_provider import specs
from torchx_provider.schedulers.kube import mcad, volcano
from torchx_provider.schedulers.kube.appwrapper import create_async_client, create_scheduler
from torchx_provider.triggers.follow import JobFollower

pytestmark = pytest.mark.kubernetes


@pytest.fixture
def scheduler(tracked_scheduler: Any) -> Any:
    return tracked_scheduler(
        create_scheduler, local_only="needs the local cluster's nodes (32 CPUs each)"
    )


def too_large(kube_cluster: Any) -> specs.AppDef:
    app = one_replica_app(kube_cluster, "toolarge", exit_code=0, run_seconds=1)
    app.roles[0].resource = specs.Resource(cpu=200, gpu=0, memMB=256)
    return app


@contextlib.asynccontextmanager
async def followed(client: Any, app_id: str) -> AsyncIterator[TaskLog]:
    """The app followed as the triggerer follows it, into a task log, until the block ends;
    ``client`` is closed after."""
    log = TaskLog()
    follow = asyncio.ensure_future(JobFollower(client, app_id, log=log, poll_interval=1.0).run())
    try:
        yield log
    finally:
        follow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follow
        await client.close()


async def first_said(log: TaskLog, phrase: str, within: float) -> tuple[list[str], float]:
    """The task log's lines holding ``phrase`` once one is there (at most ``within``
    seconds), and how long that took."""
    started = time.monotonic()
    said: list[str] = []
    while time.monotonic() - started < within and not said:
        said = [ln for ln in log.lines if phrase in ln]
        await asyncio.sleep(0.2)
    assert said, log.lines
    return said, time.monotonic() - started


async def said_once_by_both(
    scheduler: Any, client: Any, app_id: str, phrase: str, within: float = 15
) -> tuple[str, float, list[str]]:
    """Follow ``app_id`` as the triggerer does until ``phrase`` is said (within ``within``
    seconds), check that 5 s later (several polls, the controller saying it again) it was
    said once, and that the worker's describe says it once too; the line, how long it took,
    and the task log."""
    async with followed(client, app_id) as log:
        said, took = await first_said(log, phrase, 2 * within)
        assert took < within, (took, log.lines)
        await asyncio.sleep(5)
        assert sum(phrase in ln for ln in log.lines) == 1, log.lines
    described = scheduler.describe(app_id)
    assert described is not None and described.state.name == "PENDING", described
    texts = [n.text for n in scheduler.core.take_notices()]
    assert sum(phrase in t for t in texts) == 1, texts
    return said[0], took, log.lines


async def test_an_unschedulable_replica_is_said_once_within_seconds(
    kube_cluster: Any, scheduler: Any
) -> None:
    app_id, _ = submit(scheduler, too_large(kube_cluster))
    client = restricted_async_client(create_async_client, kube_cluster)
    async with followed(client, app_id) as log:
        said, took = await first_said(log, "is not scheduled", 60)
        assert "Insufficient cpu" in said[0], said
        await asyncio.sleep(5)  # several polls and watch events later: still said once
        assert sum("is not scheduled" in ln for ln in log.lines) == 1, log.lines
    print(f"reason in the task log {took:.1f} s after submission")


@pytest.fixture
def volcano_scheduler(tracked_scheduler: Any) -> Any:
    return tracked_scheduler(
        volcano.create_scheduler, local_only="needs the local cluster's nodes (32 CPUs each)"
    )


QUOTA = "queue resource quota insufficient"


async def test_a_volcano_job_over_its_queue_quota_says_why_once_within_seconds(
    kube_cluster: Any, volcano_scheduler: Any
) -> None:
    app = too_large(kube_cluster)
    app.roles[0].num_replicas = 2
    app_id, _ = submit(volcano_scheduler, app, queue="default")
    client = restricted_async_client(volcano.create_async_client, kube_cluster)
    # Volcano repeats the Event every cycle; the worker's describe lists the PodGroup's
    # Events while the job is pending
    said, took, lines = await said_once_by_both(volcano_scheduler, client, app_id, QUOTA)
    assert "PodGroup" in said and "insufficient cpu" in said, said
    assert not [ln for ln in lines if "add the rule" in ln], lines
    print(f"queue reason in the task log {took:.1f} s after submission")


@pytest.fixture
def own_queue(kube_cluster: Any) -> Iterator[str]:
    """A Volcano Queue of its own (cluster-scoped; deleted after)."""
    from kubernetes import client as k8s

    name = f"torchx-test-q-{secrets.token_hex(3)}"
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1, "reclaimable": False},
    }
    with kube_cluster.api_client() as api:
        custom = k8s.CustomObjectsApi(api)
        custom.create_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", queue)
        try:
            yield name
        finally:
            custom.delete_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", name)


def close_queue(kube_cluster: Any, name: str) -> None:
    """Close Volcano Queue ``name`` as its state machine keeps it: Closing while jobs are
    in it, then Closed."""
    from kubernetes import client as k8s

    with kube_cluster.api_client() as api:
        k8s.CustomObjectsApi(api).patch_cluster_custom_object_status(
            "scheduling.volcano.sh", "v1beta1", "queues", name, {"status": {"state": "Closed"}}
        )


async def test_a_volcano_queue_closed_while_a_job_waits_there_is_said_once_within_seconds(
    kube_cluster: Any, own_queue: str, volcano_scheduler: Any
) -> None:
    """Said to an account that may read the cluster's Queues (here the admin's); the
    shipped Role is namespaced and cannot: its describe says nothing of the queue."""
    app_id, _ = submit(volcano_scheduler, too_large(kube_cluster), queue=own_queue)
    close_queue(kube_cluster, own_queue)
    admin = {"kubeconfig": kube_cluster.kubeconfig, "namespace": kube_cluster.namespace}
    client = volcano.create_async_client(**admin)
    worker = volcano.create_scheduler("admin", **admin)
    phrase = f"Volcano queue {own_queue!r} is Clos"
    try:
        said, took, _ = await said_once_by_both(worker, client, app_id, phrase)
    finally:
        worker.close()
    assert "admits no new job" in said and f"kubectl get queue {own_queue}" in said, said
    print(f"closed queue in the task log {took:.1f} s after it was closed")
    assert volcano_scheduler.describe(app_id).state.name == "PENDING"
    quiet = [n.text for n in volcano_scheduler.core.take_notices()]
    assert not [t for t in quiet if own_queue in t or "add the rule" in t], quiet


@pytest.fixture
def no_pods_namespace(kube_cluster: Any) -> Iterator[str]:
    """A namespace of its own whose ResourceQuota allows no pod (deleted after)."""
    from kubernetes import client as k8s

    name = f"torchx-test-nopods-{secrets.token_hex(3)}"
    with kube_cluster.api_client() as api:
        core = k8s.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": name}})
        try:
            core.create_namespaced_resource_quota(
                name, {"metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}}
            )
            # The local cluster runs no quota controller: admission enforces a quota by the
            # status that controller would write, so write it here.
            core.replace_namespaced_resource_quota_status(
                "no-pods",
                name,
                {
                    "metadata": {"name": "no-pods"},
                    "spec": {"hard": {"pods": "0"}},
                    "status": {"hard": {"pods": "0"}, "used": {"pods": "0"}},
                },
            )
            yield name
        finally:
            core.delete_namespace(name)


async def test_pods_a_volcano_job_cannot_create_are_said_once_within_seconds(
    kube_cluster: Any, no_pods_namespace: str
) -> None:
    if not kube_cluster.local:
        pytest.skip("makes a namespace of its own on the local cluster")
    with tracked(
        volcano.create_scheduler(
            "it", kubeconfig=kube_cluster.kubeconfig, namespace=no_pods_namespace
        )
    ) as scheduler:
        app = one_replica_app(kube_cluster, "nopods", exit_code=0, run_seconds=1)
        app_id = scheduler.schedule(scheduler.submit_dryrun(app, {"queue": "default"}))
        scheduler.created.append(app_id)
        client = volcano.create_async_client(
            kubeconfig=kube_cluster.kubeconfig, namespace=no_pods_namespace
        )
        # Volcano retries the pods and writes the Event again each time
        said, took, _ = await said_once_by_both(scheduler, client, app_id, "FailedCreate")
    assert said.startswith(f"Job {app_id.split(':')[1]} waits: FailedCreate: "), said
    assert "exceeded quota: no-pods" in said, said
    print(f"pods refused, in the task log {took:.1f} s after submission")


@pytest.fixture
def kueue(kube_cluster: Any) -> Any:
    kube_cluster.skip_unless_local("needs the local cluster's Kueue queues")
    return kube_cluster.require_kueue()


async def test_kueue_says_why_an_appwrapper_is_not_admitted_once_within_seconds(
    kube_cluster: Any, scheduler: Any, kueue: Any, tmp_path: Path
) -> None:
    """Two AppWrappers Kueue will not admit, followed from the shared Workload watch: one
    asks for more CPU than the ClusterQueue ever holds (never admissible), the other names
    a LocalQueue that does not exist (submitted by an account that may not read
    LocalQueues: the documented one refuses it before submission). Neither takes any
    quota."""
    big = one_replica_app(kube_cluster, "kq-big", run_seconds=1)
    big.roles[0].resource = specs.Resource(cpu=64, gpu=0, memMB=256)
    lost = one_replica_app(kube_cluster, "kq-lost", run_seconds=1)
    accounts = Accounts(kube_cluster, tmp_path)
    blind = accounts.without("kueue.x-k8s.io", "localqueues", "get")
    apps = []
    with contextlib.ExitStack() as stack:
        stack.callback(accounts.delete)
        unread = stack.enter_context(
            tracked(create_scheduler("it", kubeconfig=blind, namespace=kube_cluster.namespace))
        )
        for submitter, app, queue in (
            (scheduler, big, kueue.local_queue),
            (unread, lost, "no-such-queue"),
        ):
            app_id, _ = submit(submitter, app, local_queue=queue)
            apps.append(app_id)
        await said_not_admitted(kube_cluster, scheduler, apps)


async def said_not_admitted(kube_cluster: Any, scheduler: Any, apps: list[str]) -> None:
    """What the test above checks of its two apps, once submitted."""
    clients = [restricted_async_client(create_async_client, kube_cluster) for _ in apps]
    async with followed(clients[0], apps[0]) as log_big, followed(clients[1], apps[1]) as log_lost:
        never, took_big = await first_said(log_big, "can never be admitted", 30)
        assert "maximum capacity" in never[0] and "cpu" in never[0], never
        lost_said, took_lost = await first_said(log_lost, "cannot be admitted", 30)
        assert "Inadmissible: LocalQueue no-such-queue doesn't exist" in lost_said[0], lost_said
        assert max(took_big, took_lost) < 15, (took_big, took_lost)
        await asyncio.sleep(4)  # Kueue keeps trying: still said once
        assert sum("can never be admitted" in ln for ln in log_big.lines) == 1, log_big.lines
        assert sum("cannot be admitted" in ln for ln in log_lost.lines) == 1, log_lost.lines
    # The worker's describe reads the same from one list of the app's Workload.
    scheduler.describe(apps[0])
    texts = [n.text for n in scheduler.core.take_notices()]
    assert any("can never be admitted" in t for t in texts), texts
    print(f"Kueue's reasons in the task log {took_big:.1f} s / {took_lost:.1f} s after submission")


@pytest.fixture
def mcad_scheduler(kube_cluster: Any, tracked_scheduler: Any) -> Any:
    if not kube_cluster.local or kube_cluster.mcad_restricted_kubeconfig is None:
        pytest.skip("needs the local cluster's MCAD API server")
    if not kube_cluster.mcad_controller:
        pytest.skip("this cluster does not run MCAD's controller")
    return tracked_scheduler(mcad.create_scheduler, mcad=True)


MCAD_HOLDS = "not dispatched: AppWrapperNotRunnable"


async def test_mcad_says_why_it_does_not_dispatch_an_appwrapper_once_within_seconds(
    kube_cluster: Any, mcad_scheduler: Any
) -> None:
    """MCAD keeps an AppWrapper larger than its nodes queued and says why only in the
    AppWrapper's conditions (``Backoff``): the follow says it once, in MCAD's words."""
    app = too_large(kube_cluster)
    app.roles[0].num_replicas = 2
    app_id, _ = submit(mcad_scheduler, app)
    client = restricted_async_client(mcad.create_async_client, kube_cluster, mcad=True)
    # MCAD backs off and tries again; the worker's describe reads the same conditions
    said, took, _ = await said_once_by_both(mcad_scheduler, client, app_id, MCAD_HOLDS)
    assert "Insufficient resources to dispatch AppWrapper" in said, said
    print(f"MCAD's reason in the task log {took:.1f} s after submission")
