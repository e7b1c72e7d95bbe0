"""The local cluster of tests/cluster/ as tests and benchmarks reach it: its settings (what
``cluster.sh env`` prints) and what puts a pod on its real node (tests/cluster/node.sh)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

CLUSTER_SCRIPT = Path(__file__).resolve().parents[1] / "cluster" / "cluster.sh"
NODE_SCRIPT = CLUSTER_SCRIPT.with_name("node.sh")
#: the real node's label and taint
NODE_LABEL = "torchx.dev/real-node"
#: what puts a pod on the real node: its selector and toleration, and the image taken from
#: the node's containerd (an image tagged ``latest`` is otherwise always pulled)
ON_REAL_NODE = {
    "spec": {
        "nodeSelector": {NODE_LABEL: "true"},
        "tolerations": [
            {"key": NODE_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
        ],
        "containers": [{"imagePullPolicy": "IfNotPresent"}],
    }
}


def cluster_env(extra: dict[str, str] | None = None) -> dict[str, str] | None:
    """The local cluster's settings (``TORCHX_CLUSTER_*``: its kubeconfigs, namespace, log
    folder), ``None`` when the script cannot tell them (nothing built)."""
    result = subprocess.run(
        ["bash", str(CLUSTER_SCRIPT), "env"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(extra or {})},
        check=False,
    )
    if result.returncode != 0:
        return None
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


def running_cluster_env() -> dict[str, str]:
    """:func:`cluster_env`, for a benchmark that cannot go on without it."""
    env = cluster_env()
    if env is None:
        raise SystemExit(f"no local cluster: run `bash {CLUSTER_SCRIPT} up` first")
    return env
