"""The stand-in for the trigger's logger that tests give a follow: every line, in order."""

from __future__ import annotations

from typing import Any


class TaskLog:
    """Collects what a follow writes to the task log."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, msg: str, *args: Any) -> None:
        self.lines.append(msg % args if args else msg)

    warning = info
    error = info

    def of(self, key: str) -> list[str]:
        """The lines forwarded for replica ``key`` (``role/replica``), without their prefix
        (not those the failure summary repeats)."""
        prefix = f"[{key}] "
        end = next((i for i, ln in enumerate(self.lines) if ln.startswith("::group::")), None)
        return [ln[len(prefix) :] for ln in self.lines[:end] if ln.startswith(prefix)]

    def replica_lines(self) -> list[str]:
        """Every replica line, with its ``[role/replica]`` prefix."""
        return [ln for ln in self.lines if ln.startswith("[")]
