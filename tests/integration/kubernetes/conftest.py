"""One Kubernetes cluster for the whole test session.

The ``kube_cluster`` fixture (session scope) gives every test in this directory
a cluster with Volcano, AppWrapper v1beta2 under Kueue and an MCAD (AppWrapper
v1beta1) API server. Where it comes from:

1. ``TORCHX_TEST_KUBECONFIG`` names a cluster: it is used as is. Only this variable
   does: ``KUBECONFIG`` and ``~/.kube/config`` are never used (they may name a
   production cluster; tests/conftest.py keeps every client away from them). The
   fixture applies ``tests/cluster/rbac.yaml`` there with that (admin) kubeconfig
   and mints a token for the restricted ServiceAccount.
   ``TORCHX_TEST_MCAD_KUBECONFIG`` may name the MCAD API server.
   If it is the admin kubeconfig of the local cluster below (``cluster.sh
   kubeconfig``), that cluster is used as it is, with all its helpers.
2. Otherwise the local cluster of ``tests/cluster/cluster.sh`` is started (or
   found running) with ``cluster.sh up``. Binaries must already be in the cache
   (``cluster.sh build``); set ``TORCHX_CLUSTER_BUILD=1`` to let the fixture build
   them (a cold build takes a long time). In CI (``CI`` set) it always builds.
   A cluster the fixture started is stopped at the end of the session unless
   ``TORCHX_CLUSTER_KEEP=1``.

When neither is possible, the tests are skipped with the reason, or fail when
``CI`` is set.

The fixture returns a :class:`KubeCluster`:

``kubeconfig``
    admin kubeconfig (system:masters); for set-up and for checking what a
    controller did, never for the code under test.
``restricted_kubeconfig``
    kubeconfig of ServiceAccount ``torchx-provider`` in ``namespace``, bound to
    the Role in ``tests/cluster/rbac.yaml``: what the provider is documented to
    need, and nothing else. Run the code under test with this one.
``namespace``
    ``torchx-test``, where that Role applies.
``mcad_kubeconfig`` / ``mcad_restricted_kubeconfig``
    the same two for the second API server, which serves MCAD's
    ``workload.codeflare.dev/v1beta1`` AppWrapper (the CRD has the same name as
    v1beta2's, so it cannot live in the main one); ``None`` if there is none.
``mcad_controller``
    True when MCAD's kar-controllers runs against that server. When False the
    server holds the CRD only: a test moves an AppWrapper through its states
    itself with :meth:`KubeCluster.set_mcad_appwrapper_state`, as MCAD would.
``kueue``
    the Kueue objects of the local cluster (:class:`KueueQueues`: its LocalQueue in
    ``namespace``, ClusterQueue and its quota, high and low WorkloadPriorityClass);
    ``None`` on a cluster given by kubeconfig. :meth:`KubeCluster.require_kueue`
    returns it, or skips (fails in CI) without it.
``node_kueue``
    the local cluster's third pair of Kueue queues, alike, for the real node's training
    tier, which runs beside the Kueue tiers (:meth:`KubeCluster.require_node_kueue`).
``local``
    True for the local cluster, where the fake kubelet (kwok) follows the
    behaviour annotations below and :meth:`KubeCluster.set_pod_logs` works.

Driving pods (local cluster)
    Pods are not run: kwok moves them Pending → Running → Succeeded/Failed.
    Put the annotations (or labels) of :meth:`KubeCluster.pod_behaviour` on the
    pod template, e.g. through the provider's pod overlay::

        overlay = {"metadata": {"annotations": kube_cluster.pod_behaviour(
            exit_code=3, reason="Error", run_seconds=2)}}

    ``keep_running=True`` keeps the pod Running until it is deleted.

Giving a pod log lines (local cluster)
    ``kube_cluster.set_pod_logs("job-worker-0", ["a", "b"])`` writes a CRI log
    file and a kwok ``Logs`` object named after the pod, so that
    ``GET pods/job-worker-0/log`` returns ``a\\nb\\n``. Call it before or after the
    pod exists (Volcano pods are named ``{job}-{task}-{index}``). Lines may carry
    their own timestamps (``(datetime, text)``); :meth:`KubeCluster.append_pod_logs`
    adds lines for follow/since tests. Pods without logs have an empty log.
    Unlike a kubelet's, a ``follow`` stream from kwok never ends by itself, even
    for a finished pod: stop on the pod's phase or a timeout. Read logs with
    ``_preload_content=False`` (the client's ``str`` result is the repr of bytes).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import os
import secrets
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypedDict, Unpack

import pytest

from cluster_sharing import session_queues, session_tag
from kube_apps import kube_scheduler
from local_cluster import CLUSTER_SCRIPT, cluster_env
from registry_fixture import local_registry  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[3]
RBAC_YAML = REPO_ROOT / "tests" / "cluster" / "rbac.yaml"
NAMESPACE = "torchx-test"
SERVICE_ACCOUNT = "torchx-provider"
ANNOTATION_PREFIX = "cluster.torchx.test/"

LineSpec = str | tuple[dt.datetime, str]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test in this directory needs the cluster: mark it ``kubernetes``."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.kubernetes)


def _unavailable(reason: str) -> NoReturn:
    """Skip outside CI, fail inside it: in CI a missing cluster is a broken build."""
    if os.environ.get("CI"):
        pytest.fail(f"Kubernetes cluster unavailable in CI: {reason}", pytrace=False)
    pytest.skip(f"Kubernetes cluster unavailable: {reason}")


def _cri_timestamp(when: dt.datetime) -> str:
    when = when.astimezone(dt.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond:06d}000Z"


@dataclass(frozen=True)
class KueueQueues:
    """What ``cluster.sh up`` makes for Kueue: a LocalQueue in the test namespace, feeding one
    ClusterQueue of finite quota that preempts lower-priority work, and two priorities."""

    local_queue: str
    cluster_queue: str
    high_priority: str
    low_priority: str


class PodLogOptions(TypedDict, total=False):
    """Where the lines of :meth:`KubeCluster.set_pod_logs` go, and how they are stamped."""

    #: the pod's namespace (default: the cluster's)
    namespace: str | None
    #: the one container they are of (default: every container of the pod)
    container: str | None
    #: the timestamp of the first plain line (default: now)
    start: dt.datetime | None
    #: the time between two plain lines (default: 1 ms)
    interval: dt.timedelta
    #: ``stdout`` (the default) or ``stderr``
    stream: str
    #: the pod is on the MCAD API server
    mcad: bool
    #: the lines' own file (see :meth:`KubeCluster.set_pod_logs`)
    file_tag: str | None


@dataclass
class KubeCluster:
    """A cluster the tests may use; see the module docstring."""

    kubeconfig: str
    restricted_kubeconfig: str
    namespace: str
    mcad_kubeconfig: str | None = None
    mcad_restricted_kubeconfig: str | None = None
    mcad_controller: bool = False
    kueue: KueueQueues | None = None
    node_kueue: KueueQueues | None = None
    local: bool = False
    pod_logs_dir: Path | None = None
    _clients: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False)
    #: the kwok Logs objects (namespace, pod, mcad) and log files made since the last
    #: :meth:`forget_pod_logs`
    _log_objects: set[tuple[str, str, bool]] = field(default_factory=set, repr=False)
    _log_files: set[Path] = field(default_factory=set, repr=False)

    def skip_unless_local(self, reason: str) -> None:
        """Skip the test (in CI too) with ``reason`` on a cluster other than the local one."""
        if not self.local:
            pytest.skip(reason)

    def require_kueue(self) -> KueueQueues:
        """The cluster's Kueue queues; skips (fails in CI) on a cluster without them."""
        if self.kueue is None:
            _unavailable("this cluster has no Kueue queues of the local cluster's")
        return self.kueue

    def require_node_kueue(self) -> KueueQueues:
        """The Kueue queues of the real node's training tier (a ClusterQueue of its own, with
        the same quota); skips (fails in CI) on a cluster without them."""
        if self.node_kueue is None:
            _unavailable(
                "this cluster has no Kueue queues for the real node's tier: start it with "
                "this checkout's cluster.sh"
            )
        return self.node_kueue

    # -- clients ---------------------------------------------------------------
    def api_client(self, *, restricted: bool = False, mcad: bool = False) -> Any:
        """A ``kubernetes.client.ApiClient`` for one of the four kubeconfigs."""
        from kubernetes import client, config

        path = self._kubeconfig_for(restricted=restricted, mcad=mcad)
        key = (path, "sync")
        if key not in self._clients:
            configuration = client.Configuration()
            config.load_kube_config(config_file=path, client_configuration=configuration)
            self._clients[key] = client.ApiClient(configuration)
        return self._clients[key]

    def _kubeconfig_for(self, *, restricted: bool, mcad: bool) -> str:
        if mcad:
            path = self.mcad_restricted_kubeconfig if restricted else self.mcad_kubeconfig
            if path is None:
                pytest.skip("this cluster has no MCAD API server")
            return path
        return self.restricted_kubeconfig if restricted else self.kubeconfig

    # -- pod behaviour -----------------------------------------------------------
    @staticmethod
    def pod_behaviour(
        *,
        exit_code: int = 0,
        reason: str | None = None,
        message: str | None = None,
        run_seconds: float | None = None,
        start_seconds: float | None = None,
        keep_running: bool = False,
    ) -> dict[str, str]:
        """Annotations that make kwok run a pod this way (see tests/cluster/README.md).

        ``exit_code`` 0 ends in phase Succeeded, anything else in Failed, with
        every container terminated with that code and ``reason`` (default
        ``Completed``/``Error``). ``run_seconds`` is the time spent Running
        (default 2), ``start_seconds`` the time Pending (default 0.5).
        """
        out = {ANNOTATION_PREFIX + "exit-code": str(int(exit_code))}
        if reason is not None:
            out[ANNOTATION_PREFIX + "reason"] = reason
        if message is not None:
            out[ANNOTATION_PREFIX + "message"] = message
        if run_seconds is not None:
            out[ANNOTATION_PREFIX + "run-duration"] = f"{int(run_seconds * 1000)}ms"
        if start_seconds is not None:
            out[ANNOTATION_PREFIX + "start-delay"] = f"{int(start_seconds * 1000)}ms"
        if keep_running:
            out[ANNOTATION_PREFIX + "keep-running"] = "true"
        return out

    # -- pod logs ----------------------------------------------------------------
    def set_pod_logs(
        self, pod: str, lines: Iterable[LineSpec], **options: Unpack[PodLogOptions]
    ) -> Path:
        """Give ``pod`` (one ``container`` of it, or all) these log lines.

        A plain string gets the timestamp ``start + i * interval`` (``start``
        defaults to now); a ``(datetime, text)`` pair keeps its own. Returns the
        CRI log file, which :meth:`append_pod_logs` extends. The options are those of
        :class:`PodLogOptions`.

        ``file_tag`` gives the lines a file of their own: a pod replaced by one
        with the same name (Volcano's restarts) gets new lines for its new
        instance while streams opened on the old one go on reading the old file,
        as with a kubelet, which keeps one log per container instance.
        """
        path = self._log_file(pod, options)
        path.write_text("")
        self.append_pod_logs(pod, lines, **options)
        namespace = options.get("namespace") or self.namespace
        container, mcad = options.get("container"), options.get("mcad", False)
        self._put_logs_object(pod, namespace, container, path, mcad)
        return path

    def append_pod_logs(
        self, pod: str, lines: Iterable[LineSpec], **options: Unpack[PodLogOptions]
    ) -> Path:
        """Append lines to the log set with :meth:`set_pod_logs` (same arguments)."""
        path = self._log_file(pod, options)
        base = options.get("start") or dt.datetime.now(dt.timezone.utc)
        interval = options.get("interval", dt.timedelta(milliseconds=1))
        stream = options.get("stream", "stdout")
        with path.open("a", encoding="utf-8") as f:
            for i, spec in enumerate(lines):
                when, text = spec if isinstance(spec, tuple) else (base + i * interval, spec)
                if "\n" in text:
                    raise ValueError(f"log line {i} contains a newline: {text!r}")
                f.write(f"{_cri_timestamp(when)} {stream} F {text}\n")
        return path

    def _log_file(self, pod: str, options: PodLogOptions) -> Path:
        if not self.local or self.pod_logs_dir is None:
            pytest.skip(
                "pod logs can only be set on the local cluster (kwok serves them from files)"
            )
        ns = options.get("namespace") or self.namespace
        directory = self.pod_logs_dir / ("mcad" if options.get("mcad") else "main") / ns
        directory.mkdir(parents=True, exist_ok=True)
        file_tag = options.get("file_tag")
        tag = f".{file_tag}" if file_tag else ""
        path = directory / f"{pod}.{options.get('container') or '_all'}{tag}.log"
        self._log_files.add(path)
        return path

    def forget_pod_logs(self) -> None:
        """Remove the Logs objects and log files made since the last call (each test's are
        removed after it: a long-lived cluster would keep them all, and kwok serves them)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        for namespace, pod, mcad in sorted(self._log_objects):
            api = client.CustomObjectsApi(self.api_client(mcad=mcad))
            try:
                api.delete_namespaced_custom_object(
                    "kwok.x-k8s.io", "v1alpha1", namespace, "logs", pod
                )
            except ApiException as e:
                if e.status != 404:
                    raise
        for path in self._log_files:
            path.unlink(missing_ok=True)
        self._log_objects.clear()
        self._log_files.clear()

    def _put_logs_object(
        self, pod: str, namespace: str, container: str | None, path: Path, mcad: bool
    ) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        api = client.CustomObjectsApi(self.api_client(mcad=mcad))
        self._log_objects.add((namespace, pod, mcad))
        entry: dict[str, Any] = {"logsFile": str(path), "follow": True}
        if container:
            entry["containers"] = [container]
        # Made, or changed where it exists. Either can meet a conflict on a loaded API server
        # (a create whose first attempt went through: 409 AlreadyExists; a change raced by
        # another): read it again and retry.
        for attempt in range(5):
            try:
                self._create_or_change_logs(api, namespace, pod, container, entry)
                return
            except ApiException as e:
                if e.status != 409 or attempt == 4:
                    raise

    @staticmethod
    def _create_or_change_logs(
        api: Any, namespace: str, pod: str, container: str | None, entry: dict[str, Any]
    ) -> None:
        from kubernetes.client.exceptions import ApiException

        group, version, plural = "kwok.x-k8s.io", "v1alpha1", "logs"
        try:
            current = api.get_namespaced_custom_object(group, version, namespace, plural, pod)
        except ApiException as e:
            if e.status != 404:
                raise
            body = {
                "apiVersion": f"{group}/{version}",
                "kind": "Logs",
                "metadata": {"name": pod, "namespace": namespace},
                "spec": {"logs": [entry]},
            }
            api.create_namespaced_custom_object(group, version, namespace, plural, body)
            return
        entries = [
            e
            for e in current.get("spec", {}).get("logs", [])
            if (e.get("containers") or [None]) != ([container] if container else [None])
        ]
        # kwok takes the first entry naming the container, else the first without names.
        entries.insert(0, entry) if container else entries.append(entry)
        current["spec"] = {"logs": entries}
        api.replace_namespaced_custom_object(group, version, namespace, plural, pod, current)

    # -- MCAD without its controller -------------------------------------------
    def set_mcad_appwrapper_state(
        self, name: str, state: str, *, namespace: str | None = None, **status: Any
    ) -> dict[str, Any]:
        """Set ``status.state`` (and other status fields) of a v1beta1 AppWrapper.

        This is what MCAD's controller does (``Pending``, ``Running``,
        ``Completed``, ``Failed``, ...); use it when ``mcad_controller`` is False.
        """
        from kubernetes import client

        api = client.CustomObjectsApi(self.api_client(mcad=True))
        body = {"status": {"state": state, **status}}
        return api.patch_namespaced_custom_object_status(
            "workload.codeflare.dev",
            "v1beta1",
            namespace or self.namespace,
            "appwrappers",
            name,
            body,
        )


# ---------------------------------------------------------------------------- fixture
def _run(
    args: list[str], *, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _given_kubeconfig() -> str | None:
    """The kubeconfig ``TORCHX_TEST_KUBECONFIG`` names, if any: a cluster is only ever
    given explicitly, never taken from ``KUBECONFIG`` or ``~/.kube/config``."""
    path = os.environ.get("TORCHX_TEST_KUBECONFIG")
    if not path:
        return None
    if not Path(path).is_file():
        _unavailable(f"kubeconfig {path} (from TORCHX_TEST_KUBECONFIG) does not exist")
    return path


def _restricted_for(admin_kubeconfig: str, out_dir: Path, name: str) -> str:
    """Apply rbac.yaml with the admin kubeconfig and write a token kubeconfig."""
    import yaml
    from kubernetes import client, config, utils

    configuration = client.Configuration()
    config.load_kube_config(config_file=admin_kubeconfig, client_configuration=configuration)
    api_client = client.ApiClient(configuration)
    for doc in yaml.safe_load_all(RBAC_YAML.read_text()):
        try:
            utils.create_from_dict(api_client, doc)
        except utils.FailToCreateError as e:
            if any(getattr(x, "status", None) != 409 for x in e.api_exceptions):
                raise
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=24 * 3600)
    )
    token = (
        client.CoreV1Api(api_client)
        .create_namespaced_service_account_token(SERVICE_ACCOUNT, NAMESPACE, request)
        .status.token
    )
    cluster = {"server": configuration.host}
    if configuration.ssl_ca_cert:
        cluster["certificate-authority-data"] = base64.b64encode(
            Path(configuration.ssl_ca_cert).read_bytes()
        ).decode()
    if not configuration.verify_ssl:
        cluster["insecure-skip-tls-verify"] = True
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [
            {
                "name": "c",
                "context": {"cluster": "c", "user": SERVICE_ACCOUNT, "namespace": NAMESPACE},
            }
        ],
        "current-context": "c",
    }
    path = out_dir / f"{name}-restricted.yaml"
    path.write_text(json.dumps(kubeconfig))
    path.chmod(0o600)
    return str(path)


def _queues(
    env: dict[str, str], local_queue: str | None, cluster_queue: str | None
) -> KueueQueues | None:
    """The queues ``local_queue`` and ``cluster_queue`` with the cluster's two priorities, or
    None where any of them is missing."""
    priorities = env.get("TORCHX_CLUSTER_KUEUE_PRIORITY_CLASSES", "").split(",")
    if not local_queue or not cluster_queue or len(priorities) != 2:
        return None
    return KueueQueues(local_queue, cluster_queue, priorities[0], priorities[1])


def _pair(env: dict[str, str], which: str) -> list[str] | None:
    """A spare pair of queues cluster.sh names (``TORCHX_CLUSTER_KUEUE_<WHICH>_QUEUES``:
    "local,cluster"), or None."""
    pair = env.get(f"TORCHX_CLUSTER_KUEUE_{which}_QUEUES", "").split(",")
    return pair if len(pair) == 2 and all(pair) else None


def _node_kueue_from_env(env: dict[str, str]) -> KueueQueues | None:
    pair = _pair(env, "NODE")
    return _queues(env, *pair) if pair else None


def _kueue_from_env(env: dict[str, str]) -> KueueQueues | None:
    local_queue = env.get("TORCHX_CLUSTER_KUEUE_LOCAL_QUEUE")
    cluster_queue = env.get("TORCHX_CLUSTER_KUEUE_CLUSTER_QUEUE")
    if session_tag():
        # a session sharing the cluster with another run of these tests: the second pair,
        # or the third (tests/support/cluster_sharing.py)
        which = session_queues()
        pair = _pair(env, "NODE" if which == "third" else "SECOND")
        if pair is None:
            _unavailable(
                "this session shares the cluster (TORCHX_TEST_CLUSTER_TAG) but the cluster "
                f"has no {which} pair of Kueue queues: start it with this checkout's cluster.sh"
            )
        local_queue, cluster_queue = pair
    return _queues(env, local_queue, cluster_queue)


def _cluster_from_env(env: dict[str, str]) -> KubeCluster:
    mcad = env.get("TORCHX_CLUSTER_MCAD_KUBECONFIG") or None
    return KubeCluster(
        kubeconfig=env["TORCHX_CLUSTER_KUBECONFIG"],
        restricted_kubeconfig=env["TORCHX_CLUSTER_RESTRICTED_KUBECONFIG"],
        namespace=env.get("TORCHX_CLUSTER_NAMESPACE", NAMESPACE),
        mcad_kubeconfig=mcad,
        mcad_restricted_kubeconfig=env.get("TORCHX_CLUSTER_MCAD_RESTRICTED_KUBECONFIG")
        if mcad
        else None,
        mcad_controller=env.get("TORCHX_CLUSTER_MCAD_CONTROLLER") == "kar-controllers",
        kueue=_kueue_from_env(env),
        node_kueue=_node_kueue_from_env(env),
        local=True,
        pod_logs_dir=Path(env["TORCHX_CLUSTER_POD_LOGS"]),
    )


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    """The session's cluster (see the module docstring)."""
    pytest.importorskip("kubernetes", reason="the kubernetes client is not installed")
    given = _given_kubeconfig()
    local_env = cluster_env() if CLUSTER_SCRIPT.is_file() else None
    if (
        given
        and local_env
        and Path(given).resolve() == Path(local_env["TORCHX_CLUSTER_KUBECONFIG"]).resolve()
    ):
        # The local cluster, started by someone else (e.g. .ci/run): use it as it is.
        yield _cluster_from_env(local_env)
        return
    if given:
        with tempfile.TemporaryDirectory(prefix="torchx-kube-") as tmp:
            try:
                restricted = _restricted_for(given, Path(tmp), "main")
                mcad = os.environ.get("TORCHX_TEST_MCAD_KUBECONFIG") or None
                mcad_restricted = _restricted_for(mcad, Path(tmp), "mcad") if mcad else None
            except Exception as e:  # any failure means the cluster is not usable
                _unavailable(f"cannot prepare {given}: {e}")
            yield KubeCluster(
                kubeconfig=given,
                restricted_kubeconfig=restricted,
                namespace=NAMESPACE,
                mcad_kubeconfig=mcad,
                mcad_restricted_kubeconfig=mcad_restricted,
            )
        return

    if not CLUSTER_SCRIPT.is_file():
        _unavailable(f"{CLUSTER_SCRIPT} is missing")
    was_running = _run(["bash", str(CLUSTER_SCRIPT), "status"], timeout=60).returncode == 0
    build = bool(os.environ.get("CI")) or os.environ.get("TORCHX_CLUSTER_BUILD") == "1"
    up = _run(
        ["bash", str(CLUSTER_SCRIPT), "up"],
        timeout=3 * 3600 if build else 600,
        env=None if build else {"TORCHX_CLUSTER_NO_BUILD": "1"},
    )
    if up.returncode != 0:
        tail = "\n".join((up.stderr or up.stdout).splitlines()[-15:])
        hint = (
            ""
            if build
            else " (run 'bash tests/cluster/cluster.sh build' first, or set TORCHX_CLUSTER_BUILD=1)"
        )
        _unavailable(f"'cluster.sh up' failed{hint}:\n{tail}")
    env = cluster_env()
    if env is None:
        _unavailable("'cluster.sh env' failed after 'cluster.sh up'")
    try:
        yield _cluster_from_env(env)
    finally:
        if not was_running and os.environ.get("TORCHX_CLUSTER_KEEP") != "1":
            _run(["bash", str(CLUSTER_SCRIPT), "down"], timeout=120)


# ---------------------------------------------------------------------------- helpers
def _wait_until(
    predicate: Callable[[], Any],
    *,
    timeout: float = 60,
    interval: float = 0.2,
    message: str | Callable[[], str] = "condition",
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {text}")
        time.sleep(interval)


@pytest.fixture(autouse=True)
def pod_logs_removed(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that uses the cluster: its pod logs are removed
    (:meth:`KubeCluster.forget_pod_logs`)."""
    uses = "kube_cluster" in request.fixturenames
    cluster = request.getfixturevalue("kube_cluster") if uses else None
    yield
    if cluster is not None:
        cluster.forget_pod_logs()


@pytest.fixture
def wait_until() -> Callable[..., Any]:
    """``wait_until(predicate, timeout=60, message=...)`` polls ``predicate`` until it
    returns something truthy (and returns that), or fails the test."""
    return _wait_until


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """``unique_name("job")`` gives an RFC 1123 name no other test uses, e.g. ``job-3f9a1c``."""

    def make(prefix: str) -> str:
        return f"{prefix[:32].rstrip('-')}-{secrets.token_hex(3)}"

    return make


@pytest.fixture
def tracked_scheduler(kube_cluster: KubeCluster) -> Iterator[Callable[..., Any]]:
    """``tracked_scheduler(create_scheduler, session="it", mcad=False, local_only=None)``: a
    scheduler of the restricted account made by a backend's ``create_scheduler`` (see
    :func:`kube_apps.kube_scheduler`); what it was told it submitted is deleted, and it is
    closed, after the test. With ``local_only`` (the reason), the test is skipped on a
    cluster other than the local one."""
    with contextlib.ExitStack() as stack:

        def make(
            create_scheduler: Callable[..., Any], *, local_only: str | None = None, **kw: Any
        ) -> Any:
            if local_only is not None:
                kube_cluster.skip_unless_local(local_only)
            return stack.enter_context(kube_scheduler(create_scheduler, kube_cluster, **kw))

        yield make
