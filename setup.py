"""The wheel's build step that setuptools' declarative configuration cannot say: the
"TorchX app" view's bundle, built with npm from ui/ into the package
(``torchx_provider/plugins/static/app-view.js``) before the package's files are collected.

A bundle newer than every source of ui/ is kept as it is; otherwise ``npm ci`` (when ui/
has no node_modules yet) and ``npm run build`` make it, and a build without npm fails
saying so. Nothing is built when the wheel is installed: the bundle ships in the wheel.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
UI = ROOT / "ui"
BUNDLE = ROOT / "provider" / "torchx_provider" / "plugins" / "static" / "app-view.js"
SOURCES = ("src", "package.json", "package-lock.json", "vite.config.ts", "tsconfig.json")


def newest_source() -> float:
    """The modification time of the newest source of the view (0: no sources)."""
    times = [0.0]
    for name in SOURCES:
        path = UI / name
        files = path.rglob("*") if path.is_dir() else [path]
        times.extend(f.stat().st_mtime for f in files if f.is_file())
    return max(times)


def build_view() -> None:
    """Build the view's bundle unless it is newer than its sources."""
    if not (UI / "package.json").is_file():
        if BUNDLE.is_file():
            return
        raise SystemExit("the view's sources (ui/) and its bundle are both missing")
    if BUNDLE.is_file() and BUNDLE.stat().st_mtime >= newest_source():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit(
            "building the wheel needs npm (Node.js 20 or later) to build the TorchX app "
            "view's bundle from ui/"
        )
    if not (UI / "node_modules").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=UI, check=True)
    subprocess.run([npm, "run", "build"], cwd=UI, check=True)
    if not BUNDLE.is_file():
        raise SystemExit(f"npm run build made no {BUNDLE.name}")


class BuildPyWithView(build_py):
    """``build_py``, after the view's bundle is built."""

    def run(self) -> None:
        build_view()
        super().run()


setup(cmdclass={"build_py": BuildPyWithView})
