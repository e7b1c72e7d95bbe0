"""What a namespace full of Events costs a follower's event loop when its watch starts.

A Volcano app's follow reads why it waits from the namespace's Events about PodGroups, over
one shared informer per namespace and process, which first LISTs every such Event: in a busy
namespace thousands, megabytes of JSON. Parsing holds the interpreter lock, so what matters
is the longest single stall of the event loop (every other follow in the triggerer waits
through it), not the total time.

The benchmark writes ``--events`` PodGroup Events (about 1.2 KB each, as Volcano writes
them, about as many apps) into a namespace of the test cluster, then starts that Events
informer in a fresh interpreter, following one of the apps, while a ticker measures the
event loop's lag every millisecond until the informer has listed. Three ways, each
``--runs`` times (the median of each figure is printed):

* ``empty``: the same informer in a namespace without Events (the baseline: creating the
  client, one request);
* ``one_piece``: the whole list in one page, every Event kept until the cache sorts them, the
  garbage collector left on (as the list was read before it was paged and filtered);
* ``paged``: as the provider reads it: pages sized to about 256 KB, each parsed and filtered
  to the followed apps' Events in one step with the garbage collector paused (its
  collections would otherwise move the pages into the oldest generation and set off
  collections of the whole heap).

Before any of them, the follow's first describe makes the process's Kubernetes client, and
with it imports ``kubernetes_asyncio`` (about a third of a second). That is measured too, in
a fresh interpreter that has imported Airflow (as a triggerer has): the loop's lag while the
client is made, with the library imported in a worker thread (``first_client``, as the
provider does) and on the loop itself (``first_client_on_loop``, the baseline).

The last lines are machine-readable::

    events=N paged_lag_max_ms=P one_piece_lag_max_ms=O empty_lag_max_ms=E ratio_vs_one_piece=R
    first_client_lag_max_ms=T on_loop_lag_max_ms=L ratio_vs_on_loop=Q

Usage (the test cluster up; ``cluster.sh up``)::

    python benchmarks/bench_events_list.py [--kubeconfig PATH] [--events 2000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "provider"))

NAMESPACE_PREFIX = "bench-events"
MODES = ("empty", "one_piece", "paged")
FIRST_CLIENT = ("first_client", "first_client_on_loop")
TICK = 0.001
MESSAGE = (
    "0/0 tasks in gang unschedulable: pod group is not ready, 2 minAvailable; queue resource "
    "quota insufficient: insufficient cpu"
)


def default_kubeconfig() -> str:
    return os.environ.get("TORCHX_TEST_KUBECONFIG") or str(
        Path.home() / ".cache/airflow-provider-torchx/cluster/run/kubeconfig/admin.yaml"
    )


async def api_client(kubeconfig: str) -> Any:
    from torchx_provider.schedulers.kube.client_config import KubeClientConfig

    return await KubeClientConfig.from_kwargs(kubeconfig=kubeconfig).async_api_client()


def pod_group_event(namespace: str, i: int) -> dict[str, Any]:
    app = f"bench-app-{i:05d}"
    uid = str(uuid.uuid4())
    now = "2026-01-01T00:00:00Z"
    return {
        "metadata": {"name": f"{app}-{uid}.{i:016x}", "namespace": namespace},
        "involvedObject": {
            "kind": "PodGroup",
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "namespace": namespace,
            "name": f"{app}-{uid}",
            "uid": uid,
            "resourceVersion": "1",
        },
        "reason": "Unschedulable",
        "message": MESSAGE,
        "source": {"component": "volcano"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 7,
        "type": "Warning",
        "reportingComponent": "volcano",
    }


async def prepare(kubeconfig: str, namespace: str, events: int) -> None:
    """``namespace`` anew, holding ``events`` PodGroup Events."""
    from kubernetes_asyncio import client

    api = await api_client(kubeconfig)
    try:
        core = client.CoreV1Api(api)
        await core.create_namespace({"metadata": {"name": namespace}})
        limit = asyncio.Semaphore(16)

        async def one(i: int) -> None:
            async with limit:
                await core.create_namespaced_event(namespace, pod_group_event(namespace, i))

        await asyncio.gather(*(one(i) for i in range(events)))
    finally:
        await api.close()


async def remove(kubeconfig: str, namespace: str) -> None:
    from kubernetes_asyncio import client

    api = await api_client(kubeconfig)
    try:
        await client.CoreV1Api(api).delete_namespace(namespace)
    finally:
        await api.close()


class LoopLag:
    """The event loop's lag, sampled every :data:`TICK` seconds while it runs."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.done = False
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopLag:
        loop = asyncio.get_running_loop()

        async def ticker() -> None:
            while not self.done:
                t = loop.time()
                await asyncio.sleep(TICK)
                self.lags.append(loop.time() - t - TICK)

        self.task = asyncio.create_task(ticker())
        await asyncio.sleep(0.05)
        self.lags.clear()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.done = True
        assert self.task is not None
        await self.task

    @property
    def max_ms(self) -> float:
        return 1000 * max(self.lags, default=0.0)


async def first_client(kubeconfig: str, on_loop: bool) -> dict[str, float]:
    """In this fresh interpreter, with Airflow imported: the loop's lag while the first
    Kubernetes client is made."""
    import airflow.configuration  # noqa: F401  (a triggerer has it loaded)

    from torchx_provider.schedulers.kube import client_config
    from torchx_provider.schedulers.kube.client_config import KubeClientConfig
    from torchx_provider.schedulers.kube.hub import InformerHub

    if on_loop:

        async def here(fn: Any) -> Any:
            return fn()

        client_config.asyncio.to_thread = here  # type: ignore[assignment]
    config = KubeClientConfig.from_kwargs(kubeconfig=kubeconfig)
    async with LoopLag() as lag:
        started = time.perf_counter()
        api = await InformerHub.current().acquire_client(config, count=False)
        took = time.perf_counter() - started
    await api.close()
    return {"lag_max_ms": lag.max_ms, "list_s": took, "kept": 0}


async def measure(kubeconfig: str, namespace: str, mode: str) -> dict[str, float]:
    """In this (fresh) interpreter: start the Events informer as a follow does, and the
    event loop's lag until it has listed."""
    if mode.startswith("first_client"):
        return await first_client(kubeconfig, on_loop=mode == "first_client_on_loop")
    from torchx_provider.schedulers.kube import io_async
    from torchx_provider.schedulers.kube.client_config import KubeClientConfig
    from torchx_provider.schedulers.kube.hub import InformerHub, event_app
    from torchx_provider.schedulers.kube.informer import Informer
    from torchx_provider.schedulers.kube.resources import VOLCANO_PODGROUP_EVENTS

    config = KubeClientConfig.from_kwargs(kubeconfig=kubeconfig)
    followed = "bench-app-00007"
    source = io_async.AsyncKube(config).event_watch(VOLCANO_PODGROUP_EVENTS, namespace)
    if mode == "one_piece":
        io_async.LIST_PAGE = io_async.PAGE_MIN = io_async.PAGE_MAX = 1_000_000
        io_async.paused_gc = contextlib.nullcontext  # type: ignore[assignment]
        listed = source.list
        source.list = lambda keep=None: listed(None)  # type: ignore[method-assign]
    # The client is made (and its modules imported) before the measurement: a follow's
    # first describe does that, whatever the namespace holds.
    await InformerHub.current().acquire_client(config, count=False)
    # the index of a followed-only informer: the followed app's Events only
    informer = Informer(source, lambda e: followed if event_app(e) == followed else None)
    async with LoopLag() as lag:
        started = time.perf_counter()
        running = asyncio.create_task(informer.run())
        await asyncio.wait_for(informer.synced.wait(), 120)
        took = time.perf_counter() - started
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    await InformerHub.current().close()
    for found in InformerHub.current().clients.values():
        if found.api is not None:
            await found.api.close()
    kept = len(informer.get(followed))
    return {"lag_max_ms": lag.max_ms, "list_s": took, "kept": kept}


def run_child(kubeconfig: str, namespace: str, mode: str) -> dict[str, float]:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            mode,
            "--namespace",
            namespace,
            "--kubeconfig",
            kubeconfig,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", default=default_kubeconfig())
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", choices=(*MODES, *FIRST_CLIENT))
    parser.add_argument("--namespace")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(measure(args.kubeconfig, args.namespace, args.child))))
        return
    tag = uuid.uuid4().hex[:6]
    full, empty = f"{NAMESPACE_PREFIX}-{tag}", f"{NAMESPACE_PREFIX}-empty-{tag}"
    started = time.perf_counter()
    asyncio.run(prepare(args.kubeconfig, full, args.events))
    asyncio.run(prepare(args.kubeconfig, empty, 0))
    print(f"wrote {args.events} Events in {time.perf_counter() - started:.1f}s")
    try:
        results: dict[str, list[dict[str, float]]] = {m: [] for m in (*MODES, *FIRST_CLIENT)}
        for _ in range(args.runs):
            for mode in results:
                where = empty if mode == "empty" else full
                results[mode].append(run_child(args.kubeconfig, where, mode))
        median = {
            mode: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            for mode, runs in results.items()
        }
        for mode, m in median.items():
            if mode in FIRST_CLIENT:
                print(f"  {mode:20s} lag max {m['lag_max_ms']:6.1f} ms, made in {m['list_s']:.2f}s")
                continue
            print(
                f"  {mode:9s} lag max {m['lag_max_ms']:6.1f} ms, listed in {m['list_s']:.2f}s,"
                f" kept {m['kept']:.0f}"
            )
        paged, one = median["paged"]["lag_max_ms"], median["one_piece"]["lag_max_ms"]
        print(
            f"events={args.events} paged_lag_max_ms={paged:.1f} one_piece_lag_max_ms={one:.1f}"
            f" empty_lag_max_ms={median['empty']['lag_max_ms']:.1f}"
            f" ratio_vs_one_piece={paged / one:.2f}"
        )
        first, on_loop = (median[m]["lag_max_ms"] for m in FIRST_CLIENT)
        print(
            f"first_client_lag_max_ms={first:.1f} on_loop_lag_max_ms={on_loop:.1f}"
            f" ratio_vs_on_loop={first / on_loop:.2f}"
        )
    finally:
        asyncio.run(remove(args.kubeconfig, full))
        asyncio.run(remove(args.kubeconfig, empty))


if __name__ == "__main__":
    main()
