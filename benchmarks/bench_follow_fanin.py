"""What following many deferred jobs costs one triggerer: requests, CPU, memory, latency.

N Volcano jobs of 2 replicas each run on the local test cluster's fake kubelet (kwok, see
tests/cluster); one follower process -- the triggerer's part, without Airflow -- follows all
of them as N deferred tasks would: per job, the backend's async client made the way
``TorchXJobTrigger`` makes it, and the provider's follow loop (``JobFollower``) at the
default 10 s ``poll_interval``, writing to a logger that discards lines. For each N it
prints:

* API requests per minute per job, from the API server's own ``apiserver_request_total``
  (the delta over a measurement window of the reads of jobs, pods and pod logs, by verb and
  resource, minus the same delta over a window before the follows started: the cluster's own
  controllers, and anyone else using it, make requests too); the open WATCH requests on jobs
  and pods at the end;
* CPU % of one core and peak RSS of the follower process, and the event-loop lag p99 over
  the window (a task that sleeps 100 ms and records how late it wakes);
* status -> event latency p50/p99 when the jobs finish: the pods are made to complete (kwok
  ends a pod once its ``keep-running`` annotation is no longer ``true``), a watch in the
  benchmark process (not the follower) notes when each job reached ``Completed`` on the API
  server, and the follower notes when each follow returned its event. The follows start
  spread evenly over one poll interval, as deferred tasks arriving at any time would.

The jobs run on fake nodes the benchmark adds for itself (tainted, so that nothing else
lands there, and removed at the end with the jobs), 100 pods per node. The last line, for
the largest size run, is machine-readable::

    jobs=N req_per_min_per_job=X cpu_pct=Y rss_mb=R loop_lag_p99_ms=L event_p99_s=E

Usage::

    python benchmarks/bench_follow_fanin.py [--jobs N] [--window 60] [--background 30]

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
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "provider"))

SIZES = (10, 100, 1000)
POLL_INTERVAL = 10.0  # the follow's default
PODS_PER_NODE = 100
BENCH_LABEL = "torchx.test/bench"
KEEP_RUNNING = "cluster.torchx.test/keep-running"
TICK = 0.1


# ------------------------------------------------------------------------------ the follower
class Discard:
    """A logger that drops everything (the triggerer would write to the task log)."""

    def _drop(self, *args: Any, **kwargs: Any) -> None:
        pass

    debug = info = warning = error = exception = _drop


def follower_main(kubeconfig: str, namespace: str) -> None:
    """The triggerer-like process: app ids on stdin (one JSON list), then commands
    (``mark``, ``stats``); prints ``ready``, one ``event`` line per finished follow, and
    the stats as JSON."""
    from torchx_provider.backends import get_backend
    from torchx_provider.triggers.follow import JobFollower

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    app_ids: list[str] = json.loads(sys.stdin.readline())
    client_kwargs = {"kubeconfig": kubeconfig, "namespace": namespace}
    backend = get_backend("kubernetes")
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
        follower = TimedFollower(client, app_id, log=Discard(), poll_interval=POLL_INTERVAL)
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


#: What a follow may request: reads of jobs, pods and pod logs. Writes (POST, DELETE, ...)
#: come from the controllers and whoever else uses the cluster, never from a follow.
FOLLOWED = ("jobs", "pods", "pods/log")
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
        for name in names:
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
                    "status": {
                        "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                        "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                    },
                }
            )
        wait(lambda: all(self._ready(n) for n in names), 120, f"{count} bench nodes Ready")
        return names

    def _ready(self, name: str) -> bool:
        node = self.core.read_node(name)
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

    def remove_nodes(self, names: list[str]) -> None:
        for name in names:
            try:
                self.core.delete_node(name)
            except Exception as e:  # already gone
                print(f"  (node {name}: {e})", file=sys.stderr)

    # -- jobs ----------------------------------------------------------------------------------
    def jobs(self) -> dict[str, dict[str, Any]]:
        items = self.custom.list_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", self.namespace, "jobs"
        )["items"]
        return {o["metadata"]["name"]: o for o in items}

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

    def delete_jobs(self, names: Iterable[str]) -> None:
        def delete(name: str) -> None:
            try:
                self.custom.delete_namespaced_custom_object(
                    "batch.volcano.sh",
                    "v1alpha1",
                    self.namespace,
                    "jobs",
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


class CompletedWatch(threading.Thread):
    """Notes when each job reaches ``Completed`` on the API server (a watch, in this
    process, so that it costs the follower nothing)."""

    def __init__(self, cluster: Cluster, names: set[str]) -> None:
        super().__init__(daemon=True)
        self.cluster, self.names = cluster, names
        self.completed: dict[str, float] = {}
        self.started = threading.Event()
        self.stop = False

    def run(self) -> None:
        from kubernetes import watch

        c = self.cluster
        listed = c.custom.list_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", c.namespace, "jobs"
        )
        version = listed["metadata"]["resourceVersion"]
        w = watch.Watch()
        self.started.set()
        while not self.stop and len(self.completed) < len(self.names):
            for ev in w.stream(
                c.custom.list_namespaced_custom_object,
                "batch.volcano.sh",
                "v1alpha1",
                c.namespace,
                "jobs",
                resource_version=version,
                timeout_seconds=30,
            ):
                obj = ev["object"]
                version = obj["metadata"]["resourceVersion"]
                name = obj["metadata"]["name"]
                phase = ((obj.get("status") or {}).get("state") or {}).get("phase")
                if name in self.names and phase == "Completed" and name not in self.completed:
                    self.completed[name] = time.time()
                if self.stop or len(self.completed) == len(self.names):
                    w.stop()


# ------------------------------------------------------------------------------ one size
def run_size(cluster: Cluster, n: int, window: float, background: float) -> dict[str, Any]:
    from torchx_provider.schedulers.kube.volcano import create_scheduler

    tag = secrets.token_hex(3)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    nodes = cluster.add_nodes(max(1, math.ceil(2 * n / PODS_PER_NODE)), tag)
    scheduler = create_scheduler(
        "bench", kubeconfig=cluster.restricted, namespace=cluster.namespace
    )
    app_ids: list[str] = []
    child: subprocess.Popen[str] | None = None
    try:
        app = job_app(tag)
        info = scheduler.submit_dryrun(app, {"queue": "default"})
        with ThreadPoolExecutor(8) as pool:
            app_ids = list(
                pool.map(
                    lambda _: scheduler.schedule(
                        scheduler.submit_dryrun(app, {"queue": "default"})
                    ),
                    range(n),
                )
            )
        del info
        names = {a.split(":", 1)[1] for a in app_ids}
        timings["submit_s"] = time.monotonic() - t0

        def running() -> bool:
            jobs = cluster.jobs()
            return all(
                ((jobs.get(name) or {}).get("status") or {}).get("running") == 2 for name in names
            )

        wait(running, 120 + 2 * n, f"{n} jobs with 2 running pods each", interval=2.0)
        timings["running_s"] = time.monotonic() - t0

        # Background: the cluster's own requests with the jobs running and nobody following.
        before, _ = scrape(cluster.api)
        time.sleep(background)
        after, _ = scrape(cluster.api)
        base = per_minute(after - before, background)

        child = subprocess.Popen(
            [sys.executable, __file__, "--follower", cluster.restricted, cluster.namespace],
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
            f"  [{n} jobs] window measured: follower {stats}, reads/min {during}",
            file=sys.stderr,
            flush=True,
        )

        completed = CompletedWatch(cluster, names)
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
        cluster.delete_jobs(a.split(":", 1)[1] for a in app_ids)
        scheduler.close()
        try:
            wait(lambda: cluster.pods_left(tag) == 0, 300, "the benchmark's pods to go")
        finally:
            cluster.remove_nodes(nodes)
    timings["total_s"] = time.monotonic() - t0

    rows = sorted(set(during) | set(base))
    table = {
        f"{verb} {what}": during.get((verb, what), 0.0) - base.get((verb, what), 0.0)
        for verb, what in rows
    }
    followed = sum(max(0.0, v) for v in table.values())
    return {
        "jobs": n,
        "req_per_min": table,
        "background_per_min": {f"{v} {w}": x for (v, w), x in base.items()},
        "req_per_min_per_job": followed / n,
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
    print(f"\n== {r['jobs']} jobs x 2 replicas, poll_interval {POLL_INTERVAL:g} s")
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
    if len(sys.argv) == 4 and sys.argv[1] == "--follower":
        follower_main(sys.argv[2], sys.argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, help="one size (default: 10, 100, 1000)")
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured")
    parser.add_argument(
        "--background", type=float, default=30.0, help="seconds of background measured"
    )
    args = parser.parse_args()
    cluster = Cluster()
    results = []
    for n in [args.jobs] if args.jobs else SIZES:
        results.append(run_size(cluster, n, args.window, args.background))
        report(results[-1])
    print(f"\nrun at {datetime.now().isoformat(timespec='seconds')}")
    r = results[-1]
    print(
        f"jobs={r['jobs']} req_per_min_per_job={r['req_per_min_per_job']:.2f} "
        f"cpu_pct={r['cpu_pct']:.1f} rss_mb={r['rss_mb']:.0f} "
        f"loop_lag_p99_ms={r['loop_lag_p99_ms']:.1f} event_p99_s={r['event_p99_s']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
