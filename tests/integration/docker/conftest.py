"""A real Docker engine for the ``local_docker`` tests.

The session fixture ``docker_engine`` checks that an engine answers
(``docker.from_env().ping()``) and that the test image ``torchx-provider/busybox:latest``
exists, building it with ``tests/images/build_busybox_image.sh`` (``docker import`` of the
static busybox; nothing is pulled) when it does not. When either is impossible the tests are
skipped with the reason, or fail when ``CI`` is set.

Every app runs on a network of its own for the session (``network`` fixture), removed at the
end together with any container the tests left behind.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from docker_barrier import Barrier
from docker_engine import open_docker_engine
from registry_fixture import local_registry  # noqa: F401
from torchx_provider.schedulers.docker.scheduler import DockerScheduler
from torchx_provider.schedulers.labels import LABEL_APP_ID
from torchx_provider.specs.api import AppState, is_terminal


@pytest.fixture(scope="session")
def docker_engine(skip_or_fail: Callable[[str], NoReturn]) -> Iterator[Any]:
    """A ``docker.DockerClient`` for the engine, with the test image present."""
    client = open_docker_engine(skip_or_fail)
    yield client
    client.close()


@pytest.fixture(scope="session")
def network(docker_engine: Any) -> Iterator[str]:
    """A network name for this session's apps; it and every app left on it go at the end."""
    name = f"torchx-test-{secrets.token_hex(3)}"
    yield name
    for net in docker_engine.networks.list(names=[name]):
        if net.name == name:
            remove_network(docker_engine, net)


def remove_network(docker_engine: Any, net: Any) -> None:
    """Remove ``net`` and every container on it. The engine may still hold the endpoint of
    a container it has just removed ("has active endpoints"): disconnect what is left and
    try again, for up to 60 s (the endpoints of a 40-container app were seen to take more
    than 15 s to go on a busy engine)."""
    import docker

    deadline = time.monotonic() + 60
    while True:
        for container in docker_engine.containers.list(all=True, filters={"network": net.id}):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
        try:
            net.reload()
        except docker.errors.NotFound:
            return
        for endpoint in net.attrs.get("Containers") or {}:
            with contextlib.suppress(docker.errors.APIError):
                net.disconnect(endpoint, force=True)
        try:
            net.remove()
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as e:
            if time.monotonic() > deadline:
                if engine_held_endpoint(docker_engine, net, e):
                    return
                raise
            time.sleep(0.5)


def engine_held_endpoint(docker_engine: Any, net: Any, error: Exception) -> bool:
    """Whether ``net`` is refused removal only for an endpoint the engine still counts with
    no container on the network, and none in its list of endpoints: the engine's own
    leftover (seen on Docker 20.10 after a run of several hundred containers on a loaded
    machine), not a container of this session's. Said, and the empty network left; a
    container still on it is not excused."""
    import docker

    left = docker_engine.containers.list(all=True, filters={"network": net.id})
    try:
        net.reload()
    except docker.errors.NotFound:
        return True  # gone meanwhile
    if left or net.attrs.get("Containers") or "active endpoints" not in str(error):
        return False
    print(
        f"network {net.name} left in place: the engine still counts an endpoint on it "
        f"although no container is on it ({error})"
    )
    return True


@pytest.fixture
def scheduler(docker_engine: Any, network: str) -> Iterator[DockerScheduler]:
    """A ``local_docker`` scheduler; the apps it submitted are deleted after the test."""
    sched = DockerScheduler("test")
    submitted: list[str] = []
    schedule = sched.schedule

    def tracking_schedule(info: Any) -> str:
        submitted.append(info.request.app_id)
        return schedule(info)

    sched.schedule = tracking_schedule  # type: ignore[method-assign]
    yield sched
    for app_id in submitted:
        sched.delete(app_id)
    sched.close()


@pytest.fixture
def cfg(network: str) -> dict[str, Any]:
    """Run options putting the app on the session's network."""
    return {"network": network}


def _wait_for(
    scheduler: DockerScheduler,
    app_id: str,
    until: Callable[[AppState], bool] = is_terminal,
    timeout: float = 60,
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        desc = scheduler.describe(app_id)
        assert desc is not None, f"app {app_id} vanished"
        if until(desc.state):
            return desc
        if time.monotonic() > deadline:
            pytest.fail(f"app {app_id} still {desc.state} after {timeout} s: {desc}")
        time.sleep(0.1)


@pytest.fixture
def barrier(tmp_path: Path) -> Barrier:
    """A :class:`Barrier` that releases the replicas of a test together."""
    folder = tmp_path / "barrier"
    folder.mkdir()
    folder.chmod(0o777)
    return Barrier(folder)


@pytest.fixture
def wait_for() -> Callable[..., Any]:
    """``wait_for(scheduler, app_id, until=is_terminal, timeout=60)`` polls ``describe``
    until the app's state satisfies ``until`` and returns the description, or fails."""
    return _wait_for


@pytest.fixture
def containers_of(docker_engine: Any) -> Callable[[str], list[Any]]:
    """``containers_of(app_id)``: the app's containers, straight from the engine."""

    def find(app_id: str) -> list[Any]:
        return docker_engine.containers.list(
            all=True, filters={"label": f"{LABEL_APP_ID}={app_id}"}
        )

    return find
