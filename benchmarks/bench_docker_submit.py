"""How much does ``local_docker`` cost on top of ``docker run``?

One round runs the same app -- ``echo hello`` in 4 replicas of ``torchx-provider/busybox`` on
the ``torchx`` network -- three ways, end to end (started, finished, every replica's log read):

* **plain**: four ``docker run --rm`` commands in parallel (the floor);
* **provider**: ``local_docker`` of this package (``submit``, ``describe`` until finished,
  ``log_iter`` of each replica, which also removes the containers);
* **torchx**: TorchX 0.7.0's ``local_docker`` (same calls), from its own virtual environment
  in a cache directory outside the repository, made on first use by
  ``scripts/torchx_venv.py``. When that fails the column is skipped with the reason.
  TorchX always tries to pull the image first; without a reachable registry that attempt
  fails and it falls back to the local image, and it does not remove containers (they are
  removed after each round, untimed).

Rounds interleave the three so that drift affects them alike; medians and minimums are
printed with the ratios to ``plain``. Polling uses the same interval everywhere.

Usage::

    python benchmarks/bench_docker_submit.py [--runs 5] [--replicas 4] [--no-torchx]

Needs a Docker engine and the test image (built by ``tests/images/build_busybox_image.sh``
when missing; nothing is pulled).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from torchx_venv import TORCHX_VERSION, torchx_python  # noqa: E402

IMAGE = "torchx-provider/busybox:latest"
NETWORK = "torchx"
POLL_SECONDS = 0.05

# Runs inside TorchX's virtual environment: one timed round per "run" line on stdin, one JSON
# line of timings on stdout.
TORCHX_DRIVER = r"""
import json, logging, sys, time
logging.disable(logging.WARNING)  # the failed pull of each round is expected here
import docker
from torchx.schedulers.docker_scheduler import create_scheduler
from torchx.specs import AppDef, Role, AppState

image, replicas, poll = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
terminal = {AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED}
scheduler = create_scheduler("bench")
client = docker.from_env()
app = AppDef("echo", roles=[Role(name="echo", image=image, entrypoint="echo", args=["hello"],
                                 num_replicas=replicas)])
print(json.dumps({"ready": True}), flush=True)
for command in sys.stdin:
    if command.strip() != "run":
        break
    t0 = time.perf_counter()
    app_id = scheduler.submit(app, {})
    t1 = time.perf_counter()
    while scheduler.describe(app_id).state not in terminal:
        time.sleep(poll)
    lines = [line for k in range(replicas) for line in scheduler.log_iter(app_id, "echo", k)]
    t2 = time.perf_counter()
    selector = {"label": f"torchx.pytorch.org/app-id={app_id}"}
    for c in client.containers.list(all=True, filters=selector):
        c.remove(force=True)
    print(json.dumps({"submit": t1 - t0, "e2e": t2 - t0, "lines": len(lines)}), flush=True)
"""


# ---------------------------------------------------------------------------------------------
# The three ways


def plain_round(replicas: int) -> dict[str, float]:
    """``docker run --rm`` N times in parallel; returns when all have ended."""
    cmd = ["docker", "run", "--rm", "--network", NETWORK, IMAGE, "echo", "hello"]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(replicas) as pool:
        outs = list(
            pool.map(
                lambda _: subprocess.run(cmd, capture_output=True, text=True, check=True).stdout,
                range(replicas),
            )
        )
    elapsed = time.perf_counter() - t0
    assert outs == ["hello\n"] * replicas, outs
    return {"e2e": elapsed}


class Provider:
    def __init__(self, replicas: int) -> None:
        sys.path.insert(0, str(REPO / "provider"))
        from torchx_provider.schedulers.docker import create_scheduler
        from torchx_provider.specs.api import AppDef, Role, is_terminal

        self.replicas = replicas
        self.is_terminal = is_terminal
        self.scheduler = create_scheduler("bench")
        self.app = AppDef(
            "echo",
            [Role("echo", image=IMAGE, entrypoint="echo", args=["hello"], num_replicas=replicas)],
        )

    def round(self) -> dict[str, float]:
        s = self.scheduler
        t0 = time.perf_counter()
        app_id = s.submit(self.app, {"network": NETWORK})
        t1 = time.perf_counter()
        while not self.is_terminal(s.describe(app_id).state):
            time.sleep(POLL_SECONDS)
        lines = [line for k in range(self.replicas) for line in s.log_iter(app_id, "echo", k)]
        t2 = time.perf_counter()
        assert lines == ["hello\n"] * self.replicas, lines
        assert s.describe(app_id) is None  # removed once the logs were read
        return {"submit": t1 - t0, "e2e": t2 - t0}


class TorchX:
    """TorchX 0.7.0 in its own virtual environment, driven through a pipe."""

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self.proc: subprocess.Popen[str] | None = None
        python = self._python()
        self.proc = subprocess.Popen(
            [str(python), "-c", TORCHX_DRIVER, IMAGE, str(replicas), str(POLL_SECONDS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self._read()
        if not ready.get("ready"):
            raise RuntimeError(f"the TorchX driver did not start: {ready}")

    @staticmethod
    def _python() -> Path:
        return torchx_python()

    def _read(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the TorchX driver exited")
        return json.loads(line)

    def round(self) -> dict[str, float]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        result = self._read()
        assert result["lines"] == self.replicas, result
        return result

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=30)


# ---------------------------------------------------------------------------------------------
# Set-up and report


def prepare() -> None:
    """The test image and the network exist before anything is timed."""
    have = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, check=False)
    if have.returncode != 0:
        subprocess.run(["bash", str(REPO / "tests/images/build_busybox_image.sh")], check=True)
    sys.path.insert(0, str(REPO / "provider"))
    from torchx_provider.schedulers.docker.engine import DockerEngine

    engine = DockerEngine()
    engine.ensure_network(NETWORK)
    engine.close()


def summary(samples: list[dict[str, float]], key: str) -> tuple[float, float]:
    values = [s[key] for s in samples]
    return statistics.median(values), min(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--replicas", type=int, default=4, help="replicas of the echo app")
    parser.add_argument("--no-torchx", action="store_true", help="skip TorchX 0.7.0")
    args = parser.parse_args()

    prepare()
    ways: dict[str, Callable[[], dict[str, float]]] = {
        "plain": lambda: plain_round(args.replicas),
    }
    provider = Provider(args.replicas)
    ways["provider"] = provider.round
    torchx: TorchX | None = None
    if args.no_torchx:
        print("torchx: skipped (--no-torchx)")
    else:
        try:
            torchx = TorchX(args.replicas)
            ways["torchx"] = torchx.round
        except Exception as e:  # any failure only skips that column
            print(f"torchx {TORCHX_VERSION}: skipped ({e})")

    samples: dict[str, list[dict[str, float]]] = {name: [] for name in ways}
    try:
        for way in ways.values():  # warm-up, untimed
            way()
        for _ in range(args.runs):
            for name, way in ways.items():
                samples[name].append(way())
    finally:
        provider.scheduler.close()
        if torchx is not None:
            torchx.close()

    print(
        f"\necho app, {args.replicas} replicas, {args.runs} runs on "
        f"{os.cpu_count()} CPUs (seconds, median / min)"
    )
    base = summary(samples["plain"], "e2e")[0]
    labels = {
        "plain": f"docker run x{args.replicas} (parallel)",
        "provider": "airflow-provider-torchx local_docker",
        "torchx": f"torchx {TORCHX_VERSION} local_docker",
    }
    for name, runs in samples.items():
        e2e_med, e2e_min = summary(runs, "e2e")
        submit = ""
        if "submit" in runs[0]:
            sub_med, sub_min = summary(runs, "submit")
            rate = args.replicas / sub_med
            submit = f"   submit {sub_med:.3f} / {sub_min:.3f} ({rate:.1f} containers/s)"
        print(
            f"  {labels[name]:<38} end to end {e2e_med:.3f} / {e2e_min:.3f}"
            f"   x{e2e_med / base:.2f} of plain{submit}"
        )
    if "torchx" in samples:
        ratio = summary(samples["provider"], "e2e")[0] / summary(samples["torchx"], "e2e")[0]
        print(f"  provider / torchx (median end to end): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
