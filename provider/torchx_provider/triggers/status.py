"""The ``replicas:`` status line of a follow, and when it is said. Pure.

A small app's line names every replica (``trainer[0 RUNNING, 1 SUCCEEDED(0)]``) and is said
at every change. A large app's replicas change many times a second as it starts or ends,
and a line naming each of 40 is some 800 characters: a role of more than
:data:`FOLD_REPLICAS` replicas is counted by state instead, naming only its failed
replicas (:func:`folded_line`), and an app of more than :data:`FOLD_REPLICAS` replicas has
its line said at most every :data:`STATUS_INTERVAL` seconds while it runs
(:class:`StatusPace`); its end is always said.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import ReplicaRow, status_line

#: Replicas of a role beyond which its replicas are counted by state, not named each; and
#: of an app, beyond which its status line is paced.
FOLD_REPLICAS = 16

#: Seconds between two status lines of a large app while it runs.
STATUS_INTERVAL = 5.0

#: Failed replicas a folded role names (the others are counted).
NAMED_FAILURES = 5


def folded_line(rows: Sequence[ReplicaRow], fold: int = FOLD_REPLICAS) -> str:
    """:func:`~.events.status_line`, but each role of more than ``fold`` replicas as
    ``role[N: counts by state]`` naming its first failed replicas with their exit codes.

    >>> rows = [ReplicaRow("w", i, AppState.RUNNING) for i in range(3)]
    >>> folded_line(rows + [ReplicaRow("w", 3, AppState.FAILED, 137)], fold=2)
    'w[4: 3 RUNNING, 1 FAILED: 3(137)]'
    >>> folded_line(rows, fold=8)
    'w[0 RUNNING, 1 RUNNING, 2 RUNNING]'
    """
    by_role: dict[str, list[ReplicaRow]] = {}
    for row in rows:
        by_role.setdefault(row.role, []).append(row)
    if all(len(replicas) <= fold for replicas in by_role.values()):
        return status_line(rows)
    parts = []
    for role, replicas in by_role.items():
        if len(replicas) <= fold:
            parts.append(status_line(replicas))
            continue
        counts: dict[AppState, int] = {}
        for r in replicas:
            counts[r.state] = counts.get(r.state, 0) + 1
        failed = [r for r in replicas if r.state == AppState.FAILED]
        named = [
            f"{r.replica_id}" + ("" if r.exit_code is None else f"({r.exit_code})")
            for r in failed[:NAMED_FAILURES]
        ]
        more = len(failed) - len(named)
        failures = ", ".join(named) + (f" and {more} more" if more > 0 else "")
        said = [
            f"{n} {state.name}" + (f": {failures}" if state == AppState.FAILED else "")
            for state, n in counts.items()
        ]
        parts.append(f"{role}[{len(replicas)}: {', '.join(said)}]")
    return " ".join(parts)


@dataclass
class StatusPace:
    """When a follow says the replicas' status line (see the module docstring); times on
    the follow's clock.

    >>> pace = StatusPace(fold=1, interval=5.0)
    >>> two = (ReplicaRow("w", 0, AppState.RUNNING), ReplicaRow("w", 1, AppState.PENDING))
    >>> pace.line(two, False, 0.0)
    'w[2: 1 RUNNING, 1 PENDING]'
    >>> ended = tuple(ReplicaRow("w", i, AppState.SUCCEEDED, 0) for i in range(2))
    >>> pace.line(ended[:1] + two[1:], False, 1.0) is None  # within the interval
    True
    >>> pace.line(ended, True, 2.0)  # the end is always said
    'w[2: 2 SUCCEEDED]'
    >>> pace.line(ended, True, 9.0) is None  # nothing new
    True
    """

    fold: int = FOLD_REPLICAS
    interval: float = STATUS_INTERVAL
    #: the rows of the last line said, and when
    said: tuple[ReplicaRow, ...] | None = None
    said_at: float | None = None

    def line(self, rows: tuple[ReplicaRow, ...], terminal: bool, now: float) -> str | None:
        """The status line to say for ``rows`` at ``now`` (``terminal``: the app has
        ended), ``None`` when nothing is to be said: nothing changed since the last line,
        or a large app's last line is younger than the interval."""
        if rows == self.said:
            return None
        large = len(rows) > self.fold
        recent = self.said_at is not None and now - self.said_at < self.interval
        if large and recent and not terminal:
            return None
        self.said, self.said_at = rows, now
        return folded_line(rows, self.fold)
