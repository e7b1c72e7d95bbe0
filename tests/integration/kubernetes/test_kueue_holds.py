"""What Kueue holds, on the real Kueue: a cancel by suspension that Kueue does not undo
(the Workload deactivated), and that no later try follows; a LocalQueue that does not exist
refused before anything is submitted; a crash restart told as a restart, never as a
preemption or a return to waiting; a ClusterQueue stopped while a job waits, said from its
LocalQueue."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
from kueue_objects import KUEUE, condition, queue_options, workload
from rbac_accounts import Accounts

from cluster_sharing import tagged
from kube_apps import one_replica_app, restricted_async_client, submit, tracked, wait_state
from reliability_results import outcome_row, recorded
from task_log import TaskLog
from torchx_provider import specs
from torchx_provider.errors import AppConfigurationError, UserCodeError
from torchx_provider.operators.finishing import failure_error
from torchx_provider.schedulers.kube import appwrapper, jobset
from torchx_provider.schedulers.labels import LABEL_APP_ID, TaskInstanceKey
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import EventKind
from torchx_provider.triggers.follow import JobFollower

pytestmark = pytest.mark.kubernetes

KINDS = {"appwrapper": "AppWrapper", "jobset": "JobSet"}
PLURALS = {"appwrapper": "appwrappers", "jobset": "jobsets"}
#: seconds a cancelled app is watched for anything starting it again (Kueue admitted a
#: suspended one again within about 4 s)
HOLD_WATCH = 12.0


@pytest.fixture(params=[appwrapper, jobset], ids=["appwrapper", "jobset"])
def backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture
def name(backend: Any) -> str:
    return str(backend.__name__.rsplit(".", 1)[1])


@pytest.fixture
def scheduler(backend: Any, tracked_scheduler: Any) -> Any:
    return tracked_scheduler(
        backend.create_scheduler, local_only="needs the local cluster's Kueue queues"
    )


def live_pods(kube_cluster: Any, app_id: str) -> set[str]:
    """The names of the app's pods that are not being deleted."""
    from kubernetes import client

    namespace, app_name = app_id.split(":")
    core = client.CoreV1Api(kube_cluster.api_client())
    pods = core.list_namespaced_pod(namespace, label_selector=f"{LABEL_APP_ID}={app_name}").items
    return {p.metadata.name for p in pods if p.metadata.deletion_timestamp is None}


def stored(kube_cluster: Any, app_id: str, name: str) -> dict[str, Any]:
    from kubernetes import client

    from torchx_provider.schedulers.kube.resources import APPWRAPPER_V1BETA2, JOBSET

    res = {"appwrapper": APPWRAPPER_V1BETA2, "jobset": JOBSET}[name]
    namespace, app_name = app_id.split(":")
    api = client.CustomObjectsApi(kube_cluster.api_client())
    return dict(
        api.get_namespaced_custom_object(res.group, res.version, namespace, res.plural, app_name)
    )


def quota_filler(kube_cluster: Any, app_name: str, **behaviour: Any) -> specs.AppDef:
    """One replica asking for 3 of the ClusterQueue's 4 CPUs: two cannot run at once."""
    app = one_replica_app(kube_cluster, app_name, **behaviour)
    app.roles[0].resource = specs.Resource(cpu=3, gpu=0, memMB=256)
    return app


def watch_held(
    kube_cluster: Any, app_id: str, name: str, seconds: float, before: set[str]
) -> list[str]:
    """What started the cancelled app again within ``seconds``: a pod not among ``before``
    (those it had when it was cancelled, being removed), its object unsuspended once Kueue
    suspended it, or never suspended (nothing: the cancel holds)."""
    deadline = time.monotonic() + seconds
    seen: list[str] = []
    suspended = False
    while time.monotonic() < deadline:
        seen.extend(sorted(p for p in live_pods(kube_cluster, app_id) - before if p not in seen))
        now = bool(stored(kube_cluster, app_id, name)["spec"].get("suspend"))
        if suspended and not now and "unsuspended again" not in seen:
            seen.append("unsuspended again")
        suspended = suspended or now
        time.sleep(0.5)
    return seen if suspended else [*seen, "never suspended"]


KEY = TaskInstanceKey(tagged("it-kueue-holds"), "train", "run-1", -1, 1)


def test_a_cancel_by_suspension_holds_under_kueue(
    kube_cluster: Any, scheduler: Any, name: str
) -> None:
    """Running, then cancelled with cancel_by=suspend: its Workload deactivated, Kueue
    suspends the object, which stays; Kueue does not start it again; a later try of the
    task does not follow it."""
    kueue = kube_cluster.require_kueue()
    started = time.monotonic()
    app = one_replica_app(kube_cluster, "kq-hold", keep_running=True)
    key = dataclasses.replace(KEY, task_id=f"hold-{name}")
    app_id, _ = submit(scheduler, app, key, cancel_by="suspend", **queue_options(kueue))
    wait_state(scheduler, app_id, lambda r: r.state is AppState.RUNNING, timeout=60)
    before = live_pods(kube_cluster, app_id)
    scheduler.cancel(app_id)
    cancelled = time.monotonic()
    restarted = watch_held(kube_cluster, app_id, name, HOLD_WATCH, before)
    wl = workload(kube_cluster, app_id, KINDS[name])
    resp = scheduler.describe(app_id)
    [listed] = scheduler.find_apps(dataclasses.replace(key, try_number=2), [kube_cluster.namespace])
    row = outcome_row(
        f"kueue-cancel-holds-{name}",
        f"real Kueue: a running {KINDS[name]} of a LocalQueue is cancelled with "
        "cancel_by='suspend'",
        "the object stays suspended with its status, its Workload deactivated; Kueue does not "
        "start it again; a later try does not follow it",
        "held: " + ("nothing started it again" if not restarted else "started again"),
        lines=False,
        orphans=len([p for p in restarted if p not in ("unsuspended again", "never suspended")]),
        duplicates=0,
        seconds=time.monotonic() - started,
        notes=f"watched {HOLD_WATCH:.0f} s after the cancel; Kueue v0.17 had started it "
        "again within 4 s",
    )
    with recorded(row):
        assert not restarted, restarted
        assert wl is not None and wl["spec"].get("active") is False, wl
        assert resp is not None and resp.state is AppState.CANCELLED, resp
        assert listed.state is AppState.CANCELLED, listed
    print(
        f"{app_id}: cancelled; nothing started it again in {time.monotonic() - cancelled:.1f}s; "
        f"Workload Evicted: {condition(wl, 'Evicted').get('reason')}"
    )


def test_a_cancel_by_suspension_while_waiting_is_never_admitted(
    kube_cluster: Any, scheduler: Any, name: str
) -> None:
    """Cancelled while it waits for quota, then the quota frees: it is not admitted."""
    kueue = kube_cluster.require_kueue()
    filler_id, _ = submit(
        scheduler, quota_filler(kube_cluster, "kq-fill", run_seconds=6), **queue_options(kueue)
    )
    wait_state(scheduler, filler_id, lambda r: r.state is AppState.RUNNING, timeout=60)
    waiting_id, _ = submit(
        scheduler,
        quota_filler(kube_cluster, "kq-wait", run_seconds=2),
        cancel_by="suspend",
        **queue_options(kueue),
    )
    wait_state(scheduler, waiting_id, lambda r: workload(kube_cluster, r.app_id, KINDS[name]))
    scheduler.cancel(waiting_id)
    wait_state(scheduler, filler_id, lambda r: r.state is AppState.SUCCEEDED, timeout=60)
    restarted = watch_held(kube_cluster, waiting_id, name, HOLD_WATCH, set())
    assert not restarted, restarted
    wl = workload(kube_cluster, waiting_id, KINDS[name])
    assert condition(wl, "QuotaReserved").get("status") != "True", wl
    assert scheduler.describe(waiting_id).state is AppState.CANCELLED


def test_a_local_queue_that_does_not_exist_is_refused_before_submission(
    kube_cluster: Any, scheduler: Any, name: str
) -> None:
    kueue = kube_cluster.require_kueue()
    started = time.monotonic()
    key = dataclasses.replace(KEY, task_id=f"no-lq-{name}")
    with pytest.raises(AppConfigurationError) as refused:
        submit(scheduler, one_replica_app(kube_cluster, "kq-nolq"), key, local_queue="no-such-lq")
    took = time.monotonic() - started
    message = str(refused.value)
    assert "LocalQueue 'no-such-lq' does not exist" in message, message
    assert kueue.local_queue in message, message  # the namespace's LocalQueues are named
    assert not scheduler.find_apps(key, [kube_cluster.namespace])  # nothing was submitted
    assert took < 5, took
    print(f"refused in {took:.2f}s: {message}")


async def test_a_crash_restart_is_a_restart_not_a_preemption(
    kube_cluster: Any, scheduler: Any, backend: Any, name: str
) -> None:
    """The replica exits 3 at every run, max_retries=2: two restarts said as restarts, no
    return to waiting, no preemption counted, then FAILED without a wait announced."""
    kueue = kube_cluster.require_kueue()
    app = one_replica_app(kube_cluster, "kq-crash", exit_code=3, run_seconds=1)
    app.roles[0].max_retries = 2
    extra = (
        {"retry_pause_period": "1s", "failure_grace_period": "1s"} if name == "appwrapper" else {}
    )
    started = time.monotonic()
    app_id, _ = submit(scheduler, app, **extra, **queue_options(kueue))
    client = restricted_async_client(backend.create_async_client, kube_cluster)
    log = TaskLog()
    try:
        event = await asyncio.wait_for(
            JobFollower(client, app_id, log=log, poll_interval=1.0).run(), 240
        )
    finally:
        await client.close()
    resp = scheduler.describe(app_id)
    back = [ln for ln in log.lines if "back to waiting" in ln]
    restarts = [ln for ln in log.lines if "restarted in the cluster" in ln]
    row = outcome_row(
        f"crash-restart-not-preemption-{name}",
        f"real Kueue: the replica of {'an' if name == 'appwrapper' else 'a'} {KINDS[name]} "
        "exits 3 at every run, max_retries=2",
        "each restart said as a restart (num_restarts 2), none as a preemption or a return to "
        "waiting; FAILED with UserCodeError",
        f"finished {event.state.name} after {resp.num_restarts if resp else '?'} restart(s), "
        f"{event.preemptions} preemption(s), {len(back)} return(s) to waiting",
        lines=False,
        orphans=0,
        duplicates=0,
        seconds=time.monotonic() - started,
    )
    with recorded(row):
        assert event.kind is EventKind.FINISHED and event.state is AppState.FAILED, log.lines
        assert not back, log.lines
        assert not [ln for ln in log.lines if "preemption" in ln], log.lines
        assert event.preemptions == 0, event
        assert isinstance(failure_error(event), UserCodeError), failure_error(event)
        assert resp is not None and resp.num_restarts == 2, resp
        # each restart said (two describes may see both at once: the last says the count)
        assert restarts and "(restart 2)" in restarts[-1], log.lines
    print(log.text)


async def test_a_cluster_queue_stopped_while_a_job_waits_is_said(
    kube_cluster: Any, tracked_scheduler: Any
) -> None:
    """stopPolicy Hold on the ClusterQueue while a JobSet waits for quota: the task log says
    the LocalQueue admits nothing, from the LocalQueue's own condition."""
    from kubernetes import client as k8s

    kueue = kube_cluster.require_kueue()
    scheduler = tracked_scheduler(jobset.create_scheduler, local_only="stops a ClusterQueue")
    api = k8s.CustomObjectsApi(kube_cluster.api_client())
    group, version = KUEUE
    filler_id, _ = submit(
        scheduler, quota_filler(kube_cluster, "kq-fill", keep_running=True), **queue_options(kueue)
    )
    wait_state(scheduler, filler_id, lambda r: r.state is AppState.RUNNING, timeout=60)
    waiting_id, _ = submit(scheduler, quota_filler(kube_cluster, "kq-wait"), **queue_options(kueue))
    async_client = restricted_async_client(jobset.create_async_client, kube_cluster)
    log = TaskLog()
    follow = asyncio.ensure_future(
        JobFollower(async_client, waiting_id, log=log, poll_interval=1.0).run()
    )

    def stop_policy(policy: str) -> None:
        api.patch_cluster_custom_object(
            group, version, "clusterqueues", kueue.cluster_queue, {"spec": {"stopPolicy": policy}}
        )

    try:
        deadline = time.monotonic() + 60
        while not any("waits for quota" in ln for ln in log.lines):
            assert time.monotonic() < deadline, log.lines
            await asyncio.sleep(0.3)
        stop_policy("Hold")
        stopped = time.monotonic()
        while not any("admits no workload" in ln for ln in log.lines):
            assert time.monotonic() < stopped + 30, log.lines
            await asyncio.sleep(0.3)
        took = time.monotonic() - stopped
    finally:
        with contextlib.suppress(Exception):
            stop_policy("None")
        follow.cancel()
        await asyncio.gather(follow, return_exceptions=True)
        await async_client.close()
    [line] = [ln for ln in log.lines if "admits no workload" in ln]
    assert f"LocalQueue {kueue.local_queue} (ClusterQueue {kueue.cluster_queue})" in line, line
    print(f"said {took:.1f}s after the ClusterQueue stopped: {line}")


async def test_unread_a_missing_local_queue_ends_the_task_after_the_start_grace(
    kube_cluster: Any, tracked_scheduler: Any, tmp_path: Path
) -> None:
    """An account that may not read LocalQueues submits to one that does not exist: Kueue
    says so on the Workload, and the follow gives the app up after the start grace (here
    5 s) as configuration, instead of waiting without end."""
    kube_cluster.require_kueue()
    kube_cluster.skip_unless_local("makes a ServiceAccount and a Role on the local cluster")
    accounts = Accounts(kube_cluster, tmp_path)
    try:
        blind = accounts.without("kueue.x-k8s.io", "localqueues", "get")
        with tracked(
            jobset.create_scheduler("it", kubeconfig=blind, namespace=kube_cluster.namespace)
        ) as unread:
            app_id, _ = submit(
                unread, one_replica_app(kube_cluster, "kq-nolq"), local_queue="no-such-lq"
            )
            client = jobset.create_async_client(kubeconfig=blind, namespace=kube_cluster.namespace)
            log = TaskLog()
            started = time.monotonic()
            try:
                event = await asyncio.wait_for(
                    JobFollower(client, app_id, log=log, poll_interval=1.0, start_grace=5.0).run(),
                    90,
                )
            finally:
                await client.close()
            took = time.monotonic() - started
            resp = unread.describe(app_id)
    finally:
        accounts.delete()
    error = failure_error(event)
    assert event.kind is EventKind.ERROR, (event, log.lines)
    assert isinstance(error, AppConfigurationError), error
    assert "Inadmissible: LocalQueue no-such-lq doesn't exist" in str(error), error
    assert resp is None or resp.state is AppState.CANCELLED, resp
    assert took < 60, took
    print(f"given up {took:.1f}s after submission: {error}")
