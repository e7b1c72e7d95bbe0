"""The event a follow ends with, and the per-replica rows it carries
(:class:`~torchx_provider.replicas.ReplicaRow`, also importable from here). Pure data.

One :class:`JobEvent` is built in one place (:mod:`~torchx_provider.triggers.follow`) and
read in one place (the operator's ``execute_complete``); in between it travels as the
``TriggerEvent`` payload produced by :meth:`JobEvent.to_payload`:

>>> event = JobEvent(
...     kind=EventKind.FINISHED, app_id="echo-x1", state=AppState.SUCCEEDED, message="",
...     replicas=(ReplicaRow("echo", 0, AppState.SUCCEEDED, exit_code=0),),
... )
>>> JobEvent.from_payload(event.to_payload()) == event
True
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from torchx_provider.failures import bounded
from torchx_provider.replicas import ReplicaRow
from torchx_provider.schedulers.api import DescribeAppResponse
from torchx_provider.specs.api import NONE, AppState

_N = TypeVar("_N", int, float)

#: bump when the payload changes shape; from_payload reads older versions it knows
PAYLOAD_VERSION = 1
#: the payload carries the app's timeline up to this size (bytes of JSON); a larger one
#: stays in the checkpoint, where the task reads it
PAYLOAD_TIMELINE_LIMIT = 32 * 1024


class EventKind(str, enum.Enum):
    """Why a follow ended."""

    #: the app reached a terminal state (SUCCEEDED, FAILED or CANCELLED)
    FINISHED = "finished"
    #: the follow hit an error it cannot recover from (the app may still be running)
    ERROR = "error"
    #: the task's deadline (``execution_timeout`` / ``follow_timeout``) passed; the app was
    #: cancelled unless ``on_kill_action="keep"``
    TIMEOUT = "timeout"


class ErrorKind(str, enum.Enum):
    """What kind of error ended an :attr:`EventKind.ERROR` (or :attr:`EventKind.TIMEOUT`)
    follow (the exception class the operator raises); absent: the backend was lost
    (unreachable, the app unknown). A timeout carries the kind of its cause."""

    #: refused as configured: credentials, a permission, a certificate
    #: (:class:`~torchx_provider.errors.AppConfigurationError`)
    CONFIGURATION = "configuration"
    #: (with :attr:`EventKind.TIMEOUT`) the app waited to run longer than ``queue_timeout``
    #: (:class:`~torchx_provider.errors.QueueTimeoutError`)
    QUEUE = "queue"
    #: (with :attr:`EventKind.TIMEOUT`) the task's deadline (``execution_timeout`` /
    #: ``follow_timeout``) passed (:class:`~torchx_provider.errors.AppTimeoutError`)
    DEADLINE = "deadline"
    #: a replica cannot start: it waits for a reason waiting does not heal (an image that
    #: can never be pulled), or it waited past ``START_GRACE`` for one Kubernetes retries
    #: without end (an image it cannot pull, a Secret missing); the app was cancelled. The
    #: class is that replica's kind (:attr:`JobEvent.root_cause` names it), else
    #: :class:`~torchx_provider.errors.AppConfigurationError`
    START = "start"
    #: (with :attr:`EventKind.TIMEOUT`) no replica of the running app moved for
    #: ``stall_timeout``; the app was cancelled unless ``on_kill_action="keep"``
    #: (:class:`~torchx_provider.errors.AppStalledError`); :attr:`JobEvent.stalled` names
    #: the replicas that stopped first
    STALL = "stall"


def replica_rows(resp: DescribeAppResponse) -> tuple[ReplicaRow, ...]:
    """The replicas of a describe response, ordered by role (as described) and replica id."""
    rows: list[ReplicaRow] = []
    for role_status in resp.roles_statuses:
        for r in sorted(role_status.replicas, key=lambda r: r.id):
            msg = "" if r.structured_error_msg in (NONE, None) else str(r.structured_error_msg)
            rows.append(
                ReplicaRow(
                    role=role_status.role,
                    replica_id=r.id,
                    state=r.state,
                    exit_code=r.exit_code,
                    hostname=r.hostname or "",
                    message=bounded(msg),
                    reason=r.reason,
                    failure=r.failure or "",
                    finished_at=r.finished_at.isoformat() if r.finished_at else "",
                    restarts=r.num_restarts,
                    cannot_start=r.cannot_start,
                    started_at=r.started_at.isoformat() if r.started_at else "",
                )
            )
    return tuple(rows)


def status_line(rows: Iterable[ReplicaRow]) -> str:
    """A compact one-line summary, e.g. ``trainer[0 RUNNING, 1 PENDING] ps[0 SUCCEEDED(0)]``.

    >>> status_line([ReplicaRow("a", 0, AppState.RUNNING), ReplicaRow("a", 1, AppState.FAILED, 3)])
    'a[0 RUNNING, 1 FAILED(3)]'
    """
    by_role: dict[str, list[str]] = {}
    for row in rows:
        code = (
            f"({row.exit_code})"
            if row.exit_code is not None and row.state != AppState.RUNNING
            else ""
        )
        by_role.setdefault(row.role, []).append(f"{row.replica_id} {row.state.name}{code}")
    return (
        " ".join(f"{role}[{', '.join(items)}]" for role, items in by_role.items())
        or "(no replicas yet)"
    )


def replica_table(rows: Iterable[ReplicaRow]) -> str:
    """A fixed-width table of the replicas (for failure messages)."""
    header = ("role", "replica", "state", "exit code", "reason", "restarts", "host", "message")
    body = [
        (
            r.role,
            str(r.replica_id),
            r.state.name,
            "" if r.exit_code is None else str(r.exit_code),
            r.reason,
            "" if r.restarts is None else str(r.restarts),
            r.hostname,
            r.message.replace("\n", " ")[:200],
        )
        for r in rows
    ]
    if not body:
        return "(the backend reported no replicas)"
    widths = [max(len(row[i]) for row in (header, *body)) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, *body)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


@dataclass(frozen=True)
class JobEvent:
    """What a follow of one app ended with.

    Args:
        kind: :class:`EventKind`.
        app_id: the app followed.
        state: its last known state (``UNKNOWN`` if it was never described).
        message: the backend's message, or the error for :attr:`EventKind.ERROR`.
        replicas: the last per-replica rows.
        log_cursors: ``role/replica`` -> :meth:`LogCursor.to_dict` after the last line forwarded.
        ui_url: the job's URL from the backend, if it has one.
        error: for :attr:`EventKind.ERROR` and :attr:`EventKind.TIMEOUT`, what kind of error
            (:class:`ErrorKind`).
        root_cause: the key (``role/replica``) of the replica that failed first, as the
            follow found it with the logs at hand (:func:`~torchx_provider.failures.
            root_cause`); ``""``: none failed, or an older event.
        root_error: the Python error line of that replica's log, ``""`` if none was seen.
        num_restarts: how often the backend restarted the app inside the cluster (Volcano
            RestartJob, AppWrapper resets), ``-1``: not told.
        queued_seconds: seconds the app waited to run (queued, admitted but not started,
            requeued after a preemption), as the follow saw it; ``None``: not told.
        running_seconds: seconds it ran, likewise.
        preemptions: how often it was preempted or evicted and requeued (Kueue's count, or
            the returns to waiting the follow saw); ``None``: not told.
        progress: ``role/replica`` -> its progress as its log showed it
            (:meth:`~torchx_provider.triggers.progress.ReplicaProgress.to_dict`: last line,
            when, last step); only replicas whose log was read.
        stalled: for :attr:`ErrorKind.STALL`, the replicas that stopped first.
        timeline: what the app and its replicas went through, when
            (:meth:`~torchx_provider.triggers.timeline.Timeline.snapshot`); ``None``: not
            told, or left out of the payload for its size (:data:`PAYLOAD_TIMELINE_LIMIT`:
            the checkpoint holds it then).
    """

    kind: EventKind
    app_id: str
    state: AppState
    message: str = ""
    replicas: tuple[ReplicaRow, ...] = ()
    log_cursors: dict[str, dict[str, Any]] = field(default_factory=dict)
    ui_url: str | None = None
    error: ErrorKind | None = None
    root_cause: str = ""
    root_error: str = ""
    num_restarts: int = -1
    queued_seconds: float | None = None
    running_seconds: float | None = None
    preemptions: int | None = None
    progress: dict[str, dict[str, Any]] = field(default_factory=dict)
    stalled: tuple[str, ...] = ()
    timeline: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def succeeded(self) -> bool:
        return self.kind == EventKind.FINISHED and self.state == AppState.SUCCEEDED

    def to_payload(self) -> dict[str, Any]:
        """JSON-safe form (the ``TriggerEvent`` payload)."""
        payload: dict[str, Any] = {
            "version": PAYLOAD_VERSION,
            "kind": self.kind.value,
            "app_id": self.app_id,
            "state": self.state.name,
            "message": self.message,
            "replicas": [r.to_dict() for r in self.replicas],
            "log_cursors": {k: dict(v) for k, v in self.log_cursors.items()},
            "ui_url": self.ui_url,
        }
        if self.error is not None:  # only when set: readers of version 1 before it had none
            payload["error"] = self.error.value
        if self.num_restarts >= 0:  # likewise
            payload["num_restarts"] = self.num_restarts
        for key in ("queued_seconds", "running_seconds", "preemptions"):  # likewise
            if getattr(self, key) is not None:
                payload[key] = getattr(self, key)
        if self.root_cause:  # likewise
            payload["root_cause"] = self.root_cause
            payload["root_error"] = self.root_error
        if self.progress:  # likewise
            payload["progress"] = {k: dict(v) for k, v in self.progress.items()}
        if self.stalled:  # likewise
            payload["stalled"] = list(self.stalled)
        if self.timeline and _fits(self.timeline, PAYLOAD_TIMELINE_LIMIT):  # likewise
            payload["timeline"] = self.timeline
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> JobEvent:
        """Read a payload of any known version; anything else is a ``ValueError``."""
        version = payload.get("version")
        if version != PAYLOAD_VERSION:
            raise ValueError(f"unknown TorchX job event version {version!r} in {dict(payload)!r}")
        return cls(
            kind=EventKind(payload["kind"]),
            app_id=str(payload["app_id"]),
            state=AppState[str(payload["state"])],
            message=str(payload.get("message") or ""),
            replicas=tuple(ReplicaRow.from_dict(r) for r in payload.get("replicas") or []),
            log_cursors={str(k): dict(v) for k, v in (payload.get("log_cursors") or {}).items()},
            ui_url=payload.get("ui_url"),
            error=ErrorKind(payload["error"]) if payload.get("error") else None,
            root_cause=str(payload.get("root_cause") or ""),
            root_error=str(payload.get("root_error") or ""),
            num_restarts=int(payload.get("num_restarts", -1)),
            queued_seconds=_number(payload.get("queued_seconds"), float),
            running_seconds=_number(payload.get("running_seconds"), float),
            preemptions=_number(payload.get("preemptions"), int),
            progress={
                str(k): dict(v)
                for k, v in (payload.get("progress") or {}).items()
                if isinstance(v, Mapping)
            },
            stalled=tuple(str(k) for k in payload.get("stalled") or ()),
            timeline=payload["timeline"] if isinstance(payload.get("timeline"), Mapping) else None,
        )


def _fits(value: Any, limit: int) -> bool:
    """Whether ``value`` takes at most ``limit`` bytes as JSON."""
    import json

    return len(json.dumps(value, separators=(",", ":"))) <= limit


def _number(value: Any, kind: Callable[[Any], _N]) -> _N | None:
    """``value`` as ``kind`` (``None`` stays ``None``: an older payload)."""
    return None if value is None else kind(value)
