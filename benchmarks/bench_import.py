"""How much does importing the TorchX operators cost a DAG file?

The DAG processor imports every DAG file again and again, so the operators must import
cheaply: no Kubernetes or Docker client library until a task actually runs. Each case is
timed in a fresh interpreter (``time.perf_counter`` around the import statement, so the
interpreter's own start-up is not counted), several times, and the median is reported:

* ``import airflow.sdk`` -- the floor every DAG file pays;
* ``from airflow.sdk import DAG, BaseOperator`` -- what any operator-using DAG file pays;
* ``from torchx_provider.operators import TorchXKubernetesOperator`` -- ours;
* ``from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator``
  (the cncf.kubernetes provider, in the dev extra) -- the usual way to run on Kubernetes.

It prints both ratios asked for -- ours over ``import airflow.sdk`` and ours over
KubernetesPodOperator -- and checks that ours loaded no ``kubernetes``,
``kubernetes_asyncio`` or ``docker`` module.

Usage::

    python benchmarks/bench_import.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CASES = {
    "airflow.sdk": "import airflow.sdk",
    "sdk DAG+BaseOperator": "from airflow.sdk import DAG, BaseOperator",
    "torchx operators": "from torchx_provider.operators import TorchXKubernetesOperator",
    "KubernetesPodOperator": (
        "from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator"
    ),
}
CLIENT_LIBRARIES = ("kubernetes", "kubernetes_asyncio", "docker")

DRIVER = """
import json, sys, time
t = time.perf_counter()
{stmt}
elapsed = time.perf_counter() - t
heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({libs!r}))
print(json.dumps({{"ms": elapsed * 1000, "clients": heavy}}))
"""


def time_import(stmt: str, env: dict[str, str]) -> dict[str, object]:
    code = DRIVER.format(stmt=stmt, libs=CLIENT_LIBRARIES)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="bench-import-airflow-home-")
    env = {**os.environ, "AIRFLOW_HOME": home, "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    # one warm-up run so that every case reads files from the page cache
    for stmt in CASES.values():
        time_import(stmt, env)
    medians: dict[str, float] = {}
    clients: dict[str, list[str]] = {}
    for name, stmt in CASES.items():
        samples: list[float] = []
        for _ in range(args.runs):
            result = time_import(stmt, env)
            if "error" in result:
                print(f"{name:24s} unavailable: {result['error']}")
                break
            samples.append(float(result["ms"]))  # type: ignore[arg-type]
            clients[name] = list(result["clients"])  # type: ignore[call-overload]
        if samples:
            medians[name] = statistics.median(samples)
            print(
                f"{name:24s} median {medians[name]:8.1f} ms   "
                f"min {min(samples):8.1f} ms   client libraries loaded: {clients[name] or 'none'}"
            )
    ours = medians.get("torchx operators")
    if ours is None:
        print("could not time the torchx operators")
        return 1
    base = medians.get("airflow.sdk")
    if base:
        print(f"torchx operators / import airflow.sdk      = {ours / base:6.2f}x")
    floor = medians.get("sdk DAG+BaseOperator")
    if floor:
        print(f"torchx operators - (DAG + BaseOperator)    = {ours - floor:+8.1f} ms")
    kpo = medians.get("KubernetesPodOperator")
    if kpo:
        print(f"torchx operators / KubernetesPodOperator   = {ours / kpo:6.2f}x")
    else:
        print("KubernetesPodOperator unavailable: install apache-airflow-providers-cncf-kubernetes")
    if clients.get("torchx operators"):
        print(f"FAIL: importing the operators loaded {clients['torchx operators']}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
