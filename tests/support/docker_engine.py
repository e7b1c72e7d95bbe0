"""The Docker engine of the integration tests, with the local test image on it.

Shared by the Docker tests, the Kubernetes workspace tests and the Docker fault rows: one
place decides what "a usable engine" means and builds the image when it
is missing (no registry is needed: see tests/images/build_busybox_image.sh).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

#: The busybox image built locally with ``docker import``.
IMAGE = "torchx-provider/busybox:latest"
BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "images" / "build_busybox_image.sh"


def open_docker_engine(skip_or_fail: Callable[[str], NoReturn]) -> Any:
    """A ``docker.DockerClient`` that answers and has :data:`IMAGE`; else skip (fail in CI)."""
    try:
        import docker
    except ImportError:
        skip_or_fail(
            "the docker SDK is not installed (pip install 'airflow-provider-torchx[docker]')"
        )
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as e:  # any failure means there is no usable engine
        skip_or_fail(f"no Docker engine answers: {e}")
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=300, check=False
        )
        if result.returncode != 0:
            skip_or_fail(f"cannot build the test image {IMAGE}: {result.stderr.strip()[-500:]}")
    return client
