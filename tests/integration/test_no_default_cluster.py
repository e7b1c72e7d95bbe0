"""The test command reaches no cluster it was not given.

A kubeconfig in the shell (``KUBECONFIG``, ``~/.kube/config``) or the service account of a
pod the tests run in may name a production cluster: the tests never use it. The Kubernetes
tiers use the local cluster (tests/cluster/cluster.sh) or the one named by
``TORCHX_TEST_KUBECONFIG``; for everything else tests/conftest.py gives the session a
``KUBECONFIG`` that names no cluster and hides the in-cluster service account.

:func:`test_the_test_command_sends_nothing_to_the_shells_cluster` runs the test command on
a few tests of each kind (the Kubernetes fixture, unit tests that build clients, a
``dag.test()`` run with a Kubernetes connection, and the probe below) with every one of
those pointing at a fake API server that records what it receives: it must receive nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = REPO / "tests" / "cluster" / "cluster.sh"
PROBE = "tests/integration/test_no_default_cluster.py::test_the_environment_names_no_cluster"
#: tests run on the local cluster when it runs: there they must pass, not skip
ON_THE_LOCAL_CLUSTER = [
    "tests/integration/kubernetes/test_cluster_smoke.py::test_api_server_reports_its_release",
    "tests/airflow/test_torchx_dagtest_kubernetes.py::test_success_on_volcano[worker]",
]
#: unit tests that build clients without naming a cluster
UNIT = ["tests/unit/schedulers/kube/test_kube_hub.py", "tests/unit/hooks/test_hooks.py"]


def test_the_environment_names_no_cluster() -> None:
    """What a client given no configuration finds in the test session: no cluster."""
    pytest.importorskip("kubernetes")
    pytest.importorskip("kubernetes_asyncio")
    from torchx_provider.errors import TorchXProviderError
    from torchx_provider.hooks.kubernetes import resolve_kube_client

    assert "KUBERNETES_SERVICE_HOST" not in os.environ
    _no_client()  # the scheduler's and the trigger's clients, given nothing
    try:  # the Airflow hook without a connection
        kwargs, _ = resolve_kube_client({}, None)
    except TorchXProviderError:
        return
    _no_client(**kwargs)


def _no_client(**kwargs: Any) -> None:
    """Neither client can be made from ``kwargs``, or reach a server if it is."""
    from kubernetes import client

    from torchx_provider.errors import TorchXProviderError
    from torchx_provider.schedulers.kube.client_config import KubeClientConfig

    config = KubeClientConfig.from_kwargs(**kwargs)
    with pytest.raises(TorchXProviderError):
        client.VersionApi(config.sync_api_client()).get_code(_request_timeout=5)

    async def version() -> Any:
        from kubernetes_asyncio import client as aclient

        async with await config.async_api_client() as api:
            return await aclient.VersionApi(api).get_code(_request_timeout=5)

    with pytest.raises(TorchXProviderError):
        asyncio.run(version())


class _Recorder(BaseHTTPRequestHandler):
    """Records every connection and request; answers each request 403, as a cluster would
    answer a token it does not know."""

    seen: list[str]

    def handle(self) -> None:
        self.seen.append(f"connection from {self.client_address[0]}")
        super().handle()

    def _answer(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        status = {"kind": "Status", "apiVersion": "v1", "reason": "Forbidden", "code": 403}
        body = json.dumps(status).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def production() -> Iterator[tuple[str, list[str]]]:
    """A fake API server on loopback: ``(its URL, what it received)``."""
    seen: list[str] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def _kubeconfig(server: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "prod", "cluster": {"server": server}}],
            "users": [{"name": "admin", "user": {"token": "production-admin-token"}}],
            "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "admin"}}],
            "current-context": "prod",
        }
    )


def _cluster_cache() -> Path:
    """cluster.sh's cache (it holds the running cluster's state), as it finds it."""
    if os.environ.get("TORCHX_CLUSTER_CACHE"):
        return Path(os.environ["TORCHX_CLUSTER_CACHE"])
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "airflow-provider-torchx" / "cluster"


def _local_cluster_runs() -> bool:
    if not CLUSTER_SCRIPT.is_file():
        return False
    status = subprocess.run(
        ["bash", str(CLUSTER_SCRIPT), "status"], capture_output=True, timeout=60, check=False
    )
    return status.returncode == 0


def _outcomes(junit: Path) -> dict[str, str]:
    """``{test id: passed|skipped|failed}`` from pytest's JUnit XML."""
    out = {}
    for case in ET.parse(junit).iter("testcase"):
        path = case.get("classname", "").replace(".", "/")
        node = f"{path}.py::{case.get('name')}"
        kinds = {child.tag for child in case}
        failed = bool(kinds & {"failure", "error"})
        out[node] = "failed" if failed else "skipped" if "skipped" in kinds else "passed"
    return out


# real Airflow (dag.test()) and, when it runs, the local cluster
@pytest.mark.airflow
@pytest.mark.kubernetes
@pytest.mark.slow
def test_the_test_command_sends_nothing_to_the_shells_cluster(
    production: tuple[str, list[str]], tmp_path: Path
) -> None:
    server, seen = production
    kubeconfig = tmp_path / "production.yaml"
    kubeconfig.write_text(_kubeconfig(server))
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(_kubeconfig(server))
    port = server.rsplit(":", 1)[1]

    local = _local_cluster_runs()
    env = {
        k: v
        for k, v in os.environ.items()
        # a cluster named for the tests, and the session's Airflow home, are not inherited
        if not k.startswith(("TORCHX_TEST_", "AIRFLOW"))
    }
    env.update(
        KUBECONFIG=str(kubeconfig),
        HOME=str(home),
        KUBERNETES_SERVICE_HOST="127.0.0.1",
        KUBERNETES_SERVICE_PORT=port,
        # the local cluster, if it runs, where cluster.sh keeps it; if it does not, an empty
        # cache, so that the Kubernetes fixture skips instead of building or starting one
        TORCHX_CLUSTER_CACHE=str(_cluster_cache() if local else tmp_path / "no-cluster"),
        # an Airflow home of its own (tests/airflow/conftest.py), removed with tmp_path
        TORCHX_TEST_AIRFLOW_HOME=str(tmp_path / "airflow"),
        AIRFLOW_HOME=str(tmp_path / "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(tmp_path / "airflow" / "dags"),
    )
    if not local:
        env.pop("CI", None)
    junit = tmp_path / "junit.xml"
    tests = [PROBE, *UNIT, *ON_THE_LOCAL_CLUSTER]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    run = subprocess.run(
        [*command, f"--junitxml={junit}", *tests],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = (run.stdout + run.stderr)[-4000:]
    assert seen == [], f"the shell's cluster was contacted: {seen}\n{output}"
    assert run.returncode == 0, output
    outcomes = _outcomes(junit)
    assert outcomes.get(PROBE) == "passed", (outcomes, output)
    assert any(k.startswith(tuple(UNIT)) and v == "passed" for k, v in outcomes.items())
    if local:
        for node in ON_THE_LOCAL_CLUSTER:
            assert outcomes.get(node) == "passed", (node, outcomes, output)
