"""The ``kubernetes_jobset`` backend on the real JobSet v0.11.1 controller.

The main API server serves the JobSet CRD, the JobSet controller (with its webhooks, called
by URL) and the batch Job controller run there, and kwok plays the pods. The provider only
uses the restricted kubeconfig.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import signal
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import backend_checks
import kueue_objects
import pytest
from kueue_objects import condition, cpu_quota

from kube_apps import (
    TRAIN_ARGS,
    all_running,
    kube_role,
    replicas,
    stored_object,
    submit,
    trainer_and_ps,
    wait_state,
)
from kube_apps import app_pods as pods
from reliability_results import outcome_row, recorded
from torchx_provider import specs
from torchx_provider.errors import RejectedConfigurationError
from torchx_provider.schedulers.kube.jobset import create_async_client, create_scheduler
from torchx_provider.schedulers.kube.resources import JOBSET
from torchx_provider.schedulers.kube.status import JOB_INDEX_LABEL
from torchx_provider.schedulers.labels import LABEL_APP_ID
from torchx_provider.specs.api import AppState, is_terminal

pytestmark = pytest.mark.kubernetes


@pytest.fixture
def scheduler(tracked_scheduler: Any) -> Any:
    return tracked_scheduler(create_scheduler)


#: role ``trainer`` of 2 replicas and ``ps`` of one, ``app(name, behaviour, max_retries=0,
#: cpu=0.5, ps=None)``: ``ps`` the behaviour of the ps role if not ``behaviour``
app = trainer_and_ps
stored = partial(stored_object, resource=JOBSET)


def test_success_runs_every_replica(kube_cluster: Any, scheduler: Any) -> None:
    app_id, info = submit(scheduler, app("it-js-ok", kube_cluster.pod_behaviour(run_seconds=2)))
    body = stored(kube_cluster, app_id)
    sent = info.request.body["spec"]
    # Nothing the provider set was pruned or changed by the webhook's defaults.
    for key in ("network", "successPolicy", "failurePolicy", "suspend"):
        assert body["spec"][key] == sent[key], key
    for got, want in zip(body["spec"]["replicatedJobs"], sent["replicatedJobs"], strict=True):
        assert (
            got["template"]["spec"]["podFailurePolicy"]
            == want["template"]["spec"]["podFailurePolicy"]
        )
    resp = wait_state(scheduler, app_id, lambda r: is_terminal(r.state))
    assert resp.state is AppState.SUCCEEDED, resp
    assert resp.msg == "Completed: jobset completed successfully"
    backend_checks.every_replica_succeeded(resp)
    name = app_id.split(":")[1]
    assert replicas(resp)[1].hostname == f"{name}-trainer-0-1.{name}"
    # the hostnames the provider reports are those the Job controller gave the pods, in the
    # headless Service the JobSet controller made; rank 0's address is one of them (kwok runs
    # no DNS: the names are compared, not resolved)
    found = pods(kube_cluster, app_id)
    hosts = {f"{p.spec.hostname}.{p.spec.subdomain}" for p in found}
    assert hosts == {r.hostname for r in replicas(resp)}
    from kubernetes import client

    service = client.CoreV1Api(kube_cluster.api_client()).read_namespaced_service(
        name, kube_cluster.namespace
    )
    assert service.spec.cluster_ip == "None" and {p.spec.subdomain for p in found} == {name}
    rank0 = {
        e.value
        for p in found
        for c in p.spec.containers
        for e in c.env or []
        if e.name == "TORCHX_RANK0_HOST"
    }
    # rank 0's host is the full name of one of them, as its pod's /etc/hosts has it
    full = f"{name}-trainer-0-0.{name}.{kube_cluster.namespace}.svc.cluster.local"
    assert rank0 == {full} and f"{name}-trainer-0-0.{name}" in hosts
    assert resp.num_restarts == 0


def test_a_failed_replica_restarts_the_jobset_then_fails(kube_cluster: Any, scheduler: Any) -> None:
    behaviour = kube_cluster.pod_behaviour(exit_code=3, run_seconds=1)
    app_id, _ = submit(scheduler, app("it-js-retry", behaviour, max_retries=1))
    resp = wait_state(scheduler, app_id, lambda r: is_terminal(r.state), timeout=180)
    assert resp.state is AppState.FAILED, resp
    assert resp.num_restarts == 1
    assert stored(kube_cluster, app_id)["status"]["restarts"] == 1
    assert 3 in {r.exit_code for r in replicas(resp)}, replicas(resp)
    assert "reaching max number of restarts" in resp.msg, resp.msg


def test_an_exit_code_that_fails_at_once_is_not_restarted(
    kube_cluster: Any, scheduler: Any
) -> None:
    behaviour = kube_cluster.pod_behaviour(exit_code=3, run_seconds=1)
    app_id, _ = submit(
        scheduler, app("it-js-exitcode", behaviour, max_retries=3), fail_on_exit_codes="2,3"
    )
    resp = wait_state(scheduler, app_id, lambda r: is_terminal(r.state), timeout=120)
    assert resp.state is AppState.FAILED, resp
    assert resp.num_restarts == 0
    conditions = {c["type"]: c for c in stored(kube_cluster, app_id)["status"]["conditions"]}
    assert conditions["Failed"]["reason"] == "FailJobSetFailurePolicyAction", conditions


def test_cancel_suspends_and_keeps_the_jobset(kube_cluster: Any, scheduler: Any) -> None:
    app_id = backend_checks.cancelled_while_running(
        scheduler, app("it-js-cancel", kube_cluster.pod_behaviour(keep_running=True))
    )
    deadline = time.monotonic() + 60
    while pods(kube_cluster, app_id):
        assert time.monotonic() < deadline, [p.metadata.name for p in pods(kube_cluster, app_id)]
        time.sleep(0.3)
    assert stored(kube_cluster, app_id)["spec"]["suspend"] is True
    backend_checks.cancelled_is_left_alone_then_deleted(scheduler, app_id)


def test_cancel_by_delete(kube_cluster: Any, scheduler: Any) -> None:
    backend_checks.cancel_by_delete(
        scheduler, app("it-js-cancel-del", kube_cluster.pod_behaviour(keep_running=True))
    )


def test_roles_start_in_order_and_the_first_roles_success_is_the_apps(
    kube_cluster: Any, scheduler: Any
) -> None:
    """start_order=in_order: the ps role's pods are created only once every trainer pod is
    ready; success_policy=first_role: the trainers' success ends the JobSet although ps would
    run on."""
    app_id, _ = submit(
        scheduler,
        app(
            "it-js-order",
            kube_cluster.pod_behaviour(run_seconds=4, start_seconds=1),
            ps=kube_cluster.pod_behaviour(keep_running=True),
        ),
        start_order="in_order",
        success_policy="first_role",
    )
    # each pod's creation, noted while the JobSet runs: the ps pods are deleted with the
    # JobSet's end, which may come before a look at the pods after it
    seen: dict[str, tuple[str, dt.datetime]] = {}

    def ended(resp: Any) -> bool:
        for p in pods(kube_cluster, app_id):
            role_name = p.metadata.annotations["torchx.pytorch.org/role-name"]
            seen[p.metadata.name] = (role_name, p.metadata.creation_timestamp)
        return is_terminal(resp.state)

    resp = wait_state(scheduler, app_id, ended, timeout=120, interval=0.2)
    assert resp.state is AppState.SUCCEEDED, resp
    created: dict[str, list[dt.datetime]] = {}
    for role_name, at in seen.values():
        created.setdefault(role_name, []).append(at)
    assert set(created) == {"trainer", "ps"}, seen
    # the trainers were pending for 1 s before they were ready; ps came after
    assert min(created["ps"]) >= max(created["trainer"]) + dt.timedelta(seconds=1), created


def test_reattach_finds_the_app_of_an_earlier_try(kube_cluster: Any, scheduler: Any) -> None:
    backend_checks.reattach(
        scheduler, app("it-js-reattach", kube_cluster.pod_behaviour(keep_running=True)), "js"
    )


def test_logs_of_every_replica(kube_cluster: Any, scheduler: Any, wait_until: Any) -> None:
    backend_checks.logs_of_every_replica(
        kube_cluster,
        scheduler,
        app("it-js-logs", kube_cluster.pod_behaviour(run_seconds=4)),
        wait_until,
    )


async def test_async_client(kube_cluster: Any, scheduler: Any) -> None:
    app_id, _ = submit(scheduler, app("it-js-async", kube_cluster.pod_behaviour(keep_running=True)))
    # the JobSet counts a role ready a moment after its pods run
    wait_state(scheduler, app_id, lambda r: r.state is AppState.RUNNING and all_running(r))
    await backend_checks.async_client_describes_and_cancels(
        kube_cluster, scheduler, create_async_client, app_id
    )


def test_what_the_webhook_refuses_is_the_apps_configuration(
    kube_cluster: Any, scheduler: Any
) -> None:
    """A JobSet the controller's webhook refuses (here: its first role made to wait for
    another) fails the submission as the app's configuration, in the webhook's words."""
    a = app("it-js-refused", kube_cluster.pod_behaviour(run_seconds=1))
    info = scheduler.submit_dryrun(a, {})
    info.request.body["spec"]["replicatedJobs"][0]["dependsOn"] = [
        {"name": "ps", "status": "Ready"}
    ]
    with pytest.raises(RejectedConfigurationError, match="denied the request"):
        scheduler.schedule(info)


def evicted_by_the_kubelet(kube_cluster: Any, pod_name: str) -> None:
    """Play what a kubelet does to a pod it evicts under node pressure (kwok plays no
    eviction): the pod fails with exit code 137 and the condition ``DisruptionTarget``
    (reason ``TerminationByKubelet``) that the Job controller's pod failure policy reads."""
    from kubernetes import client

    core = client.CoreV1Api(kube_cluster.api_client())
    pod = core.read_namespaced_pod(pod_name, kube_cluster.namespace)
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    said = "The node was low on resource: memory."
    terminated = {"exitCode": 137, "reason": "Error", "startedAt": now, "finishedAt": now}
    body = {
        "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "message": said,
            "conditions": [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "TerminationByKubelet",
                    "message": said,
                    "lastTransitionTime": now,
                }
            ],
            "containerStatuses": [
                {
                    "name": c.name,
                    "image": c.image,
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": terminated},
                }
                for c in pod.spec.containers
            ],
        }
    }
    core.patch_namespaced_pod_status(pod_name, kube_cluster.namespace, body)


@contextlib.contextmanager
def jobset_controller_paused(kube_cluster: Any) -> Iterator[None]:
    """The local cluster's JobSet controller stopped (SIGSTOP) while the block runs, and
    continued after it, so that what describe says between a replica's failure and the
    JobSet's restart can be read: unpaused, that lasts well under a second, and a describe
    every 0.3 s on a loaded machine once missed it. Keep the block short: the controller's
    webhooks wait meanwhile. Another cluster's controller is not paused."""
    if not kube_cluster.local:
        yield
        return
    run = Path(kube_cluster.kubeconfig).resolve().parents[1]
    pid = int((run / "pids" / "jobset-controller.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_an_evicted_replica_restarts_the_jobset_without_counting(
    kube_cluster: Any, scheduler: Any
) -> None:
    """max_retries=0, and a replica is evicted: the JobSet restarts anyway (the disruption
    rule ignores maxRestarts) and runs to success; describe names the eviction while it
    lasts, as an infrastructure failure."""
    app_id, _ = submit(
        scheduler, app("it-js-evicted", kube_cluster.pod_behaviour(run_seconds=6), max_retries=0)
    )
    wait_state(scheduler, app_id, all_running)
    victim = sorted(p.metadata.name for p in pods(kube_cluster, app_id))[0]
    with jobset_controller_paused(kube_cluster):
        evicted_by_the_kubelet(kube_cluster, victim)
        seen = wait_state(
            scheduler, app_id, lambda r: any(x.state is AppState.FAILED for x in replicas(r)), 30
        )
    (failed,) = [x for x in replicas(seen) if x.state is AppState.FAILED]
    assert (failed.exit_code, failed.reason, failed.failure) == (
        137,
        "TerminationByKubelet",
        "infrastructure",
    )
    resp = wait_state(scheduler, app_id, lambda r: is_terminal(r.state), timeout=120)
    assert resp.state is AppState.SUCCEEDED, resp
    assert resp.num_restarts == 1
    status = stored(kube_cluster, app_id)["status"]
    assert status["restarts"] == 1 and not status.get("restartsCountTowardsMax"), status


async def test_every_incarnation_of_a_restarted_jobset_is_in_the_task_log(
    kube_cluster: Any, scheduler: Any
) -> None:
    """max_retries=1 and every replica crashes: the JobSet is made again once (new pods, new
    names, ``jobset.sigs.k8s.io/restart-attempt`` 1), then fails. The follow of the triggerer
    has every line of both incarnations of each replica, in order, then the failure."""
    import asyncio
    import threading

    from kubernetes import client

    from task_log import TaskLog
    from torchx_provider.triggers.follow import JobFollower

    crash = kube_cluster.pod_behaviour(exit_code=1, run_seconds=2, start_seconds=1.5)
    a = specs.AppDef(
        "it-js-incarnations",
        [kube_role("trainer", crash, replicas=2, max_retries=1, args=list(TRAIN_ARGS))],
    )
    info = scheduler.submit_dryrun(a, {})
    name = info.request.name
    core = client.CoreV1Api(kube_cluster.api_client())
    stop = threading.Event()
    given: dict[str, tuple[int, int]] = {}

    def lines(replica: int, attempt: int) -> list[str]:
        return [f"replica {replica} attempt {attempt} step {i}" for i in range(4)]

    def kubelet() -> None:
        """Give each new pod its lines while it waits to start."""
        while not stop.is_set():
            for pod in core.list_namespaced_pod(
                kube_cluster.namespace, label_selector=f"{LABEL_APP_ID}={name}"
            ).items:
                if pod.metadata.name in given:
                    continue
                labels = pod.metadata.labels
                replica = int(labels[JOB_INDEX_LABEL])
                attempt = int(labels["jobset.sigs.k8s.io/restart-attempt"])
                kube_cluster.set_pod_logs(
                    pod.metadata.name,
                    lines(replica, attempt),
                    start=dt.datetime.now(dt.timezone.utc),
                    interval=dt.timedelta(milliseconds=20),
                )
                given[pod.metadata.name] = (replica, attempt)
            stop.wait(0.05)

    thread = threading.Thread(target=kubelet, daemon=True)
    thread.start()
    async_client = create_async_client(
        kubeconfig=kube_cluster.restricted_kubeconfig, namespace=kube_cluster.namespace
    )
    log = TaskLog()
    try:
        app_id = scheduler.schedule(info)
        scheduler.created.append(app_id)
        event = await asyncio.wait_for(
            JobFollower(async_client, app_id, log=log, poll_interval=2.0).run(), timeout=180
        )
    finally:
        stop.set()
        thread.join(10)
        await async_client.close()
    assert event.state is AppState.FAILED, (event, log.lines)
    assert sorted(given.values()) == [(0, 0), (0, 1), (1, 0), (1, 1)], given
    for replica in (0, 1):
        assert log.of(f"trainer/{replica}") == lines(replica, 0) + lines(replica, 1), log.lines


# -- Kueue ---------------------------------------------------------------------------------------
#: ``workload(kube_cluster, app_id)``: the Kueue Workload of a JobSet, if Kueue made one
workload = partial(kueue_objects.workload, owner_kind="JobSet")


def test_kueue_admits_a_jobset_of_its_local_queue(
    kube_cluster: Any, scheduler: Any, wait_until: Any
) -> None:
    app_id, kueue = backend_checks.submit_at_low_priority(
        kube_cluster, scheduler, app("it-js-kueue", kube_cluster.pod_behaviour(run_seconds=2))
    )
    body = stored(kube_cluster, app_id)
    assert body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == kueue.local_queue
    resp = wait_state(scheduler, app_id, lambda r: is_terminal(r.state), timeout=120)
    assert resp.state is AppState.SUCCEEDED, resp
    wl = wait_until(lambda: workload(kube_cluster, app_id))
    assert wl["status"]["admission"]["clusterQueue"] == kueue.cluster_queue
    assert wl["spec"]["priorityClassRef"]["name"] == kueue.low_priority
    # one pod set per role, with every replica
    assert [ps["count"] for ps in wl["spec"]["podSets"]] == [2, 1]


def test_a_jobset_over_quota_waits_until_the_quota_frees(
    kube_cluster: Any, scheduler: Any, wait_until: Any
) -> None:
    kueue = kube_cluster.require_kueue()
    started = time.monotonic()
    cpu = cpu_quota(kube_cluster, kueue.cluster_queue) / 4
    first, second = backend_checks.one_running_one_queued(
        kube_cluster, scheduler, app, "it-js", cpu
    )
    reserved = wait_until(
        lambda: condition(workload(kube_cluster, second), "QuotaReserved") or None
    )
    assert reserved["status"] == "False" and "insufficient" in reserved["message"], reserved
    backend_checks.held_in_the_queue(kube_cluster, scheduler, second)
    # The worker says Kueue's reason with what waits in the LocalQueue (one GET of it).
    waits = [n.text for n in scheduler.core.take_notices() if "waits for quota" in n.text]
    assert len(waits) == 1 and "insufficient unused quota" in waits[0], waits
    assert re.search(rf"; LocalQueue {kueue.local_queue} holds \d+ pending", waits[0]), waits
    assert wait_state(scheduler, first, lambda r: is_terminal(r.state)).state is (
        AppState.SUCCEEDED
    )
    resp = wait_state(scheduler, second, lambda r: is_terminal(r.state), timeout=120)
    row = outcome_row(
        "kueue-over-quota",
        "real Kueue: a JobSet asks for more than the ClusterQueue has left while another runs",
        "held in the queue (suspended, no pod) with Kueue's reason, admitted once the quota "
        "frees, runs to the end",
        f"held, then admitted; finished {resp.state.name}",
        lines=False,
        # pods of either JobSet still running once both ended
        orphans=sum(
            p.status.phase == "Running" for a in (first, second) for p in pods(kube_cluster, a)
        ),
        duplicates=0,
        seconds=time.monotonic() - started,
        reason=reserved["message"],
    )
    with recorded(row):
        assert resp.state is AppState.SUCCEEDED, resp
        assert row["orphans"] == 0, row


def test_a_preempted_jobset_is_queued_again_and_runs_to_the_end(
    kube_cluster: Any, scheduler: Any, wait_until: Any
) -> None:
    """A high-priority JobSet that does not fit beside a running low-priority one makes Kueue
    evict it: the low one is suspended (its pods removed), not failed, and admitted again
    once the high one has ended."""
    low_behaviour = kube_cluster.pod_behaviour(run_seconds=6)
    low, high = backend_checks.high_preempts_low(
        kube_cluster, scheduler, app, "it-js", low_behaviour, workload, wait_until
    )
    assert scheduler.describe(low).state in (AppState.PENDING, AppState.RUNNING)
    assert wait_state(scheduler, high, lambda r: is_terminal(r.state), timeout=120).state is (
        AppState.SUCCEEDED
    )
    resp = wait_state(scheduler, low, lambda r: is_terminal(r.state), timeout=180)
    assert resp.state is AppState.SUCCEEDED, resp
