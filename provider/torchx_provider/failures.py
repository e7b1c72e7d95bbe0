"""Why an app failed, and which replica failed first. Pure: data in, data out.

Each backend decides the :class:`FailureKind` of a failed replica from what it reports, with
one commented table (``CONTAINER_FAILURE`` in :mod:`~torchx_provider.schedulers.docker.state`,
the ``*_FAILURE`` tables of :mod:`~torchx_provider.schedulers.kube.status`); a case no table
knows has no kind. This module holds what is the same for every backend:

* :func:`exit_failure`: the kind a replica's exit code (and the runtime's OOM flag) tells,
  where nothing else says who ended it: the one rule for a SIGKILL or SIGTERM (137/143);
* :func:`root_cause`: of several failed replicas, the one that failed first. Those that
  finished within :data:`ROOT_CAUSE_WINDOW` of the first failure count as failing at once
  (a torchrun job tears its other workers down within a second), and among them the
  evidence in the log tail decides (torchrun's "Root Cause (first observed failure)" block,
  a Python traceback), then the earlier of two such blocks' failure times, then a non-signal
  exit over a SIGKILL/SIGTERM (137/143), then the finish time, then the order the app
  describes them. The finish times are the backend's own, as precise as it tells them: whole
  seconds on Kubernetes (``finishedAt``), nanoseconds on Docker (``State.FinishedAt``).
  Where the replica that ended first is a torchrun node that tells when its worker failed,
  every such node counts as failing at that moment, whenever its container ended: torchrun's
  times of the failures decide between them (a node whose rank failed first can end seconds
  after its peers, stopping its other ranks and waiting at torchrun's exit barrier);
  before all of that, a replica whose error says it lost a peer rank (:data:`PEER_LOSS`: gloo's
  "Connection closed by peer", NCCL's remote error) comes after every other, whenever it
  ended: the failure began elsewhere. The replica whose rank raised can end last, stopped
  from outside (a job that fails fast stops its other pods once the first one failed) before
  its torchrun could print its summary; its own error is then still in its log, before
  torchrun's teardown. It may not have ended at all when the app failed: :func:`suspects`
  adds such a replica to the failed ones (:func:`raised_unended`);
* :func:`python_error`: the error a tail's Python tracebacks tell most of: a replica's own
  error over a lost peer's, either over torchrun's teardown (``SignalException``);
* :func:`error_class`: the exception class of a kind (an unknown kind is the base class).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from torchx_provider.timestamps import read_timestamp

if TYPE_CHECKING:
    from torchx_provider.errors import AppFailedError
    from torchx_provider.replicas import ReplicaRow

#: How long a replica's message may be where it is shown (task log, XCom, exception).
MESSAGE_LIMIT = 1000

#: The exit code of a process killed by SIGKILL (128 + 9) and by SIGTERM (128 + 15), as a
#: container runtime reports it.
SIGKILL_EXIT, SIGTERM_EXIT = 137, 143
#: Exit codes of a process killed by SIGKILL or SIGTERM: most often sent to it by something
#: else (the OOM killer, a stop, torchrun tearing down its workers), so the weakest evidence
#: that this replica is where the failure began.
SIGNAL_EXITS = frozenset({SIGKILL_EXIT, SIGTERM_EXIT})


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


def exit_failure(exit_code: int | None, oom_killed: bool = False) -> FailureKind | None:
    """The kind of a replica's failure as its exit tells it, the same on every backend. A
    backend asks only when nothing else says who ended the replica: the platform's own word
    (a disruption, an eviction, the Docker engine seen stopping), the task's cancel, a
    container that could not start are decided before.

    * ``oom_killed`` (the runtime says it was killed for exceeding its own memory limit,
      the role's ``resource.memMB``): :attr:`FailureKind.USER`, the code needs more memory;
    * SIGKILL or SIGTERM (:data:`SIGNAL_EXITS`, 137 and 143) otherwise: no kind. Those
      signals are most often sent from outside the replica's code -- the kernel or the
      kubelet on a node in trouble, ``docker stop`` or ``docker kill``, a container runtime
      restarted -- and the exit code alone does not say who. Calling it the user's would
      make :data:`~torchx_provider.retry.RETRY_INFRASTRUCTURE_ONLY` fail at once a task a
      retry could fix; calling it the platform's would be a guess. Without a kind the app
      fails with the base class, :class:`~torchx_provider.errors.AppFailedError`, which that
      policy leaves to the task's ``retries``;
    * any other non-zero code: :attr:`FailureKind.USER`, its own exit or a signal that only
      its own process raises (SIGSEGV 139, SIGABRT 134);
    * 0, or no code told: no kind.

    >>> exit_failure(1).value, exit_failure(137, oom_killed=True).value, exit_failure(139).value
    ('user', 'user', 'user')
    >>> exit_failure(137), exit_failure(143), exit_failure(0), exit_failure(None)
    (None, None, None, None)
    """
    if oom_killed:
        return FailureKind.USER
    if not exit_code or exit_code in SIGNAL_EXITS:
        return None
    return FailureKind.USER


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


def _traceback_errors(tail: Sequence[str]) -> list[str]:
    """The error lines of ``tail`` from its first Python traceback on, in order. Every such
    line counts, not only the first after each ``Traceback`` line: the ranks of one node write
    their tracebacks to the same stream at the same moment, line by line interleaved. A
    traceback torchrun's failure summary shows (after ``traceback :``, indented) counts too.
    """
    lines = [_strip(line) for line in tail]
    first = next((i for i, line in enumerate(lines) if _TRACEBACK in line), None)
    if first is None:
        return []
    return [
        line.strip()
        for line in lines[first + 1 :]
        if _TRACEBACK not in line and _ERROR_LINE.match(line.strip())
    ]


def python_error(tail: Sequence[str]) -> str:
    """The last error line of the Python tracebacks in ``tail`` among those that tell most
    (``""``: none): the replica's own error over a lost peer's (:data:`PEER_LOSS`), and that over
    torchrun's teardown (``SignalException``, when its launcher or the platform stopped it).
    A node's log can hold all three: its rank raised, its other rank lost that peer (and
    torchrun, seeing both fail in the same second, may name either as its root cause), then
    it was stopped from outside -- and its ranks' tracebacks interleaved line by line.

    >>> python_error(["Traceback (most recent call last):", '  File "t.py", line 1',
    ...               "ValueError: bad input", "done"])
    'ValueError: bad input'
    >>> python_error(["  traceback : Traceback (most recent call last):",
    ...               '    File "t.py", line 1, in main', "      raise ValueError('bad')",
    ...               "  ValueError: bad", "  ", "====="])
    'ValueError: bad'
    >>> python_error(["Traceback (most recent call last):", "RuntimeError: rank 3 failed",
    ...               "Traceback (most recent call last):", "SignalException: got signal: 15"])
    'RuntimeError: rank 3 failed'
    """
    errors = _traceback_errors(tail)
    if not errors:
        return ""
    best = max(_telling(e) for e in errors)
    return [e for e in errors if _telling(e) == best][-1]


def _telling(error: str) -> int:
    """How much an error line tells of where a failure began: 2 for the replica's own error,
    1 for a lost peer (:data:`PEER_LOSS`), 0 for torchrun's teardown. (torchrun's own
    ``ChildFailedError:`` line has no text of its own and is no error line.)"""
    if is_teardown(error):
        return 0
    return 1 if is_peer_loss(error) else 2


def is_teardown(error: str) -> bool:
    """``error`` (an error line) is torchrun's teardown of a replica it was told to stop."""
    return _SIGNAL_EXCEPTION in error


#: Errors a rank raises when another rank is gone: the failure began elsewhere. Fragments of
#: the error line, as each communication library words it.
#:
#: =====================================================  ==================================
#: fragment                                               said by
#: =====================================================  ==================================
#: ``Connection closed by peer``                          gloo: a peer's socket closed (its
#:                                                        process exited)
#: ``Connection reset by peer``                           gloo, TCPStore: the same, reset
#: ``ncclRemoteError``                                    NCCL: a remote rank exited or its
#:                                                        network failed
#: ``remote process exited``                              NCCL's words for the same
#: ``NCCL communicator was aborted``                      PyTorch: NCCL's communicator
#:                                                        aborted after another rank's error
#: =====================================================  ==================================
PEER_LOSS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "ncclRemoteError",
    "remote process exited",
    "NCCL communicator was aborted",
)


def is_peer_loss(error: str) -> bool:
    """``error`` (an error line) says a peer rank was gone: a consequence, not a cause.

    >>> is_peer_loss("RuntimeError: [./gloo/transport/tcp/pair.cc:598] Connection closed by "
    ...              "peer [10.89.0.8]:9124")
    True
    >>> is_peer_loss("RuntimeError: rank 3 failed at step 3 as asked")
    False
    """
    return any(fragment in error for fragment in PEER_LOSS)


#: the time in torchrun's root-cause block: ``time      : 2024-05-01_10:00:01`` (whole
#: seconds, the node's local time)
_BLOCK_TIME = re.compile(r"^\s*time\s*:\s*(\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d)\s*$")


def oom_words(limit: str = "") -> str:
    """What a replica killed for its memory limit is told, on every backend: the limit it went
    over (``limit``, in words, where the backend tells it) and the option that raises it.

    >>> oom_words("256 MiB")
    'killed for exceeding its memory limit of 256 MiB: raise resource.memMB'
    """
    of = f" of {limit}" if limit else ""
    return f"killed for exceeding its memory limit{of}: raise resource.memMB"


def root_cause_time(tail: Sequence[str]) -> str | None:
    """When the worker of torchrun's last root-cause block in ``tail`` failed, as torchrun
    wrote it (``None``: no block, or no time in it). The strings sort as the times do.

    >>> root_cause_time(["Root Cause (first observed failure):", "[0]:",
    ...                  "  time      : 2024-05-01_10:00:01", "  rank      : 3"])
    '2024-05-01_10:00:01'
    """
    lines = [_strip(line) for line in tail]
    block = max((i for i, line in enumerate(lines) if _ROOT_CAUSE in line), default=-1)
    if block < 0:
        return None
    for line in lines[block + 1 :]:
        m = _BLOCK_TIME.match(line)
        if m:
            return m.group(1)
    return None


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
    return 1 if error and not is_teardown(error) else 0


#: How long after the first failure another replica's failure still counts as the same
#: moment, for :func:`root_cause`: its log and exit code then decide which began it. Measured
#: between the finish times as the backend tells them, bounds included: on Docker (times to
#: the nanosecond) a second; on Kubernetes (whole seconds) the same second or the next, so
#: that two replicas that ended less than a second apart always count as one moment there
#: too, whichever side of a second's boundary each fell.
ROOT_CAUSE_WINDOW = timedelta(seconds=1)


def _seconds(value: str | None) -> float | None:
    """A finish time (RFC 3339) as seconds since the epoch (``None``: not told)."""
    when = read_timestamp(value)
    return None if when is None else when.timestamp()


def root_cause(
    failed: Sequence[ReplicaRow], tails: Mapping[str, Sequence[str]]
) -> ReplicaRow | None:
    """The replica among ``failed`` (rows of failed replicas, in the app's order) whose
    failure came first (module doc); ``None`` when there is none. ``tails``: source key
    (``role/replica``) -> the last lines of its log. A replica whose finish time is not told
    comes after every one whose time is.

    >>> from torchx_provider.replicas import ReplicaRow
    >>> from torchx_provider.specs.api import AppState
    >>> killed = ReplicaRow("tb", 0, AppState.FAILED, 137, finished_at="2024-05-01T10:00:01.2Z")
    >>> exit2 = ReplicaRow("tb", 1, AppState.FAILED, 2, finished_at="2024-05-01T10:00:02.1Z")
    >>> root_cause([killed, exit2], {}).key  # 0.9 s later: the one not killed by a signal
    'tb/1'
    >>> later = ReplicaRow("tb", 1, AppState.FAILED, 2, finished_at="2024-05-01T10:00:02.3Z")
    >>> root_cause([killed, later], {}).key  # 1.1 s later: the first
    'tb/0'
    >>> def block(at):
    ...     return ["Root Cause (first observed failure):", "[0]:", f"  time      : {at}",
    ...             "  exitcode  : 1 (pid: 9)"]
    >>> peer_lost = ReplicaRow("t", 0, AppState.FAILED, 1, finished_at="2024-05-01T10:00:14Z")
    >>> raised = ReplicaRow("t", 1, AppState.FAILED, 1, finished_at="2024-05-01T10:00:17Z")
    >>> tails = {"t/0": block("2024-05-01_10:00:12"), "t/1": block("2024-05-01_10:00:02")}
    >>> root_cause([peer_lost, raised], tails).key  # ended 3 s later, its rank failed 10 s first
    't/1'
    >>> lost = ["Traceback (most recent call last):", "RuntimeError: Connection closed by peer"]
    >>> raised_first = ["Traceback (most recent call last):", "RuntimeError: bad batch",
    ...                 "Traceback (most recent call last):", "SignalException: got signal: 15"]
    >>> root_cause([peer_lost, raised], {"t/0": lost, "t/1": raised_first}).key  # stopped later
    't/1'
    """
    if not failed:
        return None
    times = [_seconds(row.finished_at) for row in failed]
    known = [t for t in times if t is not None]
    window_ends = min(known) + ROOT_CAUSE_WINDOW.total_seconds() if known else None
    torchrun_times = [root_cause_time(tails.get(row.key, ())) for row in failed]
    first_ended = min(((t, i) for i, t in enumerate(times) if t is not None), default=None)
    # the first to end is a torchrun node telling its failure's time: the nodes that tell one
    # are compared by it (module doc)
    torchrun_decides = first_ended is not None and torchrun_times[first_ended[1]] is not None

    def order(i: int) -> tuple[int, float, int, str, int, float, int]:
        row, at = failed[i], times[i]
        tail = tails.get(row.key, ())
        if torchrun_decides and torchrun_times[i] is not None:
            late = 0.0
        elif at is None:
            # after every known time; among unknown ones, the logs and the exit decide
            late = float("inf") if window_ends is not None else 0.0
        else:
            late = 0.0 if window_ends is not None and at <= window_ends else at
        return (
            # a rank that lost its peer did not begin the failure, whenever it ended
            1 if is_peer_loss(python_error(tail)) else 0,
            late,
            -evidence(tail),
            # torchrun's own time of the failure: its nodes wait for each other before they
            # exit (their exit barrier), so the node that failed first may end last
            torchrun_times[i] or "~",
            1 if row.exit_code in SIGNAL_EXITS else 0,
            at if at is not None else float("inf"),
            i,
        )

    return failed[min(range(len(failed)), key=order)]


def raised_unended(row: ReplicaRow, tails: Mapping[str, Sequence[str]]) -> bool:
    """Of an app that ended FAILED, ``row`` is a replica that neither failed nor succeeded
    (still running, or stopped from outside) whose log tail holds its own Python error (not a
    lost peer's, not torchrun's teardown): it raised, and the app failed before its pod or
    container did. A gang that fails fast (Volcano's ``PodFailed -> AbortJob``, a JobSet's
    failure policy) fails the app when the first pod fails, which can be a peer that lost this
    one, while this one is still being stopped.

    >>> from torchx_provider.replicas import ReplicaRow
    >>> from torchx_provider.specs.api import AppState
    >>> raised = ["Traceback (most recent call last):", "RuntimeError: rank 3 failed"]
    >>> stopping = ReplicaRow("t", 1, AppState.RUNNING)
    >>> raised_unended(stopping, {"t/1": raised}), raised_unended(stopping, {})
    (True, False)
    >>> lost = ["Traceback (most recent call last):", "RuntimeError: Connection reset by peer"]
    >>> raised_unended(stopping, {"t/1": lost})
    False
    """
    from torchx_provider.specs.api import AppState

    if row.state in (AppState.SUCCEEDED, AppState.FAILED):
        return False
    error = python_error(tails.get(row.key, ()))
    return bool(error) and _telling(error) == 2


def suspects(rows: Sequence[ReplicaRow], tails: Mapping[str, Sequence[str]]) -> list[ReplicaRow]:
    """The replicas of an app that ended FAILED where its failure may have begun, in the
    app's order, for :func:`root_cause`: the failed ones and those that raised but had not
    ended yet (:func:`raised_unended`). Having no finish time, such a replica comes after
    every failed one but those that lost a peer: it leads only over them."""
    from torchx_provider.specs.api import AppState

    return [r for r in rows if r.state == AppState.FAILED or raised_unended(r, tails)]


#: the Python error line a backend's message ends with, after its own words
#: (``Error: torch...SignalException: ...``, ``Error: RuntimeError: ...``)
_ERROR_IN_MESSAGE = re.compile(r"(?<=: )…?[A-Za-z_][\w.]*(?:Error|Exception)\w*(?::\s.*)?$", re.S)


def with_log_errors(
    rows: Sequence[ReplicaRow], tails: Mapping[str, Sequence[str]]
) -> tuple[ReplicaRow, ...]:
    """``rows`` where each failed replica the backend gave no message gets the Python error
    its log tail ends with (bounded), so the summary, the table and the XCom show the error
    itself, not just an exit code. A backend's own message (a termination message) stays,
    unless the Python error it ends with tells less than the log tail's (a teardown or a lost
    peer, where the tail holds the replica's own error: a termination message is only the
    log's last lines): that error then takes its place, after the backend's own words
    (``Error: ``). A replica not ended whose log tail holds its own error
    (:func:`raised_unended`) gets that error as its message and the user's kind.

    >>> from torchx_provider.replicas import ReplicaRow
    >>> from torchx_provider.specs.api import AppState
    >>> row = ReplicaRow("t", 1, AppState.FAILED, 1, message="Error: torch.distributed."
    ...                  "elastic.multiprocessing.api.SignalException: Process 7 got signal: 15")
    >>> tail = ["Traceback (most recent call last):", "RuntimeError: rank 3 failed",
    ...         "Traceback (most recent call last):", "SignalException: got signal: 15"]
    >>> with_log_errors([row], {"t/1": tail})[0].message
    'Error: RuntimeError: rank 3 failed'
    """
    from dataclasses import replace

    from torchx_provider.specs.api import AppState

    out = []
    for row in rows:
        if raised_unended(row, tails):
            error = python_error(tails.get(row.key, ()))
            row = replace(
                row,
                message=row.message or bounded(error),
                failure=row.failure or FailureKind.USER.value,
            )
        elif row.state == AppState.FAILED:
            error = python_error(tails.get(row.key, ()))
            if error and not row.message:
                row = replace(row, message=bounded(error))
            elif error:
                told = _ERROR_IN_MESSAGE.search(row.message)
                if told is not None and _telling(told.group(0)) < _telling(error):
                    said = row.message[: told.start()] + error
                    row = replace(row, message=bounded(said))
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


#: The reason of a replica whose app was taken off the backend by something other than the
#: task before it finished: a Kubernetes job deleted, a Docker app's containers removed.
REMOVED_FROM_OUTSIDE = "RemovedFromOutside"


def removed_from_outside(
    rows: Sequence[ReplicaRow], known: Sequence[str], now: datetime
) -> tuple[ReplicaRow, ...]:
    """The replicas of an app that was taken off the backend before it finished, and not by
    the task (it cancels only as its follow ends): each not seen finished ends ``FAILED``,
    :data:`REMOVED_FROM_OUTSIDE`, of kind :attr:`FailureKind.INFRASTRUCTURE` (the platform
    or someone on it took it), stamped ``now``. A follow that described none of them (one
    resumed after the app went) knows them by ``known``, the ``role/replica`` keys of its
    log cursors.

    >>> from datetime import timezone
    >>> from torchx_provider.specs.api import AppState
    >>> from torchx_provider.replicas import ReplicaRow
    >>> now = datetime(2024, 1, 1, tzinfo=timezone.utc)
    >>> done, live = ReplicaRow("w", 0, AppState.SUCCEEDED, 0), ReplicaRow("w", 1, AppState.RUNNING)
    >>> [(r.key, r.state.name, r.reason) for r in removed_from_outside([done, live], [], now)]
    [('w/0', 'SUCCEEDED', ''), ('w/1', 'FAILED', 'RemovedFromOutside')]
    >>> [(r.key, r.failure) for r in removed_from_outside([], ["w/0"], now)]
    [('w/0', 'infrastructure')]
    """
    from dataclasses import replace

    from torchx_provider.replicas import ReplicaRow
    from torchx_provider.specs.api import AppState, is_terminal

    if not rows:
        rows = [
            ReplicaRow(role, int(replica), AppState.RUNNING)
            for role, _, replica in (key.rpartition("/") for key in known)
            if role and replica.isdigit()
        ]
    out = []
    for row in rows:
        if not is_terminal(row.state):
            row = replace(
                row,
                state=AppState.FAILED,
                reason=REMOVED_FROM_OUTSIDE,
                failure=FailureKind.INFRASTRUCTURE.value,
                message="taken off the backend before it finished, not by this task",
                finished_at=now.isoformat(),
                exit_code=None,
                cannot_start=False,
            )
        out.append(row)
    return tuple(out)
