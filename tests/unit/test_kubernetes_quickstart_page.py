"""docs/kubernetes-quickstart.md stays true without a cluster: its DAG is the example DAG,
its controller installs pin the versions the local cluster runs, its objects are the ones
the cluster test applies. (tests/airflow/test_kubernetes_quickstart.py runs the page.)"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from doc_blocks import blocks

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "kubernetes-quickstart.md"
EXAMPLE = REPO / "dags_examples" / "torchx_quickstart_kubernetes.py"
CLUSTER_SCRIPT = REPO / "tests" / "cluster" / "cluster.sh"


def test_the_dag_is_the_example_dag() -> None:
    """The page's DAG is dags_examples/torchx_quickstart_kubernetes.py, from its imports on."""
    source = EXAMPLE.read_text()
    body = source[source.index("\nimport pendulum\n") + 1 :]
    assert body in blocks(PAGE.read_text(), "python"), (
        "docs/kubernetes-quickstart.md's DAG differs from "
        "dags_examples/torchx_quickstart_kubernetes.py"
    )


def test_the_installs_pin_the_versions_the_local_cluster_runs() -> None:
    """Each controller is installed from its release's manifests, at the version that
    tests/cluster/cluster.sh builds: the version the page's run in CI is of."""
    script = CLUSTER_SCRIPT.read_text()
    versions = dict(re.findall(r'^(\w+)_VERSION="([^"]+)"', script, re.M))
    installs = "\n".join(blocks(PAGE.read_text(), "bash"))
    expected = {
        "VOLCANO": "https://raw.githubusercontent.com/volcano-sh/volcano/{}/installer/"
        "volcano-development.yaml",
        "JOBSET": "https://github.com/kubernetes-sigs/jobset/releases/download/{}/manifests.yaml",
        "KUEUE": "https://github.com/kubernetes-sigs/kueue/releases/download/{}/manifests.yaml",
    }
    for name, url in expected.items():
        assert url.format(versions[name]) in installs, (
            f"the page does not install {name} at {versions[name]}"
        )
    # JobSet before Kueue: Kueue finds the frameworks it manages when it starts
    assert installs.index("kubernetes-sigs/jobset") < installs.index("kubernetes-sigs/kueue")


def test_the_objects_are_in_the_pages_namespace_and_name_each_other() -> None:
    """Every namespaced object is in the page's namespace; the RoleBinding binds the Role
    to the ServiceAccount; the queues the DAG names exist; the LocalQueue feeds the
    ClusterQueue, whose flavor exists."""
    docs = [d for block in blocks(PAGE.read_text(), "yaml") for d in yaml.safe_load_all(block)]
    by_kind = {d["kind"]: d for d in docs}
    namespace = by_kind["Namespace"]["metadata"]["name"]
    for d in docs:
        if d["kind"] not in {"Namespace", "Queue", "ResourceFlavor", "ClusterQueue"}:
            assert d["metadata"]["namespace"] == namespace, d["kind"]
    binding = by_kind["RoleBinding"]
    assert binding["roleRef"]["name"] == by_kind["Role"]["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": by_kind["ServiceAccount"]["metadata"]["name"],
            "namespace": namespace,
        }
    ]
    dag = EXAMPLE.read_text()
    assert f'cfg={{"queue": "{by_kind["Queue"]["metadata"]["name"]}"}}' in dag
    assert f'cfg={{"local_queue": "{by_kind["LocalQueue"]["metadata"]["name"]}"}}' in dag
    assert (
        by_kind["LocalQueue"]["spec"]["clusterQueue"] == by_kind["ClusterQueue"]["metadata"]["name"]
    )
    flavors = by_kind["ClusterQueue"]["spec"]["resourceGroups"][0]["flavors"]
    assert [f["name"] for f in flavors] == [by_kind["ResourceFlavor"]["metadata"]["name"]]
    assert f'"namespace": "{namespace}"' in PAGE.read_text()  # the connection's
