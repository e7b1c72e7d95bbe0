"""The failure summary a failed app's task log ends with. Pure.

One collapsible group per failed replica -- Airflow's log view folds the lines between
``::group::`` and ``::endgroup::`` -- headed by the replica, its exit code and reason, then
its last lines, so the traceback is there without scrolling::

    ::group::trainer/1 failed: exit code 1 (Error) — last 3 lines
    [trainer/1] Traceback (most recent call last):
    [trainer/1]   File "train.py", line 9, in <module>
    [trainer/1] RuntimeError: CUDA out of memory
    ::endgroup::
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from torchx_provider.failures import bounded
from torchx_provider.specs.api import AppState, is_terminal
from torchx_provider.triggers.events import ReplicaRow

#: How much of a replica's message a summary header shows.
HEADER_MESSAGE_LIMIT = 300


def replica_failure(row: ReplicaRow) -> str:
    """``trainer/1 failed: exit code 137 (OOMKilled: ...)``: one failed replica in a few
    words -- its exit code, the backend's reason and its message (bounded). A replica that
    raised but had not ended when the app failed
    (:func:`~torchx_provider.failures.raised_unended`) is said to be so, with its state.

    >>> print(replica_failure(ReplicaRow("t", 1, AppState.RUNNING, message="ValueError: x")))
    t/1 failed: its log shows its error; still RUNNING when the app failed (ValueError: x)
    """
    code = "unknown" if row.exit_code is None else str(row.exit_code)
    message = bounded(row.message.replace("\n", " "), HEADER_MESSAGE_LIMIT)
    if row.reason and not message.startswith(row.reason):
        message = f"{row.reason}: {message}" if message else row.reason
    if row.state != AppState.FAILED and row.exit_code is None:
        ended = f"its log shows its error; still {row.state.name} when the app failed"
    else:
        ended = f"exit code {code}"
    return f"{row.key} failed: {ended} ({message or 'no reason given'})"


def failed_rows(rows: Iterable[ReplicaRow]) -> list[ReplicaRow]:
    """The failed replicas, in the order the app describes them."""
    return [r for r in rows if r.state == AppState.FAILED]


#: Last lines of each failed replica's log the summary shows.
SUMMARY_LINES = 50


def failure_summary(
    rows: Iterable[ReplicaRow], tails: Mapping[str, Sequence[str]], first: str = ""
) -> list[str]:
    """The summary's lines: per failed replica its group, with the last lines of its log
    (``tails``: source key -> last lines, without newlines); the replica ``first`` (its
    key: the root cause) leads, marked so when others failed too, the others follow in the
    app's order."""
    out: list[str] = []
    rows = list(rows)
    # the first can be a replica that raised and had not ended (failures.raised_unended)
    failed = [r for r in rows if r.state == AppState.FAILED or r.key == first]
    failed.sort(key=lambda r: r.key != first)
    for row in failed:
        lines = list(tails.get(row.key, ()))[-SUMMARY_LINES:]
        head = replica_failure(row)
        if len(failed) > 1 and row.key == first:
            head = head.replace(" failed:", " failed first:", 1)
        out.append(f"::group::{head} — last {len(lines)} lines")
        out.extend(f"[{row.key}] {text}" for text in lines)
        out.append("::endgroup::")
    return out


def restart_notes(
    app_id: str,
    app_restarts: tuple[int, int],
    before: Iterable[ReplicaRow],
    after: Iterable[ReplicaRow],
    reason: str = "",
) -> list[str]:
    """What restarted inside the cluster between two describes, one line each: the app
    (``app_restarts``: its count before and after; ``-1``: not told) with the backend's
    ``reason``, and each replica whose restart count grew, with its last exit code and
    reason when told. Nothing on the first describe (``before`` empty, a count unknown).

    >>> rows = [ReplicaRow("t", 0, AppState.RUNNING, restarts=0)]
    >>> later = [ReplicaRow("t", 0, AppState.RUNNING, 137, reason="OOMKilled", restarts=1)]
    >>> for note in restart_notes("a", (0, 1), rows, later, "pod evicted"):
    ...     print(note)
    app a restarted in the cluster (restart 1): pod evicted
    t/0 restarted (restart 1; last exit code 137, OOMKilled)
    """
    notes: list[str] = []
    old, new = app_restarts
    if old >= 0 and new > old:
        why = f": {reason}" if reason else ""
        notes.append(f"app {app_id} restarted in the cluster (restart {new}){why}")
    known = {row.key: row.restarts for row in before}
    for row in after:
        was = known.get(row.key)
        if was is None or row.restarts is None or row.restarts <= was:
            continue
        last = [] if row.exit_code is None else [f"last exit code {row.exit_code}"]
        if row.reason:
            last.append(row.reason)
        detail = f"; {', '.join(last)}" if last else ""
        notes.append(f"{row.key} restarted (restart {row.restarts}{detail})")
    return notes


def _hint(row: ReplicaRow) -> str:
    """What a replica's reason to wait means, in a few words (``""``: nothing to add), by
    the one rule the replica's status reads too
    (:func:`~torchx_provider.schedulers.waiting_reasons.waiting_verdict`), from the
    backend's message."""
    from torchx_provider.schedulers.waiting_reasons import waiting_verdict

    verdict = waiting_verdict(row.reason, row.message)
    return verdict.why if verdict is not None else ""


def _words(row: ReplicaRow) -> str:
    """The backend's words for why ``row`` waits: its message (which starts with the
    reason), else the reason."""
    message = row.message.replace("\n", " ")
    if not message:
        return row.reason
    return message if message.startswith(row.reason) else f"{row.reason}: {message}"


def waiting_notes(rows: Iterable[ReplicaRow]) -> list[tuple[str, str]]:
    """``(key, line)`` for each unfinished replica of ``rows`` that waits to start for a
    reason (an image it cannot pull, a Secret missing): the backend retries it without end,
    so the task log says why it does not start. A line is said once per key (the replica,
    its reason and the backend's words): a kubelet that alternates ``ErrImagePull`` and
    ``ImagePullBackOff`` is told twice, not at every turn.

    >>> row = ReplicaRow("t", 0, AppState.PENDING, reason="InvalidImageName")
    >>> waiting_notes([row])
    [('waits:t/0:InvalidImageName:', 't/0 waits: InvalidImageName (the image name is not valid)')]
    """
    notes = []
    for row in rows:
        if is_terminal(row.state) or not row.reason:
            continue
        hint = _hint(row)
        notes.append(
            (
                f"waits:{row.key}:{row.reason}:{row.message}",
                f"{row.key} waits: {_words(row)}" + (f" ({hint})" if hint else ""),
            )
        )
    return notes


def start_failure(row: ReplicaRow, image: str, waited: float) -> str:
    """Why the replica of ``row`` cannot start, for the task log and the exception: the
    replica, for a pull its ``image``, what the reason means and the backend's words; for a
    wait that could have healed, how long it lasted (``waited`` seconds).

    >>> row = ReplicaRow("t", 0, AppState.PENDING, reason="ErrImagePull",
    ...                  message='ErrImagePull: r/x:1: not found', cannot_start=True)
    >>> start_failure(row, "r/x:1", 0.4).split(" (")[0]
    "t/0 cannot start: image 'r/x:1' cannot be pulled"
    """
    from torchx_provider.schedulers.images import pull_verdict

    pull = pull_verdict(row.reason, row.message) is not None
    what = f"image {image!r} cannot be pulled" if pull and image else row.reason
    hint = _hint(row)
    detail = f" ({hint})" if hint else ""
    words = _words(row)
    if row.cannot_start:
        return f"{row.key} cannot start: {what}{detail}: {words}"
    return f"{row.key} waited {waited:.0f}s without starting: {what}{detail}: {words}"
