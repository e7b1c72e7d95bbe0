"""What a follow makes of its replicas' progress: stragglers named, a stalled app. Pure.

Given when each watched replica (a running replica whose log is read) last moved
(:mod:`~torchx_provider.triggers.progress`), on the follow's clock, :func:`assess` decides:

* **stragglers** (``straggler_after``): a replica that has not moved for that long while a
  peer went on past it -- the peer's step is further, or (without steps) the peer moved
  later, by more than :data:`TOGETHER` seconds -- is said once, with its last line and for
  how long; again when what it shows changes (a new line that is no step), and when it
  moves again. Where some replicas report steps, only those are compared: a replica that
  prints no step (the ranks that leave the printing to rank 0) is no straggler;
* **a stall** (``stall_timeout``): no watched replica has moved for that long. The replicas
  that stopped first are those no peer stopped before (:func:`stopped_first`).

The follow loop (:mod:`~torchx_provider.triggers.follow`) runs it after each describe of a
``RUNNING`` app, worker and triggerer alike, and wakes by :attr:`Assessment.next_due` at the
latest. Time not seen -- before the follow started, before a replica was seen running,
while its log could not be read -- is no silence: the caller starts each replica's quiet no
earlier than those.

>>> limits = WatchLimits(straggler_after=30.0, stall_timeout=120.0)
>>> p = {"t/0": ReplicaProgress("step 9", step=9), "t/1": ReplicaProgress("step 7", step=7)}
>>> a = assess({"t/0": 95.0, "t/1": 60.0}, p, 100.0, limits)
>>> a.notes[0].text
"t/1 is straggling: no progress for 40s while its peers went on (last step 7; last line: 'step 7')"
>>> a.stalled, a.next_due
((), 125.0)
>>> assess({"t/0": 95.0, "t/1": 60.0}, p, 215.0, limits, a.said).stalled
('t/1',)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torchx_provider.triggers.progress import ProgressPattern, ReplicaProgress

#: Seconds within which replicas that stopped are taken as stopping together (lines of
#: ranks in step reach the log within milliseconds of each other).
TOGETHER = 1.0
#: Last lines of each replica the task log shows when the app is found stalled.
STALL_LINES = 5


@dataclass(frozen=True)
class WatchLimits:
    """``straggler_after`` and ``stall_timeout`` in seconds (``None``: off)."""

    straggler_after: float | None = None
    stall_timeout: float | None = None

    @property
    def on(self) -> bool:
        return self.straggler_after is not None or self.stall_timeout is not None


def watch_options(options: Any) -> tuple[ProgressPattern | None, WatchLimits]:
    """The progress pattern and the limits of ``options`` -- the operator's ``Following``,
    or the trigger's arguments: their ``progress_pattern``, ``straggler_after`` and
    ``stall_timeout`` -- as a follow takes them."""
    source = options.progress_pattern
    pattern = None if source is None else ProgressPattern.parse(source)
    return pattern, WatchLimits(options.straggler_after, options.stall_timeout)


@dataclass(frozen=True)
class Note:
    """A line for the task log: a warning, or (``warning=False``) an info."""

    text: str
    warning: bool = True


@dataclass(frozen=True)
class Named:
    """A straggler as it was named: what it showed, and since when it had not moved."""

    progress: ReplicaProgress
    quiet_since: float


@dataclass(frozen=True)
class Assessment:
    """What :func:`assess` found: lines to say, the stragglers named now, the replicas that
    stopped first when the app is stalled (empty: it is not), and when to look again at the
    latest (``None``: only when something moves)."""

    notes: tuple[Note, ...] = ()
    said: Mapping[str, Named] = field(default_factory=dict)
    stalled: tuple[str, ...] = ()
    next_due: float | None = None


@dataclass(frozen=True)
class _Order:
    """How far the compared replicas got: by step where some report steps (only those are
    compared), else by when they last moved. Linear in the replicas: a large app is looked
    at every few seconds."""

    #: replica key -> how far it got (its step, or when it last moved)
    reached: Mapping[str, float]
    #: how far one must be behind the furthest to be passed (0 for steps)
    margin: float

    @classmethod
    def of(
        cls, quiet_since: Mapping[str, float], progress: Mapping[str, ReplicaProgress]
    ) -> _Order:
        steps = {
            k: float(p.step)
            for k in quiet_since
            if (p := progress.get(k)) is not None and p.step is not None
        }
        if steps:
            return cls(steps, 0.0)
        return cls(dict(quiet_since), TOGETHER)

    def passed(self) -> set[str]:
        """The replicas a peer went on past: a further step, or moving more than
        :data:`TOGETHER` seconds later."""
        if not self.reached:
            return set()
        top = max(self.reached.values())
        return {k for k, v in self.reached.items() if top - v > self.margin}

    def first(self) -> tuple[str, ...]:
        """Those that went on past none (all, when none went on past another)."""
        if not self.reached:
            return ()
        low = min(self.reached.values())
        return tuple(sorted(k for k, v in self.reached.items() if v - low <= self.margin))


def stopped_first(
    quiet_since: Mapping[str, float], progress: Mapping[str, ReplicaProgress]
) -> tuple[str, ...]:
    """The replicas that stopped first: of those compared (the ones that report steps, if
    any do), those that went on past none; all of them when none went on past another
    (they stopped together).

    >>> stopped_first({"a": 10.0, "b": 10.2, "c": 20.0}, {})
    ('a', 'b')
    >>> stopped_first({"a": 10.0, "b": 30.0}, {"a": ReplicaProgress(step=5),
    ...                                        "b": ReplicaProgress(step=5)})
    ('a', 'b')
    >>> stopped_first({"a": 10.0, "b": 30.0, "c": 5.0}, {"a": ReplicaProgress(step=6),
    ...                                                 "b": ReplicaProgress(step=5)})
    ('b',)
    """
    return _Order.of(quiet_since, progress).first()


def assess(
    quiet_since: Mapping[str, float],
    progress: Mapping[str, ReplicaProgress],
    now: float,
    limits: WatchLimits,
    said: Mapping[str, Named] | None = None,
    blind_until: float | None = None,
) -> Assessment:
    """The stragglers and the stall of the watched replicas (see the module docstring).

    :param quiet_since: watched replica key -> since when (the follow's clock) it has not
        moved; the replicas not watched (not running, log not read) are left out.
    :param progress: what each replica's log showed last.
    :param said: the stragglers named so far (:attr:`Assessment.said` of the last call).
    :param blind_until: until when the follow could not have seen a move (its event loop
        was frozen: the lines written meanwhile are read after it): no replica is taken to
        straggle, nor the app to stall, for quiet before it. Which replica stopped first
        is still told by ``quiet_since``.
    """
    said = dict(said or {})
    notes: list[Note] = []
    due: list[float] = []
    after = limits.straggler_after
    order = _Order.of(quiet_since, progress)
    passed = order.passed() if after is not None else set()
    named: dict[str, Named] = {}
    for key in sorted(quiet_since):
        since = quiet_since[key]
        now_shows = progress.get(key) or ReplicaProgress()
        before = said.get(key)
        if before is not None and since > before.quiet_since and now_shows != before.progress:
            # it moved (a quiet start pushed later without a new line -- its log could not
            # be read for a while -- is no move)
            notes.append(_moves_again(key, since - before.quiet_since, now_shows))
            before = None
        if after is None or key not in order.reached:
            continue
        quiet = now - since
        seen_quiet = quiet if blind_until is None else min(quiet, now - blind_until)
        straggling = seen_quiet >= after and key in passed
        if straggling:
            if before is None or before.progress != now_shows:
                notes.append(_straggling(key, quiet, now_shows, again=before is not None))
            named[key] = Named(now_shows, since)
        elif before is not None:
            named[key] = before  # not passed any more, and not moved: still the one named
        if since + after > now:
            due.append(since + after)
        elif seen_quiet < after:
            due.append(now - seen_quiet + after)
    stalled: tuple[str, ...] = ()
    if limits.stall_timeout is not None and quiet_since:
        last_move = max(quiet_since.values())
        if blind_until is not None:
            last_move = max(last_move, blind_until)
        if now - last_move >= limits.stall_timeout:
            stalled = order.first()
        else:
            due.append(last_move + limits.stall_timeout)
    return Assessment(tuple(notes), named, stalled, min(due) if due else None)


def _straggling(key: str, quiet: float, shows: ReplicaProgress, *, again: bool) -> Note:
    what = "still straggling" if again else "straggling"
    return Note(
        f"{key} is {what}: no progress for {quiet:.0f}s while its peers went on "
        f"({shows.describe()})"
    )


def _moves_again(key: str, quiet: float, shows: ReplicaProgress) -> Note:
    step = "" if shows.step is None else f" (step {shows.step})"
    return Note(f"{key} moves again{step} after {quiet:.0f}s without progress", warning=False)


def stall_report(
    app_id: str,
    quiet_since: Mapping[str, float],
    progress: Mapping[str, ReplicaProgress],
    tails: Mapping[str, Sequence[str]],
    first: Iterable[str],
    now: float,
    timeout: float,
) -> tuple[str, list[str]]:
    """The message of a stalled app (naming the replicas that stopped first) and the task
    log's lines that show, per watched replica, how long it has been quiet, its progress and
    its last :data:`STALL_LINES` lines -- the ones that stopped first leading.

    >>> message, lines = stall_report("a-1", {"t/0": 0.0, "t/1": 5.0}, {}, {"t/0": ["x"]},
    ...                               ["t/0"], 70.0, 60.0)
    >>> message
    'no replica of app a-1 moved for 65s (stall_timeout 60s); stopped first: t/0 (quiet 70s)'
    >>> for line in lines[:3]:
    ...     print(line)
    ::group::t/0 stopped first: no progress for 70s (no line yet) — last 1 lines
    [t/0] x
    ::endgroup::
    """
    first = list(first)
    quiet_for = now - max(quiet_since.values())
    names = ", ".join(f"{k} (quiet {now - quiet_since[k]:.0f}s)" for k in first)
    message = (
        f"no replica of app {app_id} moved for {quiet_for:.0f}s (stall_timeout "
        f"{timeout:g}s); stopped first: {names}"
    )
    lines: list[str] = []
    order = sorted(quiet_since, key=lambda k: (k not in first, quiet_since[k], k))
    for key in order:
        shows = progress.get(key) or ReplicaProgress()
        tail = list(tails.get(key, ()))[-STALL_LINES:]
        head = "stopped first" if key in first else "stopped"
        lines.append(
            f"::group::{key} {head}: no progress for {now - quiet_since[key]:.0f}s "
            f"({shows.describe()}) — last {len(tail)} lines"
        )
        lines.extend(f"[{key}] {text}" for text in tail)
        lines.append("::endgroup::")
    return message, lines
