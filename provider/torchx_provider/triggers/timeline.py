"""The timeline of a followed app: what the app and each replica went through, when. Pure.

A follow feeds :class:`Timeline` each describe (the app's state, the replicas' rows) and
each notice of the backend (why the app waits, its admission); the timeline keeps, on one
wall clock:

* the app's phases: ``queued``, ``admitted`` (a queue let it in), ``running``, back to
  ``queued`` (preempted, evicted or requeued: a ``preempted`` mark), its end;
* each replica's phases (``queued``, ``running``, ``succeeded``, ``failed``,
  ``cancelled``), a ``preempted`` mark when it went back from running to waiting, a
  ``restart`` mark with the last exit code and reason each time its restart count grew,
  and its end with exit code and reason;
* the reasons the cluster gave while the app waited, newest last;
* the root cause once the follow found it: the replica that failed first and its error.

It is bounded: each text is cut, a replica keeps its first events and its latest ones (the
ones between are counted, ``dropped``), and the whole stays under :data:`SIZE_LIMIT` bytes
as JSON -- a 1,000-replica app with 10 restarts each included.

:meth:`Timeline.snapshot` is the JSON-safe form the checkpoint XCom and the task's result
carry (``version`` :data:`VERSION`); :meth:`Timeline.from_dict` reads one back, so a follow
rebuilt from a checkpoint goes on with the same timeline. Times are seconds from
``origin`` (POSIX seconds, UTC), to a tenth.

>>> t = Timeline(wall=iter([100.0, 105.0, 130.0]).__next__)
>>> from torchx_provider.triggers.events import ReplicaRow
>>> t.observe(AppState.PENDING, [ReplicaRow("w", 0, AppState.PENDING)])
True
>>> t.observe(AppState.RUNNING, [ReplicaRow("w", 0, AppState.RUNNING)])
True
>>> t.observe(AppState.FAILED, [ReplicaRow("w", 0, AppState.FAILED, 3, reason="Error")])
True
>>> snap = t.snapshot()
>>> snap["app"]["events"]
[[0.0, 'queued'], [5.0, 'running'], [30.0, 'failed']]
>>> snap["replicas"][0]["events"]
[[0.0, 'queued'], [5.0, 'running'], [30.0, 'failed', 3, 'Error']]
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torchx_provider.failures import bounded
from torchx_provider.specs.api import AppState, is_terminal
from torchx_provider.timestamps import read_timestamp
from torchx_provider.triggers.events import ReplicaRow

#: bump when the snapshot changes shape
VERSION = 1
#: the snapshot's size as JSON, at most (bytes)
SIZE_LIMIT = 1 << 20
#: a replica's events, at most; fewer for a large app (:data:`TOTAL_EVENTS`)
REPLICA_EVENTS = 64
#: a replica's events, at least, however large the app
MIN_REPLICA_EVENTS = 6
#: the replicas' events, at most, all together
TOTAL_EVENTS = 24_000
#: how many first events of a replica are kept when older ones are dropped
KEPT_FIRST = 2
#: the app's own events, at most
APP_EVENTS = 200
#: the reasons to wait kept (the newest)
WAITS = 20
#: how much of a reason (an exit reason, a wait's words) is kept
REASON_LIMIT = 80
#: how much of a wait's text is kept
WAIT_LIMIT = 300
#: how much of the root cause's error line and message is kept
ERROR_LIMIT = 500

#: the phase a state is in (``UNKNOWN``: none, the phase goes on)
PHASES: dict[AppState, str] = {
    AppState.UNSUBMITTED: "queued",
    AppState.SUBMITTED: "queued",
    AppState.PENDING: "queued",
    AppState.RUNNING: "running",
    AppState.SUCCEEDED: "succeeded",
    AppState.FAILED: "failed",
    AppState.CANCELLED: "cancelled",
}
ENDS = frozenset({"succeeded", "failed", "cancelled"})


def _t(seconds: float) -> float:
    return round(seconds, 1)


@dataclass
class _Replica:
    role: str
    replica_id: int
    events: list[list[Any]] = field(default_factory=list)
    dropped: int = 0
    restarts: int | None = None
    phase: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "id": self.replica_id, "events": self.events}
        if self.dropped:
            out["dropped"] = self.dropped
        if self.restarts:
            out["restarts"] = self.restarts
        return out


class Timeline:
    """The timeline of one app (see the module docstring).

    :param wall: POSIX seconds now (the follow's wall clock).
    :param origin: POSIX seconds of time 0 (default: the first thing taken in).
    """

    def __init__(self, wall: Callable[[], float] = time.time, origin: float | None = None):
        self.wall = wall
        self.origin = origin
        self.app: list[list[Any]] = []
        self.app_dropped = 0
        self.app_phase = ""
        #: ``preempted`` marks the app's lane ever had (dropped ones included)
        self.app_preempted = 0
        self.replicas: dict[str, _Replica] = {}
        self.waits: list[list[Any]] = []
        self.root_cause = ""
        self.root_error = ""
        self.root_message = ""
        self.ui_url = ""
        self.now = 0.0
        #: grows with each change (a checkpoint is due)
        self.version = 0
        self._snapshot: dict[str, Any] | None = None
        self._total = 0
        self._cap_for = -1
        self._cap_is = REPLICA_EVENTS

    # -- taking things in ------------------------------------------------------------------------
    def _clock(self) -> float:
        now = self.wall()
        if self.origin is None:
            self.origin = now
        self.now = _t(now - self.origin)
        return self.now

    def _changed(self) -> bool:
        self.version += 1
        self._snapshot = None
        return True

    def observe(
        self,
        state: AppState | None,
        rows: Iterable[ReplicaRow],
        ui_url: str | None = None,
        preemptions: int | None = None,
    ) -> bool:
        """Take in a describe: the app's ``state`` and its replicas' ``rows``, and how often
        the follow knows the app was preempted or evicted (``preemptions``: the backend's
        count, or the returns to waiting it saw, this describe's included; ``None``: every
        return to waiting is one). Whether the timeline changed.

        A preemption the follow did not see happen (the app was preempted and admitted again
        between two describes, or while no follow ran) is marked when it is learned of: the
        lane's marks are as many as the app's preemptions. A return to waiting whose
        preemption the backend counted first (marked then) is not marked again."""
        rows = tuple(rows)
        now = self._clock()
        changed = False
        for row in rows:
            changed = self._replica(row, now) or changed
        phase = PHASES.get(state) if state is not None else None
        if phase is not None and phase != self.app_phase:
            back = phase == "queued" and self.app_phase == "running"
            if not (phase == "queued" and self.app_phase == "admitted"):
                if back and (preemptions is None or self.app_preempted < preemptions):
                    self._app_event([now, "preempted"])
                at = now
                if phase in ENDS:
                    if self.app_phase != "running":  # it ran unseen: since its replicas did
                        started = self._told(rows, "started_at", now)
                        if started is not None:
                            self._app_event([started, "running"])
                    at = self._told(rows, "finished_at", now, latest=True) or now
                self._app_event([at, phase])
                self.app_phase = phase
                changed = True
        for _ in range((preemptions or 0) - self.app_preempted):
            self._app_event([now, "preempted"])
            changed = True
        if ui_url and ui_url != self.ui_url:
            self.ui_url = ui_url
            changed = True
        for key, text in _waits(rows):
            changed = self.wait(text, key=key) or changed
        self._fit()
        return self._changed() if changed else False

    def _at(self, stamp: str, now: float, floor: float | None) -> float | None:
        """The backend's time ``stamp`` on this timeline, where it fits between ``floor``
        (what was seen before) and ``now``; ``None``: not told."""
        told = read_timestamp(stamp) if stamp else None
        if told is None or self.origin is None:
            return None
        at = min(now, _t(told.timestamp() - self.origin))
        return at if floor is None else max(at, floor)

    def _told(
        self, rows: Iterable[ReplicaRow], which: str, now: float, *, latest: bool = False
    ) -> float | None:
        """The earliest (``latest``: the latest) of the replicas' ``which`` times."""
        floor = self.app[-1][0] if self.app else None
        times = [self._at(getattr(r, which), now, floor) for r in rows]
        known = [t for t in times if t is not None]
        if not known:
            return None
        return max(known) if latest else min(known)

    def waiting_again_since(self) -> float | None:
        """POSIX seconds when the app's present wait began, if it waits again after it ran
        (preempted, evicted, requeued); ``None`` if it never ran or does not wait now. A
        follow resumed then times that wait from its own start, not from the submission.

        >>> t = Timeline(origin=100.0)
        >>> t.app, t.app_phase = [[0.0, "queued"], [5.0, "running"]], "running"
        >>> t.waiting_again_since() is None
        True
        >>> t.app += [[3600.0, "preempted"], [3600.0, "queued"], [3610.0, "admitted"]]
        >>> t.app_phase = "admitted"
        >>> t.waiting_again_since()
        3700.0
        """
        if self.origin is None or self.app_phase not in ("queued", "admitted"):
            return None
        since: float | None = None
        ran = False
        for event in self.app:
            if len(event) < 2:
                continue
            if event[1] == "running":
                ran, since = True, None
            elif ran and since is None and event[1] in ("preempted", "queued"):
                since = float(event[0])
        return None if since is None else self.origin + since

    def submitted(self, at: float) -> bool:
        """The app was submitted at ``at`` (POSIX seconds): it waited from then, before the
        follow's first describe. Only on a timeline that holds nothing yet."""
        if self.origin is not None or self.app:
            return False
        self.origin = at
        self._app_event([0.0, "queued"])
        self.app_phase = "queued"
        return self._changed()

    def notice(self, text: str, *, warning: bool = True) -> bool:
        """A notice of the backend: why the app waits (``warning``), or news that needs no
        action -- an admission, which a queued app's phase becomes. A warning about an app
        that runs or ended is no reason to wait: not kept."""
        if warning:
            return self.wait(text) if self.app_phase in ("", "queued", "admitted") else False
        now = self._clock()
        if self.app_phase in ("queued", ""):
            self._app_event([now, "admitted", bounded(text, WAIT_LIMIT)])
            self.app_phase = "admitted"
            return self._changed()
        return False

    def wait(self, text: str, *, key: str = "") -> bool:
        """A reason to wait the cluster gave; said again, only its time moves."""
        now = self._clock()
        text = bounded(text.replace("\n", " "), WAIT_LIMIT)
        for item in self.waits:
            if item[1] == text:
                if item is self.waits[-1]:
                    return False
                self.waits.remove(item)
                break
        self.waits.append([now, text, key] if key else [now, text])
        del self.waits[:-WAITS]
        return self._changed()

    def ended(self) -> set[str]:
        """The keys (``role/replica``) of the replicas this timeline saw end."""
        return {key for key, rep in self.replicas.items() if rep.phase in ENDS}

    def found_root_cause(self, key: str, error: str = "", message: str = "") -> bool:
        """The replica that failed first (``key``), its error line and its message."""
        if not key:
            return False
        self.root_cause = key
        self.root_error = bounded(error, ERROR_LIMIT) if error else ""
        self.root_message = bounded(message, ERROR_LIMIT) if message else ""
        return self._changed()

    def _app_event(self, event: list[Any]) -> None:
        if event[1] == "preempted":
            self.app_preempted += 1
        self.app.append(event)
        if len(self.app) > APP_EVENTS:
            del self.app[KEPT_FIRST]
            self.app_dropped += 1

    def _replica(self, row: ReplicaRow, now: float) -> bool:
        rep = self.replicas.get(row.key)
        if rep is None:
            rep = self.replicas[row.key] = _Replica(row.role, row.replica_id)
        changed = False
        last = rep.events[-1][0] if rep.events else None
        if (
            row.restarts is not None
            and rep.restarts is not None
            and row.restarts > rep.restarts
            and not is_terminal(row.state)
        ):
            changed = self._add(rep, [now, "restart", row.exit_code, _reason(row)])
        if row.restarts is not None:
            rep.restarts = row.restarts
        phase = PHASES.get(row.state)
        if phase is None or phase == rep.phase:
            return changed
        if phase == "queued" and rep.phase == "running":
            self._add(rep, [now, "preempted"])
        if phase in ENDS and rep.phase != "running":
            # it ran unseen (it started and ended between two describes): since the backend
            # says it started
            started = self._at(row.started_at, now, last)
            if started is not None:
                self._add(rep, [started, "running"])
                last = started
        stamp = row.finished_at if phase in ENDS else row.started_at if phase == "running" else ""
        # the backend's own time, where it fits between what was seen before and now
        at = self._at(stamp, now, last)
        event: list[Any] = [now if at is None else at, phase]
        if phase in ENDS and (row.exit_code is not None or row.reason):
            event += [row.exit_code, _reason(row)]
        rep.phase = phase
        self._add(rep, event)
        return True

    def _cap(self) -> int:
        """A replica's events, at most, for an app of this many replicas."""
        n = len(self.replicas)
        if n != self._cap_for:
            share = TOTAL_EVENTS // max(1, n)
            self._cap_for, self._cap_is = n, max(MIN_REPLICA_EVENTS, min(REPLICA_EVENTS, share))
        return self._cap_is

    def _add(self, rep: _Replica, event: list[Any]) -> bool:
        rep.events.append(event)
        self._total += 1
        cap = self._cap()
        while len(rep.events) > cap:
            del rep.events[KEPT_FIRST]
            rep.dropped += 1
            self._total -= 1
        return True

    def _fit(self) -> None:
        """Keep every replica within its share (the app grew), and the whole within
        :data:`SIZE_LIMIT` (long texts in many events): the share halves until it fits."""
        cap = self._cap()
        if self._total > len(self.replicas) * cap:
            self._trim(cap)
        if self._total * 24 < SIZE_LIMIT // 2:  # far below: not measured
            return
        while cap > KEPT_FIRST + 1 and len(json.dumps(self._build())) > SIZE_LIMIT:
            cap = max(KEPT_FIRST + 1, cap // 2)
            self._trim(cap)

    def _trim(self, cap: int) -> None:
        for rep in self.replicas.values():
            extra = len(rep.events) - cap
            if extra > 0:
                del rep.events[KEPT_FIRST : KEPT_FIRST + extra]
                rep.dropped += extra
                self._total -= extra
        self._snapshot = None

    # -- the stored form -------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The JSON-safe form (the same object until the timeline changes)."""
        if self._snapshot is None:
            self._snapshot = self._build()
        return self._snapshot

    def _build(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": VERSION,
            "origin": self.origin,
            "now": self.now,
            "app": {
                "phase": self.app_phase,
                "events": [list(e) for e in self.app],
                "preemptions": self.app_preempted,
            },
            "replicas": [r.to_dict() for r in self.replicas.values()],
            "waits": [list(w) for w in self.waits],
        }
        if self.app_dropped:
            out["app"]["dropped"] = self.app_dropped
        if self.ui_url:
            out["ui_url"] = self.ui_url
        if self.root_cause:
            out["root_cause"] = {
                "replica": self.root_cause,
                "error": self.root_error,
                "message": self.root_message,
            }
        return out

    @classmethod
    def from_dict(cls, data: Any, wall: Callable[[], float] = time.time) -> Timeline:
        """A timeline to go on with from a :meth:`snapshot` (a fresh one from anything that
        is not one of this version)."""
        if not isinstance(data, Mapping) or data.get("version") != VERSION:
            return cls(wall)
        origin = data.get("origin")
        t = cls(wall, float(origin) if isinstance(origin, int | float) else None)
        try:
            app = data.get("app") or {}
            t.app = [list(e) for e in app.get("events") or []]
            t.app_dropped = int(app.get("dropped") or 0)
            t.app_phase = str(app.get("phase") or "")
            marks = sum(1 for e in t.app if len(e) > 1 and e[1] == "preempted")
            t.app_preempted = int(app.get("preemptions") or marks)
            for item in data.get("replicas") or []:
                rep = _Replica(
                    str(item["role"]),
                    int(item["id"]),
                    [list(e) for e in item.get("events") or []],
                    int(item.get("dropped") or 0),
                    item.get("restarts"),
                )
                rep.phase = next((e[1] for e in reversed(rep.events) if e[1] in _PHASE), "")
                t.replicas[f"{rep.role}/{rep.replica_id}"] = rep
                t._total += len(rep.events)
            t.waits = [list(w) for w in data.get("waits") or []]
            t.ui_url = str(data.get("ui_url") or "")
            t.now = float(data.get("now") or 0.0)
            root = data.get("root_cause") or {}
            t.root_cause = str(root.get("replica") or "")
            t.root_error = str(root.get("error") or "")
            t.root_message = str(root.get("message") or "")
        except (KeyError, TypeError, ValueError, AttributeError):
            return cls(wall)
        return t


_PHASE = frozenset(PHASES.values())


def _reason(row: ReplicaRow) -> str:
    return bounded(row.reason or row.failure, REASON_LIMIT) if (row.reason or row.failure) else ""


def _waits(rows: Iterable[ReplicaRow]) -> list[tuple[str, str]]:
    """``(replica key, text)`` of each unfinished replica that waits for a reason."""
    from torchx_provider.triggers.summary import waiting_notes

    return [(key.split(":", 2)[1], text) for key, text in waiting_notes(rows)]


def merged_timeline(
    timeline: Mapping[str, Any] | None, root_cause: str, error: str, rows: Iterable[ReplicaRow]
) -> dict[str, Any] | None:
    """A stored timeline with the root cause of the follow's end (``None`` stays
    ``None``): the form the task's result and its ``timeline`` XCom carry."""
    if not timeline:
        return None
    t = Timeline.from_dict(timeline)
    if t.origin is None:
        return dict(timeline)
    if root_cause and not t.root_cause:
        message = next((r.message for r in rows if r.key == root_cause), "")
        t.found_root_cause(root_cause, error, message)
    return t.snapshot()
