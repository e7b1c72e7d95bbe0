"""The training image of the real-training tiers, built (or found up to date) by
tests/images/build_torch_image.sh: Debian's torch 1.13 (CPU) and the example training script,
from Debian packages only, imported into the Docker engine. Shared by the Docker tier and the
Kubernetes tier (whose real node imports it from the engine)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

TORCH_IMAGE = "torchx-provider/torch:latest"
BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "images" / "build_torch_image.sh"
#: where the build script puts the example training script in the image
TRAIN_SCRIPT = "/opt/torchx-provider/train_ddp.py"
#: a cold build (mmdebstrap of python3-torch) takes minutes; a warm one seconds
BUILD_TIMEOUT = 1800


def build_torch_image(skip_or_fail: Callable[[str], NoReturn]) -> str:
    """:data:`TORCH_IMAGE`, built if it is missing or out of date; else skip (fail in CI)."""
    try:
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        skip_or_fail(f"building {TORCH_IMAGE} took more than {BUILD_TIMEOUT} s")
    if result.returncode != 0:
        skip_or_fail(f"cannot build {TORCH_IMAGE}: {result.stderr.strip()[-800:]}")
    return TORCH_IMAGE
