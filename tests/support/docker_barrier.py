"""A barrier the replicas of a Docker test wait at, released by the test (a file in a folder
they mount): they end together, or after the test has begun to follow them, however long their
submission took on a busy machine."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from torchx_provider.specs.api import BindMount


@dataclasses.dataclass(frozen=True)
class Barrier:
    """A folder the replicas of a test mount read-only at ``/barrier``: ``wait_then(cmd)`` is
    a shell command that waits until :meth:`release` has been called, then runs ``cmd``."""

    folder: Path

    @property
    def mount(self) -> BindMount:
        return BindMount(str(self.folder), "/barrier", read_only=True)

    @staticmethod
    def wait_then(cmd: str = "true") -> str:
        return f"until [ -e /barrier/go ]; do sleep 0.1; done; {cmd}"

    def release(self) -> None:
        (self.folder / "go").touch()
