"""Shared test plumbing.

Integration tests need a real Docker engine or Kubernetes cluster. Outside CI a missing one
skips the test with the reason; in CI (``CI`` set) it fails, so a broken setup can never pass
as "all skipped".

No test reaches a cluster it was not given. The Kubernetes tiers use the local cluster
(tests/cluster/cluster.sh) or the one ``TORCHX_TEST_KUBECONFIG`` names; everything else
gives its clients a kubeconfig explicitly. A client left to find a cluster by itself would
take the shell's (``KUBECONFIG``, ``~/.kube/config``, the service account of a pod), perhaps
a production one: so, for the whole session (and the processes it starts), ``KUBECONFIG``
names a kubeconfig without clusters or contexts, which the clients and the provider read
instead of ``~/.kube/config`` (no client can be made from it), and the in-cluster service
account is hidden. Tests of that search set their own environment.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest

IN_CI = bool(os.environ.get("CI"))


def _no_cluster_by_default() -> None:
    """Point ``KUBECONFIG`` at a kubeconfig that names no cluster and hide the in-cluster
    service account (see the module docstring)."""
    folder = tempfile.mkdtemp(prefix="torchx-tests-no-cluster-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = Path(folder) / "kubeconfig"
    path.write_text(
        "# KUBECONFIG of the test session: no cluster (tests/conftest.py). The Kubernetes\n"
        "# tests use the local cluster or the one TORCHX_TEST_KUBECONFIG names.\n"
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n"
    )
    os.environ["KUBECONFIG"] = str(path)
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        os.environ.pop(name, None)
    # The client libraries read KUBECONFIG once, when first imported.
    for module in ("kubernetes.config.kube_config", "kubernetes_asyncio.config.kube_config"):
        loaded = sys.modules.get(module)
        if loaded is not None:
            setattr(loaded, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))  # noqa: B010


_no_cluster_by_default()


def unavailable(reason: str) -> NoReturn:
    """Skip with ``reason`` outside CI; fail with it in CI."""
    if IN_CI:
        pytest.fail(f"{reason} (CI is set, so integration tests may not skip)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def skip_or_fail() -> Callable[[str], NoReturn]:
    """The :func:`unavailable` function, for fixtures that find a backend missing."""
    return unavailable


# ---------------------------------------------------------------- lanes
# The test command (scripts/test.sh) runs the suite as two pytest processes at once: the
# tiers that need the local Kubernetes cluster, whose rows mostly wait on clocks (kwok's
# stages, API server outages, triggerer restarts), and everything else. Each test belongs to
# exactly one lane; without --lane a session runs both, one after the other as before.
LANES = ("local", "cluster")
#: fixtures that reach the Kubernetes cluster (directly or through a deployment that has a
#: Kubernetes connection): a test that uses one, even indirectly, is in the cluster lane
CLUSTER_FIXTURES = frozenset({"kube_cluster", "deployment_cluster"})


#: The cluster lane is itself run in parts (``--cluster-part``): ``kube``, ``kube2`` and
#: ``rows`` at the same time, then ``alone``. ``kube`` holds the Airflow tiers on the cluster
#: and the tiers that use no Kueue quota; ``kube2`` (a session of its own names and Kueue
#: queues: scripts/test.sh tags it) the Kueue tiers and then the real node's training tier
#: (whose ClusterQueue is its own). ``rows`` are the fault rows and the Airflow deployment's
#: tests: none submits to Kueue. ``alone`` are the tests marked ``cluster_alone`` (the API
#: server restarts), run when no other test uses the cluster.
CLUSTER_PARTS = ("kube", "kube2", "rows", "alone")
ROWS_PART = ("tests/faults/", "tests/airflow/test_torchx_deployment.py")
KUBE2_PART = tuple(
    f"tests/integration/kubernetes/test_{name}.py"
    for name in (
        "appwrapper_scheduler",
        "image_pulls_and_evictions",
        "jobset_scheduler",
        "kube_logs_never_lost",
        "kube_real_training",
        "kube_shared_watches",
        "kueue_holds",
        "kueue_preemption",
        "pending_reasons",
    )
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lane",
        choices=LANES,
        default=None,
        help="run only the tests of one lane: 'cluster' (they use the Kubernetes cluster) "
        "or 'local' (the others); scripts/test.sh runs both at once",
    )
    parser.addoption(
        "--cluster-part",
        choices=CLUSTER_PARTS,
        default=None,
        help="with --lane cluster, run only one part of it: 'kube', 'kube2' and 'rows' can "
        "run at once, 'alone' (the tests that restart the API server) only by itself",
    )
    parser.addoption(
        "--kube-takes",
        action="append",
        default=[],
        metavar="PATH",
        help="with --cluster-part kube or kube2: the tests of 'kube2' in the file PATH run in "
        "'kube' instead, where 'kube' has Kueue queues of its own too (give both sessions "
        "the same; scripts/other_versions.sh evens out the lowest clients' sessions so)",
    )


def lane_of(item: pytest.Item) -> str:
    """``cluster`` for a test that uses the Kubernetes cluster, else ``local``."""
    if item.get_closest_marker("kubernetes") is not None:
        return "cluster"
    if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "cluster"
    return "local"


def cluster_part_of(item: pytest.Item) -> str:
    """The part of the cluster lane a test of it belongs to (:data:`CLUSTER_PARTS`)."""
    if item.get_closest_marker("cluster_alone") is not None:
        return "alone"
    if item.nodeid.startswith(ROWS_PART):
        return "rows"
    if item.nodeid.startswith(KUBE2_PART):
        taken = tuple(item.config.getoption("--kube-takes"))
        return "kube" if taken and item.nodeid.startswith(taken) else "kube2"
    return "kube"


def selected(item: pytest.Item, lane: str, part: str | None) -> bool:
    """Whether a session of ``--lane lane --cluster-part part`` runs ``item``."""
    if lane_of(item) != lane:
        return False
    return part is None or lane != "cluster" or cluster_part_of(item) == part


@pytest.hookimpl(trylast=True)  # after the tiers' own hooks have added their markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    lane = config.getoption("--lane")
    if lane is None:
        return
    part = config.getoption("--cluster-part")
    keep = [item for item in items if selected(item, lane, part)]
    dropped = [item for item in items if not selected(item, lane, part)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    if lane == "cluster" and part in ("kube", "kube2"):
        # the tests that count what the API server holds for every client run last: by then
        # 'rows' has most often ended, and they need not wait for its tests
        # (cluster_turn_taken); in 'kube2', the real node's training tier after them, when
        # the other parts' tests have mostly ended (a stable sort: each keeps its order)
        items.sort(
            key=lambda item: (
                item.get_closest_marker("training") is not None,
                item.get_closest_marker("cluster_quiet") is not None,
            )
        )


#: (CI) a file this session makes once only tests of ``tests/unit`` are left to run: from
#: then on it starts no container, and CI starts the other versions' tiers beside it
ONLY_UNIT_LEFT = "TORCHX_TEST_ONLY_UNIT_LEFT"
_last_not_unit: list[str] = []


def pytest_collection_finish(session: pytest.Session) -> None:
    flag = os.environ.get(ONLY_UNIT_LEFT)
    if not flag:
        return
    others = [item.nodeid for item in session.items if not item.nodeid.startswith("tests/unit/")]
    if others:
        _last_not_unit[:] = others[-1:]
    else:
        Path(flag).touch()


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    flag = os.environ.get(ONLY_UNIT_LEFT)
    if flag and nodeid in _last_not_unit:
        Path(flag).touch()


@pytest.fixture(autouse=True)
def cluster_turn_taken(request: pytest.FixtureRequest) -> Iterator[None]:
    """Where other pytest processes use the same cluster (``kube`` and ``rows`` of the test
    command, or a second session of the Kubernetes tier), a test marked ``cluster_quiet``
    runs while none of theirs does (tests/support/cluster_sharing.py). Tests of the local
    lane take no turn."""
    if lane_of(request.node) != "cluster":
        yield
        return
    from cluster_sharing import cluster_turn  # tests/support, on the path of the tests only

    quiet = request.node.get_closest_marker("cluster_quiet") is not None
    with cluster_turn(exclusive=quiet):
        yield
