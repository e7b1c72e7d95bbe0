"""The local test cluster (tests/cluster/cluster.sh), for ``dag.test()`` runs: found through
the helpers of tests/integration/kubernetes/conftest.py, loaded under a name of its own."""

from __future__ import annotations

import datetime as dt
import importlib.util
import sys
from pathlib import Path
from typing import Any

_CONFTEST = Path(__file__).resolve().parents[1] / "integration" / "kubernetes" / "conftest.py"

#: set by the test module's fixture; used by DAG files run with dag.test() in this process
CLUSTER: Any = None


def _helpers() -> Any:
    spec = importlib.util.spec_from_file_location("torchx_kube_conftest_helpers", _CONFTEST)
    assert spec and spec.loader
    if spec.name in sys.modules:
        return sys.modules[spec.name]
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def running_cluster() -> tuple[Any, str | None]:
    """``(KubeCluster, None)`` for the running local cluster, or ``(None, reason)``."""
    if not _CONFTEST.is_file():
        return None, f"{_CONFTEST} is missing"
    helpers = _helpers()
    env = helpers._local_env()
    if env is None:
        return None, "'cluster.sh env' failed"
    cluster = helpers._cluster_from_env(env)
    try:
        from kubernetes import client

        client.VersionApi(cluster.api_client()).get_code(_request_timeout=10)
    except Exception as e:
        return None, f"the local cluster does not answer (bash tests/cluster/cluster.sh up): {e}"
    return cluster, None


def pod_names(request: Any) -> dict[tuple[str, int], str]:
    """The pod of each replica of a Volcano Job request, as Volcano names it."""
    job = request.body
    out = {}
    for task in job["spec"]["tasks"]:
        meta = task["template"]["metadata"]
        key = (
            meta["annotations"]["torchx.pytorch.org/role-name"],
            int(meta["labels"]["torchx.pytorch.org/replica-id"]),
        )
        out[key] = f"{job['metadata']['name']}-{task['name']}-0"
    return out


def give_logs(dryrun: Any, lines: int = 4) -> None:
    """Give every replica of the dry run ``lines`` log lines ``{role} {replica} line {n}``."""
    start = dt.datetime.now(dt.timezone.utc)
    for (role, replica), pod in pod_names(dryrun.request).items():
        CLUSTER.set_pod_logs(
            pod,
            [f"{role} {replica} line {n}" for n in range(lines)],
            namespace=dryrun.request.namespace,
            start=start,
            interval=dt.timedelta(milliseconds=200),
        )
