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
from functools import partial
from typing import Any

import backend_checks
import kueue_objects
import pytest
from kueue_objects import condition, cpu_quota

from kube_apps import all_running, replicas, stored_object, submit, trainer_and_ps, wait_state
from kube_apps import app_pods as pods
from torchx_provider.schedulers.kube.appwrapper import create_async_client, create_scheduler
from torchx_provider.schedulers.kube.hub import InformerHub
from torchx_provider.schedulers.kube.resources import APPWRAPPER_V1BETA2
from torchx_provider.specs.api import AppState, is_terminal

pytestmark = pytest.mark.kubernetes


#: role ``trainer`` of 2 replicas and ``ps`` of one, ``app(name, behaviour, max_retries=0,
#: cpu=0.5)``
app = trainer_and_ps
stored = partial(stored_object, resource=APPWRAPPER_V1BETA2)
#: ``workload(kube_cluster, app_id)``: the Kueue Workload of an AppWrapper, if Kueue made one
workload = partial(kueue_objects.workload, owner_kind="AppWrapper")


@pytest.fixture
def scheduler(tracked_scheduler: Any) -> Any:
    return tracked_scheduler(create_scheduler)


def test_success_runs_every_replica(kube_cluster: Any, scheduler: Any) -> None:
    app_id, info = submit(scheduler, app("it-aw-ok", kube_cluster.pod_behaviour(run_seconds=2)))
    body = stored(kube_cluster, app_id)
    # Nothing was pruned: the components came back as sent.
    assert body["spec"]["components"] == info.request.body["spec"]["components"]
    resp = wait_state(scheduler, app_id, lambda r: is_terminal(r.state))
    assert resp.state is AppState.SUCCEEDED, resp
    backend_checks.every_replica_succeeded(resp)
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
    # deletion_on_failure_grace_period kept the last run's pods: their exit codes show. The
    # AppWrapper fails on its first failed pod; the others of that run end a moment later.
    resp = wait_state(
        scheduler, app_id, lambda r: all(x.exit_code is not None for x in replicas(r)), timeout=30
    )
    assert resp.state is AppState.FAILED, resp
    assert {r.exit_code for r in replicas(resp)} == {3}
    assert "3" in resp.structured_error_msg or "Error" in resp.structured_error_msg


def test_cancel_suspends_and_keeps_the_appwrapper(kube_cluster: Any, scheduler: Any) -> None:
    app_id = backend_checks.cancelled_while_running(
        scheduler, app("it-aw-cancel", kube_cluster.pod_behaviour(keep_running=True))
    )
    deadline = time.monotonic() + 60
    while stored(kube_cluster, app_id).get("status", {}).get("phase") != "Suspended" or pods(
        kube_cluster, app_id
    ):
        assert time.monotonic() < deadline, stored(kube_cluster, app_id).get("status")
        time.sleep(0.3)
    body = stored(kube_cluster, app_id)
    assert body["spec"]["suspend"] is True
    backend_checks.cancelled_is_left_alone_then_deleted(scheduler, app_id)


def test_cancel_by_delete(kube_cluster: Any, scheduler: Any) -> None:
    backend_checks.cancel_by_delete(
        scheduler, app("it-aw-cancel-del", kube_cluster.pod_behaviour(keep_running=True))
    )


def test_reattach_finds_the_app_of_an_earlier_try(kube_cluster: Any, scheduler: Any) -> None:
    backend_checks.reattach(
        scheduler, app("it-aw-reattach", kube_cluster.pod_behaviour(keep_running=True)), "aw"
    )


def test_logs_of_every_replica(kube_cluster: Any, scheduler: Any, wait_until: Any) -> None:
    app_id, expected = backend_checks.logs_of_every_replica(
        kube_cluster,
        scheduler,
        app("it-aw-logs", kube_cluster.pod_behaviour(run_seconds=4)),
        wait_until,
    )
    since = backend_checks.LOGS_START + dt.timedelta(seconds=1)
    assert list(scheduler.log_iter(app_id, "trainer", 1, since=since)) == [
        f"{x}\n" for x in expected[("trainer", 1)][1:]
    ]


def test_kueue_admits_an_app_of_its_local_queue(
    kube_cluster: Any, scheduler: Any, wait_until: Any
) -> None:
    submitted = app("it-aw-kueue", kube_cluster.pod_behaviour(run_seconds=2))
    app_id, kueue = backend_checks.submit_at_low_priority(kube_cluster, scheduler, submitted)
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
    first, second = backend_checks.one_running_one_queued(
        kube_cluster, scheduler, app, "it-aw", cpu
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
    backend_checks.held_in_the_queue(kube_cluster, scheduler, second)
    assert stored(kube_cluster, second)["spec"]["suspend"] is True
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


async def notices_of(kube_cluster: Any, app_id: str, within: float = 15) -> list[str]:
    """What a triggerer's describes of ``app_id`` say about why it waits, as a follow's
    would: again on each change the shared watches report (a fresh client's Workload watch
    may list after its first describe), until Kueue's reason is said or ``within`` s."""
    client = create_async_client(
        kubeconfig=kube_cluster.restricted_kubeconfig, namespace=kube_cluster.namespace
    )
    said: list[str] = []
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            await client.describe(app_id)
            said += [n.text for n in client.take_notices()]
            if any("waits for quota" in t for t in said):
                break
            await client.wait_changed(app_id, 1.0)
        return said
    finally:
        await client.close()
        await InformerHub.current().close()


async def test_async_client(kube_cluster: Any, scheduler: Any) -> None:
    app_id, _ = submit(scheduler, app("it-aw-async", kube_cluster.pod_behaviour(keep_running=True)))
    wait_state(scheduler, app_id, all_running)
    await backend_checks.async_client_describes_and_cancels(
        kube_cluster, scheduler, create_async_client, app_id
    )


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
    low_behaviour = kube_cluster.pod_behaviour(keep_running=True)
    low, high = backend_checks.high_preempts_low(
        kube_cluster, scheduler, app, "it-aw", low_behaviour, workload, wait_until
    )
    resp = wait_state(scheduler, high, lambda r: is_terminal(r.state), timeout=120)
    assert resp.state is AppState.SUCCEEDED, resp
    # Preempted is not the end: the low one was suspended, not failed, and runs again.
    assert scheduler.describe(low).state in (AppState.PENDING, AppState.RUNNING)
    wait_state(scheduler, low, all_running, timeout=120)
    assert condition(workload(kube_cluster, low), "QuotaReserved")["status"] == "True"
