"""What the tests of the ``kubernetes_appwrapper`` and ``kubernetes_jobset`` backends (and,
for the async client, ``kubernetes_mcad``) check alike: each test names its backend's app and
scheduler and calls one of these."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from kueue_objects import condition, cpu_quota, queue_options

from cluster_sharing import IT_DAG
from kube_apps import (
    all_running,
    app_pods,
    replicas,
    restricted_async_client,
    submit,
    wait_gone,
    wait_state,
)
from torchx_provider import specs
from torchx_provider.schedulers.kube.status import JOB_INDEX_LABEL
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.specs.api import AppState, is_terminal

#: a run of the DAG ``it_dag``
RUN_ID = "scheduled__2024-05-01T00:00:00+00:00"
#: when the log lines of :func:`logs_of_every_replica` start, one a second
LOGS_START = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.timezone.utc)

AppOf = Callable[..., specs.AppDef]


def every_replica_succeeded(resp: Any) -> None:
    """The description of a trainer-and-ps app names both roles, and each of the 3
    replicas succeeded with exit code 0."""
    assert [r.name for r in resp.roles] == ["trainer", "ps"]
    assert [(r.role, r.id, r.state, r.exit_code) for r in replicas(resp)] == [
        ("trainer", 0, AppState.SUCCEEDED, 0),
        ("trainer", 1, AppState.SUCCEEDED, 0),
        ("ps", 0, AppState.SUCCEEDED, 0),
    ]


def cancelled_while_running(scheduler: Any, app: specs.AppDef) -> str:
    """Submit ``app``, cancel it once every replica runs, and see it cancelled: its app id."""
    app_id, _ = submit(scheduler, app)
    wait_state(scheduler, app_id, all_running)
    scheduler.cancel(app_id)
    resp = scheduler.describe(app_id)
    assert resp is not None and resp.state is AppState.CANCELLED
    return app_id


def cancelled_is_left_alone_then_deleted(scheduler: Any, app_id: str) -> None:
    """The cancelled app stays cancelled; cancelling it again changes nothing; delete
    removes it."""
    assert scheduler.describe(app_id).state is AppState.CANCELLED
    scheduler.cancel(app_id)  # an ended app is left alone
    scheduler.delete(app_id)
    wait_gone(scheduler, app_id)


def cancel_by_delete(scheduler: Any, app: specs.AppDef) -> None:
    """With ``cancel_by=delete``, cancelling a running app removes it."""
    app_id, _ = submit(scheduler, app, cancel_by="delete")
    wait_state(scheduler, app_id, lambda r: r.state is AppState.RUNNING)
    scheduler.cancel(app_id)
    wait_gone(scheduler, app_id)


def reattach(scheduler: Any, app: specs.AppDef, task_id: str) -> None:
    """The app the first try of task ``task_id`` submitted is found by its second try (and
    listed), not by another task's."""
    first = TaskInstanceKey(IT_DAG, task_id, RUN_ID, -1, 1)
    app_id, _ = submit(scheduler, app, first)
    retry = TaskInstanceKey(IT_DAG, task_id, RUN_ID, -1, 2)
    assert [f.app_id for f in scheduler.find_apps(retry)] == [app_id]
    assert app_id in {r.app_id for r in scheduler.list()}
    other = TaskInstanceKey(IT_DAG, "other", RUN_ID, -1, 2)
    assert scheduler.find_apps(other) == []


def logs_of_every_replica(
    kube_cluster: Any, scheduler: Any, app: specs.AppDef, wait_until: Any
) -> tuple[str, dict[tuple[str, int], list[str]]]:
    """Each of the 3 pods of a trainer-and-ps app gets 3 lines, one a second from
    :data:`LOGS_START`; once the app has ended, each replica's log is its lines. Returns
    the app id and the lines of each ``(role, replica)``."""
    app_id, _ = submit(scheduler, app)
    found = wait_until(
        lambda: len(app_pods(kube_cluster, app_id)) == 3 and app_pods(kube_cluster, app_id)
    )
    expected = {}
    for pod in found:
        role_name = pod.metadata.annotations["torchx.pytorch.org/role-name"]
        index = int(pod.metadata.labels[JOB_INDEX_LABEL])
        lines = [f"{role_name}/{index} line {i}" for i in range(3)]
        kube_cluster.set_pod_logs(
            pod.metadata.name, lines, start=LOGS_START, interval=dt.timedelta(seconds=1)
        )
        expected[(role_name, index)] = lines
    assert set(expected) == {("trainer", 0), ("trainer", 1), ("ps", 0)}
    # kwok serves a pod's lines once its watch has seen the pod's Logs object: on a loaded
    # machine that can come after the pod ended (kwok's stages are clocks of their own)
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(kube_cluster.api_client())

    def served(name: str, namespace: str) -> bool:
        try:
            return "line 2" in core.read_namespaced_pod_log(name, namespace)
        except ApiException:  # not on its node yet
            return False

    for pod in found:
        wait_until(
            lambda pod=pod: served(pod.metadata.name, pod.metadata.namespace),
            message=f"kwok to serve the lines of {pod.metadata.name}",
        )
    wait_state(scheduler, app_id, lambda r: is_terminal(r.state))
    for (role_name, index), lines in expected.items():
        got = list(scheduler.log_iter(app_id, role_name, index))
        assert got == [f"{x}\n" for x in lines], (role_name, index, got)
    return app_id, expected


async def async_client_describes_and_cancels(
    kube_cluster: Any,
    scheduler: Any,
    create_async_client: Callable[..., Any],
    app_id: str,
    *,
    mcad: bool = False,
) -> None:
    """The async client (of the MCAD API server with ``mcad``) describes the running app as
    the scheduler does, and cancels it: the app is then cancelled (with ``mcad``, gone: MCAD
    has no abort, the AppWrapper is deleted)."""
    client = restricted_async_client(create_async_client, kube_cluster, mcad=mcad)
    try:
        resp = await client.describe(app_id)
        assert resp is not None and resp.state is AppState.RUNNING
        assert resp == scheduler.describe(app_id)
        await client.cancel(app_id)
        if mcad:
            assert await client.describe(app_id) is None
        else:
            resp = await client.describe(app_id)
            assert resp is not None and resp.state is AppState.CANCELLED
    finally:
        await client.close()


def submit_at_low_priority(kube_cluster: Any, scheduler: Any, app: specs.AppDef) -> tuple[str, Any]:
    """Submit ``app`` to Kueue's LocalQueue at the low priority: its app id, and the queues."""
    kueue = kube_cluster.require_kueue()
    app_id, _ = submit(scheduler, app, **queue_options(kueue, kueue.low_priority))
    return app_id, kueue


def one_running_one_queued(
    kube_cluster: Any, scheduler: Any, app: AppOf, prefix: str, cpu: float
) -> tuple[str, str]:
    """Two apps of Kueue's local queue, each needing ``cpu`` a replica (a quarter of the
    ClusterQueue's quota: two do not fit): ``{prefix}-quota-a`` runs 8 s, and is running
    when ``{prefix}-quota-b`` is submitted. Their app ids."""
    kueue = kube_cluster.require_kueue()
    first, _ = submit(
        scheduler,
        app(f"{prefix}-quota-a", kube_cluster.pod_behaviour(run_seconds=8), cpu=cpu),
        **queue_options(kueue),
    )
    wait_state(scheduler, first, lambda r: r.state is AppState.RUNNING)
    second, _ = submit(
        scheduler,
        app(f"{prefix}-quota-b", kube_cluster.pod_behaviour(run_seconds=1), cpu=cpu),
        **queue_options(kueue),
    )
    return first, second


def held_in_the_queue(kube_cluster: Any, scheduler: Any, app_id: str) -> None:
    """The app waits for Kueue's admission: pending, with the task log's reason, no pod."""
    kueue = kube_cluster.require_kueue()
    held = scheduler.describe(app_id)
    assert held.state is AppState.PENDING
    assert held.msg == (
        f"Suspended: queued in Kueue local queue {kueue.local_queue!r}, waiting for admission"
    )
    assert app_pods(kube_cluster, app_id) == []


def high_preempts_low(
    kube_cluster: Any,
    scheduler: Any,
    app: AppOf,
    prefix: str,
    low_behaviour: dict[str, str],
    workload: Callable[[Any, str], dict[str, Any] | None],
    wait_until: Any,
) -> tuple[str, str]:
    """``{prefix}-low`` (``low_behaviour``) of low priority runs; ``{prefix}-high`` (2 s) of
    high priority, which does not fit beside it (each replica of both asks for a quarter of
    the ClusterQueue's CPU), makes Kueue evict it. Their app ids."""
    kueue = kube_cluster.require_kueue()
    cpu = cpu_quota(kube_cluster, kueue.cluster_queue) / 4
    low, _ = submit(
        scheduler,
        app(f"{prefix}-low", low_behaviour, cpu=cpu),
        **queue_options(kueue, kueue.low_priority),
    )
    wait_state(scheduler, low, all_running)
    high, _ = submit(
        scheduler,
        app(f"{prefix}-high", kube_cluster.pod_behaviour(run_seconds=2), cpu=cpu),
        **queue_options(kueue, kueue.high_priority),
    )
    evicted = wait_until(
        lambda: condition(workload(kube_cluster, low), "Evicted") or None, timeout=60
    )
    assert evicted["reason"] == "Preempted", evicted
    return low, high
