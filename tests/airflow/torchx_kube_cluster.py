"""The local test cluster (tests/cluster/cluster.sh), for ``dag.test()`` runs and the real
deployment's Kubernetes task: found through the helpers of
tests/integration/kubernetes/conftest.py, loaded under a name of its own."""

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
    from local_cluster import cluster_env

    helpers = _helpers()
    env = cluster_env()
    if env is None:
        return None, "'cluster.sh env' failed"
    cluster = helpers._cluster_from_env(env)
    try:
        from kubernetes import client

        client.VersionApi(cluster.api_client()).get_code(_request_timeout=10)
    except Exception as e:
        return None, f"the local cluster does not answer (bash tests/cluster/cluster.sh up): {e}"
    return cluster, None


def connection(cluster: Any, **extra: Any) -> str:
    """A ``torchx_kubernetes`` connection to ``cluster`` through its restricted kubeconfig,
    with ``extra``'s run options, as the value of an ``AIRFLOW_CONN_*`` variable."""
    import json

    conn = {
        "conn_type": "torchx_kubernetes",
        "extra": {"kube_config_path": cluster.restricted_kubeconfig, **extra},
    }
    return json.dumps(conn)


def pod_behaviour(**kwargs: Any) -> dict[str, str]:
    """The annotations that make kwok run a pod this way (``KubeCluster.pod_behaviour``)."""
    return dict(_helpers().KubeCluster.pod_behaviour(**kwargs))


#: Volcano's Job resource: group, version, namespaced plural
VOLCANO_JOBS = ("batch.volcano.sh", "v1alpha1", "jobs")


def volcano_jobs(cluster: Any, dag_id: str) -> list[dict[str, Any]]:
    """Every Volcano Job any try of ``dag_id``'s tasks created (by their labels)."""
    from kubernetes import client

    group, version, plural = VOLCANO_JOBS
    found = client.CustomObjectsApi(cluster.api_client()).list_namespaced_custom_object(
        group,
        version,
        cluster.namespace,
        plural,
        label_selector=f"airflow.apache.org/dag-id={dag_id}",
    )
    return list(found["items"])


def delete_volcano_jobs(cluster: Any, dag_id: str) -> None:
    """Delete every Volcano Job of ``dag_id``'s tasks (with their pods)."""
    from kubernetes import client

    group, version, plural = VOLCANO_JOBS
    client.CustomObjectsApi(cluster.api_client()).delete_collection_namespaced_custom_object(
        group,
        version,
        cluster.namespace,
        plural,
        label_selector=f"airflow.apache.org/dag-id={dag_id}",
    )


def running_pods(cluster: Any, dag_id: str, prefix: str = "") -> list[str]:
    """The pods of ``dag_id``'s jobs in phase Running (names starting with ``prefix``)."""
    from kubernetes import client

    pods = client.CoreV1Api(cluster.api_client()).list_namespaced_pod(
        cluster.namespace, label_selector=f"airflow.apache.org/dag-id={dag_id}"
    )
    return [
        p.metadata.name
        for p in pods.items
        if p.status.phase == "Running"
        and p.metadata.deletion_timestamp is None
        and p.metadata.name.startswith(prefix)
    ]


def evict(cluster: Any, pod: str) -> None:
    """Evict ``pod`` (``POST pods/<name>/eviction``), as a node drain does."""
    from kubernetes import client

    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=cluster.namespace))
    client.CoreV1Api(cluster.api_client()).create_namespaced_pod_eviction(
        pod, cluster.namespace, body
    )


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


def give_logs_once_created(dryrun: Any, lines: int = 4, timeout: float = 120) -> None:
    """Give each replica ``lines`` log lines ``{role} {replica} line {n}`` as soon as its pod
    exists (a controller that names pods itself, as the Job controller of a JobSet does), from
    a thread that watches the app's pods until every replica has had its lines."""
    import threading
    import time

    from kubernetes import client

    from torchx_provider.schedulers.kube.status import replica_of
    from torchx_provider.schedulers.labels import LABEL_APP_ID

    namespace, name = dryrun.request.namespace, dryrun.request.name
    wanted = sum(
        int(rjob["template"]["spec"]["completions"])
        for rjob in dryrun.request.body["spec"]["replicatedJobs"]
    )
    core = client.CoreV1Api(CLUSTER.api_client())

    def give() -> None:
        given: set[str] = set()
        deadline = time.monotonic() + timeout
        while len(given) < wanted and time.monotonic() < deadline:
            for pod in core.list_namespaced_pod(
                namespace, label_selector=f"{LABEL_APP_ID}={name}"
            ).items:
                key = replica_of(pod.to_dict()["metadata"])
                if key is None or pod.metadata.name in given:
                    continue
                CLUSTER.set_pod_logs(
                    pod.metadata.name,
                    [f"{key.role} {key.replica_id} line {n}" for n in range(lines)],
                    namespace=namespace,
                    start=dt.datetime.now(dt.timezone.utc),
                    interval=dt.timedelta(milliseconds=200),
                )
                given.add(pod.metadata.name)
            time.sleep(0.1)

    threading.Thread(target=give, name=f"logs of {name}", daemon=True).start()
