"""How long do a dry run of a large app and printing it take, here and in TorchX 0.7.0?

The app is 1 role x 1,024 replicas (``python -m train --rank ${replica_id}``, 8 CPUs, 1 GPU,
32 GB, a rendezvous port): the request of a large data-parallel job. Two things are timed on
each backend (``kubernetes``, ``kubernetes_mcad``, ``kubernetes_appwrapper``,
``kubernetes_jobset``, ``local_docker``; an AppWrapper ``v1beta2`` and a JobSet each hold one
Indexed Job of 1,024 completions, one pod template, so they are the cheapest, and TorchX has
no such schedulers: no TorchX columns):

* ``dry run``: the whole of ``submit_dryrun`` -- options, validation and the translation to a
  Volcano Job, an MCAD AppWrapper or the Docker containers; what a worker does before it
  contacts the cluster or the engine, on every try;
* ``+ render``: the dry run and ``str(info)``, the YAML a user prints to see the request.

The same app goes through TorchX 0.7.0's schedulers of the same names in the same run, from
TorchX's own virtual environment, kept outside the repository in
``${XDG_CACHE_HOME:-~/.cache}/airflow-provider-torchx/torchx-0.7.0-venv`` and made on first
use (:func:`torchx_python`). When that is impossible the TorchX columns are skipped and the
reason printed.

Usage::

    python benchmarks/bench_dryrun.py [--replicas 1024] [--runs 15] [--no-torchx]

Prints the median and the fastest run of each, and TorchX's median over ours; exits non-zero
when a dry run misses its budget or, with TorchX measured, when ours is not
:data:`MIN_SPEEDUP` times faster in both columns.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from torchx_venv import TORCHX_VERSION, torchx_python

#: The longest median dry run (without rendering) allowed per backend.
BUDGET_MS = 100.0
#: How many times faster than TorchX ours must be, dry run alone and with rendering.
MIN_SPEEDUP = 10.0
BACKENDS = (
    "kubernetes",
    "kubernetes_mcad",
    "kubernetes_appwrapper",
    "kubernetes_jobset",
    "local_docker",
)
COLUMNS = ("dry run", "+ render")

# Runs inside TorchX's virtual environment; prints one JSON object of timings (ms).
TORCHX_DRIVER = r"""
import json, logging, sys, time, warnings
logging.disable(logging.WARNING)
warnings.simplefilter("ignore")
from torchx.specs import AppDef, Resource, Role
from torchx.schedulers.docker_scheduler import DockerScheduler
from torchx.schedulers.kubernetes_scheduler import KubernetesScheduler
from torchx.schedulers.kubernetes_mcad_scheduler import KubernetesMCADScheduler

replicas, runs = int(sys.argv[1]), int(sys.argv[2])
def app():
    return AppDef("bench", roles=[Role(
        "trainer", image="registry.example.com/train:1", entrypoint="python",
        args=["-m", "train", "--rank", "${replica_id}"], num_replicas=replicas,
        resource=Resource(cpu=8, gpu=1, memMB=32768), port_map={"c10d": 29500})])
out = {}
for name, scheduler, cfg in [
    ("kubernetes", KubernetesScheduler("bench"), {"queue": "default"}),
    ("kubernetes_mcad", KubernetesMCADScheduler("bench"), {"namespace": "default"}),
    ("local_docker", DockerScheduler("bench"), {}),
]:
    str(scheduler.submit_dryrun(app(), cfg))  # warm up imports
    samples = {"dry run": [], "+ render": []}
    for _ in range(runs):
        a = app()
        t = time.perf_counter()
        scheduler.submit_dryrun(a, cfg)
        samples["dry run"].append((time.perf_counter() - t) * 1000)
        a = app()
        t = time.perf_counter()
        str(scheduler.submit_dryrun(a, cfg))
        samples["+ render"].append((time.perf_counter() - t) * 1000)
    out[name] = samples
print(json.dumps(out))
"""

Samples = dict[str, dict[str, list[float]]]


def torchx_samples(replicas: int, runs: int) -> Samples:
    python = torchx_python()
    result = subprocess.run(
        [str(python), "-c", TORCHX_DRIVER, str(replicas), str(runs)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"TorchX's dry run failed:\n{tail}")
    samples: Samples = json.loads(result.stdout.strip().splitlines()[-1])
    return samples


def our_samples(replicas: int, runs: int) -> Samples:
    from torchx_provider import specs
    from torchx_provider.backends import create_scheduler

    def app() -> specs.AppDef:
        role = specs.Role(
            "trainer",
            image="registry.example.com/train:1",
            entrypoint="python",
            args=["-m", "train", "--rank", "${replica_id}"],
            num_replicas=replicas,
            resource=specs.Resource(cpu=8, gpu=1, memMB=32768),
            port_map={"c10d": 29500},
        )
        return specs.AppDef("bench", roles=[role])

    configs: dict[str, dict[str, Any]] = {
        "kubernetes": {"queue": "default"},
        "kubernetes_mcad": {},
        "kubernetes_appwrapper": {},
        "kubernetes_jobset": {},
        # more than one bridge network holds: the dry run is what is timed, not the engine
        "local_docker": {"max_replicas": replicas},
    }
    out: Samples = {}
    for backend in BACKENDS:
        cfg = configs[backend]
        kwargs = {} if backend == "local_docker" else {"namespace": "default"}
        scheduler = create_scheduler(backend, "bench", **kwargs)
        str(scheduler.submit_dryrun(app(), cfg))  # warm up imports
        samples: dict[str, list[float]] = {column: [] for column in COLUMNS}
        for _ in range(runs):
            a = app()
            t = time.perf_counter()
            info = scheduler.submit_dryrun(a, cfg)
            samples["dry run"].append((time.perf_counter() - t) * 1000)
            a = app()
            t = time.perf_counter()
            str(scheduler.submit_dryrun(a, cfg))
            samples["+ render"].append((time.perf_counter() - t) * 1000)
        assert len(replica_requests(backend, info.request)) == replicas
        out[backend] = samples
    return out


def replica_requests(backend: str, request: Any) -> list[Any]:
    """One entry per replica in a request: pods, or containers on ``local_docker``."""
    if backend == "local_docker":
        return list(request.containers)
    body = request.body
    if backend == "kubernetes_appwrapper":  # replicas of the Indexed Jobs' pod sets
        components = body["spec"]["components"]
        return [
            None for c in components for ps in c.get("podSets") or [] for _ in range(ps["replicas"])
        ]
    if backend == "kubernetes_jobset":  # the completions of each role's Indexed Job
        return [
            None
            for rjob in body["spec"]["replicatedJobs"]
            for _ in range(rjob["template"]["spec"]["completions"])
        ]
    if backend == "kubernetes":
        return list(body["spec"]["tasks"])
    items = body["spec"]["resources"]["GenericItems"]
    return [i for i in items if i["generictemplate"]["kind"] == "Pod"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--no-torchx", action="store_true", help="time this package only")
    args = parser.parse_args()

    ours = our_samples(args.replicas, args.runs)
    theirs: Samples = {}
    if not args.no_torchx:
        try:
            theirs = torchx_samples(args.replicas, args.runs)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            print(f"TorchX {TORCHX_VERSION} skipped: {e}")

    median: Callable[[list[float]], float] = statistics.median
    print(f"\n1 role x {args.replicas} replicas, {args.runs} runs (ms, median / min)")
    header = f"{'backend':<23}{'column':<10}{'ours':>18}"
    if theirs:
        header += f"{'torchx ' + TORCHX_VERSION:>20}{'torchx/ours':>13}"
    print(header)
    ok = True
    for backend, columns in ours.items():
        ok = ok and median(columns["dry run"]) < BUDGET_MS
        for column, samples in columns.items():
            ours_ms = f"{median(samples):.1f} / {min(samples):.1f}"
            line = f"{backend:<23}{column:<10}{ours_ms:>18}"
            if backend in theirs:
                t = theirs[backend][column]
                speedup = median(t) / median(samples)
                ok = ok and speedup >= MIN_SPEEDUP
                line += f"{f'{median(t):.1f} / {min(t):.1f}':>20}{speedup:>12.1f}x"
            print(line)
    goal = f"dry run median under {BUDGET_MS:.0f} ms"
    if theirs:
        goal += f", at least {MIN_SPEEDUP:.0f}x faster than TorchX {TORCHX_VERSION}"
    print(f"\ngoal ({goal}): {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
