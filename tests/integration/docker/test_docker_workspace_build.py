"""Workspaces: a local directory layered onto the role's image, built offline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from torchx_provider.errors import SubmissionError
from torchx_provider.schedulers.workspace import build_workspace_image, pushed_image_name
from torchx_provider.specs.api import AppDef, AppState, Role

pytestmark = pytest.mark.docker

IMAGE = "torchx-provider/busybox:latest"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "hello.txt").write_text("from the workspace\n")
    (tmp_path / "secret.txt").write_text("keep out\n")
    (tmp_path / ".dockerignore").write_text("secret.txt\n")
    return tmp_path


def test_a_role_runs_its_workspace(
    scheduler: Any, cfg: dict[str, Any], wait_for: Any, docker_engine: Any, workspace: Path
) -> None:
    role = Role(
        "ws",
        image=IMAGE,
        entrypoint="sh",
        args=["-c", "cat /hello.txt && test ! -e /secret.txt"],
        workspace=str(workspace),
    )
    app_id = scheduler.submit(AppDef("workspace", [role]), {**cfg, "remove": False})
    desc = wait_for(scheduler, app_id)
    image_id = ""
    try:
        assert desc.state == AppState.SUCCEEDED, desc
        assert list(scheduler.log_iter(app_id, "ws", 0)) == ["from the workspace\n"]
        assert desc.roles[0].workspace == str(workspace)  # the role as submitted
        (container,) = docker_engine.containers.list(
            all=True, filters={"label": f"torchx.pytorch.org/app-id={app_id}"}
        )
        image_id = container.attrs["Image"]
        assert image_id != docker_engine.images.get(IMAGE).id  # a patched image ran
    finally:
        scheduler.delete(app_id)
    # delete also removed the image built for the app
    import docker.errors

    assert image_id
    with pytest.raises(docker.errors.ImageNotFound):
        docker_engine.images.get(image_id)


def test_own_dockerfile_and_push_to_an_unreachable_repo(
    docker_engine: Any, workspace: Path
) -> None:
    (workspace / "Dockerfile.torchx").write_text(
        "ARG IMAGE\nFROM $IMAGE\nCOPY hello.txt /opt/hello.txt\nENV FROM_DOCKERFILE=1\n"
    )
    image_id = build_workspace_image(str(workspace), IMAGE, client=docker_engine, quiet=True)
    try:
        assert image_id.startswith("sha256:")
        assert "FROM_DOCKERFILE=1" in docker_engine.images.get(image_id).attrs["Config"]["Env"]

        # No registry is reachable here: the build and tag work, the push fails clearly.
        repo = "localhost:1/torchx-provider/workspace"
        with pytest.raises(SubmissionError, match=r"image_repo='localhost:1/.*docker login"):
            build_workspace_image(
                str(workspace), IMAGE, image_repo=repo, client=docker_engine, quiet=True
            )
        tagged = docker_engine.images.get(pushed_image_name(repo, image_id))
        assert tagged.id == image_id  # same content, same image
    finally:
        docker_engine.images.remove(image_id, force=True)
