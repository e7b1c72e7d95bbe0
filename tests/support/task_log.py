"""Stand-ins for the trigger's logger that tests and benchmarks give a follow: one keeps
every line in order; one keeps nothing but counts numbered lines (for long logs)."""

from __future__ import annotations

import asyncio
import time
from typing import Any


def first_at(lines: list[str], at: list[float], text: str) -> float:
    """When the first of ``lines`` holding ``text`` was written (``at`` is each line's time)."""
    return min(t for t, line in zip(at, lines, strict=True) if text in line)


def last_at(lines: list[str], at: list[float], text: str) -> float:
    """When the last of ``lines`` holding ``text`` was written."""
    return max(t for t, line in zip(at, lines, strict=True) if text in line)


class TaskLog:
    """Collects what a follow writes to the task log."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        #: when each line came (``time.monotonic()``), for a timeline of a follow
        self.at: list[float] = []

    def info(self, msg: str, *args: Any) -> None:
        self.lines.append(msg % args if args else msg)
        self.at.append(time.monotonic())

    warning = info
    error = info

    @property
    def text(self) -> str:
        """The whole task log, a line each (what a failed check prints, or searches)."""
        return "\n".join(self.lines)

    def of(self, key: str) -> list[str]:
        """The lines forwarded for replica ``key`` (``role/replica``), without their prefix
        (not those the failure summary repeats)."""
        prefix = f"[{key}] "
        end = next((i for i, ln in enumerate(self.lines) if ln.startswith("::group::")), None)
        return [ln[len(prefix) :] for ln in self.lines[:end] if ln.startswith(prefix)]

    def replica_lines(self) -> list[str]:
        """Every replica line, with its ``[role/replica]`` prefix."""
        return [ln for ln in self.lines if ln.startswith("[")]

    def first(self, text: str) -> float:
        """When the first line holding ``text`` came."""
        return first_at(self.lines, self.at, text)

    def last(self, text: str) -> float:
        """When the last line holding ``text`` came."""
        return last_at(self.lines, self.at, text)

    def own(self, since: float) -> list[str]:
        """The follow's own lines (not the replicas'), each after its second from ``since``."""
        return [
            f"+{at - since:.0f}s {ln}"
            for ln, at in zip(self.lines, self.at, strict=True)
            if not ln.startswith("[")
        ]


class SequenceLog:
    """Counts the lines of replica ``key`` that start with a 10-digit sequence number:
    lines lost (numbers skipped) and repeated (numbers seen before); keeps only the other
    lines (the follow's own). :attr:`done` is set once ``total`` lines have arrived."""

    def __init__(self, key: str, total: int | None = None) -> None:
        self.prefix = f"[{key}] "
        self.total = total
        self.next = self.lost = self.repeated = 0
        self.other: list[str] = []
        self.done = asyncio.Event()

    def info(self, msg: str, *args: Any) -> None:
        text = msg % args if args else msg
        if not text.startswith(self.prefix):
            self.other.append(text)
            return
        start = len(self.prefix)
        seq = int(text[start : start + 10])
        if seq < self.next:
            self.repeated += 1
        else:
            self.lost += seq - self.next
            self.next = seq + 1
        if self.total is not None and self.next >= self.total:
            self.done.set()

    warning = info
    error = info


def rss_mb() -> float:
    """This process's resident memory, in MiB (Linux)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")
