"""Airflow at another version, with other client libraries or on another Python, in a
virtual environment of its own, outside the repository.

The package declares ``apache-airflow>=3.1``, client library ranges and Python versions, and
CI tests what it declares (``scripts/other_versions.sh``): the newest 3.1 and 3.2 patch
releases, 3.3.2 with the lowest client versions (``3.3.2+lowest``) and 3.3.2 on another
CPython (``3.3.2+py3.13``, built by ``scripts/cpython.sh``). Each gets
``${XDG_CACHE_HOME:-~/.cache}/airflow-provider-torchx/airflow-<version>-venv``, made once with
``python -m venv`` and ``pip install apache-airflow==<version>`` plus this package's
dependencies and dev tools, and reused while it still imports that Airflow on that Python.
This package itself is installed into it afresh (editable, without dependencies) on every
call, so the environment always tests the checkout it is called from.

Usage::

    python scripts/airflow_venv.py 3.1.8     # make it when missing; print its interpreter
    python scripts/airflow_venv.py --env-only 3.1.8   # without installing the checkout
    python scripts/airflow_venv.py 3.3.2+lowest       # with the lowest declared clients
    python scripts/airflow_venv.py 3.3.2+py3.13       # on CPython 3.13
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]


LOWEST = "lowest"


def parse(version: str) -> tuple[str, bool, str | None]:
    """``AIRFLOW[+lowest][+pyX.Y]`` -> (Airflow version, lowest clients?, Python or None).

    >>> parse("3.3.2+lowest")
    ('3.3.2', True, None)
    >>> parse("3.3.2+py3.13")
    ('3.3.2', False, '3.13')
    """
    airflow, *tags = version.split("+")
    python = None
    for tag in tags:
        if re.fullmatch(r"py3\.[0-9]+", tag):
            python = tag[2:]
        elif tag != LOWEST:
            raise ValueError(f"{version!r}: unknown tag {tag!r} (known: +lowest, +py3.N)")
    return airflow, LOWEST in tags, python


def venv_dir(version: str) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "airflow-provider-torchx" / f"airflow-{version}-venv"


def lowest_pins(reqs: list[str]) -> list[str]:
    """``name>=X,<Y`` -> ``name==X`` (padded to three parts: the lowest release allowed).

    >>> lowest_pins(["kubernetes>=29,<37", "docker>=7,<8"])
    ['kubernetes==29.0.0', 'docker==7.0.0']
    """
    out = []
    for req in reqs:
        m = re.match(r"^([A-Za-z0-9_.-]+)>=([0-9.]+)", req)
        if not m:
            raise ValueError(f"{req!r} has no lower bound")
        parts = [*m.group(2).split("."), "0", "0"][:3]
        out.append(f"{m.group(1)}=={'.'.join(parts)}")
    return out


def requirements(version: str) -> list[str]:
    """Airflow at ``version`` and what ``.[dev]`` needs, read from pyproject.toml (the package
    itself excluded: it is installed editable afterwards). ``X.Y.Z+lowest``: Airflow X.Y.Z
    with the lowest client library versions the package declares."""
    airflow, lowest, _ = parse(version)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    reqs = [r for r in project["dependencies"] if not r.startswith("apache-airflow")]
    clients = extras["kubernetes"] + extras["docker"]
    reqs += lowest_pins(clients) if lowest else clients
    dev = [r for r in extras["dev"] if not r.startswith("airflow-provider-torchx")]
    return [f"apache-airflow=={airflow}", *reqs, *dev]


def existing_python(version: str) -> Path | None:
    python = venv_dir(version) / "bin" / "python"
    if not python.exists():
        return None
    airflow, _, py = parse(version)
    want_py = f"and sys.version.startswith({py + '.'!r})" if py else ""
    check = f"import airflow, sys; sys.exit(not (airflow.__version__ == {airflow!r} {want_py}))"
    ok = subprocess.run([str(python), "-c", check], capture_output=True).returncode == 0
    return python if ok else None


def _run(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{tail}")
    return done.stdout


def _pip(python: Path, *args: str) -> None:
    _run(str(python), "-m", "pip", "install", "-q", *args)


def airflow_python(version: str, install_checkout: bool = True) -> Path:
    """The interpreter of Airflow ``version``'s environment with this checkout installed
    (``install_checkout=False``: the environment only, e.g. while another pip builds it).

    Raises:
        RuntimeError: pip failed (the last lines of its output say why).
    """
    python = existing_python(version)
    if python is None:
        env_dir = venv_dir(version)
        print(f"creating {env_dir} ({requirements(version)[0]}, ...)", file=sys.stderr)
        base_python = parse(version)[2]
        if base_python is None:
            venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
        else:
            interpreter = _run("bash", str(REPO / "scripts" / "cpython.sh"), base_python)
            _run(interpreter.strip(), "-m", "venv", "--clear", str(env_dir))
        python = env_dir / "bin" / "python"
        _pip(python, "--upgrade", "pip")
        _pip(python, *requirements(version))
        if existing_python(version) is None:
            raise RuntimeError(f"{env_dir} does not import apache-airflow {version}")
    if install_checkout:
        _pip(python, "--no-deps", "-e", str(REPO))
    return python


if __name__ == "__main__":
    args = sys.argv[1:]
    env_only = "--env-only" in args
    args = [a for a in args if a != "--env-only"]
    if len(args) != 1:
        print("usage: python scripts/airflow_venv.py [--env-only] AIRFLOW_VERSION", file=sys.stderr)
        sys.exit(2)
    try:
        print(airflow_python(args[0], install_checkout=not env_only))
    except (RuntimeError, ValueError) as e:
        print(e, file=sys.stderr)
        sys.exit(1)
