"""A local container registry for the tests that push workspace images.

The session fixture ``local_registry`` gives a :class:`LocalRegistry`: the CNCF distribution
registry run by ``tests/registry/registry.sh`` on 127.0.0.1 (plain HTTP, no login; the
Docker engine allows insecure registries on 127.0.0.0/8 without configuration, provided the
engine runs on this machine).

Where it comes from:

1. a registry already answering at ``registry.sh url`` is used as it is;
2. otherwise ``registry.sh up`` starts it, building the binary first only when ``CI`` or
   ``TORCHX_REGISTRY_BUILD=1`` is set (building takes a few minutes; run
   ``bash tests/registry/registry.sh build`` once instead). A registry started here is
   stopped at the end of the session unless ``TORCHX_REGISTRY_KEEP=1``.

When neither works the tests are skipped with the reason, or fail when ``CI`` is set.

Conftests use it with::

    from registry_fixture import local_registry  # noqa: F401
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

REGISTRY_SCRIPT = Path(__file__).resolve().parents[1] / "registry" / "registry.sh"

#: Manifest media types asked for when looking up a digest to delete.
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)


@dataclass(frozen=True)
class LocalRegistry:
    """A registry on the loopback address, read through its HTTP API (``/v2/``)."""

    #: ``host:port``, the prefix of image names pushed there.
    address: str

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def repo(self, name: str) -> str:
        """The ``image_repo`` value for repository ``name``, e.g. ``127.0.0.1:15000/name``."""
        return f"{self.address}/{name}"

    def _request(
        self, method: str, path: str, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(self.url + path, method=method, headers=headers or {})
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()

    def answers(self) -> bool:
        """Whether the API root answers 200."""
        try:
            return self._request("GET", "/v2/")[0] == 200
        except (OSError, urllib.error.URLError):
            return False

    def tags(self, name: str) -> list[str]:
        """The tags of repository ``name`` (``/v2/<name>/tags/list``); [] when it is unknown."""
        try:
            _, _, body = self._request("GET", f"/v2/{name}/tags/list")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return []
            raise
        return list(json.loads(body).get("tags") or [])

    def digest(self, name: str, tag: str) -> str:
        """The manifest digest of ``name:tag`` (``HEAD /v2/<name>/manifests/<tag>``)."""
        _, headers, _ = self._request(
            "HEAD", f"/v2/{name}/manifests/{tag}", {"Accept": MANIFEST_TYPES}
        )
        return str(headers["Docker-Content-Digest"])

    def delete(self, name: str, tag: str) -> None:
        """Delete the manifest ``name:tag`` points at (its blobs stay until garbage collection);
        a missing one is fine."""
        try:
            digest = self.digest(name, tag)
            self._request("DELETE", f"/v2/{name}/manifests/{digest}")
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise


def _script(
    command: str, *, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REGISTRY_SCRIPT), command],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.fixture(scope="session")
def local_registry(skip_or_fail: Callable[[str], NoReturn]) -> Iterator[LocalRegistry]:
    """The session's local registry (see the module docstring)."""
    if not REGISTRY_SCRIPT.is_file():
        skip_or_fail(f"{REGISTRY_SCRIPT} is missing")
    url = _script("url", timeout=30)
    if url.returncode != 0 or not url.stdout.strip():
        skip_or_fail(f"'registry.sh url' failed: {url.stderr.strip()[-500:]}")
    registry = LocalRegistry(url.stdout.strip())
    if registry.answers():
        yield registry
        return

    build = bool(os.environ.get("CI")) or os.environ.get("TORCHX_REGISTRY_BUILD") == "1"
    try:
        up = _script(
            "up",
            timeout=1800 if build else 120,
            env=None if build else {"TORCHX_REGISTRY_NO_BUILD": "1"},
        )
    except subprocess.TimeoutExpired as e:
        skip_or_fail(f"'registry.sh up' did not finish in {e.timeout:.0f} s")
    if up.returncode != 0:
        tail = "\n".join(up.stderr.splitlines()[-15:])
        hint = (
            ""
            if build
            else " (run 'bash tests/registry/registry.sh build' first, or set "
            "TORCHX_REGISTRY_BUILD=1)"
        )
        skip_or_fail(f"cannot start the local registry: 'registry.sh up' failed{hint}:\n{tail}")
    try:
        if not registry.answers():
            skip_or_fail(f"the local registry started but {registry.url}/v2/ does not answer")
        yield registry
    finally:
        if os.environ.get("TORCHX_REGISTRY_KEEP") != "1":
            _script("down", timeout=60)
