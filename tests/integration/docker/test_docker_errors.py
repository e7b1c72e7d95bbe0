"""What goes wrong at submission is one clear error, and nothing is left behind."""

from __future__ import annotations

import secrets
import threading
from typing import Any

import pytest

from torchx_provider.errors import SubmissionError
from torchx_provider.schedulers.docker.engine import DockerEngine
from torchx_provider.specs.api import AppDef, Resource, Role

pytestmark = pytest.mark.docker

IMAGE = "torchx-provider/busybox:latest"


def app_with(resource: Resource | None = None, image: str = IMAGE) -> AppDef:
    role = Role("big", image=image, entrypoint="true", num_replicas=2)
    if resource is not None:
        role.resource = resource
    return AppDef("errors", [Role("ok", image=IMAGE, entrypoint="true"), role])


def submit_fails(scheduler: Any, app: AppDef, cfg: dict[str, Any]) -> tuple[str, SubmissionError]:
    info = scheduler.submit_dryrun(app, cfg)
    with pytest.raises(SubmissionError) as err:
        scheduler.schedule(info)
    return info.request.app_id, err.value


def test_more_cpus_than_the_engine_has(
    scheduler: Any, cfg: dict[str, Any], docker_engine: Any, containers_of: Any
) -> None:
    ncpu = docker_engine.info()["NCPU"]
    app_id, err = submit_fails(scheduler, app_with(Resource(cpu=32 * ncpu, gpu=0, memMB=64)), cfg)
    assert f"role 'big' asks for {32 * ncpu} CPUs" in str(err)
    assert f"has only {ncpu}" in str(err)
    assert containers_of(app_id) == []


def test_more_memory_than_the_engine_has(
    scheduler: Any, cfg: dict[str, Any], containers_of: Any
) -> None:
    app_id, err = submit_fails(scheduler, app_with(Resource(cpu=1, gpu=0, memMB=2**30)), cfg)
    assert "role 'big' asks for" in str(err) and "MiB of memory" in str(err)
    assert containers_of(app_id) == []


def test_gpus_without_a_gpu_runtime_roll_back(
    scheduler: Any, cfg: dict[str, Any], docker_engine: Any, containers_of: Any
) -> None:
    if "nvidia" in docker_engine.info().get("Runtimes", {}):
        pytest.skip("this engine has a GPU runtime")
    app_id, err = submit_fails(scheduler, app_with(Resource(cpu=1, gpu=1, memMB=64)), cfg)
    assert "replica big/" in str(err) and "resource.gpu=0" in str(err)
    assert containers_of(app_id) == []  # the replicas that did start were removed


def test_an_image_that_is_neither_local_nor_pullable(
    scheduler: Any, cfg: dict[str, Any], containers_of: Any
) -> None:
    image = "localhost:1/torchx-provider/missing:1"  # nothing listens there: fails at once
    app_id, err = submit_fails(scheduler, app_with(image=image), cfg)
    assert f"image {image!r} of role 'big' is not on the Docker engine" in str(err)
    assert "docker load" in str(err)
    assert containers_of(app_id) == []


def test_racing_submits_share_one_network(docker_engine: Any) -> None:
    name = f"torchx-test-race-{secrets.token_hex(3)}"
    engines = [DockerEngine() for _ in range(4)]
    ids: list[str] = []
    barrier = threading.Barrier(len(engines))

    def ensure(engine: DockerEngine) -> None:
        engine.client.ping()
        barrier.wait()
        ids.append(engine.ensure_network(name))

    threads = [threading.Thread(target=ensure, args=(e,)) for e in engines]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert len(ids) == len(engines) and len(set(ids)) == 1
        existing = [n for n in docker_engine.networks.list(names=[name]) if n.name == name]
        assert [n.id for n in existing] == ids[:1]
        assert engines[0].ensure_network(name) == ids[0]  # idempotent
    finally:
        for n in docker_engine.networks.list(names=[name]):
            if n.name == name:
                n.remove()
        for e in engines:
            e.close()
