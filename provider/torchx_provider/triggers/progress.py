"""Each replica's progress, read from the log lines a follow forwards anyway. Pure.

A follow already reads every selected replica's log as it is written, so it knows, at no
request cost, when each replica last wrote a line, what that line said, and -- where a line
matches the app's ``progress_pattern`` (:class:`ProgressPattern`) -- its last step.
:class:`ProgressBook` keeps that per replica: the figures (:class:`ReplicaProgress`) go to
the checkpoint, the event and the ``replicas`` XCom; when each replica last *moved*, on the
follow's own clock, is kept beside them and never stored (a follow resumed elsewhere has
another clock, and knows nothing of the time it was not running).

A replica *moves* when it writes a line; once one of its lines has matched the pattern,
only a new step counts (a replica that prints warnings while its step is stuck does not
move). The decisions made of it are in :mod:`~torchx_provider.triggers.watch`.

>>> pattern = ProgressPattern.parse(r"step=(\\d+)")
>>> book = ProgressBook(pattern)
>>> book.lines("t/0", ["rank=0 step=1 loss=0.5", "saving"], "2024-05-01T10:00:00Z", now=5.0)
>>> book.lines("t/0", ["warning: slow"], "2024-05-01T10:00:03Z", now=8.0)
>>> book.moved["t/0"], book.replicas["t/0"].step, book.replicas["t/0"].last_line
(5.0, 1, 'warning: slow')
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torchx_provider.errors import InvalidOptionError

#: How much of a replica's last line progress keeps (the task log has the whole line).
LAST_LINE_LIMIT = 200

#: the name of the group that holds the step, when the pattern has several
STEP_GROUP = "step"


@dataclass(frozen=True)
class ProgressPattern:
    """A regular expression that finds a replica's step in a log line: the group named
    ``step`` if it has one, else its first group, read as a number.

    >>> ProgressPattern.parse(r"step (\\d+)").step("epoch 2 step 120 loss 0.4")
    120
    >>> ProgressPattern.parse(r"it=(?P<step>[\\d.]+)").step("it=2.5") , ProgressPattern.parse(
    ...     r"step (\\d+)").step("no step here")
    (2.5, None)
    """

    source: str
    regex: re.Pattern[str]

    @classmethod
    def parse(cls, value: object, name: str = "progress_pattern") -> ProgressPattern:
        """Check and compile; one :class:`InvalidOptionError` naming ``name`` otherwise."""
        if isinstance(value, re.Pattern):
            value = value.pattern
        if not isinstance(value, str) or not value:
            raise InvalidOptionError(
                f"{name} must be a regular expression with one group that captures the "
                rf"step, e.g. {name}=r'step (\d+)', got {value!r}",
                name,
            )
        try:
            regex = re.compile(value)
        except re.error as e:
            raise InvalidOptionError(
                f"{name}={value!r} is not a regular expression: {e}", name
            ) from e
        if regex.groups < 1:
            raise InvalidOptionError(
                f"{name}={value!r} has no group: put the step in parentheses, e.g. "
                r"r'step (\d+)'",
                name,
            )
        return cls(value, regex)

    def step(self, text: str) -> int | float | None:
        """The step ``text`` reports, ``None`` when it reports none."""
        m = self.regex.search(text)
        if m is None:
            return None
        group = m.group(STEP_GROUP) if STEP_GROUP in self.regex.groupindex else m.group(1)
        return _number(group)


def _number(text: str | None) -> int | float | None:
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class ReplicaProgress:
    """What one replica's log showed last: its last line (bounded) and when the backend
    recorded it (ISO 8601 UTC, ``""``: not told), and its last step and when that line was
    recorded (``None``/``""``: none matched the pattern)."""

    last_line: str = ""
    last_line_at: str = ""
    step: int | float | None = None
    step_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "last_line": self.last_line,
            "last_line_at": self.last_line_at,
            "step": self.step,
            "step_at": self.step_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplicaProgress:
        step = data.get("step")
        return cls(
            last_line=str(data.get("last_line") or ""),
            last_line_at=str(data.get("last_line_at") or ""),
            step=step if isinstance(step, (int, float)) and not isinstance(step, bool) else None,
            step_at=str(data.get("step_at") or ""),
        )

    def describe(self) -> str:
        """``last step 40; last line at 10:00:05Z: 'step 40 loss 0.3'`` (for the task log).

        >>> ReplicaProgress("step 4", "2024-05-01T10:00:05.5Z", 4, "").describe()
        "last step 4; last line at 2024-05-01T10:00:05.5Z: 'step 4'"
        >>> ReplicaProgress().describe()
        'no line yet'
        """
        parts = [] if self.step is None else [f"last step {self.step}"]
        if self.last_line or self.last_line_at:
            at = f" at {self.last_line_at}" if self.last_line_at else ""
            parts.append(f"last line{at}: {self.last_line!r}")
        return "; ".join(parts) or "no line yet"


def progress_from_json(data: Mapping[str, Any] | None) -> dict[str, ReplicaProgress]:
    """``replica key -> progress`` from its JSON form (a checkpoint, an event); what is not
    a mapping is skipped."""
    return {
        str(k): ReplicaProgress.from_dict(v)
        for k, v in (data or {}).items()
        if isinstance(v, Mapping)
    }


def progress_to_json(progress: Mapping[str, ReplicaProgress]) -> dict[str, dict[str, Any]]:
    return {k: p.to_dict() for k, p in sorted(progress.items())}


class ProgressBook:
    """The progress of one follow's replicas (see the module docstring).

    :param pattern: finds the step in a line; ``None``: only lines count.
    :param stored: the progress a previous follow stored (kept; it has not moved here yet).
    """

    def __init__(
        self,
        pattern: ProgressPattern | None = None,
        stored: Mapping[str, ReplicaProgress] | None = None,
    ) -> None:
        self.pattern = pattern
        #: replica key -> what its log showed last
        self.replicas: dict[str, ReplicaProgress] = dict(stored or {})
        #: replica key -> when (the follow's clock) it last moved in this follow
        self.moved: dict[str, float] = {}

    def lines(self, key: str, texts: Sequence[str], at: str, now: float) -> None:
        """Replica ``key`` wrote ``texts`` (in order, not empty; the last one recorded by
        the backend at ``at``, ISO 8601 or ``""``), seen at ``now``."""
        if not texts:
            return
        was = self.replicas.get(key) or ReplicaProgress()
        step, step_at = was.step, was.step_at
        found = self._last_step(texts)
        moved = found is not None and found != was.step
        if found is not None:
            step, step_at = found, at
        elif was.step is None:
            moved = True  # a replica that reports no step moves with each line
        last = texts[-1]
        if len(last) > LAST_LINE_LIMIT:
            last = last[: LAST_LINE_LIMIT - 1] + "…"
        self.replicas[key] = ReplicaProgress(last, at, step, step_at)
        if moved:
            self.moved[key] = now

    def _last_step(self, texts: Sequence[str]) -> int | float | None:
        if self.pattern is None:
            return None
        step = self.pattern.step
        for text in reversed(texts):
            found = step(text)
            if found is not None:
                return found
        return None

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """The figures as JSON (a new dict each call: checkpoints compare them)."""
        return progress_to_json(self.replicas)

    def of(self, keys: Iterable[str]) -> dict[str, ReplicaProgress]:
        return {k: self.replicas[k] for k in keys if k in self.replicas}
