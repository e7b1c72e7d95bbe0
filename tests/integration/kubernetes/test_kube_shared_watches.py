"""Many Volcano jobs (and Kueue AppWrappers) followed from one process through one shared
list + watch per type.

Fifty 2-replica jobs run on kwok's nodes; fifty async clients (as fifty triggers in one
triggerer would) follow one job each with ``describe`` / ``wait_changed``. The API server's
own metrics must show at most one open watch per (namespace, type) -- jobs and pods -- and
the clients' requests, counted at the HTTP layer, no GET or LIST per job once synced.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections import Counter
from typing import Any
from urllib.parse import urlparse

import pytest
from kueue_objects import queue_options

from kube_apps import kube_role, kube_scheduler, restricted_async_client, submit
from torchx_provider import specs
from torchx_provider.schedulers.kube.volcano import create_async_client, create_scheduler
from torchx_provider.specs.api import AppState, is_terminal

# The API server's count of open watches is every client's: another session of this tier on
# the cluster waits while these tests count (tests/support/cluster_sharing.py).
pytestmark = [pytest.mark.kubernetes, pytest.mark.cluster_quiet]

JOBS = 50
WATCH_GAUGE = re.compile(
    r'^apiserver_longrunning_requests\{[^}]*group="(?P<group>[^"]*)",resource="(?P<resource>\w+)",'
    r'scope="namespace"[^}]*verb="WATCH"[^}]*\} (?P<value>\d+)',
    re.M,
)


def open_watches(admin_kubeconfig: str) -> Counter[tuple[str, str]]:
    """Open namespace-scoped watches by (group, resource), from the API server's /metrics."""
    text = subprocess.run(
        ["kubectl", "--kubeconfig", admin_kubeconfig, "get", "--raw", "/metrics"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return Counter(
        {(m["group"], m["resource"]): int(m["value"]) for m in WATCH_GAUGE.finditer(text)}
    )


@pytest.fixture
def scheduler(tracked_scheduler: Any) -> Any:
    return tracked_scheduler(
        create_scheduler, session="hub", local_only="pods are run by the local cluster's kwok nodes"
    )


class RequestLog:
    """Every request the async client sends: (verb, path, whether it is a watch)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, bool]] = []

    def count(self, verb: str, path_part: str, watch: bool = False) -> int:
        return sum(1 for v, p, w in self.requests if v == verb and path_part in p and w is watch)


@pytest.fixture
def request_log(monkeypatch: pytest.MonkeyPatch) -> RequestLog:
    from kubernetes_asyncio.client import rest

    log = RequestLog()
    original = rest.RESTClientObject.request

    async def request(self: Any, method: str, url: str, query_params: Any = None, **kw: Any):
        watch = any(k == "watch" and v for k, v in (query_params or []))
        log.requests.append((method, urlparse(url).path, watch))
        return await original(self, method, url, query_params=query_params, **kw)

    monkeypatch.setattr(rest.RESTClientObject, "request", request)
    return log


def two_replica_app(kube_cluster: Any, i: int) -> specs.AppDef:
    # long enough that the fiftieth follow starts (~5 s after the first submission on a
    # loaded 2-core machine: fifty clients and their first lists) before the first job ends
    behaviour = kube_cluster.pod_behaviour(run_seconds=12, start_seconds=1)
    return specs.AppDef(
        f"fanin-{i}", [kube_role("worker", behaviour, replicas=2, cpu=0.1, mem_mb=64)]
    )


async def test_fifty_jobs_one_watch_per_namespace_and_type(
    kube_cluster: Any, scheduler: Any, request_log: RequestLog
) -> None:
    before = open_watches(kube_cluster.kubeconfig)
    app_ids = []
    for i in range(JOBS):
        app_id, _ = submit(scheduler, two_replica_app(kube_cluster, i), queue="default")
        app_ids.append(app_id)

    clients = [restricted_async_client(create_async_client, kube_cluster) for _ in app_ids]
    during: list[Counter[tuple[str, str]]] = []
    synced_at: list[int] = []

    async def follow(client: Any, app_id: str) -> tuple[AppState, list[AppState]]:
        seen: list[AppState] = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            resp = await client.describe(app_id)
            if resp is None:
                last = await client.last_seen(app_id)
                assert last is not None, f"{app_id} vanished unseen"
                resp = last
            if not seen or seen[-1] is not resp.state:
                seen.append(resp.state)
            if is_terminal(resp.state):
                return resp.state, seen
            await client.wait_changed(app_id, 30)
        pytest.fail(f"{app_id}: still {seen} after 240 s")

    async def sample() -> None:
        await asyncio.sleep(3)
        synced_at.append(len(request_log.requests))
        for _ in range(3):
            during.append(await asyncio.to_thread(open_watches, kube_cluster.kubeconfig))
            await asyncio.sleep(2)

    try:
        sampler = asyncio.create_task(sample())
        pairs = zip(clients, app_ids, strict=True)
        results = await asyncio.gather(*(follow(c, a) for c, a in pairs))
        await sampler
    finally:
        for client in clients:
            await client.close()

    assert [state for state, _ in results] == [AppState.SUCCEEDED] * JOBS
    # a follow that began before its job ended saw it run (on a loaded machine the last of
    # fifty clients can make its first list after its job's 12 s: it sees the end only)
    missed = [
        (app_id, seen)
        for app_id, (_, seen) in zip(app_ids, results, strict=True)
        if not is_terminal(seen[0]) and AppState.RUNNING not in seen
    ]
    assert not missed, missed
    # The API server saw at most one more open watch per (namespace, type) from us.
    for snapshot in during:
        extra = snapshot - before
        assert extra[("batch.volcano.sh", "jobs")] <= 1, snapshot
        assert extra[("", "pods")] <= 1, snapshot
    # And the clients sent: one list per type (plus relists), no GET or LIST per job.
    jobs_path = f"/namespaces/{kube_cluster.namespace}/jobs"
    pods_path = f"/namespaces/{kube_cluster.namespace}/pods"
    assert request_log.count("GET", jobs_path + "/") == 0, request_log.requests[:20]
    assert request_log.count("GET", jobs_path) <= 2
    assert request_log.count("GET", pods_path) <= 2
    assert 1 <= request_log.count("GET", jobs_path, watch=True) <= 3
    assert 1 <= request_log.count("GET", pods_path, watch=True) <= 3
    after_sync = request_log.requests[synced_at[0] :]
    assert [r for r in after_sync if not r[2]] == [], after_sync[:20]
    print(
        f"\n{JOBS} jobs followed: {len(request_log.requests)} requests in all "
        f"{Counter((v, p.rsplit('/', 1)[-1], w) for v, p, w in request_log.requests)}; "
        f"open watches during {[dict(s - before) for s in during]}"
    )


KUEUE_JOBS = 20


async def test_kueue_workloads_of_many_appwrappers_come_from_one_watch(
    kube_cluster: Any, request_log: RequestLog
) -> None:
    """Twenty AppWrappers of Kueue's LocalQueue followed from one process: their Workloads
    (why each waits, whether it was admitted) are read from one list + watch of the
    namespace's Workloads, never one request per app."""
    from torchx_provider.schedulers.kube import appwrapper

    kube_cluster.skip_unless_local("pods are run by the local cluster's kwok nodes")
    kueue = kube_cluster.require_kueue()
    behaviour = kube_cluster.pod_behaviour(run_seconds=2, start_seconds=0.5)
    with kube_scheduler(appwrapper.create_scheduler, kube_cluster, session="hub") as aws:
        app_ids = []
        for i in range(KUEUE_JOBS):
            app = specs.AppDef(
                f"kq-fanin-{i}", [kube_role("worker", behaviour, cpu=0.2, mem_mb=64)]
            )
            app_id, _ = submit(aws, app, **queue_options(kueue))
            app_ids.append(app_id)
        clients = [
            restricted_async_client(appwrapper.create_async_client, kube_cluster) for _ in app_ids
        ]
        said: list[str] = []

        async def follow(client: Any, app_id: str) -> AppState:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                resp = await client.describe(app_id)
                said.extend(n.text for n in client.take_notices())
                if resp is None:
                    resp = await client.last_seen(app_id)
                    assert resp is not None, f"{app_id} vanished unseen"
                if is_terminal(resp.state):
                    return resp.state
                await client.wait_changed(app_id, 30)
            pytest.fail(f"{app_id}: not ended after 180 s")

        try:
            states = await asyncio.gather(
                *(follow(c, a) for c, a in zip(clients, app_ids, strict=True))
            )
        finally:
            for client in clients:
                await client.close()
    assert states == [AppState.SUCCEEDED] * KUEUE_JOBS
    workloads = f"/namespaces/{kube_cluster.namespace}/workloads"
    assert request_log.count("GET", workloads + "/") == 0, request_log.requests[:20]
    assert 1 <= request_log.count("GET", workloads) <= 2
    assert 1 <= request_log.count("GET", workloads, watch=True) <= 3
    admitted = [t for t in said if "admitted: QuotaReserved" in t]
    assert len(admitted) >= KUEUE_JOBS // 2, said  # most were seen admitted
    print(
        f"\n{KUEUE_JOBS} Kueue apps: workload requests "
        f"{request_log.count('GET', workloads)} list, "
        f"{request_log.count('GET', workloads, watch=True)} watch; {len(admitted)} admissions said"
    )
