"""TorchX 0.7.0 in a virtual environment of its own, outside the repository.

This package promises that TorchX 0.7.0's DAGs and apps move over unchanged; the benchmarks
time TorchX beside it and a test compares the two surfaces. Both need TorchX itself, which
must never be importable next to this package (the names would clash), so it lives in its
own environment, ``${XDG_CACHE_HOME:-~/.cache}/airflow-provider-torchx/torchx-0.7.0-venv``,
made once with ``python -m venv`` and ``pip install torchx==0.7.0 kubernetes docker`` and
reused while it still imports.

Usage::

    python scripts/torchx_venv.py          # make it when missing; print its interpreter

Other scripts import :func:`torchx_python` (or :func:`existing_torchx_python`, which never
installs) after putting this directory on ``sys.path``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

TORCHX_VERSION = "0.7.0"
#: What the environment holds: TorchX and the client libraries its schedulers import.
REQUIREMENTS = (f"torchx=={TORCHX_VERSION}", "kubernetes", "docker")


def venv_dir() -> Path:
    """Where the environment is (``$XDG_CACHE_HOME``, by default ``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "airflow-provider-torchx" / f"torchx-{TORCHX_VERSION}-venv"


def existing_torchx_python() -> Path | None:
    """The environment's interpreter when it imports TorchX 0.7.0 and its clients, else None."""
    python = venv_dir() / "bin" / "python"
    if not python.exists():
        return None
    check = (
        "import torchx, kubernetes, docker, sys; "
        f"sys.exit(torchx.__version__ != {TORCHX_VERSION!r})"
    )
    ok = subprocess.run([str(python), "-c", check], capture_output=True).returncode == 0
    return python if ok else None


def torchx_python() -> Path:
    """TorchX 0.7.0's interpreter, making the environment first when needed.

    Raises:
        RuntimeError: pip failed (the last lines of its output say why).
    """
    python = existing_torchx_python()
    if python is not None:
        return python
    env_dir = venv_dir()
    print(f"creating {env_dir} (pip install {' '.join(REQUIREMENTS)}) ...", file=sys.stderr)
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *REQUIREMENTS],
        capture_output=True,
        text=True,
    )
    if install.returncode != 0 or existing_torchx_python() is None:
        tail = "\n".join((install.stderr or install.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"pip install {' '.join(REQUIREMENTS)} failed:\n{tail}")
    return python


if __name__ == "__main__":
    try:
        print(torchx_python())
    except RuntimeError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
