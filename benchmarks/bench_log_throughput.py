"""How fast does one replica's log reach the task log, next to the backend's own reader?

One replica writes N sequence-numbered lines (100,000 on the local Kubernetes cluster, from
a file the fake kubelet serves; 200,000 on Docker, from a busybox loop). Once the whole log
is written, the same run times, in rounds (``--rounds``, default 5), each of:

* ``raw``: the backend's own reader of that log (``kubectl logs`` / ``docker logs``), to
  the end;
* ``follow``: the provider's follow loop (``JobFollower`` over the backend's real async
  client, as in the triggerer) writing to a logger that counts lines, until the last line
  arrived -- and how many were lost or repeated (by sequence number), and how much the
  process's memory grew meanwhile (sampled every 50 ms).

The ratio is the raw reader's median time over the follow's (a single pair varies by up to
2x on a small machine, where the API server, the fake kubelet and the follower share the
CPUs); lost and repeated lines are summed over all rounds, RSS growth is the largest. The
last line is machine-readable::

    backend=B lines=N ratio_vs_raw=R lost=L repeated=P rss_growth_mb=M

Usage::

    python benchmarks/bench_log_throughput.py --backend kubernetes|local_docker [--lines N]
        [--rounds R] [--progress-pattern REGEX] [--stall-timeout SECONDS] [--real-node]

Kubernetes needs the running local cluster (``bash tests/cluster/cluster.sh up``); with
``--real-node`` the replica is a real container (the busybox loop Docker runs) on its real
node (``bash tests/cluster/node.sh up``) instead of a log kwok serves. Docker needs an engine
with the test image (``scripts/setup.sh`` makes both).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "provider"))
sys.path.insert(0, str(REPO / "tests" / "support"))  # the counting task logger

from local_cluster import ON_REAL_NODE, running_cluster_env  # noqa: E402

IMAGE = "torchx-provider/busybox:latest"
PAD = "x" * 80
#: The most lines ``--real-node`` writes: the kubelet rotates a container's log past 10 MiB
#: (its default ``containerLogMaxSize``) and serves only the current file, and each of these
#: lines takes some 132 bytes as it stores them (with its timestamp and stream).
REAL_NODE_MAX_LINES = 75_000


async def time_follow(client: Any, app_id: str, key: str, total: int) -> dict[str, float]:
    from task_log import SequenceLog, rss_mb
    from torchx_provider.schedulers.streams import StreamSlots
    from torchx_provider.triggers.follow import JobFollower

    log = SequenceLog(key, total)
    await client.describe(app_id)  # clients made, caches synced: the memory baseline
    # as in a triggerer, Airflow's configuration (which holds the stream cap) is loaded
    # before any trigger runs: neither its import time nor its memory is the follow's
    StreamSlots.current()
    before = rss_mb()
    peak = before

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, rss_mb())
            await asyncio.sleep(0.05)

    sampler = asyncio.ensure_future(sample())
    start = time.perf_counter()
    follow = asyncio.ensure_future(
        JobFollower(client, app_id, log=log, poll_interval=10.0, **FOLLOW_OPTIONS).run()
    )
    try:
        await asyncio.wait_for(log.done.wait(), 600)
        seconds = time.perf_counter() - start
    finally:
        follow.cancel()
        sampler.cancel()
        await asyncio.gather(follow, sampler, return_exceptions=True)
    return {
        "seconds": seconds,
        "lost": log.lost + (total - log.next),
        "repeated": log.repeated,
        "rss_growth_mb": peak - before,
    }


def time_raw(args: list[str], total: int) -> float:
    start = time.perf_counter()
    out = subprocess.run(args, capture_output=True, check=True).stdout
    seconds = time.perf_counter() - start
    got = out.count(b"\n")
    if got < total:
        raise RuntimeError(f"{args[0]} read {got} of {total} lines")
    return seconds


# -- Kubernetes ----------------------------------------------------------------------------------
def pod_log_path(env: dict[str, str], namespace: str, pod: str) -> Path:
    return Path(env["TORCHX_CLUSTER_POD_LOGS"]) / "bench" / namespace / f"{pod}.log"


def write_pod_log(
    env: dict[str, str], namespace: str, pod: str, total: int, interval: float
) -> None:
    """The pod's log file (CRI format), its lines ``interval`` seconds apart and the last one
    written now, and the kwok Logs object naming it."""
    path = pod_log_path(env, namespace, pod)
    path.parent.mkdir(parents=True, exist_ok=True)
    base = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=interval * total)
    with path.open("w", encoding="ascii") as f:
        for i in range(total):
            when = base + dt.timedelta(seconds=interval * i)
            stamp = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond:06d}000Z"
            f.write(f"{stamp} stdout F {i:010d} {PAD}\n")
    manifest = (
        "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Logs\n"
        f"metadata: {{name: {pod}, namespace: {namespace}}}\n"
        f"spec: {{logs: [{{logsFile: {path}, follow: true}}]}}\n"
    )
    subprocess.run(
        ["kubectl", "--kubeconfig", env["TORCHX_CLUSTER_KUBECONFIG"], "apply", "-f", "-"],
        input=manifest,
        text=True,
        check=True,
        capture_output=True,
    )


def writer_script(total: int) -> str:
    """A busybox shell loop that writes ``total`` sequence-numbered lines, then waits."""
    return (
        f'i=0; while [ $i -lt {total} ]; do printf "%010d {PAD}\\n" $i; i=$((i+1)); done; sleep 600'
    )


async def written(tail: list[str], total: int) -> None:
    """Until ``tail`` (a command printing the log's last line) shows line ``total - 1``."""
    last = f"{total - 1:010d}".encode()
    for _ in range(2400):
        out = await asyncio.to_thread(subprocess.run, tail, capture_output=True)
        if out.stdout.startswith(last):
            return
        await asyncio.sleep(0.25)
    raise RuntimeError(f"the log did not reach line {total - 1}: {out.stdout[-200:]!r}")


async def kubernetes(
    total: int, rounds: int, interval: float, real_node: bool = False
) -> list[tuple[float, dict[str, float]]]:
    """A kwok pod's log, from a file it serves (``interval`` seconds apart); with
    ``real_node`` a real container's on the local cluster's real node (its busybox loop)."""
    from torchx_provider import specs
    from torchx_provider.schedulers.kube.volcano import create_async_client, create_scheduler

    env = running_cluster_env()
    namespace = env["TORCHX_CLUSTER_NAMESPACE"]
    kubeconfig = env["TORCHX_CLUSTER_RESTRICTED_KUBECONFIG"]
    scheduler = create_scheduler("bench", kubeconfig=kubeconfig, namespace=namespace)
    if real_node:
        role = specs.Role(
            "r",
            image=IMAGE,
            entrypoint="sh",
            args=["-c", writer_script(total)],
            resource=specs.Resource(cpu=1, gpu=0, memMB=256),
            metadata={"kubernetes": ON_REAL_NODE},
        )
    else:
        behaviour = {"cluster.torchx.test/keep-running": "true"}
        role = specs.Role(
            "r",
            image="registry.invalid/x:1",
            entrypoint="sh",
            resource=specs.Resource(cpu=0.1, gpu=0, memMB=64),
            metadata={"kubernetes": {"metadata": {"annotations": behaviour}}},
        )
    info = scheduler.submit_dryrun(specs.AppDef("logbench", [role]), {"queue": "default"})
    job = info.request.body
    pod = f"{job['metadata']['name']}-{job['spec']['tasks'][0]['name']}-0"
    if not real_node:
        write_pod_log(env, namespace, pod, total, interval)
    app_id = scheduler.schedule(info)
    client = create_async_client(kubeconfig=kubeconfig, namespace=namespace)
    kubectl = ["kubectl", "--kubeconfig", kubeconfig, "-n", namespace, "logs", pod]
    try:
        for _ in range(3000):
            resp = scheduler.describe(app_id)
            if resp is not None and resp.state.name == "RUNNING":
                break
            await asyncio.sleep(0.1)
        if real_node:
            await written([*kubectl, "--tail", "1"], total)
        timed = [
            (time_raw(kubectl, total), await time_follow(client, app_id, "r/0", total))
            for _ in range(rounds)
        ]
    finally:
        await client.close()
        scheduler.delete(app_id)
        scheduler.close()
        if not real_node:
            remove_pod_log(env, namespace, pod)
    return timed


def remove_pod_log(env: dict[str, str], namespace: str, pod: str) -> None:
    """The Logs object and the file (kwok serves every Logs object it has)."""
    kubectl = ["kubectl", "--kubeconfig", env["TORCHX_CLUSTER_KUBECONFIG"], "-n", namespace]
    subprocess.run(
        [*kubectl, "delete", "logs.kwok.x-k8s.io", pod, "--ignore-not-found"],
        check=False,
        capture_output=True,
    )
    pod_log_path(env, namespace, pod).unlink(missing_ok=True)


# -- Docker --------------------------------------------------------------------------------------
async def local_docker(total: int, rounds: int) -> list[tuple[float, dict[str, float]]]:
    from torchx_provider.schedulers.docker import create_async_client, create_scheduler
    from torchx_provider.specs.api import AppDef, Role

    scheduler = create_scheduler("bench")
    role = Role("r", image=IMAGE, entrypoint="sh", args=["-c", writer_script(total)])
    app_id = scheduler.submit(AppDef("logbench", [role]), {})
    client = create_async_client()
    try:
        container = scheduler.engine.replica(app_id, "r", 0)
        await written(["docker", "logs", "--tail", "1", container.id], total)
        timed = [
            (
                time_raw(["docker", "logs", container.id], total),
                await time_follow(client, app_id, "r/0", total),
            )
            for _ in range(rounds)
        ]
        desc = scheduler.describe(app_id)
        print("  the app after the follow:", None if desc is None else desc.state.name)
    finally:
        await client.close()
        scheduler.delete(app_id)
        scheduler.close()
    return timed


#: the follow's progress options (``--progress-pattern``, ``--stall-timeout``)
FOLLOW_OPTIONS: dict[str, object] = {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["kubernetes", "local_docker"], required=True)
    parser.add_argument(
        "--lines", type=int, help="default: 100,000 (kubernetes; 50,000 --real-node), 200,000"
    )
    parser.add_argument("--rounds", type=int, default=5, help="raw read + follow pairs")
    parser.add_argument(
        "--line-interval",
        type=float,
        default=0.001,
        help="kubernetes: seconds between the timestamps of successive lines (default 0.001: "
        "a replica writing 1,000 lines/s); Docker's are the times the lines were written",
    )
    parser.add_argument(
        "--progress-pattern",
        help="the follow's progress_pattern (each line is matched; the benchmark's lines "
        "match none, so every line is searched)",
    )
    parser.add_argument("--stall-timeout", type=float, help="the follow's stall_timeout")
    parser.add_argument(
        "--real-node",
        action="store_true",
        help="kubernetes: the replica is a real container on the local cluster's real node "
        "(tests/cluster/node.sh up), not a log kwok serves",
    )
    args = parser.parse_args()
    if args.progress_pattern:
        from torchx_provider.triggers.progress import ProgressPattern

        FOLLOW_OPTIONS["progress_pattern"] = ProgressPattern.parse(args.progress_pattern)
    if args.stall_timeout:
        from torchx_provider.triggers.watch import WatchLimits

        FOLLOW_OPTIONS["watch"] = WatchLimits(
            straggler_after=None, stall_timeout=args.stall_timeout
        )
    default = 50_000 if args.real_node else 100_000
    total = args.lines or (default if args.backend == "kubernetes" else 200_000)
    if args.real_node and total > REAL_NODE_MAX_LINES:
        parser.error(
            f"--real-node: at most {REAL_NODE_MAX_LINES:,} lines: more are over 10 MiB as the "
            "kubelet stores them, and it rotates the log away before it is read "
            "(benchmarks/README.md)"
        )
    timed = asyncio.run(
        kubernetes(total, args.rounds, args.line_interval, args.real_node)
        if args.backend == "kubernetes"
        else local_docker(total, args.rounds)
    )
    print(f"backend {args.backend}, {total:,} lines of {len(PAD) + 11} bytes, pid {os.getpid()}")
    for i, (raw, followed) in enumerate(timed, 1):
        print(
            f"  round {i}: raw reader {raw:.2f} s ({total / raw:,.0f} lines/s), follow "
            f"{followed['seconds']:.2f} s ({total / followed['seconds']:,.0f} lines/s), lost "
            f"{followed['lost']:.0f}, repeated {followed['repeated']:.0f}, RSS growth "
            f"{followed['rss_growth_mb']:.1f} MB"
        )
    raw = statistics.median(r for r, _ in timed)
    follow = statistics.median(f["seconds"] for _, f in timed)
    lost = sum(f["lost"] for _, f in timed)
    repeated = sum(f["repeated"] for _, f in timed)
    growth = max(f["rss_growth_mb"] for _, f in timed)
    print(f"  medians of {len(timed)} rounds: raw reader {raw:.2f} s, follow {follow:.2f} s")
    print(
        f"backend={args.backend} lines={total} ratio_vs_raw={raw / follow:.2f} "
        f"lost={lost:.0f} repeated={repeated:.0f} rss_growth_mb={growth:.1f}"
    )


if __name__ == "__main__":
    main()
