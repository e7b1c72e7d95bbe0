"""What a user installs: the sdist and the wheel built from a copy of this repository.

``python -m build`` builds the sdist, then the wheel from that sdist, in an isolated
environment with the declared ``[build-system]`` requirements: a file missing from the sdist,
or a build requirement too old for the metadata, fails here before it fails a user.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import HeaderParser
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from torchx_provider.optional import EXTRAS
from torchx_provider.version import __version__

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "provider" / "torchx_provider"
HOME = "https://github.com/airflow-provider-torchx/airflow-provider-torchx"
DIST = f"airflow_provider_torchx-{__version__}"
#: Not part of the build: version control, virtualenvs, caches and earlier build output.
SKIPPED = shutil.ignore_patterns(
    *(".git", ".venv", ".airflow", ".ci-logs", "build", "dist"),
    *("*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "node_modules"),
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(wheel, sdist), built once for the module."""
    tmp = tmp_path_factory.mktemp("packaging")
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=SKIPPED)
    out = tmp / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        pytest.fail(f"python -m build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return out / f"{DIST}-py3-none-any.whl", out / f"{DIST}.tar.gz"


def wheel_files(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def wheel_text(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        return z.read(name).decode()


def metadata(wheel: Path) -> Message:
    return HeaderParser().parsestr(wheel_text(wheel, f"{DIST}.dist-info/METADATA"))


def requirements(meta: Message) -> list[Requirement]:
    return [Requirement(r) for r in meta.get_all("Requires-Dist") or []]


pytestmark = [pytest.mark.slow, pytest.mark.checkout]


def test_license_is_an_spdx_expression_with_its_file(built: tuple[Path, Path]) -> None:
    wheel, _ = built
    meta = metadata(wheel)
    assert meta["Metadata-Version"] in {"2.4", "2.5"}
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["License"] is None  # the deprecated free-text field
    assert not [c for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]


def test_project_urls(built: tuple[Path, Path]) -> None:
    urls = dict(u.split(", ", 1) for u in metadata(built[0]).get_all("Project-URL") or [])
    assert urls == {
        "Documentation": f"{HOME}#readme",
        "Source": HOME,
        "Changelog": f"{HOME}/blob/main/CHANGELOG.md",
        "Issues": f"{HOME}/issues",
    }
    assert (ROOT / "CHANGELOG.md").is_file()


def test_classifiers(built: tuple[Path, Path]) -> None:
    meta = metadata(built[0])
    classifiers = set(meta.get_all("Classifier") or [])
    assert "Development Status :: 4 - Beta" in classifiers
    assert "Framework :: Apache Airflow :: Provider" in classifiers
    assert "Typing :: Typed" in classifiers
    pythons = sorted(
        int(c.rsplit(".", 1)[1]) for c in classifiers if re.fullmatch(r".*Python :: 3\.\d+", c)
    )
    assert pythons == [11, 12, 13, 14]
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["Description-Content-Type"] == "text/markdown"


def test_each_client_library_is_bounded_under_its_extra(built: tuple[Path, Path]) -> None:
    by_name = {r.name: r for r in requirements(metadata(built[0])) if r.marker}
    for package, extra in EXTRAS.items():
        req = by_name[package]
        assert req.marker is not None and req.marker.evaluate({"extra": extra}), req
        operators = {s.operator for s in req.specifier}
        assert operators == {">=", "<"}, f"{req}: needs a lower and an upper bound"
        # The versions the tests run against are inside what the package declares.
        assert req.specifier.contains(version(package)), (req, version(package))
    assert str(by_name["kubernetes"].specifier) == "<37,>=36.0.1"
    assert str(by_name["kubernetes_asyncio"].specifier) == "<37,>=32"
    assert str(by_name["docker"].specifier) == "<8,>=7.1"


def test_the_provider_entry_point(built: tuple[Path, Path]) -> None:
    entry_points = wheel_text(built[0], f"{DIST}.dist-info/entry_points.txt")
    assert "[apache_airflow_provider]" in entry_points
    assert "provider_info = torchx_provider.provider_info:get_provider_info" in entry_points


def test_the_app_view_is_built_into_the_wheel_and_registered(built: tuple[Path, Path]) -> None:
    """The view's bundle is built from ui/ when the wheel is built (the sdist holds its
    sources, not the bundle), ships in the wheel, and its plugin has its entry point."""
    wheel, sdist = built
    bundle = wheel_text(wheel, "torchx_provider/plugins/static/app-view.js")
    assert bundle.startswith("(function(") and "AirflowPlugin" in bundle[:2000]
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    assert f"{DIST}/ui/package-lock.json" in names and f"{DIST}/ui/src/main.tsx" in names
    assert not [n for n in names if n.endswith("app-view.js") or "node_modules" in n]
    entry_points = wheel_text(wheel, f"{DIST}.dist-info/entry_points.txt")
    assert "[airflow.plugins]" in entry_points
    assert "torchx_app_view = torchx_provider.plugins.app_view:TorchXAppViewPlugin" in (
        entry_points
    )


def test_wheel_holds_the_package_and_license_only(built: tuple[Path, Path]) -> None:
    files = wheel_files(built[0])
    assert f"{DIST}.dist-info/licenses/LICENSE" in files
    assert "torchx_provider/py.typed" in files
    assert {f.split("/")[0] for f in files} == {"torchx_provider", f"{DIST}.dist-info"}
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]
    # Every source module ships (a subpackage without __init__.py would be left out).
    sources = {
        p.relative_to(PACKAGE.parent).as_posix()
        for p in PACKAGE.rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert sources <= set(files), sorted(sources - set(files))
    license_text = wheel_text(built[0], f"{DIST}.dist-info/licenses/LICENSE")
    assert license_text == (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text


def test_sdist_holds_license_and_build_files(built: tuple[Path, Path]) -> None:
    with tarfile.open(built[1]) as tar:
        names = {n.removeprefix(f"{DIST}/") for n in tar.getnames()}
        pkg_info = tar.extractfile(f"{DIST}/PKG-INFO")
        assert pkg_info is not None
        meta = HeaderParser().parsestr(pkg_info.read().decode())
    assert {"LICENSE", "README.md", "pyproject.toml", "setup.cfg"} <= names
    assert "provider/torchx_provider/py.typed" in names
    assert meta["License-Expression"] == "Apache-2.0"
    assert not [n for n in names if n.startswith("tests/")]
