"""The Kubernetes example DAGs, end to end with ``airflow dags test`` on the local cluster.

Pods are played by kwok (tests/cluster): they run for a moment and succeed. A watcher gives
each new pod of the app its log lines -- what the real program would print -- so the check is
the user's: every replica's lines in the task log and a successful run. The DAG reaches the
cluster through the connection id it names, defined here as an environment variable with the
least-privilege kubeconfig.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, NoReturn

import pytest
import torchx_kube_cluster
from torchx_airflow_helpers import run_example

from torchx_provider.schedulers.labels import (
    LABEL_APP_NAME,
    LABEL_DAG_ID,
    LABEL_REPLICA_ID,
    LABEL_ROLE_NAME,
)

pytestmark = [pytest.mark.airflow, pytest.mark.kubernetes, pytest.mark.slow]


@pytest.fixture(scope="module")
def kube(skip_or_fail: Callable[[str], NoReturn]) -> Any:
    cluster, reason = torchx_kube_cluster.running_cluster()
    if cluster is None:
        skip_or_fail(f"Kubernetes cluster unavailable: {reason}")
    return cluster


@pytest.fixture
def pod_logs(kube: Any) -> Iterator[Callable[[str], list[str]]]:
    yield from watch_pods(kube, mcad=False)


@pytest.fixture
def mcad_pod_logs(
    kube: Any, skip_or_fail: Callable[[str], NoReturn]
) -> Iterator[Callable[[str], list[str]]]:
    if not kube.mcad_controller:
        skip_or_fail("the MCAD example needs MCAD's controller (kar-controllers) on the cluster")
    yield from watch_pods(kube, mcad=True)


def replica_line(role: str, replica: str) -> str:
    return f"{role} replica {replica}: epoch 1 loss 0.42"


#: The example DAGs run here. Their pods alone get lines: the other cluster tests run beside
#: these in the same namespace, and a line given to one of their pods would be in its log.
EXAMPLE_DAG_IDS = (
    "torchx_ddp_volcano",
    "torchx_train_ddp",
    "torchx_mcad",
    "torchx_appwrapper",
    "torchx_jobset",
)


def watch_pods(kube: Any, mcad: bool) -> Iterator[Callable[[str], list[str]]]:
    """Give every pod of the example DAGs created from now on its log line; yields a function
    listing the pods seen of an app name."""
    from kubernetes import client, watch

    api = client.CoreV1Api(kube.api_client(mcad=mcad))
    seen: list[tuple[str, str]] = []
    stop = threading.Event()
    since = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=1)

    def give_logs() -> None:
        while not stop.is_set():
            w = watch.Watch()
            for event in w.stream(
                api.list_namespaced_pod,
                kube.namespace,
                label_selector=(
                    f"{LABEL_ROLE_NAME},{LABEL_DAG_ID} in ({','.join(EXAMPLE_DAG_IDS)})"
                ),
                timeout_seconds=2,
            ):
                if stop.is_set():  # the test has ended: the next one's pods are not ours
                    w.stop()
                    break
                pod = event["object"]
                name = pod.metadata.name
                new = pod.metadata.creation_timestamp >= since
                if event["type"] == "ADDED" and new and name not in {n for _, n in seen}:
                    labels = pod.metadata.labels
                    line = replica_line(
                        labels[LABEL_ROLE_NAME],
                        # An AppWrapper v1beta2 replica is its Indexed Job's completion index.
                        labels.get(LABEL_REPLICA_ID)
                        or labels["batch.kubernetes.io/job-completion-index"],
                    )
                    kube.set_pod_logs(name, [line], mcad=mcad)
                    seen.append((labels[LABEL_APP_NAME], name))

    thread = threading.Thread(target=give_logs, daemon=True)
    thread.start()
    yield lambda app_name: [n for a, n in seen if a == app_name]
    stop.set()
    thread.join(timeout=10)


def run_kube_example(
    kube: Any,
    dag_id: str,
    conn_env: str,
    tmp_path: Path,
    conf: dict[str, Any],
    *,
    mcad: bool = False,
) -> str:
    """Run the example DAG ``dag_id`` with ``conf``, its connection (the environment variable
    ``conn_env``) naming the restricted kubeconfig (of the MCAD API server with ``mcad``):
    the output of ``airflow dags test``."""
    kubeconfig = kube.mcad_restricted_kubeconfig if mcad else kube.restricted_kubeconfig
    conn = {"conn_type": "torchx_kubernetes", "extra": {"kube_config_path": kubeconfig}}
    return run_example(dag_id, tmp_path / "home", extra_env={conn_env: json.dumps(conn)}, conf=conf)


def assert_every_replica_logged(
    output: str, pods: list[str], replicas: list[tuple[str, str]]
) -> None:
    """The app had one pod per ``(role, replica)``, and each one's line is in the output."""
    assert len(pods) == len(replicas), pods
    for role, replica in replicas:
        assert f"[{role}/{replica}] {replica_line(role, replica)}" in output


def kueue_conf(kube: Any, skip_or_fail: Callable[[str], NoReturn], example: str) -> dict[str, Any]:
    """The DAG's conf that submits to the local cluster's Kueue LocalQueue, at low priority
    (skips, or fails in CI, on a cluster without the queues)."""
    if kube.kueue is None:
        skip_or_fail(f"the {example} example needs the local cluster's Kueue queues")
    return {
        "namespace": kube.namespace,
        "local_queue": kube.kueue.local_queue,
        "priority_class": kube.kueue.low_priority,
    }


def test_ddp_on_volcano_runs_end_to_end(
    kube: Any, pod_logs: Callable[[str], list[str]], tmp_path: Path
) -> None:
    conf = {"namespace": kube.namespace, "queue": "default"}
    output = run_kube_example(
        kube, "torchx_ddp_volcano", "AIRFLOW_CONN_TORCHX_KUBERNETES_DEFAULT", tmp_path, conf
    )
    assert_every_replica_logged(output, pod_logs("ddp"), [("ddp", "0"), ("ddp", "1")])


def test_the_readmes_kubernetes_dag_runs_end_to_end(
    kube: Any, pod_logs: Callable[[str], list[str]], tmp_path: Path
) -> None:
    """The README's first Kubernetes DAG (dags_examples/torchx_train_ddp.py, which a unit
    test keeps the same as the README's), run as the README says: its connection
    ``ml_cluster`` holds the cluster and the run options ``queue`` and ``namespace`` (the
    local cluster's here), and it is triggered with an image. Each of its 2 pods asks for
    32 CPUs, 4 GPUs and 256,000 MB: a whole node of the local cluster each (kwok's nodes
    have 32 CPUs, 8 GPUs and 256 GiB), gang-scheduled by Volcano."""
    conn = torchx_kube_cluster.connection(kube, namespace=kube.namespace, queue="default")
    output = run_example(
        "torchx_train_ddp",
        tmp_path / "home",
        extra_env={"AIRFLOW_CONN_ML_CLUSTER": conn},
        conf={"image": "registry.example.com/ml/train:2.0"},
    )
    assert_every_replica_logged(output, pod_logs("ddp"), [("ddp", "0"), ("ddp", "1")])


def test_mcad_example_runs_end_to_end(
    kube: Any, mcad_pod_logs: Callable[[str], list[str]], tmp_path: Path
) -> None:
    # The local cluster has no scheduler-plugins coscheduler: the default scheduler places
    # the pods (the PodGroups are still created and checked by the API server).
    conf = {"namespace": kube.namespace, "coscheduler_name": "default-scheduler"}
    output = run_kube_example(
        kube, "torchx_mcad", "AIRFLOW_CONN_TORCHX_MCAD_DEFAULT", tmp_path, conf, mcad=True
    )
    assert_every_replica_logged(output, mcad_pod_logs("infer"), [("infer", "0"), ("infer", "1")])


@pytest.fixture
def kueue_admitted(kube: Any) -> Iterator[set[str]]:
    """Watch Kueue at work: yields the set of the AppWrappers and JobSets whose Workload Kueue
    admitted,
    filled while the test runs (by the end the AppWrapper, and its Workload, may be gone)."""
    from kubernetes import client

    api = client.CustomObjectsApi(kube.api_client())
    args = ("kueue.x-k8s.io", "v1beta2", kube.namespace, "workloads")
    admitted: set[str] = set()
    stop = threading.Event()

    def look() -> None:
        while not stop.wait(0.3):
            for wl in api.list_namespaced_custom_object(*args).get("items", []):
                if (wl.get("status") or {}).get("admission"):
                    owners = wl["metadata"].get("ownerReferences") or []
                    admitted.update(
                        o["name"] for o in owners if o["kind"] in ("AppWrapper", "JobSet")
                    )

    thread = threading.Thread(target=look, daemon=True)
    thread.start()
    yield admitted
    stop.set()
    thread.join(timeout=10)


@pytest.fixture
def run_queued_example(
    kube: Any, tmp_path: Path, skip_or_fail: Callable[[str], NoReturn]
) -> Callable[[str, str, str], str]:
    """``run(example, dag_id, conn_env)``: :func:`run_kube_example` of the restricted
    kubeconfig with :func:`kueue_conf`; the output."""

    def run(example: str, dag_id: str, conn_env: str) -> str:
        conf = kueue_conf(kube, skip_or_fail, example)
        return run_kube_example(kube, dag_id, conn_env, tmp_path, conf)

    return run


def test_appwrapper_example_runs_end_to_end(
    pod_logs: Callable[[str], list[str]],
    kueue_admitted: set[str],
    run_queued_example: Callable[[str, str, str], str],
) -> None:
    output = run_queued_example(
        "AppWrapper", "torchx_appwrapper", "AIRFLOW_CONN_TORCHX_APPWRAPPER_DEFAULT"
    )
    # Kueue admitted it: the one AppWrapper of the run
    assert len([n for n in kueue_admitted if n.startswith("infer-aw-")]) == 1, kueue_admitted
    assert_every_replica_logged(
        output, pod_logs("infer-aw"), [("infer-aw", "0"), ("infer-aw", "1")]
    )


def test_jobset_example_runs_end_to_end(
    pod_logs: Callable[[str], list[str]],
    kueue_admitted: set[str],
    run_queued_example: Callable[[str, str, str], str],
) -> None:
    output = run_queued_example("JobSet", "torchx_jobset", "AIRFLOW_CONN_TORCHX_JOBSET_DEFAULT")
    # Kueue admitted it: the one JobSet of the run; both roles ran, each replica's line is in
    # the task log
    assert len([n for n in kueue_admitted if n.startswith("ddp-js-")]) == 1, kueue_admitted
    assert_every_replica_logged(
        output, pod_logs("ddp-js"), [("trainer", "0"), ("trainer", "1"), ("evaluator", "0")]
    )
