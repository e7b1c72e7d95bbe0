"""A Kueue preemption is a suspension, not the end, on the real Kueue: a low-priority
AppWrapper (or JobSet) that fills the ClusterQueue's quota is preempted by a high-priority one,
requeued, admitted again once the high one has ended, and runs to success; the follow stays
on it throughout, says what happened in Kueue's words (naming the preemptor, an app followed
by the same process), loses no line of either run, and ends with the app's success."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

import pytest
from kueue_objects import queue_options

from kube_apps import one_replica_app, restricted_async_client, submit
from reliability_results import lines_lost_and_repeated, outcome_row, recorded
from task_log import TaskLog
from torchx_provider import specs
from torchx_provider.schedulers.kube import appwrapper, jobset
from torchx_provider.schedulers.labels import LABEL_APP_ID
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import EventKind
from torchx_provider.triggers.follow import JobFollower

pytestmark = pytest.mark.kubernetes


#: lines each run of the low app's replica writes
LINES = 5


@pytest.fixture(params=[appwrapper, jobset], ids=["appwrapper", "jobset"])
def backend(request: pytest.FixtureRequest) -> Any:
    """The package of a backend whose jobs Kueue admits."""
    return request.param


@pytest.fixture
def scheduler(backend: Any, tracked_scheduler: Any) -> Any:
    return tracked_scheduler(
        backend.create_scheduler, local_only="needs the local cluster's Kueue queues"
    )


def quota_filler(kube_cluster: Any, name: str, run_seconds: float) -> specs.AppDef:
    """One replica asking for 3 of the ClusterQueue's 4 CPUs: two cannot run at once. Each
    pod waits 3 s before it runs: time to give it its log lines before its log is read."""
    app = one_replica_app(kube_cluster, name, run_seconds=run_seconds, start_seconds=3)
    app.roles[0].resource = specs.Resource(cpu=3, gpu=0, memMB=256)
    return app


def pod_names(kube_cluster: Any, app_id: str, phase: str | None = None) -> set[str]:
    """The app's pods not being deleted (only those in ``phase``, if given)."""
    from kubernetes import client

    namespace, name = app_id.split(":")
    core = client.CoreV1Api(kube_cluster.api_client())
    pods = core.list_namespaced_pod(namespace, label_selector=f"{LABEL_APP_ID}={name}").items
    return {
        p.metadata.name
        for p in pods
        if p.metadata.deletion_timestamp is None and phase in (None, p.status.phase)
    }


async def new_pod(kube_cluster: Any, app_id: str, seen: set[str], within: float) -> str:
    """The name of the app's first pod not in ``seen`` (waits up to ``within`` seconds)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        fresh = await asyncio.to_thread(pod_names, kube_cluster, app_id)
        if fresh - seen:
            return sorted(fresh - seen)[0]
        await asyncio.sleep(0.2)
    raise AssertionError(f"{app_id}: no new pod within {within}s (seen {seen})")


async def said(log: TaskLog, phrase: str, within: float) -> list[str]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = [ln for ln in log.lines if phrase in ln]
        if found:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"{phrase!r} not said within {within}s: {log.lines}")


async def test_a_preempted_app_is_followed_through_readmission_to_success(
    kube_cluster: Any, backend: Any, scheduler: Any
) -> None:
    kueue = kube_cluster.require_kueue()
    pod_names(kube_cluster, "torchx-test:none")  # the admin client made: new_pod is quick
    low_id, _ = submit(
        scheduler,
        quota_filler(kube_cluster, "kq-low", run_seconds=10),
        **queue_options(kueue, kueue.low_priority),
    )
    client = restricted_async_client(backend.create_async_client, kube_cluster)
    low_log, high_log = TaskLog(), TaskLog()
    started = time.monotonic()
    low = asyncio.ensure_future(JobFollower(client, low_id, log=low_log, poll_interval=1.0).run())
    high: asyncio.Future[Any] | None = None
    try:
        first = await new_pod(kube_cluster, low_id, set(), 60)
        run1 = [f"run 1 line {i}" for i in range(LINES)]
        kube_cluster.set_pod_logs(first, run1, interval=dt.timedelta(milliseconds=10))
        await said(low_log, f"[worker/0] {run1[-1]}", 30)

        high_id, _ = submit(
            scheduler,
            quota_filler(kube_cluster, "kq-high", run_seconds=2),
            **queue_options(kueue, kueue.high_priority),
        )
        high = asyncio.ensure_future(
            JobFollower(client, high_id, log=high_log, poll_interval=1.0).run()
        )
        preempted = await said(low_log, "was preempted", 60)
        high_name = high_id.split(":")[1]
        assert "InClusterQueue" in preempted[0], preempted
        assert f"(the preemptor is app {high_name})" in preempted[0], preempted

        second = await new_pod(kube_cluster, low_id, {first}, 120)
        run2 = [f"run 2 line {i}" for i in range(LINES)]
        kube_cluster.set_pod_logs(second, run2, interval=dt.timedelta(milliseconds=10))
        event = await asyncio.wait_for(low, 120)
        high_event = await asyncio.wait_for(high, 60)
    finally:
        for task in (low, high):
            if task is not None and not task.done():
                task.cancel()
        await asyncio.gather(*(t for t in (low, high) if t is not None), return_exceptions=True)
        await client.close()
    took = time.monotonic() - started

    kind = {"appwrapper": "AppWrapper", "jobset": "JobSet"}[backend.__name__.rsplit(".", 1)[1]]
    lost, repeated = lines_lost_and_repeated(run1 + run2, low_log.of("worker/0"))
    # an orphan: a pod of the app still running once its follow ended (say, of the first run)
    orphans = len(await asyncio.to_thread(pod_names, kube_cluster, low_id, "Running"))
    row = outcome_row(
        f"kueue-preempted-{kind.lower()}",
        f"real Kueue: a higher-priority {kind} needs the quota a running {kind} holds; Kueue "
        "preempts the running one (its pods removed), requeues it, and admits it again once "
        "the other ended",
        "a suspension, not a failure: preempted, admitted and running again said in Kueue's "
        "words, then followed to the end: every line of both runs",
        f"finished {event.state.name} after {event.preemptions} preemption(s)",
        lines=True,
        lost=lost,
        repeated=repeated,
        orphans=orphans,
        duplicates=0,
        seconds=took,
        notes="kwok plays the pods; the preemptor is named when this process follows it",
    )
    with recorded(row):
        check_preemption(event, high_event, low_log, run1 + run2)
        assert orphans == 0, orphans
    print(
        f"preempted app followed to success in {took:.1f}s (queued {event.queued_seconds}s, "
        f"running {event.running_seconds}s, preemptions {event.preemptions}); its log:\n"
        + "\n".join(low_log.lines)
    )


def check_preemption(event: Any, high_event: Any, low_log: TaskLog, lines: list[str]) -> None:
    assert high_event.kind is EventKind.FINISHED and high_event.state is AppState.SUCCEEDED
    # Not the end: the follow stayed on the low app to its success, no error raised.
    assert event.kind is EventKind.FINISHED, (event, low_log.lines)
    assert event.state is AppState.SUCCEEDED, (event, low_log.lines)
    # Every line of both runs, once, in order.
    assert low_log.of("worker/0") == lines, low_log.lines
    # What happened, in order: preempted, admitted again, running again.
    text = "\n".join(low_log.lines)
    assert text.index("was preempted") < text.index(
        "admitted: QuotaReserved", text.index("was preempted")
    )
    assert "running again" in text, low_log.lines
    assert sum("was preempted" in ln for ln in low_log.lines) == 1, low_log.lines
    assert event.preemptions == 1, event
    assert event.queued_seconds > 0 and event.running_seconds > 0, event
