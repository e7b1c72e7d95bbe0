"""How long does a dry run of a large app take on the Kubernetes backends?

The app is 1 role x 1,024 replicas (``python -m train --rank ${replica_id}``, 8 CPUs, 1 GPU,
32 GB, a rendezvous port): the manifest of a large data-parallel job. The dry run is the
whole of ``submit_dryrun``: options, validation and the translation to a Volcano Job, an
MCAD AppWrapper or an AppWrapper ``v1beta2`` (one Indexed Job of 1,024 completions: one pod
template, so it is the cheapest) -- what a worker does before it contacts the cluster, on
every try. TorchX has no AppWrapper ``v1beta2`` scheduler: that row has no TorchX columns.

The same app goes through TorchX 0.7.0's ``kubernetes`` and ``kubernetes_mcad`` schedulers
in the same run, from TorchX's own virtual environment, kept outside the repository in
``${XDG_CACHE_HOME:-~/.cache}/airflow-provider-torchx/torchx-0.7.0-venv`` and made on first
use (``pip install torchx==0.7.0 kubernetes``). When that is impossible the TorchX columns
are skipped and the reason printed.

Usage::

    python benchmarks/bench_dryrun.py [--replicas 1024] [--runs 15] [--no-torchx]

Prints the median and the fastest run of each, and TorchX's median over ours.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import venv
from collections.abc import Callable
from pathlib import Path
from typing import Any

TORCHX_VERSION = "0.7.0"
BUDGET_MS = 100.0

# Runs inside TorchX's virtual environment; prints one JSON object of timings (ms).
TORCHX_DRIVER = r"""
import json, logging, statistics, sys, time, warnings
logging.disable(logging.WARNING)
warnings.simplefilter("ignore")
from torchx.specs import AppDef, Resource, Role
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
]:
    scheduler.submit_dryrun(app(), cfg)  # warm up imports
    samples = []
    for _ in range(runs):
        a = app()
        t = time.perf_counter()
        scheduler.submit_dryrun(a, cfg)
        samples.append((time.perf_counter() - t) * 1000)
    out[name] = samples
print(json.dumps(out))
"""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "airflow-provider-torchx"


def torchx_python() -> Path:
    """TorchX 0.7.0's interpreter, installing it on first use; raises with the reason."""
    env_dir = cache_dir() / f"torchx-{TORCHX_VERSION}-venv"
    python = env_dir / "bin" / "python"
    check = [str(python), "-c", "import torchx, kubernetes"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    print(f"creating {env_dir} (pip install torchx=={TORCHX_VERSION} kubernetes) ...", flush=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"torchx=={TORCHX_VERSION}", "kubernetes"],
        capture_output=True,
        text=True,
    )
    if install.returncode != 0:
        tail = "\n".join((install.stderr or install.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"pip install torchx=={TORCHX_VERSION} kubernetes failed:\n{tail}")
    return python


def torchx_samples(replicas: int, runs: int) -> dict[str, list[float]]:
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
    samples: dict[str, list[float]] = json.loads(result.stdout.strip().splitlines()[-1])
    return samples


def our_samples(replicas: int, runs: int) -> dict[str, list[float]]:
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

    out: dict[str, list[float]] = {}
    backends = (
        ("kubernetes", {"queue": "default"}),
        ("kubernetes_mcad", {}),
        ("kubernetes_appwrapper", {}),
    )
    for backend, cfg in backends:
        scheduler = create_scheduler(backend, "bench", namespace="default")
        scheduler.submit_dryrun(app(), cfg)  # warm up imports
        samples = []
        for _ in range(runs):
            a = app()
            t = time.perf_counter()
            info = scheduler.submit_dryrun(a, cfg)
            samples.append((time.perf_counter() - t) * 1000)
        assert pod_count(backend, info.request.body) == replicas
        out[backend] = samples
    return out


def pod_count(backend: str, body: dict[str, Any]) -> int:
    """How many pods the manifest asks for (an AppWrapper v1beta2 counts its podSets)."""
    if backend == "kubernetes":
        return len(body["spec"]["tasks"])
    if backend == "kubernetes_appwrapper":
        components = body["spec"]["components"]
        return sum(ps["replicas"] for c in components for ps in c.get("podSets") or [])
    items = body["spec"]["resources"]["GenericItems"]
    return sum(i["generictemplate"]["kind"] == "Pod" for i in items)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--no-torchx", action="store_true", help="time this package only")
    args = parser.parse_args()

    ours = our_samples(args.replicas, args.runs)
    theirs: dict[str, list[float]] = {}
    if not args.no_torchx:
        try:
            theirs = torchx_samples(args.replicas, args.runs)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            print(f"TorchX {TORCHX_VERSION} skipped: {e}")

    median: Callable[[list[float]], float] = statistics.median
    print(f"\ndry run of 1 role x {args.replicas} replicas, {args.runs} runs (ms)")
    header = f"{'backend':<23}{'ours median':>12}{'ours min':>10}"
    if theirs:
        header += f"{'torchx median':>15}{'torchx min':>12}{'torchx/ours':>13}"
    print(header)
    ok = True
    for backend, samples in ours.items():
        line = f"{backend:<23}{median(samples):>12.1f}{min(samples):>10.1f}"
        if backend in theirs:
            t = theirs[backend]
            line += f"{median(t):>15.1f}{min(t):>12.1f}{median(t) / median(samples):>12.1f}x"
        print(line)
        ok = ok and median(samples) < BUDGET_MS
    print(f"\nbudget: median under {BUDGET_MS:.0f} ms per backend: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
