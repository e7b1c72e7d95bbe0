"""Airflow at another version, with other client libraries or on another Python, in a
virtual environment of its own, outside the repository.

The package declares ``apache-airflow>=3.1``, client library ranges and Python versions, and
CI tests what it declares (``scripts/other_versions.sh``): the newest 3.1 and 3.2 patch
releases, 3.3.2 with the lowest client versions (``3.3.2+lowest``) and 3.3.2 on the newest
CPython (``3.3.2+py3.14``; any other, such as ``3.3.2+py3.13``, by hand), built by
``scripts/cpython.sh``. Each gets
``${XDG_CACHE_HOME:-~/.cache}/airflow-provider-torchx/airflow-<version>-venv``, made once with
``python -m venv`` and ``pip install apache-airflow==<version>`` plus this package's
dependencies and dev tools, and reused while it still imports that Airflow on that Python and
was made the way this script makes it now (:data:`RECIPE`, stamped into the environment).
This package itself is installed into it afresh (editable, without dependencies) on every
call, so the environment always tests the checkout it is called from.

An Airflow release older than the main environment's (``AIRFLOW_VERSION`` in
``scripts/env.sh``) is installed as its users install it: with the dependency versions of its
release day. Airflow's constraints files pin exactly those, but cannot be fetched here, so
Airflow and its dependencies are resolved from what PyPI had the day after that release's
upload (``pip install --uploaded-prior-to``); this package's own dependencies and tools are
added afterwards. Today's dependencies break older releases (Airflow 3.2.2's in-process
execution API fails on FastAPI 0.165).

Usage::

    python scripts/airflow_venv.py 3.1.8     # make it when missing; print its interpreter
    python scripts/airflow_venv.py --env-only 3.1.8   # without installing the checkout
    python scripts/airflow_venv.py 3.3.2+lowest       # with the lowest declared clients
    python scripts/airflow_venv.py 3.3.2+py3.14       # on CPython 3.14
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
import urllib.request
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


LOWEST = "lowest"
#: how the environments are made; an environment stamped otherwise is made again
RECIPE = "2: an older Airflow with the dependencies of its release day"
STAMP = "torchx-env-recipe"
PYPI_AIRFLOW = "https://pypi.org/simple/apache-airflow/"


def main_airflow() -> str:
    """The Airflow version of the main environment (``scripts/env.sh``)."""
    text = (REPO / "scripts" / "env.sh").read_text()
    m = re.search(r'AIRFLOW_VERSION="\$\{AIRFLOW_VERSION:-([0-9.]+)\}"', text)
    if not m:
        raise RuntimeError("scripts/env.sh does not set AIRFLOW_VERSION")
    return m.group(1)


def release_cutoff(airflow: str) -> str:
    """The day after ``apache-airflow==airflow`` was uploaded to PyPI (ISO 8601, UTC), read
    from PyPI's JSON simple index (PEP 691/700)."""
    request = urllib.request.Request(
        PYPI_AIRFLOW, headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        files = json.load(answer)["files"]
    names = (f"apache_airflow-{airflow}-", f"apache_airflow-{airflow}.tar.gz")
    times = [f["upload-time"] for f in files if f["filename"].startswith(names)]
    if not times:
        raise RuntimeError(f"PyPI has no upload of apache-airflow {airflow}")
    uploaded = dt.datetime.fromisoformat(min(times).replace("Z", "+00:00"))
    return (uploaded + dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


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


#: prints the checkout this package is installed from (editable) in an environment, if any
_INSTALLED_FROM = """
import importlib.metadata as m, json, urllib.parse, urllib.request
try:
    found = m.distribution("airflow-provider-torchx")
except m.PackageNotFoundError:
    raise SystemExit(0)
url = json.loads(found.read_text("direct_url.json") or "{}").get("url", "")
if url.startswith("file:"):
    print(urllib.request.url2pathname(urllib.parse.urlparse(url).path))
"""


def installed_from(python: Path, env: dict[str, str] | None = None) -> Path | None:
    """The checkout this package is installed from in ``python``'s environment (editable),
    or None."""
    done = subprocess.run(
        [str(python), "-c", _INSTALLED_FROM], capture_output=True, text=True, env=env
    )
    path = done.stdout.strip()
    return Path(path) if done.returncode == 0 and path else None


def existing_python(version: str) -> Path | None:
    python = venv_dir(version) / "bin" / "python"
    if not python.exists():
        return None
    # An install of a clone removed since breaks `import airflow` there (Airflow loads its
    # providers' entry points on import): it goes, the environment (minutes to make) stays;
    # each call installs the calling checkout anyway.
    checkout = installed_from(python)
    if checkout is not None and not checkout.is_dir():
        print(f"{venv_dir(version)}: removing the install of a removed checkout", file=sys.stderr)
        _run(str(python), "-m", "pip", "uninstall", "-y", "-q", "airflow-provider-torchx")
    airflow, _, py = parse(version)
    want_py = f"and sys.version.startswith({py + '.'!r})" if py else ""
    check = f"import airflow, sys; sys.exit(not (airflow.__version__ == {airflow!r} {want_py}))"
    ok = subprocess.run([str(python), "-c", check], capture_output=True).returncode == 0
    stamp = venv_dir(version) / STAMP
    made_so = stamp.is_file() and stamp.read_text().strip() == RECIPE
    return python if ok and made_so else None


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
        airflow = parse(version)[0]
        if airflow != main_airflow():
            cutoff = release_cutoff(airflow)
            print(f"  Airflow {airflow} with its dependencies as of {cutoff}", file=sys.stderr)
            _pip(python, "--uploaded-prior-to", cutoff, f"apache-airflow=={airflow}")
        _pip(python, *requirements(version))
        (env_dir / STAMP).write_text(RECIPE + "\n")
        if existing_python(version) is None:
            raise RuntimeError(f"{env_dir} does not import apache-airflow {version}")
    if install_checkout:
        install_this_checkout(python)
    return python


def install_this_checkout(python: Path) -> None:
    """This checkout, editable, in ``python``'s environment: once per checkout and
    ``pyproject.toml``. Two entries of one CI run share an environment (the lowest clients'
    two lanes): a second install while the first one's tests run would take the package
    away under them for a moment, and two at once would race."""
    env_dir = python.parent.parent
    want = f"{REPO}\n{hashlib.sha256((REPO / 'pyproject.toml').read_bytes()).hexdigest()}\n"
    stamp = env_dir / "torchx-checkout-installed"
    with open(env_dir / "torchx-install.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text() == want and installed_from(python) == REPO:
            return
        _pip(python, "--no-deps", "-e", str(REPO))
        stamp.write_text(want)


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
