"""Reliability row for the Docker backend: the engine restarted in the middle of a job.

The row starts a Docker engine of its own (``dockerd`` on a private socket, data and exec
roots; ``--iptables=false --bridge=none``, as the test engine), imports the busybox test
image into it, runs a 2-replica app whose replicas print a numbered line every 0.25 s, and
follows it with the trigger's follow loop (:class:`JobFollower` over the real
:class:`DockerAsyncClient`). Five seconds in, the engine is stopped (SIGTERM, as a service
manager's restart does) and started again five seconds after it exited. On its way down the
engine stops the containers (they exit 143 on its SIGTERM): the follow rides out the
outage, sees them ended and finishes ``FAILED`` naming the replicas -- no hang, and every
line they printed in the task log once the engine answers again. The failure is the
platform's: the task would raise ``InfrastructureError`` (the follow saw the engine refuse
new connections as the replicas ended: :func:`~torchx_provider.schedulers.docker.state.
stopped_by_engine`). A replica stopped from outside (``docker stop``) while the engine stays
up is not blamed on it: the base ``AppFailedError``.

"Lines lost" compares the task log with what the containers printed (their logs, read from
the engine afterwards); "orphans" are containers of the app still running after the follow.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from docker_rows import Printed, compare, numbered_app, printed_by, row_result

from task_log import TaskLog
from torchx_provider.errors import AppFailedError, InfrastructureError
from torchx_provider.operators.finishing import failure_error
from torchx_provider.schedulers.docker import create_async_client, create_scheduler
from torchx_provider.specs.api import AppState, is_terminal
from torchx_provider.triggers.events import EventKind
from torchx_provider.triggers.follow import JobFollower

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "images" / "build_busybox_image.sh"
#: numbered lines per replica, one every 0.25 s
LINES = 80
#: seconds from submission to the engine's stop, and from its exit to its start
FAULT_AT, DOWN_FOR = 5.0, 5.0


def skip_or_fail(reason: str) -> Any:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


class Engine:
    """A private ``dockerd``: its own socket, data root and exec root, stopped and started
    on command."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "docker.sock"
        self.url = f"unix://{self.socket}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        args = [
            "dockerd",
            f"--host={self.url}",
            f"--data-root={self.root / 'data'}",
            f"--exec-root={self.root / 'exec'}",
            f"--pidfile={self.root / 'dockerd.pid'}",
            "--iptables=false",
            "--ip6tables=false",
            "--bridge=none",
            "--shutdown-timeout=10",
        ]
        out = open(self.root / f"dockerd.{self.starts}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        self.starts += 1
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dockerd exited: {self.log()[-2000:]}")
            if self.answers():
                return
            time.sleep(0.2)
        raise RuntimeError(f"dockerd did not answer within 60 s: {self.log()[-2000:]}")

    def answers(self) -> bool:
        import docker

        try:
            client = docker.DockerClient(base_url=self.url, timeout=5)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except Exception:
            return False

    def stop(self) -> float:
        """SIGTERM, as a service manager's restart does; the seconds until it exited."""
        assert self.proc is not None
        began = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        return time.monotonic() - began

    def log(self) -> str:
        return "\n".join(
            p.read_text(errors="replace") for p in sorted(self.root.glob("dockerd.*.log"))
        )


@pytest.fixture
def engine() -> Iterator[Engine]:
    if os.geteuid() != 0 or not shutil.which("dockerd"):
        skip_or_fail("a private Docker engine needs dockerd and root")
    # a short path: a unix socket's path is limited to 108 bytes
    root = Path(tempfile.mkdtemp(prefix="txd-", dir="/tmp"))
    eng = Engine(root)
    try:
        eng.start()
        built = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            env={**os.environ, "DOCKER_HOST": eng.url},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if built.returncode != 0:
            skip_or_fail(f"cannot build the test image: {built.stderr[-500:]}")
        yield eng
    finally:
        networks: list[str] = []
        if eng.proc is not None and eng.proc.poll() is None:
            networks = remove_containers_and_networks(eng)
            eng.stop()
        remove_bridges(networks)
        for mounted in ("exec", "data"):  # the engine mounts both over themselves
            subprocess.run(["umount", "-R", str(root / mounted)], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


def remove_containers_and_networks(eng: Engine) -> list[str]:
    """Remove every container, then every network the engine made; their ids.

    A stopped engine leaves each network's bridge in the kernel, and with the data root gone
    nothing owns it: left there, it keeps its subnet routed and the engine under test finds
    no free address pool once some thirty have gathered.
    """
    import docker

    ids: list[str] = []
    try:
        client = docker.DockerClient(base_url=eng.url, timeout=30)
        try:
            for c in client.containers.list(all=True):
                c.remove(force=True)
            for net in client.networks.list():
                if net.name in ("bridge", "host", "none"):
                    continue
                ids.append(net.id)
                net.remove()
        finally:
            client.close()
    except Exception:  # best effort: the engine and its data root go next
        pass
    return ids


def remove_bridges(network_ids: list[str]) -> None:
    """Delete the kernel bridge of each network, if the engine left it."""
    for net_id in network_ids:
        bridge = f"br-{net_id[:12]}"
        if Path("/sys/class/net", bridge).exists():
            subprocess.run(["ip", "link", "delete", bridge], capture_output=True, check=False)


@dataclass
class Outcome:
    event: Any
    log: TaskLog
    printed: Printed
    down_for: float


async def run_row(eng: Engine) -> Outcome:
    scheduler = create_scheduler("faults", base_url=eng.url)
    app_id = scheduler.submit(
        numbered_app("engine-restart", LINES, trap_term=True), {"remove": False}
    )  # read what they printed after
    client = create_async_client(base_url=eng.url)
    log = TaskLog()
    loop = asyncio.get_running_loop()

    async def restart() -> float:
        await asyncio.sleep(FAULT_AT)
        stopped = await loop.run_in_executor(None, eng.stop)
        await asyncio.sleep(DOWN_FOR)
        await loop.run_in_executor(None, eng.start)
        return stopped + DOWN_FOR

    fault = asyncio.create_task(restart())
    try:
        event = await asyncio.wait_for(
            JobFollower(client, app_id, log=log, poll_interval=1.0).run(), 180
        )
        down_for = await fault
    finally:
        fault.cancel()
        await client.close()
    try:
        printed = printed_by(eng.url, app_id)
        state = scheduler.describe(app_id)
        assert state is not None and is_terminal(state.state), state
    finally:
        scheduler.close()
    return Outcome(event, log, printed, down_for)


ROW = {
    "id": "docker-engine-restart",
    "fault": f"Docker engine stopped (SIGTERM) {FAULT_AT:.0f} s into the job, started again "
    f"{DOWN_FOR:.0f} s after it exited",
    "expected": "the engine stops the containers: FAILED naming the replicas, "
    "InfrastructureError, no hang, every line they printed",
    "final": AppState.FAILED,
}


async def test_docker_engine_restart_row(engine: Engine, reliability: Any) -> None:
    row = ROW
    started = time.monotonic()
    out = await run_row(engine)
    seen = compare(out.log.lines, out.printed)
    event = out.event
    result = row_result(
        row_id=row["id"],
        fault=row["fault"],
        expected=row["expected"],
        event=event,
        printed=out.printed,
        seen=seen,
        seconds=time.monotonic() - started,
        notes="an engine of the row's own (private socket and data root)",
    )
    error = failure_error(event)
    result["outcome"] = f"{result['observed']}: {type(error).__name__}"
    try:
        assert event.kind == EventKind.FINISHED and event.state == row["final"], (
            result,
            out.log.lines[-30:],
        )
        assert "worker/0" in event.message and "worker/1" in event.message, event.message
        assert type(error) is InfrastructureError, (error, event.replicas)
        assert error.root_cause is not None and error.root_cause.reason == "EngineStopped"
        assert "Docker engine stopped" in str(error), error
        assert seen.lost == 0, result
        assert seen.repeated == 0, result
        assert not [ln for ln in out.log.lines if "could not be read" in ln], out.log.lines
        assert out.printed.running == 0, result
        result["ok"] = True
    finally:
        reliability(result)


async def test_a_replica_stopped_from_outside_while_the_engine_is_up_is_not_blamed_on_it(
    engine: Engine,
) -> None:
    """``docker stop`` of one replica, the engine up all along: the follow ends FAILED with
    the base class (the engine does not say who stopped it), not ``InfrastructureError``."""
    import docker

    scheduler = create_scheduler("faults", base_url=engine.url)
    app_id = scheduler.submit(numbered_app("outside-stop", LINES, trap_term=True), {})
    client = create_async_client(base_url=engine.url)

    async def stop_one() -> None:
        await asyncio.sleep(2)
        raw = docker.DockerClient(base_url=engine.url, timeout=30)
        try:
            found = raw.containers.list(filters={"label": [f"torchx.pytorch.org/app-id={app_id}"]})
            worker = next(c for c in found if c.name.endswith("worker-0"))
            await asyncio.to_thread(worker.stop, timeout=10)
        finally:
            raw.close()

    stop = asyncio.create_task(stop_one())
    try:
        event = await asyncio.wait_for(
            JobFollower(client, app_id, log=TaskLog(), poll_interval=1.0).run(), 120
        )
        await stop
        assert client.engine.outages == ()  # type: ignore[attr-defined]  # probed: it answered
    finally:
        stop.cancel()
        await client.close()
        scheduler.close()
    assert event.kind == EventKind.FINISHED and event.state == AppState.FAILED, event
    error = failure_error(event)
    assert type(error) is AppFailedError, (error, event.replicas)
    stopped = [r for r in event.replicas if r.key == "worker/0"]
    assert stopped and (stopped[0].exit_code, stopped[0].reason) == (143, "Terminated"), stopped
