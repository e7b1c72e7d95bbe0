"""What the fault rows do to the local cluster itself: stop and restart its API server, wait
for kwok to serve logs again and for its nodes to settle, bring the cluster back up."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs. A process that exited but was not reaped (an API server
    an earlier row of this session started, so a child of this process) is a zombie: it is
    reaped here, and gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    if state == "Z":
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


def stop_process(pid: int, grace: float) -> None:
    """SIGTERM to ``pid``, SIGKILL if it still runs ``grace`` seconds later; returns once it
    is gone (a process of the local cluster, or one an earlier row restarted)."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    while _alive(pid):
        time.sleep(0.1)


CLUSTER_SCRIPT = Path(__file__).resolve().parents[1] / "cluster" / "cluster.sh"


def cluster_up(*, check: bool) -> None:
    """``cluster.sh up`` without building: starts what of the local cluster is not running."""
    subprocess.run(
        ["bash", str(CLUSTER_SCRIPT), "up"],
        env={**os.environ, "TORCHX_CLUSTER_NO_BUILD": "1"},
        capture_output=True,
        timeout=300,
        check=check,
    )


def stopped_processes() -> list[str]:
    """The processes of the local cluster that ``cluster.sh status`` finds stopped."""
    status = subprocess.run(
        ["bash", str(CLUSTER_SCRIPT), "status"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return [line.split()[0] for line in status.stdout.splitlines() if line.endswith(" stopped")]


def _admin_api(admin_kubeconfig: str) -> Any:
    """A sync API client for the local cluster's admin (a context manager)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=admin_kubeconfig, client_configuration=configuration)
    return client.ApiClient(configuration)


def _apiserver_ready(admin_kubeconfig: str) -> bool:
    with _admin_api(admin_kubeconfig) as api:
        try:
            api.call_api("/readyz", "GET", _preload_content=False, _request_timeout=2)
        except Exception:
            return False
    return True


def _kwok_serves(kube_cluster: Any, run: Path, port: int, within: float = 10.0) -> bool:
    """Whether kwok's kubelet endpoint serves a Logs object made just now, within ``within``
    seconds of its making."""
    import ssl
    import urllib.request

    name = f"kwok-probe-{os.getpid()}-{time.monotonic_ns()}"
    path = kube_cluster.set_pod_logs(name, ["probe"], container="main")
    context = ssl.create_default_context(cafile=str(run / "pki" / "ca.crt"))
    context.check_hostname = False
    context.load_cert_chain(
        str(run / "pki" / "apiserver-kubelet-client.crt"),
        str(run / "pki" / "apiserver-kubelet-client.key"),
    )
    url = f"https://127.0.0.1:{port}/containerLogs/{kube_cluster.namespace}/{name}/main"
    try:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(url, context=context, timeout=5) as response,
            ):
                if response.read().strip() == b"probe":
                    return True
            time.sleep(0.5)
        return False
    finally:
        kube_cluster.forget_pod_logs()
        path.unlink(missing_ok=True)


def kwok_serves_new_logs(kube_cluster: Any, limit: float = 30.0, restarted: float = 180.0) -> str:
    """Make sure kwok serves log lines from Logs objects made after the API server's restart.

    kwok (v0.7.0) reads Logs objects through an informer of its own. After a restart of the
    API server that informer has been seen to stay stale for minutes, with kwok then serving
    every new pod an empty log. That is kwok's state, not the provider's, and every later
    test would inherit it: when no new Logs object is served within ``limit`` seconds,
    kwok is restarted (``cluster.sh up`` starts what is not running) and given ``restarted``
    seconds to list them: a kwok started on a loaded machine answers its health check well
    before its informer has synced (measured in CI: more than 10 s)."""
    from kubernetes import client

    run = Path(kube_cluster.kubeconfig).resolve().parents[1]
    with _admin_api(kube_cluster.kubeconfig) as api:
        node = client.CoreV1Api(api).list_node(label_selector="type=kwok").items[0]
        port = int(node.status.daemon_endpoints.kubelet_endpoint.port)
    began = time.monotonic()
    while time.monotonic() - began < limit:
        if _kwok_serves(kube_cluster, run, port):
            return f"yes, after {time.monotonic() - began:.1f} s"
    stop_process(int((run / "pids" / "kwok.pid").read_text()), grace=10)
    cluster_up(check=True)
    again = time.monotonic()
    if not _kwok_serves(kube_cluster, run, port, within=restarted):
        raise AssertionError(
            f"kwok serves no new Logs object even {restarted:.0f} s after its restart "
            f"(log: {run}/logs/kwok.log)"
        )
    return (
        f"only after kwok's restart ({limit:.0f} s stale; served "
        f"{time.monotonic() - again:.1f} s after it)"
    )


#: taints the node lifecycle controller puts on a node whose heartbeats it missed
NODE_TROUBLE = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def nodes_settled(admin_kubeconfig: str, steady: float = 20.0, limit: float = 180.0) -> float:
    """Seconds until every node has been Ready, without a not-ready or unreachable taint, for
    ``steady`` seconds in a row (at most ``limit``).

    An API server that was down long enough makes the controller manager take the nodes'
    heartbeats for missed once it is back: it marks them NotReady, taints them (no new pod
    is scheduled there) and marks their pods NotReady, until kwok renews the leases. The
    tests after the restart must not inherit that."""
    from kubernetes import client

    began = time.monotonic()
    healthy_since: float | None = None
    with _admin_api(admin_kubeconfig) as api:
        core = client.CoreV1Api(api)
        while True:
            now = time.monotonic()
            try:
                nodes = core.list_node(_request_timeout=5).items
                healthy = bool(nodes) and all(
                    any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
                    and not any(t.key in NODE_TROUBLE for t in n.spec.taints or [])
                    for n in nodes
                )
            except Exception:
                healthy = False
            healthy_since = (healthy_since or now) if healthy else None
            if healthy_since is not None and now - healthy_since >= steady:
                return round(now - began, 1)
            if now - began >= limit:
                raise AssertionError(
                    f"the nodes did not stay Ready for {steady:.0f} s within {limit:.0f} s "
                    "of the API server's restart"
                )
            time.sleep(0.5)


#: seconds the API server is given to exit after its SIGTERM before it is killed
APISERVER_GRACE = 5.0


def restart_apiserver(
    admin_kubeconfig: str, down: float, on_ready: Callable[[], None] | None = None
) -> dict[str, float]:
    """Stop the local cluster's kube-apiserver, wait ``down`` seconds, start it again with the
    same command line as ``cluster.sh`` gave it (recording its new pid where ``cluster.sh``
    looks), and wait until it is ready (then call ``on_ready``) and until the rest of the
    cluster is back. Whatever happens, ``cluster.sh up`` is run at the end if it is not
    running."""
    run = Path(admin_kubeconfig).resolve().parents[1]
    pid_file = run / "pids" / "kube-apiserver.pid"
    pid = int(pid_file.read_text())
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    stopped = time.monotonic()
    times: dict[str, float] = {}
    try:
        # It stops listening within milliseconds of the SIGTERM, then (v1.34, measured in CI)
        # stays up until killed: a longer grace only lengthens the outage.
        stop_process(pid, grace=APISERVER_GRACE)
        times["exit_seconds"] = round(time.monotonic() - stopped, 1)
        time.sleep(down)
        with (run / "logs" / "kube-apiserver.log").open("ab") as out:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
            )
        pid_file.write_text(f"{process.pid}\n")
        deadline = time.monotonic() + 120
        while not _apiserver_ready(admin_kubeconfig) and time.monotonic() < deadline:
            time.sleep(0.25)
        times["down_seconds"] = round(time.monotonic() - stopped, 1)
        if not _apiserver_ready(admin_kubeconfig):
            raise AssertionError(
                f"kube-apiserver not ready 120 s after its restart (log: {run}/logs/"
                "kube-apiserver.log)"
            )
        if on_ready is not None:
            on_ready()
        # What the row's job needs besides the API server: every other process of the
        # cluster (its controllers and schedulers; a process that exited during the outage
        # is said and started again) and its nodes Ready and untainted (the controller
        # manager takes the missed heartbeats of the outage for dead nodes; no pod is
        # scheduled until kwok renews their leases).
        gone = stopped_processes()
        if gone:
            print(f"exited during the API server's outage, started again: {', '.join(gone)}")
            cluster_up(check=False)
            still = stopped_processes()
            if still:
                raise AssertionError(
                    f"did not come back after the API server's restart: {', '.join(still)} "
                    f"(logs: {run}/logs/)"
                )
        times["nodes_ready_seconds"] = nodes_settled(admin_kubeconfig, steady=3.0, limit=120.0)
        return times
    finally:
        if not _apiserver_ready(admin_kubeconfig):
            cluster_up(check=False)


def apiserver_restart(
    admin_kubeconfig: str, refusing: float = 0.0
) -> Callable[[Any, float], Awaitable[None]]:
    """The fault of a row: the API server stopped for the row's seconds, then started again;
    with ``refusing``, the follow's requests are then refused (403) for that many seconds,
    as an API server whose authorizer has not loaded the Roles yet answers."""

    def refuse(proxy: Any) -> None:
        proxy.set_fault("403", seconds=refusing)

    async def inject(proxy: Any, seconds: float) -> None:
        measured = await asyncio.to_thread(
            restart_apiserver,
            admin_kubeconfig,
            seconds,
            (lambda: refuse(proxy)) if refusing else None,
        )
        proxy.injected.append((time.monotonic(), "apiserver-restart", str(measured)))
        print(f"kube-apiserver restart: {measured}")

    return inject
