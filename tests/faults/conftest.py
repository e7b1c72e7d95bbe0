"""Fixtures of the fault tier: the cluster, a fault proxy per test, the results file.

The ``kube_cluster`` fixture is the one of ``tests/integration/kubernetes`` (loaded from its
file, so that this tier starts, finds or refuses the cluster exactly as that tier does: it
skips outside CI and fails in CI when there is none).
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _load_kube_fixtures() -> Any:
    path = REPO / "tests" / "integration" / "kubernetes" / "conftest.py"
    spec = importlib.util.spec_from_file_location("torchx_faults_kube_fixtures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_kube = _load_kube_fixtures()
kube_cluster = _kube.kube_cluster
pod_logs_removed = _kube.pod_logs_removed
unique_name = _kube.unique_name


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here that uses the cluster: mark it ``kubernetes`` (and ``slow``)."""
    for item in items:
        uses_cluster = "kube_cluster" in getattr(item, "fixturenames", ())
        if uses_cluster and HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.kubernetes)
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def fault_proxies(kube_cluster: Any) -> Iterator[Callable[[], tuple[Any, str]]]:
    """``new()`` starts a :class:`fault_proxy.FaultProxy` in front of the cluster's API server
    and returns it with a bearer-token kubeconfig (the restricted ServiceAccount's) that goes
    through it; all are stopped at the end of the test."""
    import yaml

    from fault_proxy import FaultProxy, make_serving_cert, proxy_kubeconfig

    kube_cluster.skip_unless_local(
        "the fault tier drives pods and logs through the local cluster's kwok"
    )
    admin = yaml.safe_load(Path(kube_cluster.kubeconfig).read_text())
    server = admin["clusters"][0]["cluster"]["server"]
    host, _, port = server.removeprefix("https://").partition(":")
    pki = Path(kube_cluster.kubeconfig).resolve().parents[1] / "pki"
    ca_cert, ca_key = pki / "ca.crt", pki / "ca.key"
    proxies: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="torchx-faults-") as tmp:
        out = Path(tmp)
        # signed by the cluster's CA when its key is here, so the kubeconfig's CA is unchanged
        cert = make_serving_cert(
            out, ca_cert if ca_key.is_file() else None, ca_key if ca_key.is_file() else None
        )

        def new() -> tuple[Any, str]:
            proxy = FaultProxy(upstream=(host, int(port)), upstream_ca=str(ca_cert), cert=cert)
            proxies.append(proxy.start())
            return proxy, proxy_kubeconfig(kube_cluster.restricted_kubeconfig, proxy, out)

        try:
            yield new
        finally:
            for proxy in proxies:
                proxy.stop()


@pytest.fixture
def fault_proxy(fault_proxies: Callable[[], tuple[Any, str]]) -> tuple[Any, str]:
    """One proxy of :func:`fault_proxies` and its kubeconfig."""
    return fault_proxies()


@pytest.fixture
def reliability() -> Any:
    """``reliability(row_dict)`` writes one row of the results file."""
    from reliability_results import record_row

    return record_row
