"""Sixty replicas of one app ending together on a real engine: by themselves within a
second, or by a cancel. Tens of containers of one network ending at once have wedged Debian's
Docker 20.10 (its network controller) and lost its count of the network's endpoints; the
engine must answer throughout, and every replica end as it did."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from docker_barrier import Barrier
from torchx_provider.schedulers.docker.scheduler import DockerScheduler
from torchx_provider.schedulers.labels import LABEL_APP_ID
from torchx_provider.specs.api import AppDef, AppState, Role
from torchx_provider.timestamps import parse_timestamp

pytestmark = [pytest.mark.docker, pytest.mark.slow]

IMAGE = "torchx-provider/busybox:latest"
REPLICAS = 60
#: Seconds an engine request may take while the replicas end (an answering engine takes
#: well under one; a wedged one never answers).
ANSWER_WITHIN = 15.0


class EngineProbe:
    """Asks the engine for its networks and its info every half second, on a client of its
    own, and keeps the slowest answer and every request it did not answer."""

    def __init__(self) -> None:
        self.client = docker.from_env(timeout=int(ANSWER_WITHIN) + 15)
        self.slowest = 0.0
        self.unanswered: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            for what, call in (("networks", self.client.api.networks), ("info", self.client.info)):
                started = time.monotonic()
                try:
                    call()
                except Exception as e:  # every failure is a finding
                    self.unanswered.append(f"{what}: {e}")
                self.slowest = max(self.slowest, time.monotonic() - started)

    def __enter__(self) -> EngineProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.client.close()

    def check(self) -> None:
        assert self.unanswered == [], self.unanswered[:5]
        assert self.slowest < ANSWER_WITHIN, f"the engine took {self.slowest:.1f} s to answer"


@pytest.fixture
def probe() -> Iterator[EngineProbe]:
    with EngineProbe() as p:
        yield p


def running(docker_engine: Any, app_id: str) -> int:
    filters = {"label": f"{LABEL_APP_ID}={app_id}", "status": "running"}
    return len(docker_engine.api.containers(filters=filters))


def submit_when_all_run(
    scheduler: DockerScheduler, cfg: dict[str, Any], docker_engine: Any, role: Role
) -> str:
    app_id = scheduler.schedule(scheduler.submit_dryrun(AppDef("many", [role]), cfg))
    deadline = time.monotonic() + 300
    while running(docker_engine, app_id) < REPLICAS:
        assert time.monotonic() < deadline, f"{running(docker_engine, app_id)} replicas run"
        time.sleep(0.5)
    return app_id


def replica_states(desc: Any) -> set[AppState]:
    return {r.state for rs in desc.roles_statuses for r in rs.replicas}


def test_sixty_replicas_ending_within_a_second_leave_the_engine_answering(
    scheduler: DockerScheduler,
    cfg: dict[str, Any],
    docker_engine: Any,
    barrier: Barrier,
    wait_for: Any,
    containers_of: Any,
    probe: EngineProbe,
) -> None:
    """Every replica waits for one file, then exits 0: they end within a second of each
    other; the app succeeds, its containers are removed, and the engine never stops
    answering."""
    role = Role(
        "worker",
        image=IMAGE,
        entrypoint="sh",
        args=["-c", barrier.wait_then()],
        num_replicas=REPLICAS,
        mounts=[barrier.mount],
    )
    app_id = submit_when_all_run(scheduler, cfg, docker_engine, role)
    barrier.release()
    desc = wait_for(scheduler, app_id, timeout=120)
    assert desc.state == AppState.SUCCEEDED, desc
    assert replica_states(desc) == {AppState.SUCCEEDED}
    finished = [
        parse_timestamp(c.attrs["State"]["FinishedAt"]).timestamp() for c in containers_of(app_id)
    ]
    assert len(finished) == REPLICAS
    assert max(finished) - min(finished) < 1.5, "the replicas did not end together"
    scheduler.delete(app_id)
    assert containers_of(app_id) == []
    probe.check()


def test_a_cancel_of_sixty_running_replicas_ends_each_and_leaves_the_engine_answering(
    scheduler: DockerScheduler,
    cfg: dict[str, Any],
    docker_engine: Any,
    wait_for: Any,
    containers_of: Any,
    probe: EngineProbe,
) -> None:
    """A cancel marks the sixty replicas, then stops them a window at a time: each one is
    cancelled within a few seconds (they end on SIGTERM), none is left running or removed,
    and the engine never stops answering."""
    role = Role("worker", image=IMAGE, entrypoint="sleep", args=["600"], num_replicas=REPLICAS)
    app_id = submit_when_all_run(scheduler, cfg, docker_engine, role)
    started = time.monotonic()
    scheduler.cancel(app_id)
    took = time.monotonic() - started
    desc = wait_for(scheduler, app_id, timeout=60)
    assert desc.state == AppState.CANCELLED, desc
    assert replica_states(desc) == {AppState.CANCELLED}
    assert len(containers_of(app_id)) == REPLICAS
    assert took < 60, f"the cancel took {took:.0f} s"
    scheduler.delete(app_id)
    assert containers_of(app_id) == []
    probe.check()
