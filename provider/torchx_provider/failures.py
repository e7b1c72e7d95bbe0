"""Why an app failed, and which replica failed first. Pure: data in, data out.

Each backend decides the :class:`FailureKind` of a failed replica from what it reports, with
one commented table (``CONTAINER_FAILURE`` in :mod:`~torchx_provider.schedulers.docker.state`,
the ``*_FAILURE`` tables of :mod:`~torchx_provider.schedulers.kube.status`); a case no table
knows has no kind. This module holds what is the same for every backend:

* :func:`root_cause`: of several failed replicas, the one that failed first -- by finish
  time (whole seconds: what Kubernetes reports), then by the evidence in its log tail
  (torchrun's "Root Cause (first observed failure)" block, a Python traceback), then a
  non-signal exit over a SIGKILL/SIGTERM (137/143), then the order the app describes them;
* :func:`python_error`: the error line of the last Python traceback in a tail;
* :func:`error_class`: the exception class of a kind (an unknown kind is the base class).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchx_provider.errors import AppFailedError
    from torchx_provider.triggers.events import ReplicaRow

#: How long a replica's message may be where it is shown (task log, XCom, exception).
MESSAGE_LIMIT = 1000

#: Exit codes of a process killed by SIGKILL (137) or SIGTERM (143): most often sent to it
#: by something else (the OOM killer, a stop, torchrun tearing down its workers), so the
#: weakest evidence that this replica is where the failure began.
SIGNAL_EXITS = frozenset({137, 143})


class FailureKind(str, enum.Enum):
    """What ended a replica, as far as its backend tells (each kind is one exception class,
    :func:`error_class`)."""

    #: its own process failed: a non-zero exit, a signal it raised, its memory limit
    USER = "user"
    #: the platform ended it: evicted, preempted, node lost, removed from outside
    INFRASTRUCTURE = "infrastructure"
    #: it could not start as asked: image missing, a Secret missing, entrypoint not found
    CONFIGURATION = "configuration"
    #: stopped from outside the task
    CANCELLED = "cancelled"


def kind_of(value: str | None) -> FailureKind | None:
    """The kind named ``value`` (as stored in an event), ``None`` for none or an unknown one."""
    try:
        return FailureKind(value) if value else None
    except ValueError:
        return None


def error_class(kind: FailureKind | None) -> type[AppFailedError]:
    """The exception a failure of ``kind`` raises; ``None``: the base class.

    >>> error_class(FailureKind.USER).__name__, error_class(None).__name__
    ('UserCodeError', 'AppFailedError')
    """
    from torchx_provider import errors

    classes: dict[FailureKind | None, type[errors.AppFailedError]] = {
        FailureKind.USER: errors.UserCodeError,
        FailureKind.INFRASTRUCTURE: errors.InfrastructureError,
        FailureKind.CONFIGURATION: errors.AppConfigurationError,
        FailureKind.CANCELLED: errors.AppCancelledError,
    }
    return classes.get(kind, errors.AppFailedError)


def bounded(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` stripped and cut to ``limit`` characters, keeping its end (where a
    termination message or a traceback says what went wrong).

    >>> bounded("x" * 10, 6)
    '…xxxxx'
    """
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


# -- evidence in the logs ---------------------------------------------------------------------

_TRACEBACK = "Traceback (most recent call last):"
_ROOT_CAUSE = "Root Cause (first observed failure)"
#: torchrun's root-cause block names the worker's exit code: ``exitcode  : 1 (pid: 42)``;
#: a negative one is a signal
_EXITCODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
#: the last line of a traceback: ``ValueError: bad``, ``torch.OutOfMemoryError: ...``
_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\w*)(?::\s|$)")
#: torchrun's teardown of a replica it was told to stop: not where a failure began
_SIGNAL_EXCEPTION = "SignalException"


def _strip(line: str) -> str:
    """A tail line without the ``[rank]:`` prefix torchrun's ``--tee`` may add."""
    return re.sub(r"^\[(?:default)?\d+\]:", "", line).rstrip()


def python_error(tail: Sequence[str]) -> str:
    """The error line of the last Python traceback in ``tail`` (``""``: none).

    >>> python_error(["Traceback (most recent call last):", '  File "t.py", line 1',
    ...               "ValueError: bad input", "done"])
    'ValueError: bad input'
    """
    lines = [_strip(line) for line in tail]
    start = max((i for i, line in enumerate(lines) if _TRACEBACK in line), default=-1)
    if start < 0:
        return ""
    for line in lines[start + 1 :]:
        if _ERROR_LINE.match(line):
            return line
    return ""


def evidence(tail: Sequence[str]) -> int:
    """How strongly ``tail`` shows the failure began in this replica: 2 for torchrun's
    root-cause block with a non-signal exit code, 1 for a Python traceback that is not a
    teardown by signal, 0 for neither."""
    lines = [_strip(line) for line in tail]
    block = max((i for i, line in enumerate(lines) if _ROOT_CAUSE in line), default=-1)
    if block >= 0:
        for line in lines[block + 1 :]:
            m = _EXITCODE.match(line)
            if m:
                if int(m.group(1)) >= 0:
                    return 2
                break
    error = python_error(tail)
    return 1 if error and _SIGNAL_EXCEPTION not in error else 0


def _second(value: str | datetime | None) -> float:
    """A finish time in whole seconds (unknown: after every known one)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            value = None
    return float(int(value.timestamp())) if isinstance(value, datetime) else float("inf")


def root_cause(
    failed: Sequence[ReplicaRow], tails: Mapping[str, Sequence[str]]
) -> ReplicaRow | None:
    """The replica among ``failed`` (rows of failed replicas, in the app's order) whose
    failure came first (module doc); ``None`` when there is none. ``tails``: source key
    (``role/replica``) -> the last lines of its log."""
    if not failed:
        return None

    def order(indexed: tuple[int, ReplicaRow]) -> tuple[float, int, int, int]:
        i, row = indexed
        return (
            _second(row.finished_at or None),
            -evidence(tails.get(row.key, ())),
            1 if row.exit_code in SIGNAL_EXITS else 0,
            i,
        )

    return min(enumerate(failed), key=order)[1]


def with_log_errors(
    rows: Sequence[ReplicaRow], tails: Mapping[str, Sequence[str]]
) -> tuple[ReplicaRow, ...]:
    """``rows`` where each failed replica the backend gave no message gets the Python error
    its log tail ends with (bounded), so the summary, the table and the XCom show the error
    itself, not just an exit code. A backend's own message (a termination message) stays."""
    from dataclasses import replace

    from torchx_provider.specs.api import AppState

    out = []
    for row in rows:
        if row.state == AppState.FAILED and not row.message:
            error = python_error(tails.get(row.key, ()))
            if error:
                row = replace(row, message=bounded(error))
        out.append(row)
    return tuple(out)


def stamp_unseen_ends(
    before: Sequence[ReplicaRow], after: Sequence[ReplicaRow], now: datetime
) -> tuple[ReplicaRow, ...]:
    """``after`` where a failed replica whose backend tells no finish time (a Docker
    container removed from outside) gets the time it was first seen failed: ``now`` when
    this describe is the first to show it, else the stamp it got then. Without it, such a
    replica would sort after every failure it caused (:func:`root_cause`)."""
    from dataclasses import replace

    from torchx_provider.specs.api import AppState

    stamped = {r.key: r.finished_at for r in before if r.state == AppState.FAILED}
    out = []
    for row in after:
        if row.state == AppState.FAILED and not row.finished_at:
            row = replace(row, finished_at=stamped.get(row.key) or now.isoformat())
        out.append(row)
    return tuple(out)
