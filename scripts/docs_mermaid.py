"""Mermaid for the documentation site, served from the site itself.

The pages draw their diagrams as ``mermaid`` code blocks; the Material theme turns each into
a picture in the reader's browser with Mermaid's JavaScript, which it would otherwise load
from a CDN when the page is opened. The site ships its own copy instead, so the diagrams
render where no CDN can be reached, and the docs build fetches nothing.

``python scripts/docs_mermaid.py`` (run by ``scripts/setup.sh``) fetches the pinned Mermaid
release once with npm, checks the tarball against the pinned integrity, and keeps its
``dist/mermaid.min.js`` in the virtual environment. Used as a MkDocs hook (``hooks:`` in
``mkdocs.yml``), this module adds that file to the site at :data:`SITE_PATH`, and fails the
build, saying how to fetch it, when it is missing.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

#: The Mermaid release the site serves (the 11 line, the one the Material theme expects).
MERMAID_VERSION = "11.17.2"
#: The npm registry's integrity of ``mermaid-{MERMAID_VERSION}.tgz``.
MERMAID_INTEGRITY = (
    "sha512-V6K3C8EBdEsPFZXSKMJe6ppQOENxuHARr9GvHX4hh47lAbhMRD9qf4oE"
    "K7LoaRQxULMa80/qt5gHO73aCleBBg=="
)
#: Where the site serves it; ``extra_javascript`` in ``mkdocs.yml`` names the same path.
SITE_PATH = "assets/javascripts/mermaid.min.js"


def installed_path(prefix: str | Path = sys.prefix) -> Path:
    """Where the fetched ``mermaid.min.js`` is kept in the environment at ``prefix``."""
    return Path(prefix) / "share" / "airflow-provider-torchx" / f"mermaid-{MERMAID_VERSION}.min.js"


def integrity(data: bytes) -> str:
    """npm's ``sha512-...`` integrity string of ``data``."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def fetch(prefix: str | Path = sys.prefix) -> Path:
    """Fetch the pinned release with npm (once) and keep its ``mermaid.min.js`` at
    :func:`installed_path`."""
    dest = installed_path(prefix)
    if dest.is_file() and dest.stat().st_size > 0:
        return dest
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("npm is needed to fetch Mermaid for the docs site (Debian: npm)")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [npm, "pack", f"mermaid@{MERMAID_VERSION}", "--pack-destination", tmp, "--silent"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        tarball = Path(tmp) / f"mermaid-{MERMAID_VERSION}.tgz"
        got = integrity(tarball.read_bytes())
        if got != MERMAID_INTEGRITY:
            raise SystemExit(
                f"mermaid-{MERMAID_VERSION}.tgz has integrity {got}, not the pinned "
                f"{MERMAID_INTEGRITY}: not used"
            )
        with tarfile.open(tarball) as tar:
            member = tar.extractfile("package/dist/mermaid.min.js")
            if member is None:
                raise SystemExit(f"mermaid-{MERMAID_VERSION}.tgz has no dist/mermaid.min.js")
            data = member.read()
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_suffix(".partial")
    partial.write_bytes(data)
    partial.replace(dest)
    return dest


# MkDocs hooks ------------------------------------------------------------------------------


def on_config(config: Any) -> Any:
    from mkdocs.exceptions import PluginError

    if SITE_PATH not in [str(script) for script in config["extra_javascript"]]:
        raise PluginError(f"mkdocs.yml: extra_javascript must list {SITE_PATH}")
    if not installed_path().is_file():
        raise PluginError(
            f"Mermaid {MERMAID_VERSION} for the diagrams is not in this environment "
            f"({installed_path()}): run `{sys.executable} scripts/docs_mermaid.py` "
            "(scripts/setup.sh does)"
        )
    return config


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    files.append(File.generated(config, SITE_PATH, abs_src_path=str(installed_path())))
    return files


if __name__ == "__main__":
    print(fetch())
