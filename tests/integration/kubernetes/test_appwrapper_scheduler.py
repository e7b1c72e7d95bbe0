"""The ``kubernetes_appwrapper`` backend on the real AppWrapper v1.2.1 controller.

The main API server serves the ``v1beta2`` AppWrapper CRD, the AppWrapper controller and the
batch Job controller run there, and kwok plays the pods. Kueue runs too: an app submitted to
its LocalQueue (``local_queue``) is created suspended, and Kueue admits it within the
ClusterQueue's quota (see tests/cluster/README.md). The provider only uses the restricted
kubeconfig.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import kueue_objects
import pytest
from kueue_objects import condition, cpu_quota

from kube_apps import tracked
from torchx_provider import specs
from torchx_provider.schedulers.kube.appwrapper import create_async_client, create_scheduler
from torchx_provider.schedulers.kube.hub import InformerHub
from torchx_provider.schedulers.kube.resources import APPWRAPPER_V1BETA2
from torchx_provider.schedulers.kube.status import JOB_INDEX_LABEL
from torchx_provider.schedulers.labels import LABEL_APP_ID, TaskInstanceKey
from torchx_provider.specs.api import AppState, is_terminal

pytestmark = pytest.mark.kubernetes


@pytest.fixture
def scheduler(kube_cluster: Any) -> Iterator[Any]:
    with tracked(
        create_scheduler(
            "it", kubeconfig=kube_cluster.restricted_kubeconfig, namespace=kube_cluster.namespace
        )
    ) as s:
        yield s


def app(
    name: str, behaviour: dict[str, str], max_retries: int = 0, cpu: float = 0.5
) -> specs.AppDef:
    def role(role_name: str, replicas: int) -> specs.Role:
        return specs.Role(
            role_name,
            image="registry.invalid/train:1",
            entrypoint="python",
            args=["-m", "train", "--rank", "${replica_id}", "--master", "$${${rank0_env}}"],
            num_replicas=replicas,
            max_retries=max_retries,
            resource=specs.Resource(cpu=cpu, gpu=0, memMB=256),
            metadata={"kubernetes": {"metadata": {"annotations": behaviour}}},
        )

    return specs.AppDef(name, [role("trainer", 2), role("ps", 1)])


def submit(scheduler: Any, a: specs.AppDef, ti_key: Any = None, **cfg: Any) -> tuple[str, Any]:
    info = scheduler.submit_dryrun(a, cfg, ti_key=ti_key)
    app_id = scheduler.schedule(info)
    scheduler.created.append(app_id)
    return app_id, info


def wait_state(
    scheduler: Any, app_id: str, done: Callable[[Any], bool], timeout: float = 120
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        resp = scheduler.describe(app_id)
        assert resp is not None
        if done(resp):
            return resp
        if time.monotonic() > deadline:
            pytest.fail(f"{app_id}: timed out; last {resp}")
        time.sleep(0.3)


def replicas(resp: Any) -> list[Any]:
    return [r for rs in resp.roles_statuses for r in rs.replicas]


def stored(kube_cluster: Any, app_id: str) -> dict[str, Any]:
    from kubernetes import client

    namespace, name = app_id.split(":")
    api = client.CustomObjectsApi(kube_cluster.api_client())
    res = APPWRAPPER_V1BETA2
    return dict(
        api.get_namespaced_custom_object(res.group, res.version, namespace, res.plural, name)
    )


def pods(kube_cluster: Any, app_id: str) -> list[Any]:
    from kubernetes import client

    namespace, name = app_id.split(":")
    core = client.CoreV1Api(kube_cluster.api_client())
    return list(core.list_namespaced_pod(namespace, label_selector=f"{LABEL_APP_ID}={name}").items)


def test_success_runs_every_replica(kube_cluster: Any, scheduler: Any) -> None:
    app_id, info = submit(scheduler, app("it-aw-ok", kube_cluster.pod_behaviour(run_seconds=2)))
    body = stored(kube_cluster, app_id)
    # Nothing was pruned: the components came back as sent.
    assert body["spec"]["components"] == info.request.body["spec"]["components"]
    resp = wait_state(scheduler, app_id, lambda r: is_terminal(r.state))
    assert resp.state is AppState.SUCCEEDED, resp
    assert [r.name for r in resp.roles] == ["trainer", "ps"]
    assert [(r.role, r.id, r.state, r.exit_code) for r in replicas(resp)] == [
        ("trainer", 0, AppState.SUCCEEDED, 0),
        ("trainer", 1, AppState.SUCCEEDED, 0),
        ("ps", 0, AppState.SUCCEEDED, 0),
    ]
    name = app_id.split(":")[1]
    assert replicas(resp)[1].hostname == f"{name}-trainer-1.{name}"
    assert resp.num_restarts == 0
    # The controller counted every replica: 3 pods of 2 podSets.
    status = stored(kube_cluster, app_id)["status"]
    assert [ps["replicas"] for c in status["componentStatus"] for ps in c["podSets"]] == [2, 1]


def test_a_failed_replica_is_retried_then_fails(kube_cluster: Any, scheduler: Any) -> None:
    behaviour = kube_cluster.pod_behaviour(exit_code=3, run_seconds=1)
    app_id, _ = submit(
        scheduler,
        app("it-aw-retry", behaviour, max_retries=2),
        retry_pause_period="1s",
        deletion_on_failure_grace_period="60s",
    )
    resp = wait_state(scheduler, app_id, lambda r: is_terminal(r.state), timeout=180)
    assert resp.state is AppState.FAILED, resp
    assert resp.num_restarts == 2
    assert stored(kube_cluster, app_id)["status"]["resettingCount"] == 2
    # deletion_on_failure_grace_period kept the last run's pods: their exit codes show.
    assert {r.exit_code for r in replicas(resp)} == {3}
    assert "3" in resp.structured_error_msg or "Error" in resp.structured_error_msg


def test_cancel_suspends_and_keeps_the_appwrapper(kube_cluster: Any, scheduler: Any) -> None:
    app_id, _ = submit(
        scheduler, app("it-aw-cancel", kube_cluster.pod_behaviour(keep_running=True))
    )
    wait_state(scheduler, app_id, lambda r: {x.state for x in replicas(r)} == {AppState.RUNNING})
    scheduler.cancel(app_id)
    resp = scheduler.describe(app_id)
    assert resp is not None and resp.state is AppState.CANCELLED
    deadline = time.monotonic() + 60
    while stored(kube_cluster, app_id).get("status", {}).get("phase") != "Suspended" or pods(
        kube_cluster, app_id
    ):
        assert time.monotonic() < deadline, stored(kube_cluster, app_id).get("status")
        time.sleep(0.3)
    body = stored(kube_cluster, app_id)
    assert body["spec"]["suspend"] is True
    assert scheduler.describe(app_id).state is AppState.CANCELLED
    scheduler.cancel(app_id)  # an ended app is left alone
    scheduler.delete(app_id)
    deadline = time.monotonic() + 30
    while scheduler.describe(app_id) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.3)


def test_cancel_by_delete(kube_cluster: Any, scheduler: Any) -> None:
    app_id, _ = submit(
        scheduler,
        app("it-aw-cancel-del", kube_cluster.pod_behaviour(keep_running=True)),
        cancel_by="delete",
    )
    wait_state(scheduler, app_id, lambda r: r.state is AppState.RUNNING)
    scheduler.cancel(app_id)
    deadline = time.monotonic() + 30
    while scheduler.describe(app_id) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.3)


def test_reattach_finds_the_app_of_an_earlier_try(kube_cluster: Any, scheduler: Any) -> None:
    first = TaskInstanceKey("it_dag", "aw", "scheduled__2024-05-01T00:00:00+00:00", -1, 1)
    app_id, _ = submit(
        scheduler, app("it-aw-reattach", kube_cluster.pod_behaviour(keep_running=True)), first
    )
    retry = TaskInstanceKey("it_dag", "aw", "scheduled__2024-05-01T00:00:00+00:00", -1, 2)
    assert [f.app_id for f in scheduler.find_apps(retry)] == [app_id]
    assert app_id in {r.app_id for r in scheduler.list()}
    other = TaskInstanceKey("it_dag", "other", "scheduled__2024-05-01T00:00:00+00:00", -1, 2)
    assert scheduler.find_apps(other) == []


def test_logs_of_every_replica(kube_cluster: Any, scheduler: Any, wait_until: Any) -> None:
    start = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    app_id, _ = submit(scheduler, app("it-aw-logs", kube_cluster.pod_behaviour(run_seconds=4)))
    found = wait_until(lambda: len(pods(kube_cluster, app_id)) == 3 and pods(kube_cluster, app_id))
    expected = {}
    for pod in found:
        role = pod.metadata.annotations["torchx.pytorch.org/role-name"]
        index = int(pod.metadata.labels[JOB_INDEX_LABEL])
        lines = [f"{role}/{index} line {i}" for i in range(3)]
        kube_cluster.set_pod_logs(
            pod.metadata.name, lines, start=start, interval=dt.timedelta(seconds=1)
        )
        expected[(role, index)] = lines
    assert set(expected) == {("trainer", 0), ("trainer", 1), ("ps", 0)}
    wait_state(scheduler, app_id, lambda r: is_terminal(r.state))
    for (role, index), lines in expected.items():
        assert list(scheduler.log_iter(app_id, role, index)) == [f"{x}\n" for x in lines]
    since = list(scheduler.log_iter(app_id, "trainer", 1, since=start + dt.timedelta(seconds=1)))
    assert since == [f"{x}\n" for x in expected[("trainer", 1)][1:]]


def workload(kube_cluster: Any, app_id: str) -> dict[str, Any] | None:
    """The Kueue Workload of a AppWrapper, if Kueue made one."""
    return kueue_objects.workload(kube_cluster, app_id, "AppWrapper")


def test_kueue_admits_an_app_of_its_local_queue(
    kube_cluster: Any, scheduler: Any, wait_until: Any
) -> None:
    kueue = kube_cluster.require_kueue()
    app_id, _info = submit(
        scheduler,
        app("it-aw-kueue", kube_cluster.pod_behaviour(run_seconds=2)),
        local_queue=kueue.local_queue,
        priority_class=kueue.low_priority,
    )
    labels = stored(kube_cluster, app_id)["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == kueue.local_queue
    assert labels["kueue.x-k8s.io/priority-class"] == kueue.low_priority
    phases = []
    deadline = time.monotonic() + 120
    while not phases or phases[-1] not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline, phases
        phase = stored(kube_cluster, app_id).get("status", {}).get("phase")
        if not phases or phases[-1] != phase:
            phases.append(phase)
        time.sleep(0.05)
    assert phases[-1] == "Succeeded" and "Running" in phases, phases
    assert scheduler.describe(app_id).state is AppState.SUCCEEDED
    # Kueue admitted it: its Workload reserved quota in the ClusterQueue, at the priority asked.
    wl = wait_until(lambda: workload(kube_cluster, app_id))
    assert condition(wl, "Admitted")["status"] == "True" or condition(wl, "Finished"), wl
    assert wl["status"]["admission"]["clusterQueue"] == kueue.cluster_queue
    assert wl["spec"]["priorityClassRef"]["name"] == kueue.low_priority
    assert wl["spec"]["queueName"] == kueue.local_queue


def test_over_quota_waits_until_the_quota_frees(
    kube_cluster: Any, scheduler: Any, wait_until: Any
) -> None:
    """Two apps that each need most of the ClusterQueue's CPU quota: the second is held
    suspended (Kueue reserves no quota for it) while the first runs, and admitted once the
    first has ended."""
    kueue = kube_cluster.require_kueue()
    # 3 replicas each; two such apps exceed the quota, one fits.
    cpu = cpu_quota(kube_cluster, kueue.cluster_queue) / 4
    first, _ = submit(
        scheduler,
        app("it-aw-quota-a", kube_cluster.pod_behaviour(run_seconds=8), cpu=cpu),
        local_queue=kueue.local_queue,
    )
    wait_state(scheduler, first, lambda r: r.state is AppState.RUNNING)
    second, _ = submit(
        scheduler,
        app("it-aw-quota-b", kube_cluster.pod_behaviour(run_seconds=1), cpu=cpu),
        local_queue=kueue.local_queue,
    )
    wl = wait_until(lambda: workload(kube_cluster, second))
    reserved = wait_until(
        lambda: condition(workload(kube_cluster, second), "QuotaReserved") or None
    )
    assert reserved["status"] == "False", wl
    assert "insufficient unused quota" in reserved["message"], reserved
    # Held while the first runs: suspended, no pods, and the task log says it is queued.
    time.sleep(2)
    assert scheduler.describe(first).state is AppState.RUNNING
    held = scheduler.describe(second)
    assert held.state is AppState.PENDING
    assert held.msg == (
        f"Suspended: queued in Kueue local queue {kueue.local_queue!r}, waiting for admission"
    )
    assert stored(kube_cluster, second)["spec"]["suspend"] is True
    assert pods(kube_cluster, second) == []
    # The triggerer's follow says Kueue's reason with what waits in the LocalQueue (from
    # the shared LocalQueue watch).
    said = asyncio.run(notices_of(kube_cluster, second))
    waits = [t for t in said if "waits for quota" in t]
    assert len(waits) == 1 and "insufficient unused quota" in waits[0], said
    assert re.search(rf"; LocalQueue {kueue.local_queue} holds \d+ pending", waits[0]), waits
    # The first ends; Kueue admits the second, which runs to the end.
    done = wait_state(scheduler, first, lambda r: is_terminal(r.state), timeout=60)
    assert done.state is AppState.SUCCEEDED
    resp = wait_state(scheduler, second, lambda r: is_terminal(r.state), timeout=120)
    assert resp.state is AppState.SUCCEEDED, resp
    admitted = condition(workload(kube_cluster, second), "QuotaReserved")
    assert admitted["status"] == "True", admitted


async def notices_of(kube_cluster: Any, app_id: str) -> list[str]:
    """What a triggerer's describe of ``app_id`` says about why it waits."""
    client = create_async_client(
        kubeconfig=kube_cluster.restricted_kubeconfig, namespace=kube_cluster.namespace
    )
    try:
        await client.describe(app_id)
        return [n.text for n in client.take_notices()]
    finally:
        await client.close()
        await InformerHub.current().close()


async def test_async_client(kube_cluster: Any, scheduler: Any) -> None:
    app_id, _ = submit(scheduler, app("it-aw-async", kube_cluster.pod_behaviour(keep_running=True)))
    wait_state(scheduler, app_id, lambda r: {x.state for x in replicas(r)} == {AppState.RUNNING})
    client = create_async_client(
        kubeconfig=kube_cluster.restricted_kubeconfig, namespace=kube_cluster.namespace
    )
    try:
        resp = await client.describe(app_id)
        assert resp is not None and resp.state is AppState.RUNNING
        assert resp == scheduler.describe(app_id)
        await client.cancel(app_id)
        resp = await client.describe(app_id)
        assert resp is not None and resp.state is AppState.CANCELLED
    finally:
        await client.close()


@pytest.mark.parametrize(("group", "resource"), [("batch", "jobs"), ("", "services")])
def test_the_webhooks_rbac_check_would_admit_us(
    kube_cluster: Any, group: str, resource: str
) -> None:
    """The AppWrapper webhook (off here, on by default) admits an AppWrapper only if its
    submitter may create every kind it wraps: the restricted identity may."""
    from kubernetes import client

    api = client.AuthorizationV1Api(kube_cluster.api_client(restricted=True))
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                namespace=kube_cluster.namespace, verb="create", group=group, resource=resource
            )
        )
    )
    assert api.create_self_subject_access_review(review).status.allowed


def test_higher_priority_preempts_within_the_cluster_queue(
    kube_cluster: Any, scheduler: Any, wait_until: Any
) -> None:
    """The ClusterQueue preempts lower-priority work of its own: a high-priority app that
    does not fit beside a running low-priority one evicts it; the low one goes back to the
    queue (suspended, its pods removed), and is admitted again once the high one has ended."""
    kueue = kube_cluster.require_kueue()
    cpu = cpu_quota(kube_cluster, kueue.cluster_queue) / 4
    low, _ = submit(
        scheduler,
        app("it-aw-low", kube_cluster.pod_behaviour(keep_running=True), cpu=cpu),
        local_queue=kueue.local_queue,
        priority_class=kueue.low_priority,
    )
    wait_state(scheduler, low, lambda r: {x.state for x in replicas(r)} == {AppState.RUNNING})
    high, _ = submit(
        scheduler,
        app("it-aw-high", kube_cluster.pod_behaviour(run_seconds=2), cpu=cpu),
        local_queue=kueue.local_queue,
        priority_class=kueue.high_priority,
    )
    evicted = wait_until(
        lambda: condition(workload(kube_cluster, low), "Evicted") or None, timeout=60
    )
    assert evicted["reason"] == "Preempted", evicted
    resp = wait_state(scheduler, high, lambda r: is_terminal(r.state), timeout=120)
    assert resp.state is AppState.SUCCEEDED, resp
    # Preempted is not the end: the low one was suspended, not failed, and runs again.
    assert scheduler.describe(low).state in (AppState.PENDING, AppState.RUNNING)
    wait_state(
        scheduler, low, lambda r: {x.state for x in replicas(r)} == {AppState.RUNNING}, timeout=120
    )
    assert condition(workload(kube_cluster, low), "QuotaReserved")["status"] == "True"
