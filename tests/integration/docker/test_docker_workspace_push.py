"""Workspace images pushed to a real registry (the local one of ``local_registry``)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

from torchx_provider.schedulers.workspace import build_workspace_image, split_image
from torchx_provider.specs.api import AppDef, AppState, Role

pytestmark = pytest.mark.docker

IMAGE = "torchx-provider/busybox:latest"
REPO = "torchx-tests"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "hello.txt").write_text("pushed from the workspace\n")
    return tmp_path


def test_a_workspace_image_is_pushed_and_run(
    scheduler: Any,
    cfg: dict[str, Any],
    wait_for: Any,
    containers_of: Any,
    docker_engine: Any,
    local_registry: Any,
    workspace: Path,
) -> None:
    import docker.errors

    role = Role(
        "ws",
        image=IMAGE,
        entrypoint="sh",
        args=["-c", "cat /hello.txt"],
        num_replicas=2,
        workspace=str(workspace),
    )
    image_repo = local_registry.repo(REPO)
    app_id = scheduler.submit(
        AppDef("pushed", [role]), {**cfg, "image_repo": image_repo, "remove": False}
    )
    pushed = ""
    try:
        desc = wait_for(scheduler, app_id)
        assert desc.state == AppState.SUCCEEDED, desc

        # Every replica ran the pushed name, which the registry now has.
        images = {c.attrs["Config"]["Image"] for c in containers_of(app_id)}
        assert len(images) == 1, images
        pushed = images.pop()
        repo, tag = split_image(pushed)
        assert repo == image_repo
        assert tag in local_registry.tags(REPO)
        assert docker_engine.images.get(pushed).id == f"sha256:{tag}"

        # The workspace file is in that image.
        for replica in (0, 1):
            lines = list(scheduler.log_iter(app_id, "ws", replica))
            assert lines == ["pushed from the workspace\n"], (replica, lines)
    finally:
        scheduler.delete(app_id)  # the containers and the image built for the app

    # What the registry holds is the image that ran: pulled back, it has the same id.
    with pytest.raises(docker.errors.ImageNotFound):
        docker_engine.images.get(pushed)
    repo, tag = split_image(pushed)
    try:
        pulled = docker_engine.images.pull(repo, tag=tag)
        assert pulled.id == f"sha256:{tag}"
    finally:
        docker_engine.images.remove(pushed, force=True)
        local_registry.delete(REPO, tag)
    assert tag not in local_registry.tags(REPO)


def test_build_workspace_image_returns_the_pushed_name(
    docker_engine: Any, local_registry: Any, workspace: Path
) -> None:
    image_repo = local_registry.repo(f"{REPO}/direct")
    name = build_workspace_image(
        str(workspace), IMAGE, image_repo=image_repo, client=docker_engine, quiet=True
    )
    repo, tag = split_image(name)
    try:
        assert repo == image_repo
        assert tag in local_registry.tags(f"{REPO}/direct")
        # Pushing the same content again is idempotent: same name, still one tag.
        again = build_workspace_image(
            str(workspace), IMAGE, image_repo=image_repo, client=docker_engine, quiet=True
        )
        assert again == name
    finally:
        docker_engine.images.remove(f"sha256:{tag}", force=True)
        local_registry.delete(f"{REPO}/direct", tag)


def test_a_pulled_image_is_told_in_a_few_lines(
    scheduler: Any,
    cfg: dict[str, Any],
    wait_for: Any,
    docker_engine: Any,
    local_registry: Any,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    """An image missing from the engine is pulled from the registry at submission; the task
    log tells the pull in a few lines: the engine's own (``Pulling from ...``, ``Digest``,
    ``Status``) and one that ends it with its time, layers and bytes: a layer of 3 MB the
    engine did not have, and the base image's, which it had."""
    import logging
    import uuid

    tag = uuid.uuid4().hex[:12]
    repo = local_registry.repo(REPO)
    image = f"{repo}:{tag}"
    (tmp_path / "blob").write_bytes(os.urandom(3_000_000))
    (tmp_path / "Dockerfile").write_text(f"FROM {IMAGE}\nCOPY blob /blob\n")
    docker_engine.images.build(path=str(tmp_path), tag=image, rm=True)
    try:
        docker_engine.images.push(repo, tag=tag)
        docker_engine.images.remove(image)  # and its own layer with it
        role = Role("pulled", image=image, entrypoint="sh", args=["-c", "wc -c /blob"])
        with caplog.at_level(logging.INFO, logger="torchx_provider.schedulers.workspace"):
            app_id = scheduler.submit(AppDef("pulled", [role]), cfg)
        desc = wait_for(scheduler, app_id)
        assert desc.state == AppState.SUCCEEDED, desc
        said = [r.getMessage() for r in caplog.records if f"pulling {image}" in r.getMessage()]
        assert said[0] == f"pulling {image}: Pulling from {REPO}", said
        assert any(f"Status: Downloaded newer image for {image}" in s for s in said), said
        end = said[-1]
        assert end.startswith(f"pulling {image}: done in "), said
        assert end.endswith(": 2 layers, 1 already there, 3.0 MB"), said
        assert len(said) <= 6, said  # not one line per layer step
    finally:
        with contextlib.suppress(Exception):
            docker_engine.images.remove(image, force=True)
        local_registry.delete(REPO, tag)
