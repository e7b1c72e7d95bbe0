"""What following many deferred jobs costs one triggerer: requests, CPU, memory, latency.

N jobs of 2 replicas each run on the local test cluster's fake kubelet (kwok, see
tests/cluster): Volcano jobs (``--backend kubernetes``, the default), or JobSets admitted by
Kueue (``--backend kubernetes_jobset_kueue``: each JobSet is submitted with the run option
``local_queue``, to a LocalQueue of the benchmark's own feeding a ClusterQueue of its own
whose quota is what its fake nodes hold, so that every job is admitted at once; the flavor
of the cluster's own ClusterQueue is used when it places nothing, else one is made). One
follower process -- the triggerer's part, without Airflow -- follows all of them as N
deferred tasks would: per job, the backend's async client made the way ``TorchXJobTrigger``
makes it, and the provider's follow loop (``JobFollower``) at the default 10 s
``poll_interval``, writing to a logger that discards lines; under Kueue it also runs the
shared Workload and LocalQueue watches of the namespace, for Volcano the Events watches.
For each N it prints:

* API requests per minute per job, from the API server's own ``apiserver_request_total``
  (the delta over a measurement window of the reads a follow may make -- of jobs or JobSets,
  pods, pod logs, Events, Volcano Queues, Kueue Workloads and LocalQueues -- by verb and
  resource, minus the same delta over a window before the follows started: the cluster's
  own controllers, and anyone else using it, make requests too); the open WATCH requests
  on those at the end;
* CPU % of one core and peak RSS of the follower process, and the event-loop lag p99 over
  the window (a task that sleeps 100 ms and records how late it wakes);
* status -> event latency p50/p99 when the jobs finish: the pods are made to complete (kwok
  ends a pod once its ``keep-running`` annotation is no longer ``true``; a JobSet's pods,
  made by the Job controller from its template, carry the annotation as a Volcano job's
  do), a watch in the benchmark process (not the follower) notes when each job reached
  ``Completed`` on the API server, and the follower notes when each follow returned its
  event. The follows start spread evenly over one poll interval, as deferred tasks arriving
  at any time would.

The jobs run on fake nodes the benchmark adds for itself (tainted, so that nothing else
lands there), 100 pods per node. Everything it made -- jobs, Kueue queues, nodes -- is
removed at the end, also when it fails. The last line, for the largest size run, is
machine-readable::

    backend=B jobs=N req_per_min_per_job=X cpu_pct=Y rss_mb=R loop_lag_p99_ms=L event_p99_s=E

Usage::

    python benchmarks/bench_follow_fanin.py [--backend kubernetes|kubernetes_jobset_kueue]
        [--jobs N] [--window 60] [--background 30] [--watch]

``--watch`` follows with progress tracking, stragglers and stalls on: each follow has a
``progress_pattern``, ``straggler_after`` (60 s) and ``stall_timeout`` (1 hour).

Without ``--jobs`` it runs N = 10, 100 and 1000 in turn. Needs the running local cluster
(``bash tests/cluster/cluster.sh up``; ``cluster.sh env`` names its kubeconfigs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import resource
import secrets
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "provider"))

SIZES = (10, 100, 1000)
POLL_INTERVAL = 10.0  # the follow's default
PODS_PER_NODE = 100
NODE_CPU, NODE_MEMORY_GI = 64, 256  # what one fake node of the benchmark's holds
BENCH_LABEL = "torchx.test/bench"
KEEP_RUNNING = "cluster.torchx.test/keep-running"
TICK = 0.1
#: set (to ``1``) for the follower process when ``--watch`` is given
WATCH_ENV = "TORCHX_BENCH_WATCH"
#: Kueue's API group and the version the local cluster serves
KUEUE = ("kueue.x-k8s.io", "v1beta2")


# ------------------------------------------------------------------------------ the follower
class Discard:
    """A logger that drops everything (the triggerer would write to the task log)."""

    def _drop(self, *args: Any, **kwargs: Any) -> None:
        pass

    debug = info = warning = error = exception = _drop


def follower_main(backend_name: str, kubeconfig: str, namespace: str) -> None:
    """The triggerer-like process: app ids on stdin (one JSON list), then commands
    (``mark``, ``stats``); prints ``ready``, one ``event`` line per finished follow, and
    the stats as JSON."""
    from torchx_provider.backends import get_backend
    from torchx_provider.triggers.follow import JobFollower

    watch: dict[str, Any] = {}
    if os.environ.get(WATCH_ENV) == "1":
        from torchx_provider.triggers.progress import ProgressPattern
        from torchx_provider.triggers.watch import WatchLimits

        watch = {
            "progress_pattern": ProgressPattern.parse(r"step[=: ]\s*(\d+)"),
            "watch": WatchLimits(straggler_after=60.0, stall_timeout=3600.0),
        }

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    app_ids: list[str] = json.loads(sys.stdin.readline())
    client_kwargs = {"kubeconfig": kubeconfig, "namespace": namespace}
    backend = get_backend(backend_name)
    lags: list[float] = []
    out_lock = threading.Lock()

    def say(line: str) -> None:
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    async def ticker() -> None:
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(TICK)
            lags.append(loop.time() - t - TICK)

    class TimedFollower(JobFollower):
        """Notes when the follow saw the app end (before its logs are read to the end)."""

        seen_end = 0.0

        async def _finish_logs(self) -> None:
            self.seen_end = time.time()
            await super()._finish_logs()

    async def follow(app_id: str, delay: float) -> None:
        # Deferred tasks arrive at any time: their cycles are spread over the interval.
        await asyncio.sleep(delay)
        # As TorchXJobTrigger.run: the client is made off the loop, then the follow loop.
        client = await asyncio.to_thread(backend.create_async_client, **client_kwargs)
        follower = TimedFollower(
            client, app_id, log=Discard(), poll_interval=POLL_INTERVAL, **watch
        )
        try:
            event = await follower.run()
        finally:
            await client.close()
        say(f"event {app_id} {time.time():.6f} {event.state.name} {follower.seen_end:.6f}")

    async def commands(window: dict[str, float]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
            if line in ("", "quit"):
                return
            if line == "mark":
                lags.clear()
                window.update(cpu=time.process_time(), wall=time.monotonic())
                say("marked")
            elif line == "stats":
                cpu = time.process_time() - window["cpu"]
                wall = time.monotonic() - window["wall"]
                rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                say(
                    "stats "
                    + json.dumps(
                        {
                            "cpu_pct": 100.0 * cpu / wall,
                            "rss_mb": rss_kb / 1024.0,
                            "lag_p99_ms": 1000.0 * percentile(lags, 99),
                            "lag_max_ms": 1000.0 * max(lags, default=0.0),
                        }
                    )
                )

    async def main() -> None:
        tick = asyncio.create_task(ticker())
        spread = POLL_INTERVAL / len(app_ids)
        follows = [asyncio.create_task(follow(a, i * spread)) for i, a in enumerate(app_ids)]
        say("ready")
        await commands({"cpu": time.process_time(), "wall": time.monotonic()})
        for task in [tick, *follows]:
            task.cancel()
        await asyncio.gather(tick, *follows, return_exceptions=True)

    asyncio.run(main())


# ------------------------------------------------------------------------------ measuring
def percentile(values: Iterable[float], p: float) -> float:
    data = sorted(values)
    if not data:
        return float("nan")
    k = max(0, min(len(data) - 1, math.ceil(p / 100.0 * len(data)) - 1))
    return data[k]


METRIC = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
WATCHES = re.compile(r"^apiserver_longrunning_requests\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')


def scrape(api: Any) -> tuple[Counter[tuple[str, str]], Counter[str]]:
    """``(verb, resource[/subresource]) -> requests so far``, and open WATCHes by resource."""
    resp = api.call_api("/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False)
    data = (resp[0] if isinstance(resp, tuple) else resp).data
    totals: Counter[tuple[str, str]] = Counter()
    watches: Counter[str] = Counter()
    for line in data.decode().splitlines():
        m = METRIC.match(line) or WATCHES.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m["labels"]))
        what = labels.get("resource", "") + (
            f"/{labels['subresource']}" if labels.get("subresource") else ""
        )
        if line.startswith("apiserver_request_total"):
            totals[(labels.get("verb", ""), what)] += int(float(m["value"]))
        elif labels.get("verb") == "WATCH":
            watches[what] += int(float(m["value"]))
    return totals, watches


#: What a follow may request: reads of its job (a Volcano job or a JobSet), pods and pod
#: logs, the Events of a Volcano job and its PodGroup and its Volcano Queue, and under Kueue
#: the job's Workload and its LocalQueue. Writes (POST, DELETE, ...) come from the
#: controllers and whoever else uses the cluster, never from a follow.
FOLLOWED = ("jobs", "jobsets", "pods", "pods/log", "events", "workloads", "localqueues", "queues")
READS = ("GET", "LIST", "WATCH", "CONNECT")


def per_minute(delta: Counter[tuple[str, str]], seconds: float) -> dict[tuple[str, str], float]:
    return {
        (verb, what): v * 60.0 / seconds
        for (verb, what), v in delta.items()
        if v > 0 and what in FOLLOWED and verb in READS
    }


class Cluster:
    """The local test cluster: admin client for set-up and metrics, the provider for jobs."""

    def __init__(self) -> None:
        env = subprocess.run(
            ["bash", str(REPO / "tests" / "cluster" / "cluster.sh"), "env"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        self.env = dict(line.split("=", 1) for line in env.splitlines() if "=" in line)
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(
            config_file=self.env["TORCHX_CLUSTER_KUBECONFIG"], client_configuration=configuration
        )
        configuration.connection_pool_maxsize = 32
        self.api = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.namespace = self.env["TORCHX_CLUSTER_NAMESPACE"]
        self.restricted = self.env["TORCHX_CLUSTER_RESTRICTED_KUBECONFIG"]

    # -- fake nodes of the benchmark's own ------------------------------------------------------
    def add_nodes(self, count: int, tag: str) -> list[str]:
        names = [f"torchx-bench-{tag}-{i}" for i in range(count)]
        made: list[str] = []
        try:
            for name in names:
                self._add_node(name, tag)
                made.append(name)
            wait(lambda: all(self._ready(n) for n in names), 120, f"{count} bench nodes Ready")
        except BaseException:
            self.remove_nodes(made)
            raise
        return names

    def _add_node(self, name: str, tag: str) -> None:
        size = {"cpu": str(NODE_CPU), "memory": f"{NODE_MEMORY_GI}Gi", "pods": "110"}
        self.core.create_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {
                        "kwok.x-k8s.io/node": "fake",
                        "node.alpha.kubernetes.io/ttl": "0",
                    },
                    "labels": {"type": "kwok", BENCH_LABEL: tag},
                },
                "spec": {"taints": [{"key": BENCH_LABEL, "effect": "NoSchedule"}]},
                "status": {"allocatable": size, "capacity": size},
            }
        )

    def _ready(self, name: str) -> bool:
        node = self.core.read_node(name)
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

    def remove_nodes(self, names: list[str]) -> None:
        for name in names:
            try:
                self.core.delete_node(name)
            except Exception as e:  # already gone
                print(f"  (node {name}: {e})", file=sys.stderr)

    # -- Kueue queues of the benchmark's own ----------------------------------------------------
    def add_kueue_queues(self, tag: str, nodes: int, made: list[tuple[str, str]]) -> str:
        """A LocalQueue in the namespace feeding a ClusterQueue whose quota is what ``nodes``
        bench nodes hold, and a ResourceFlavor if the cluster's cannot be used. Each object
        is noted in ``made`` (plural, name) once created; returns the LocalQueue's name."""
        group, version = KUEUE
        name = f"torchx-bench-{tag}"
        meta = {"name": name, "labels": {BENCH_LABEL: tag}}
        flavor = self._plain_flavor()
        if flavor is None:
            flavor = name
            self.custom.create_cluster_custom_object(
                group,
                version,
                "resourceflavors",
                {"apiVersion": f"{group}/{version}", "kind": "ResourceFlavor", "metadata": meta},
            )
            made.append(("resourceflavors", name))
        quota = [
            {"name": "cpu", "nominalQuota": str(NODE_CPU * nodes)},
            {"name": "memory", "nominalQuota": f"{NODE_MEMORY_GI * nodes}Gi"},
        ]
        self.custom.create_cluster_custom_object(
            group,
            version,
            "clusterqueues",
            {
                "apiVersion": f"{group}/{version}",
                "kind": "ClusterQueue",
                "metadata": meta,
                "spec": {
                    "namespaceSelector": {},
                    "queueingStrategy": "BestEffortFIFO",
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory"],
                            "flavors": [{"name": flavor, "resources": quota}],
                        }
                    ],
                },
            },
        )
        made.append(("clusterqueues", name))
        self.custom.create_namespaced_custom_object(
            group,
            version,
            self.namespace,
            "localqueues",
            {
                "apiVersion": f"{group}/{version}",
                "kind": "LocalQueue",
                "metadata": {**meta, "namespace": self.namespace},
                "spec": {"clusterQueue": name},
            },
        )
        made.append(("localqueues", name))
        wait(lambda: self._queue_active(name), 60, f"LocalQueue {name} active")
        return name

    def _plain_flavor(self) -> str | None:
        """A flavor of the cluster's own ClusterQueue that puts nothing on the pods it
        admits (no node labels, taints, tolerations or topology), if there is one."""
        from kubernetes.client.exceptions import ApiException

        group, version = KUEUE
        queue = self.env.get("TORCHX_CLUSTER_KUEUE_CLUSTER_QUEUE")
        if not queue:
            return None
        try:
            cq = self.custom.get_cluster_custom_object(group, version, "clusterqueues", queue)
            for rg in (cq.get("spec") or {}).get("resourceGroups") or []:
                for f in rg.get("flavors") or []:
                    rf = self.custom.get_cluster_custom_object(
                        group, version, "resourceflavors", f["name"]
                    )
                    spec = rf.get("spec") or {}
                    if not any(
                        spec.get(k)
                        for k in ("nodeLabels", "nodeTaints", "tolerations", "topologyName")
                    ):
                        return str(f["name"])
        except ApiException as e:
            if e.status != 404:
                raise
        return None

    def _queue_active(self, name: str) -> bool:
        group, version = KUEUE
        lq = self.custom.get_namespaced_custom_object(
            group, version, self.namespace, "localqueues", name
        )
        conditions = (lq.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)

    def remove_kueue_objects(self, made: list[tuple[str, str]]) -> None:
        """Deletes what :meth:`add_kueue_queues` made, the LocalQueue first, each once the
        one before it is gone (Kueue keeps a ClusterQueue while it holds Workloads, and a
        flavor while a ClusterQueue uses it)."""
        from kubernetes.client.exceptions import ApiException

        group, version = KUEUE
        for plural, name in reversed(made):
            namespaced = plural == "localqueues"

            def gone(plural: str = plural, name: str = name, namespaced: bool = namespaced) -> bool:
                try:
                    if namespaced:
                        self.custom.get_namespaced_custom_object(
                            group, version, self.namespace, plural, name
                        )
                    else:
                        self.custom.get_cluster_custom_object(group, version, plural, name)
                except ApiException as e:
                    if e.status == 404:
                        return True
                    raise
                return False

            try:
                if namespaced:
                    self.custom.delete_namespaced_custom_object(
                        group, version, self.namespace, plural, name
                    )
                else:
                    self.custom.delete_cluster_custom_object(group, version, plural, name)
                wait(gone, 120, f"{plural} {name} to go")
            except Exception as e:  # already gone, or still there: say so, go on
                if getattr(e, "status", None) != 404:
                    print(f"  ({plural} {name}: {e})", file=sys.stderr)

    # -- jobs ----------------------------------------------------------------------------------
    def jobs(self, kind: JobKind) -> dict[str, dict[str, Any]]:
        items = self.custom.list_namespaced_custom_object(
            kind.group, kind.version, self.namespace, kind.plural
        )["items"]
        return {o["metadata"]["name"]: o for o in items}

    def running_pods(self, tag: str) -> int:
        return len(
            self.core.list_namespaced_pod(
                self.namespace,
                label_selector=f"{BENCH_LABEL}={tag}",
                field_selector="status.phase=Running",
            ).items
        )

    def finish_pods(self, tag: str) -> None:
        pods = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{BENCH_LABEL}={tag}"
        ).items
        patch = {"metadata": {"annotations": {KEEP_RUNNING: "false"}}}
        with ThreadPoolExecutor(16) as pool:
            list(
                pool.map(
                    lambda p: self.core.patch_namespaced_pod(
                        p.metadata.name, self.namespace, patch
                    ),
                    pods,
                )
            )

    def read_logs_once(self, tag: str, at_once: int) -> tuple[float, int]:
        """The baseline of reading every replica's log to its end: each ended pod's log read
        once (no follow, with timestamps) by the same asyncio client library the follower
        uses, ``at_once`` at a time. Returns (seconds, pods read)."""
        names = [
            p.metadata.name
            for p in self.core.list_namespaced_pod(
                self.namespace, label_selector=f"{BENCH_LABEL}={tag}"
            ).items
        ]

        async def read_all() -> float:
            from kubernetes_asyncio import client as aclient
            from kubernetes_asyncio import config as aconfig

            configuration = aclient.Configuration()
            await aconfig.load_kube_config(
                config_file=self.restricted, client_configuration=configuration
            )
            configuration.connection_pool_maxsize = at_once
            gate = asyncio.Semaphore(at_once)
            async with aclient.ApiClient(configuration) as api:
                core = aclient.CoreV1Api(api)

                async def read(name: str) -> None:
                    async with gate:
                        resp: Any = await core.read_namespaced_pod_log(
                            name, self.namespace, timestamps=True, _preload_content=False
                        )
                        await resp.read()
                        resp.release()

                t = time.monotonic()
                await asyncio.gather(*(read(name) for name in names))
                return time.monotonic() - t

        return asyncio.run(read_all()), len(names)

    def delete_jobs(self, kind: JobKind, names: Iterable[str]) -> None:
        def delete(name: str) -> None:
            try:
                self.custom.delete_namespaced_custom_object(
                    kind.group,
                    kind.version,
                    self.namespace,
                    kind.plural,
                    name,
                    propagation_policy="Background",
                )
            except Exception as e:
                if getattr(e, "status", None) != 404:
                    raise

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(delete, names))

    def pods_left(self, tag: str) -> int:
        return len(
            self.core.list_namespaced_pod(
                self.namespace, label_selector=f"{BENCH_LABEL}={tag}"
            ).items
        )


def wait(predicate: Any, timeout: float, what: str, interval: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def job_app(tag: str) -> Any:
    from torchx_provider import specs

    pod = {
        "metadata": {
            "labels": {BENCH_LABEL: tag},
            "annotations": {KEEP_RUNNING: "true", "cluster.torchx.test/run-duration": "10ms"},
        },
        "spec": {
            "nodeSelector": {BENCH_LABEL: tag},
            "tolerations": [{"key": BENCH_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
    role = specs.Role(
        "trainer",
        image="registry.invalid/train:1",
        entrypoint="python",
        args=["-m", "train"],
        num_replicas=2,
        resource=specs.Resource(cpu=0.1, gpu=0, memMB=64),
        metadata={"kubernetes": pod},
    )
    return specs.AppDef(f"fanin-{tag}", [role])


# ------------------------------------------------------------------------------ the backends
@dataclass(frozen=True)
class JobKind:
    """What the followed jobs are: the provider's backend that submits and follows them,
    the API object of one job, when it has completed, when all are running, and whether
    they are submitted to a Kueue LocalQueue of the benchmark's."""

    backend: str
    group: str
    version: str
    plural: str
    completed: Callable[[dict[str, Any]], bool]
    all_running: Callable[[Cluster, set[str], str], bool]
    kueue: bool = False


def volcano_completed(obj: dict[str, Any]) -> bool:
    return ((obj.get("status") or {}).get("state") or {}).get("phase") == "Completed"


def volcano_running(cluster: Cluster, names: set[str], tag: str) -> bool:
    jobs = cluster.jobs(KINDS["kubernetes"])
    return all(((jobs.get(name) or {}).get("status") or {}).get("running") == 2 for name in names)


def jobset_completed(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    return status.get("terminalState") == "Completed" or any(
        c.get("type") == "Completed" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def jobset_running(cluster: Cluster, names: set[str], tag: str) -> bool:
    # A JobSet counts Jobs, not pods: count its pods (the Job controller's) instead.
    return cluster.running_pods(tag) >= 2 * len(names)


#: ``--backend``: what it runs
KINDS = {
    "kubernetes": JobKind(
        "kubernetes", "batch.volcano.sh", "v1alpha1", "jobs", volcano_completed, volcano_running
    ),
    "kubernetes_jobset_kueue": JobKind(
        "kubernetes_jobset",
        "jobset.x-k8s.io",
        "v1alpha2",
        "jobsets",
        jobset_completed,
        jobset_running,
        kueue=True,
    ),
}


class CompletedWatch(threading.Thread):
    """Notes when each job reaches ``Completed`` on the API server (a watch, in this
    process, so that it costs the follower nothing)."""

    def __init__(self, cluster: Cluster, kind: JobKind, names: set[str]) -> None:
        super().__init__(daemon=True)
        self.cluster, self.kind, self.names = cluster, kind, names
        self.completed: dict[str, float] = {}
        self.started = threading.Event()
        self.stop = False

    def run(self) -> None:
        from kubernetes import watch

        c, kind = self.cluster, self.kind
        listed = c.custom.list_namespaced_custom_object(
            kind.group, kind.version, c.namespace, kind.plural
        )
        version = listed["metadata"]["resourceVersion"]
        w = watch.Watch()
        self.started.set()
        while not self.stop and len(self.completed) < len(self.names):
            for ev in w.stream(
                c.custom.list_namespaced_custom_object,
                kind.group,
                kind.version,
                c.namespace,
                kind.plural,
                resource_version=version,
                timeout_seconds=30,
            ):
                obj = ev["object"]
                version = obj["metadata"]["resourceVersion"]
                name = obj["metadata"]["name"]
                if name in self.names and kind.completed(obj) and name not in self.completed:
                    self.completed[name] = time.time()
                if self.stop or len(self.completed) == len(self.names):
                    w.stop()


# ------------------------------------------------------------------------------ one size
Rates = dict[tuple[str, str], float]


def followed_table(during: Rates, base: Rates) -> dict[str, float]:
    """Reads per minute by ``verb resource`` in the window, less the background's."""
    rows = sorted(set(during) | set(base))
    return {f"{v} {w}": during.get((v, w), 0.0) - base.get((v, w), 0.0) for v, w in rows}


def followed_per_job(during: Rates, base: Rates, n: int) -> float:
    """The follows' reads per minute per job (rows below the background count as none)."""
    return sum(max(0.0, x) for x in followed_table(during, base).values()) / n


def run_size(
    cluster: Cluster, backend: str, n: int, window: float, background: float
) -> dict[str, Any]:
    from torchx_provider.backends import get_backend

    kind = KINDS[backend]
    tag = secrets.token_hex(3)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    nodes = cluster.add_nodes(max(1, math.ceil(2 * n / PODS_PER_NODE)), tag)
    kueue_made: list[tuple[str, str]] = []
    scheduler: Any = None
    submitted: list[str] = []  # every app id, also when a later submit fails
    child: subprocess.Popen[str] | None = None
    try:
        options: dict[str, Any] = {"queue": "default"}
        if kind.kueue:
            options = {"local_queue": cluster.add_kueue_queues(tag, len(nodes), kueue_made)}
        scheduler = get_backend(kind.backend).create_scheduler(
            "bench", kubeconfig=cluster.restricted, namespace=cluster.namespace
        )
        app = job_app(tag)
        scheduler.submit_dryrun(app, options)  # a bad option fails here, before any submit

        def submit(_: int) -> str:
            app_id: str = scheduler.schedule(scheduler.submit_dryrun(app, options))
            submitted.append(app_id)
            return app_id

        with ThreadPoolExecutor(8) as pool:
            app_ids = list(pool.map(submit, range(n)))
        names = {a.split(":", 1)[1] for a in app_ids}
        timings["submit_s"] = time.monotonic() - t0

        wait(
            lambda: kind.all_running(cluster, names, tag),
            120 + 2 * n,
            f"{n} jobs with 2 running pods each",
            interval=2.0,
        )
        timings["running_s"] = time.monotonic() - t0

        # Background: the cluster's own requests with the jobs running and nobody following.
        before, _ = scrape(cluster.api)
        time.sleep(background)
        after, _ = scrape(cluster.api)
        base = per_minute(after - before, background)

        child = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--follower",
                kind.backend,
                cluster.restricted,
                cluster.namespace,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO / "provider")},
        )
        assert child.stdin is not None and child.stdout is not None
        events: dict[str, tuple[float, str]] = {}
        seen_end: dict[str, float] = {}  # when the follower saw the app end
        replies: list[str] = []
        got_reply = threading.Condition()

        def read_child() -> None:
            assert child is not None and child.stdout is not None
            for line in child.stdout:
                if line.startswith("event "):
                    _, app_id, at, state, seen = line.split()
                    events[app_id] = (float(at), state)
                    seen_end[app_id] = float(seen)
                else:
                    with got_reply:
                        replies.append(line.strip())
                        got_reply.notify_all()

        threading.Thread(target=read_child, daemon=True).start()

        def ask(command: str, prefix: str, timeout: float = 60) -> str:
            assert child is not None and child.stdin is not None
            if command:
                child.stdin.write(command + "\n")
                child.stdin.flush()
            with got_reply:
                if not got_reply.wait_for(
                    lambda: any(r.startswith(prefix) for r in replies), timeout
                ):
                    raise TimeoutError(f"the follower did not answer {prefix!r}")
                reply = next(r for r in replies if r.startswith(prefix))
                replies.remove(reply)
                return reply

        child.stdin.write(json.dumps(app_ids) + "\n")
        child.stdin.flush()
        ask("", "ready", 120 + n / 10)
        time.sleep(POLL_INTERVAL + 5)  # every follow has made its first cycle
        timings["followers_up_s"] = time.monotonic() - t0

        ask("mark", "marked")
        before, _ = scrape(cluster.api)
        time.sleep(window)
        after, watches = scrape(cluster.api)
        stats = json.loads(ask("stats", "stats ").split(" ", 1)[1])
        during = per_minute(after - before, window)
        print(
            f"  [{n} jobs] window measured: follower {stats}, reads/min {during};"
            f" background reads/min {base}",
            file=sys.stderr,
            flush=True,
        )
        # what the window says, before anything that may not finish (the jobs' end, cleanup)
        print(
            f"  [{n} jobs] window: backend={backend} jobs={n} req_per_min_per_job="
            f"{followed_per_job(during, base, n):.2f} cpu_pct={stats['cpu_pct']:.1f}",
            file=sys.stderr,
            flush=True,
        )

        completed = CompletedWatch(cluster, kind, names)
        completed.start()
        completed.started.wait(30)
        t_finish = time.monotonic()
        cluster.finish_pods(tag)
        try:
            wait(lambda: len(events) >= n, 120 + n, f"{n} follow events", interval=0.5)
        except TimeoutError as e:  # report the events that came; the table says how many
            print(f"  [{n} jobs] {e}", file=sys.stderr, flush=True)
        timings["finish_s"] = time.monotonic() - t_finish
        completed.stop = True
        measured = [a for a in app_ids if a in events and a.split(":", 1)[1] in completed.completed]
        latencies = [events[a][0] - completed.completed[a.split(":", 1)[1]] for a in measured]
        # where the latency goes: until the follower saw the job end, then its logs' ends
        seeing = [seen_end[a] - completed.completed[a.split(":", 1)[1]] for a in measured]
        draining = [events[a][0] - seen_end[a] for a in measured]
        states = Counter(state for _, state in events.values())
        from torchx_provider.schedulers.streams import MAX_STREAMS

        raw_seconds, raw_pods = cluster.read_logs_once(tag, MAX_STREAMS)
    finally:
        if child is not None:
            if child.stdin is not None:
                try:
                    child.stdin.write("quit\n")
                    child.stdin.flush()
                except OSError:
                    pass
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
        try:
            cluster.delete_jobs(kind, [a.split(":", 1)[1] for a in submitted])
            if scheduler is not None:
                scheduler.close()
            wait(lambda: cluster.pods_left(tag) == 0, 300 + n / 2, "the benchmark's pods to go")
        finally:
            try:
                cluster.remove_kueue_objects(kueue_made)
            finally:
                cluster.remove_nodes(nodes)
    timings["total_s"] = time.monotonic() - t0

    table = followed_table(during, base)
    return {
        "backend": backend,
        "jobs": n,
        "req_per_min": table,
        "background_per_min": {f"{v} {w}": x for (v, w), x in base.items()},
        "req_per_min_per_job": followed_per_job(during, base, n),
        "open_watches": {k: v for k, v in watches.items() if k in FOLLOWED},
        "cpu_pct": stats["cpu_pct"],
        "rss_mb": stats["rss_mb"],
        "loop_lag_p99_ms": stats["lag_p99_ms"],
        "loop_lag_max_ms": stats["lag_max_ms"],
        "event_p50_s": percentile(latencies, 50),
        "event_p99_s": percentile(latencies, 99),
        "seen_end_p50_s": percentile(seeing, 50),
        "seen_end_p99_s": percentile(seeing, 99),
        "logs_end_p50_s": percentile(draining, 50),
        "logs_end_p99_s": percentile(draining, 99),
        "raw_read_s": raw_seconds,
        "raw_read_pods": raw_pods,
        "raw_at_once": MAX_STREAMS,
        "events": dict(states),
        "latencies_measured": len(latencies),
        "timings": timings,
    }


def report(r: dict[str, Any]) -> None:
    print(f"\n== {r['backend']}: {r['jobs']} jobs x 2 replicas, poll_interval {POLL_INTERVAL:g} s")
    print("  API requests per minute (followers: window minus background), by verb and resource:")
    for key, value in sorted(r["req_per_min"].items()):
        print(f"    {key:<22} {value:10.1f}   ({value / r['jobs']:.2f} per job)")
    print(f"  per job: {r['req_per_min_per_job']:.2f} requests/min")
    print(f"  open WATCH requests at the end: {r['open_watches'] or 'none'}")
    print(f"  follower CPU {r['cpu_pct']:.1f} % of one core, peak RSS {r['rss_mb']:.0f} MB")
    print(f"  event-loop lag p99 {r['loop_lag_p99_ms']:.1f} ms (max {r['loop_lag_max_ms']:.1f} ms)")
    print(
        f"  status -> event latency p50 {r['event_p50_s']:.2f} s, p99 {r['event_p99_s']:.2f} s"
        f" ({r['latencies_measured']} jobs; events {r['events']})"
    )
    print(
        f"    of which: status -> the follower sees it p50 {r['seen_end_p50_s']:.2f} s, p99"
        f" {r['seen_end_p99_s']:.2f} s; then every replica's log read to its end p50"
        f" {r['logs_end_p50_s']:.2f} s, p99 {r['logs_end_p99_s']:.2f} s"
    )
    print(
        f"  baseline: each of the {r['raw_read_pods']} ended pods' log read once, no follow, "
        f"{r['raw_at_once']} at a time (the follower's stream cap), once the cluster is quiet: "
        f"{r['raw_read_s']:.2f} s (log drain p99 / baseline:"
        f" {r['logs_end_p99_s'] / max(r['raw_read_s'], 1e-9):.1f}x)"
    )
    t = r["timings"]
    print("  timings: " + ", ".join(f"{k.removesuffix('_s')} {v:.0f} s" for k, v in t.items()))


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--follower":
        follower_main(sys.argv[2], sys.argv[3], sys.argv[4])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backend",
        choices=sorted(KINDS),
        default="kubernetes",
        help="Volcano jobs (kubernetes, the default) or JobSets under Kueue",
    )
    parser.add_argument("--jobs", type=int, help="one size (default: 10, 100, 1000)")
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured")
    parser.add_argument(
        "--background", type=float, default=30.0, help="seconds of background measured"
    )
    parser.add_argument(
        "--watch", action="store_true", help="progress, stragglers and stalls watched"
    )
    args = parser.parse_args()
    if args.watch:
        os.environ[WATCH_ENV] = "1"  # the follower process inherits it
    cluster = Cluster()
    results = []
    for n in [args.jobs] if args.jobs else SIZES:
        results.append(run_size(cluster, args.backend, n, args.window, args.background))
        report(results[-1])
    print(f"\nrun at {datetime.now().isoformat(timespec='seconds')}")
    r = results[-1]
    print(
        f"backend={r['backend']} jobs={r['jobs']} "
        f"req_per_min_per_job={r['req_per_min_per_job']:.2f} "
        f"cpu_pct={r['cpu_pct']:.1f} rss_mb={r['rss_mb']:.0f} "
        f"loop_lag_p99_ms={r['loop_lag_p99_ms']:.1f} event_p99_s={r['event_p99_s']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
