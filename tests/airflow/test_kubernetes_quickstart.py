"""docs/kubernetes-quickstart.md, run against the local cluster (tests/cluster).

The page's steps, done as it says: every YAML block is applied (server-side apply, as
``kubectl apply --server-side`` does) in a namespace of this test's own, the page's
namespace renamed; the ServiceAccount's token goes into a kubeconfig as the page's
``kubectl config`` commands put it; the connection is the page's environment variable; the
DAG is the page's (dags_examples/torchx_quickstart_kubernetes.py, which a unit test keeps
the same) and runs with ``dag.test()``. The one step not done is the page's first, the
controllers' installs: the local cluster already runs the same versions of Volcano, JobSet
and Kueue (the page says so in its note for contributors).

Pods are played by kwok: each replica's log is what its container's ``echo`` prints. The
task log lines the page shows are then looked for, in their order, in the real log.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import importlib.util
import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import torchx_kube_cluster
import yaml
from torchx_airflow_helpers import task_instances

from doc_blocks import blocks

pytestmark = [pytest.mark.airflow, pytest.mark.kubernetes, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "kubernetes-quickstart.md"
EXAMPLE = REPO / "dags_examples" / "torchx_quickstart_kubernetes.py"
#: the page's namespace, which the test renames to one of its own
NAMESPACE = "torchx-quickstart"
#: the page's ServiceAccount and connection id
ACCOUNT = "torchx-provider"
CONN_VAR = "AIRFLOW_CONN_TORCHX_QUICKSTART"
TASKS = ("echo_volcano", "echo_jobset")


@pytest.fixture(scope="module")
def kube(skip_or_fail: Callable[[str], NoReturn]) -> Iterator[Any]:
    pytest.importorskip("kubernetes_asyncio")
    cluster, reason = torchx_kube_cluster.running_cluster()
    if cluster is None:
        skip_or_fail(f"Kubernetes cluster unavailable: {reason}")
    yield cluster


def page_objects(namespace: str) -> list[dict[str, Any]]:
    """The objects of every YAML block of the page, in order, in ``namespace``."""
    text = PAGE.read_text().replace(NAMESPACE, namespace)
    return [doc for block in blocks(text, "yaml") for doc in yaml.safe_load_all(block) if doc]


def apply(dynamic: Any, obj: dict[str, Any]) -> None:
    """``kubectl apply --server-side`` of one object; a cluster-scoped object that an earlier
    run's clean-up is still deleting is waited for first."""
    from kubernetes.dynamic.exceptions import NotFoundError

    resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    name, namespace = obj["metadata"]["name"], obj["metadata"].get("namespace")
    deadline = time.monotonic() + 60
    while not resource.namespaced:
        try:
            current = resource.get(name=name)
        except NotFoundError:
            break
        if not current.metadata.deletionTimestamp:
            break
        assert time.monotonic() < deadline, f"{obj['kind']} {name} is still being deleted"
        time.sleep(0.5)
    dynamic.server_side_apply(
        resource, body=obj, name=name, namespace=namespace, field_manager="quickstart-test"
    )


def remove(dynamic: Any, objects: list[dict[str, Any]], namespace: str) -> None:
    """The page's clean-up: the namespace (with what is in it), then the cluster-wide queues."""
    for obj in objects:
        if obj["kind"] != "Namespace" and obj["metadata"].get("namespace"):
            continue
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        with contextlib.suppress(Exception):
            resource.delete(name=obj["metadata"]["name"])


def account_kubeconfig(kube: Any, namespace: str, folder: Path) -> str:
    """The kubeconfig of the page's step 4: the cluster's server and CA, a token of the
    page's ServiceAccount (``kubectl create token``), the namespace as its context's."""
    from kubernetes import client

    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    core = client.CoreV1Api(kube.api_client())
    token = core.create_namespaced_service_account_token(ACCOUNT, namespace, request)
    config = copy.deepcopy(yaml.safe_load(Path(kube.restricted_kubeconfig).read_text()))
    config["users"][0]["user"] = {"token": token.status.token}
    for context in config["contexts"]:
        context["context"]["namespace"] = namespace
    path = folder / "torchx-quickstart.kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return str(path)


def connection(kubeconfig: str, namespace: str) -> str:
    """The value of the page's ``export AIRFLOW_CONN_TORCHX_QUICKSTART=...``, its shell
    variable expanded."""
    m = re.search(rf"^export {CONN_VAR}='(.+)'$", PAGE.read_text(), re.M)
    assert m, f"the page sets no {CONN_VAR}"
    value = m.group(1).replace(NAMESPACE, namespace)
    conn = json.loads(value.replace("'\"$KUBECONFIG_QUICKSTART\"'", kubeconfig))
    assert conn["conn_type"] == "torchx_kubernetes"
    return json.dumps(conn)


def echo_output(pod: Any) -> str:
    """What ``pod``'s container prints: its command is ``echo``, its arguments expanded as
    the kubelet expands them (``$(VAR)`` from the container's environment, which names the
    replica's index by a value or a field of the pod)."""
    container = pod.spec.containers[0]
    argv = [*(container.command or []), *(container.args or [])]
    assert argv[:1] == ["echo"], argv
    env = {}
    for var in container.env or []:
        ref = var.value_from.field_ref if var.value_from else None
        field = ref.field_path if ref else None
        m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", field or "")
        if var.value is not None:
            env[var.name] = var.value
        elif m:
            env[var.name] = getattr(pod.metadata, m.group(1))[m.group(2)]
    return " ".join(re.sub(r"\$\((\w+)\)", lambda v: env[v.group(1)], a) for a in argv[1:])


@contextlib.contextmanager
def echoing_pods(kube: Any, namespace: str) -> Iterator[dict[str, str]]:
    """Give every pod made in ``namespace`` the log its ``echo`` prints (kwok runs no
    program); yields pod name -> the line given (or the error that kept it from one)."""
    from kubernetes import client, watch

    core = client.CoreV1Api(kube.api_client())
    given: dict[str, str] = {}
    stop = threading.Event()

    def give() -> None:
        while not stop.is_set():
            w = watch.Watch()
            for event in w.stream(core.list_namespaced_pod, namespace, timeout_seconds=1):
                pod = event["object"]
                if pod.metadata.name not in given:
                    try:
                        line = echo_output(pod)
                        kube.set_pod_logs(pod.metadata.name, [line], namespace=namespace)
                    except Exception as e:  # the test shows it
                        line = f"no log: {e!r}"
                    given[pod.metadata.name] = line
                if stop.is_set():
                    w.stop()

    thread = threading.Thread(target=give, name="quickstart pods", daemon=True)
    thread.start()
    try:
        yield given
    finally:
        stop.set()
        thread.join(timeout=10)
        kube.forget_pod_logs()


def page_dag(dags_folder: Path) -> Any:
    """The DAG the page shows, from its file put in the DAG folder (``dag.test()`` parses
    the folder)."""
    from airflow.sdk import DAG

    path = dags_folder / EXAMPLE.name
    path.write_text(EXAMPLE.read_text())
    made: list[Any] = []
    real_exit = DAG.__exit__

    def keep(self: Any, *args: Any) -> Any:
        made.append(self)
        return real_exit(self, *args)

    spec = importlib.util.spec_from_file_location("torchx_quickstart_kubernetes", path)
    assert spec and spec.loader
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DAG, "__exit__", keep)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    (dag,) = made
    return dag


def expected_log(task_id: str) -> list[str]:
    """The lines the page shows of ``task_id``'s task log."""
    marker = f"<!-- task-log: {task_id} -->"
    m = re.search(re.escape(marker) + r"\n```text\n(.*?)\n```", PAGE.read_text(), re.S)
    assert m, f"the page shows no task log after {marker}"
    return m.group(1).splitlines()


#: what changes from run to run: an app id's random suffix, its Kueue Workload's hash, the
#: state the follow's first describe finds (PENDING as the page shows; on a quick cluster
#: the pods may already run, or have ended)
VARYING = [
    (re.compile(r"\b(echo-)[a-z0-9]{8}\b"), r"\1<id>"),
    (re.compile(r"\b(jobset-echo-<id>-)[a-z0-9]{5}\b"), r"\1<hash>"),
    (re.compile(r"(: - -> )(?:SUBMITTED|PENDING|RUNNING|SUCCEEDED)\b"), r"\1<first state>"),
]


def normal(line: str) -> str:
    for pattern, replacement in VARYING:
        line = pattern.sub(replacement, line)
    return line


def missing(expected: list[str], log: str) -> list[str]:
    """The lines of ``expected`` not found in ``log`` in their order (each replica's lines
    in their own order: the replicas run at once).

    >>> missing(["a jobset-echo-abcd1234-a1b2c", "[echo/1] y", "[echo/0] x", "b"],
    ...         "a jobset-echo-x1y2z3w4-d4e5f\\n"
    ...         "[echo/0] x\\n[echo/1] y\\nb")
    []
    >>> missing(["b", "a"], "a\\nb")
    ['a']
    >>> missing(["app ns:echo-abcd1234: - -> PENDING"], "app ns:echo-x1y2z3w4: - -> RUNNING")
    []
    """
    lines = [normal(line) for line in log.splitlines()]
    at: dict[str, int] = {}
    lost = []
    for want in expected:
        want = normal(want)
        m = re.match(r"\[([^\]/]+/\d+)\] ", want)
        key = m.group(1) if m else ""
        start = at.get(key, 0)
        found = next((i for i in range(start, len(lines)) if want in lines[i]), None)
        if found is None:
            lost.append(want)
        else:
            at[key] = found + 1
    return lost


def test_the_quickstart_runs_as_the_page_says(
    kube: Any,
    airflow_db: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from kubernetes import dynamic

    kube.skip_unless_local("kwok plays the pods and serves their logs on the local cluster")
    namespace = f"{NAMESPACE}-{secrets.token_hex(3)}"
    objects = page_objects(namespace)
    kinds = {obj["kind"] for obj in objects}
    assert {"Namespace", "ServiceAccount", "Role", "RoleBinding", "Queue"} <= kinds
    assert {"ResourceFlavor", "ClusterQueue", "LocalQueue"} <= kinds
    admin = dynamic.DynamicClient(kube.api_client())
    try:
        for obj in objects:
            apply(admin, obj)
        kubeconfig = account_kubeconfig(kube, namespace, tmp_path)
        monkeypatch.setenv(CONN_VAR, connection(kubeconfig, namespace))
        dag = page_dag(airflow_db / "dags")
        assert {t.task_id for t in dag.tasks} == set(TASKS)
        for task in dag.tasks:  # a task that hangs fails the test instead
            task.execution_timeout = dt.timedelta(minutes=3)
        with echoing_pods(kube, namespace) as pods:
            dag_run = dag.test()
        log = "".join(capfd.readouterr()).replace(namespace, NAMESPACE)
        states = {t: ti.state for t, ti in task_instances(dag_run).items()}
        assert states == dict.fromkeys(TASKS, "success"), log[-5000:]
        assert sorted(pods.values()) == sorted(  # two replicas on each backend
            f"hello from replica {i}" for i in (0, 0, 1, 1)
        ), pods
        for task_id in TASKS:
            lost = missing(expected_log(task_id), log)
            seen = [ln for ln in log.splitlines() if "torchx-quickstart:echo-" in ln]
            assert not lost, (
                f"{task_id}'s task log lacks, in order, the page's lines {lost}; its lines "
                "naming the app:\n" + "\n".join(seen[-40:])
            )
    finally:
        remove(admin, objects, namespace)
