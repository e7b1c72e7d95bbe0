"""Step 4 of :mod:`~torchx_provider.operators.torchx`: what a finished follow becomes.

From a :class:`~torchx_provider.triggers.events.JobEvent`: the ``replicas`` XCom, the task's
return value, or the exception the task fails with (pure), and the task's end itself
(:func:`finish`: XComs, clean-up, outcome); how to tell Airflow's deferral timeout from other
resumptions, and what to cancel after it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from torchx_provider.failures import bounded, error_class, kind_of, root_cause
from torchx_provider.operators.options import Lifecycle, OnKillAction
from torchx_provider.specs.api import AppState
from torchx_provider.tasklog import TaskLogger
from torchx_provider.triggers.events import (
    ErrorKind,
    EventKind,
    JobEvent,
    ReplicaRow,
    replica_table,
)
from torchx_provider.triggers.summary import failed_rows, replica_failure

if TYPE_CHECKING:
    from airflow.sdk.types import RuntimeTaskInstanceProtocol

#: The XCom of the app's timeline once the task ended (the "TorchX app" view reads it).
TIMELINE_XCOM_KEY = "timeline"

#: How much of a replica's message the ``replicas`` XCom keeps.
XCOM_MESSAGE_LIMIT = 300


def replica_results(event: JobEvent) -> list[dict[str, Any]]:
    """The ``replicas`` XCom: of every replica its role, replica id, state, exit code, the
    backend's reason and the kind of failure (for a failed one), its message (short),
    restarts and host; ``root_cause`` marks the replica that failed first (or, for a stalled
    app, stopped first). Its progress as its log showed it: ``last_line``, ``last_line_at``
    (the backend's time of that line, ISO 8601), ``step`` and ``step_at`` (where a line
    matched ``progress_pattern``; ``None`` and ``""`` otherwise, and for a replica whose
    log was not read); ``stopped_first`` marks those a stalled app names."""
    root = root_row(event)
    return [
        {
            **_progress_of(event, r.key),
            "role": r.role,
            "replica_id": r.replica_id,
            "state": r.state.name,
            "exit_code": r.exit_code,
            "reason": r.reason,
            "failure": r.failure,
            "message": bounded(r.message, XCOM_MESSAGE_LIMIT) if r.message else "",
            "restarts": r.restarts,
            "host": r.hostname,
            "root_cause": root is not None and r.key == root.key,
        }
        for r in event.replicas
    ]


def _progress_of(event: JobEvent, key: str) -> dict[str, Any]:
    shown = event.progress.get(key) or {}
    return {
        "last_line": str(shown.get("last_line") or ""),
        "last_line_at": str(shown.get("last_line_at") or ""),
        "step": shown.get("step"),
        "step_at": str(shown.get("step_at") or ""),
        "stopped_first": key in event.stalled,
    }


def root_row(event: JobEvent) -> ReplicaRow | None:
    """The replica that failed first: the one the follow named, else (an older event) the
    first failed one by finish time, without logs to break ties. Of a stalled app, the
    replica that stopped first."""
    # the named one can be a replica that raised and had not ended (failures.raised_unended)
    named = next((r for r in event.replicas if r.key == event.root_cause), None)
    if named is not None or event.error == ErrorKind.STALL:
        return named
    return root_cause(failed_rows(event.replicas), {})


def failure_error(event: JobEvent, deadline_cause: str = "") -> Exception | None:
    """The exception a try fails with after ``event``, ``None`` when the app succeeded;
    ``deadline_cause`` names what set the follow's deadline (``follow_timeout=3s``), for the
    message of a timeout.

    Every follow that did not see the app succeed becomes one class of
    :mod:`torchx_provider.errors`: refused as configured -> ``AppConfigurationError``; a
    replica that cannot start -> the class of its kind (an image that does not exist:
    ``AppConfigurationError``; a registry limiting the pulls past the grace:
    ``InfrastructureError``), naming it as the root cause; lost
    (the backend unreachable past ``outage_budget``, the follow failing) -> ``AppLostError``;
    the deadline -> ``AppTimeoutError``; a wait past ``queue_timeout`` ->
    ``QueueTimeoutError``; no replica moving for ``stall_timeout`` -> ``AppStalledError``
    (an ``InfrastructureError``), naming the replicas that stopped first; cancelled from
    outside -> ``AppCancelledError``; taken off the backend from outside before it finished
    -> ``InfrastructureError`` (its replicas' kind); failed -> the class of its first
    failed replica's kind
    (:func:`torchx_provider.failures.error_class`), the base ``AppFailedError`` when the
    backend did not say.
    """
    from torchx_provider import errors

    state = event.state.name
    not_seen_ending = unfinished(event, deadline_cause)
    if not_seen_ending is not None:
        if event.kind == EventKind.ERROR and event.error == ErrorKind.START:
            return start_error(event, not_seen_ending)
        if event.kind == EventKind.TIMEOUT and event.error == ErrorKind.STALL:
            return stall_error(event, not_seen_ending)
        if event.kind == EventKind.TIMEOUT and event.error == ErrorKind.QUEUE:
            cls: type[errors.AppFailedError] = errors.QueueTimeoutError
        elif event.kind == EventKind.TIMEOUT:
            cls = errors.AppTimeoutError
        elif event.error in (ErrorKind.CONFIGURATION, ErrorKind.START):
            cls = errors.AppConfigurationError
        else:
            return errors.AppLostError(not_seen_ending, app_id=event.app_id, state=state)
        return cls(not_seen_ending, app_id=event.app_id, state=state)
    if event.succeeded:
        return None
    root = root_row(event)
    if event.state == AppState.CANCELLED:
        cls = errors.AppCancelledError
    elif event.state == AppState.FAILED and root is not None:
        cls = error_class(kind_of(root.failure))
    else:
        cls = errors.AppFailedError
    cause = (
        None
        if root is None
        else errors.RootCause(root.role, root.replica_id, root.exit_code, root.reason, root.message)
    )
    return cls(failure(event), app_id=event.app_id, state=state, root_cause=cause)


def start_error(event: JobEvent, message: str) -> Exception:
    """The exception of a follow that ended because a replica cannot start: its kind's
    class (:func:`torchx_provider.failures.error_class`), ``AppConfigurationError`` when
    the event names no replica or its kind is not known."""
    from torchx_provider import errors

    row = next((r for r in event.replicas if r.key == event.root_cause), None)
    kind = kind_of(row.failure) if row is not None else None
    cls = error_class(kind) if kind is not None else errors.AppConfigurationError
    cause = (
        None
        if row is None
        else errors.RootCause(row.role, row.replica_id, row.exit_code, row.reason, row.message)
    )
    return cls(message, app_id=event.app_id, state=event.state.name, root_cause=cause)


def stall_error(event: JobEvent, message: str) -> Exception:
    """The exception of a follow that found the app stalled: ``AppStalledError``, the
    replica that stopped first as its root cause."""
    from torchx_provider import errors

    row = root_row(event)
    cause = (
        None
        if row is None
        else errors.RootCause(row.role, row.replica_id, row.exit_code, row.reason, row.message)
    )
    return errors.AppStalledError(
        message,
        app_id=event.app_id,
        state=event.state.name,
        root_cause=cause,
        stalled=event.stalled,
    )


def unfinished(event: JobEvent, deadline_cause: str = "") -> str | None:
    """The failure message of a follow that did not see the app's end: it lost the app
    (``ERROR``) or the task's deadline passed (``TIMEOUT``: ``deadline_cause`` names which
    option set it, with its value); ``None``: it saw the end."""
    if event.kind == EventKind.ERROR and event.error == ErrorKind.START:
        return f"TorchX app {event.app_id} could not start as configured: {event.message}"
    if event.kind == EventKind.ERROR and event.error == ErrorKind.CONFIGURATION:
        return (
            f"cannot follow TorchX app {event.app_id} (last state {event.state.name}) as "
            f"configured: {event.message}. It may still be running; a retry of this task "
            "reattaches to it once the configuration is fixed."
        )
    if event.kind == EventKind.ERROR:
        return (
            f"lost track of TorchX app {event.app_id} (last state {event.state.name}): "
            f"{event.message}. It may still be running; a retry of this task reattaches to it."
        )
    if event.kind == EventKind.TIMEOUT and event.error == ErrorKind.QUEUE:
        return f"TorchX app {event.app_id} did not start in time: {event.message}"
    if event.kind == EventKind.TIMEOUT and event.error == ErrorKind.STALL:
        return f"TorchX app {event.app_id} stalled: {event.message}"
    if event.kind == EventKind.TIMEOUT:
        limit = deadline_cause or "execution_timeout / follow_timeout"
        return (
            f"TorchX app {event.app_id} timed out ({limit}) in state {event.state.name}: "
            f"{event.message}"
        )
    return None


def deferral_timed_out(next_method: str, next_kwargs: Mapping[str, Any] | None) -> bool:
    """Whether Airflow resumes the task only to fail it for its deferral timeout."""
    return next_method == "__fail__" and (next_kwargs or {}).get("error") == "Trigger timeout"


def deferral_failure(
    next_method: str,
    next_kwargs: Mapping[str, Any] | None,
    app_id: str | None,
    deadline: str = "",
) -> Exception | None:
    """The exception a try fails with when Airflow resumes it only to fail it
    (``__fail__``: Airflow's ``TaskDeferralTimeout`` / ``TaskDeferralError``), ``None`` for
    any other resumption: its deferral timeout (the backstop of the task's deadline, which
    ``deadline`` names: :func:`~.following.deadline_options`) -> ``AppTimeoutError``; the
    trigger failed or was lost -> ``AppLostError`` (the app may still run; a retry
    reattaches to it).

    >>> timeout = deferral_failure("__fail__", {"error": "Trigger timeout"}, "a", "x=1s")
    >>> str(timeout).endswith("the backstop of the follow's deadline, 120s after it; the "
    ...                       "deadline: x=1s)")
    True
    """
    from torchx_provider import errors
    from torchx_provider.triggers.policy import DEFER_TIMEOUT_GRACE

    if next_method != "__fail__":
        return None
    app = f"TorchX app {app_id}" if app_id else "the TorchX app"
    if deferral_timed_out(next_method, next_kwargs):
        set_by = f"; the deadline: {deadline}" if deadline else ""
        return errors.AppTimeoutError(
            f"{app} timed out: Airflow's deferral timeout passed before the trigger "
            "reported its end (the deferral timeout is the backstop of the follow's "
            f"deadline, {DEFER_TIMEOUT_GRACE:.0f}s after it{set_by})",
            app_id=app_id,
        )
    why = (next_kwargs or {}).get("error") or "unknown"
    return errors.AppLostError(
        f"the trigger following {app} failed ({why}); the app may still be running: a retry "
        "of this task reattaches to it",
        app_id=app_id,
    )


def cancel_after_deferral_timeout(
    app_id: str | None, lifecycle: Lifecycle, new_scheduler: Callable[[], Any], log: TaskLogger
) -> None:
    """Airflow timed the deferral out (the trigger never acted on its deadline): cancel the
    app per ``on_kill_action``; the task fails with the timeout either way."""
    if lifecycle.on_kill_action != OnKillAction.CANCEL:
        log.info("deferral timed out; the app is left running (on_kill_action=keep)")
        return
    if app_id is None:
        log.warning("deferral timed out, and no app handle was stored to cancel")
        return
    try:
        with new_scheduler() as s:
            s.cancel(app_id)
        log.info("deferral timed out; cancelled app %s", app_id)
    except Exception as e:
        log.warning("deferral timed out; could not cancel app %s: %s", app_id, e)


def finish(
    ti: RuntimeTaskInstanceProtocol,
    event: JobEvent,
    handle: str,
    lifecycle: Lifecycle,
    clean_up: tuple[Any, Callable[[], Any]],
    log: TaskLogger,
    deadline_cause: str = "",
    store: Any = None,
) -> dict[str, Any]:
    """The end of a followed task: the XComs of the outcome (``final_state``, ``replicas``,
    the job's link) and the try's app kept for the view (:func:`keep_try`, in ``store``:
    ``task_state_store``, where Airflow has one), the app deleted per ``on_finish_action``
    (through ``clean_up``: an open scheduler client or ``None``, and how to open one), and the
    outcome: the task's result (:func:`task_result`) when the app succeeded, else the error of
    :mod:`torchx_provider.errors` that says why (:func:`failure_error`)."""
    from torchx_provider.links import TorchXJobLink

    replicas = replica_results(event)
    ti.xcom_push(key="final_state", value=event.state.name)
    ti.xcom_push(key="replicas", value=replicas)
    timeline = final_timeline(event)
    if timeline is not None:
        ti.xcom_push(key=TIMELINE_XCOM_KEY, value=timeline)
    keep_try(store, getattr(ti, "try_number", None), event, replicas, timeline, log)
    if event.ui_url:
        TorchXJobLink.persist(ti, event.ui_url)
    error = failure_error(event, deadline_cause)
    if unfinished(event) is None and lifecycle.deletes(event.succeeded):
        scheduler, new_scheduler = clean_up
        action = lifecycle.on_finish_action.value
        delete_app(event.app_id, scheduler, new_scheduler, action, log)
    if error is not None:
        raise error
    log.info("app %s SUCCEEDED", event.app_id)
    return task_result(event, handle)


def keep_try(
    store: Any,
    try_number: Any,
    event: JobEvent,
    replicas: list[dict[str, Any]],
    timeline: Mapping[str, Any] | None,
    log: TaskLogger,
) -> None:
    """Keep what the "TorchX app" view shows of try ``try_number``'s app (its id, end state,
    ``replicas`` and ``timeline``: the XComs it reads) in ``store`` (``task_state_store``,
    Airflow 3.3+) under :data:`~torchx_provider.plugins.api.TRY_STORE_PREFIX` + the try,
    where the next try of the task does not clear it (its XComs it does): the view shows each
    try its own app. Nothing is kept without a store; a failure to keep it is only logged (the
    task's outcome does not depend on the view)."""
    from torchx_provider.plugins.api import TRY_STORE_PREFIX

    if store is None or not isinstance(try_number, int):
        return
    record = {
        "app_id": event.app_id,
        "final_state": event.state.name,
        "replicas": replicas,
        "timeline": timeline,
    }
    try:
        store.set(f"{TRY_STORE_PREFIX}{try_number}", record)
    except Exception as e:
        log.warning("could not keep try %s's app for the TorchX app view: %s", try_number, e)


def delete_app(
    app_id: str, scheduler: Any, new_scheduler: Callable[[], Any], action: str, log: TaskLogger
) -> None:
    """Delete the finished app per ``on_finish_action`` (``action``) through ``scheduler``,
    an open client, or when ``None`` one ``new_scheduler`` opens (closed here). The outcome
    of the task does not depend on the clean-up: a failure is only logged."""
    try:
        if scheduler is None:
            with new_scheduler() as s:
                s.delete(app_id)
        else:
            scheduler.delete(app_id)
        log.info("deleted app %s (on_finish_action=%s)", app_id, action)
    except Exception as e:
        log.warning("could not delete app %s: %s", app_id, e)


def drop_checkpoint(ti: RuntimeTaskInstanceProtocol, log: TaskLogger) -> None:
    """Delete the trigger's progress XCom: bookkeeping of the try's deferral, not a result,
    read by nothing once the try has its event (a failure is only logged; the next try's
    start clears it anyway)."""
    from airflow.sdk.execution_time.xcom import XCom

    from torchx_provider.triggers.job import CHECKPOINT_XCOM_KEY

    try:
        XCom.delete(
            key=CHECKPOINT_XCOM_KEY,
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            map_index=ti.map_index,
        )
    except Exception as e:
        log.warning("could not delete the XCom %s: %s", CHECKPOINT_XCOM_KEY, e)


def live_checkpoint(
    ti: RuntimeTaskInstanceProtocol, log: TaskLogger
) -> Callable[[dict[str, Any]], None]:
    """Stores a follow's checkpoint on the worker (a task that does not defer), for the
    "TorchX app" view; a failure is said once and only costs the view its freshness."""
    from torchx_provider.triggers.job import CHECKPOINT_XCOM_KEY

    failed: list[Exception] = []

    def publish(value: dict[str, Any]) -> None:
        try:
            ti.xcom_push(key=CHECKPOINT_XCOM_KEY, value=value)
        except Exception as e:
            if not failed:
                log.warning("could not store the follow's progress for the app view: %s", e)
            failed.append(e)

    return publish


def stored_app_id(ti: RuntimeTaskInstanceProtocol) -> str | None:
    """The app id of the handle this try stored, ``None`` when none was stored."""
    from torchx_provider.specs.names import read_app_handle

    handle = ti.xcom_pull(task_ids=ti.task_id, key="app_handle", map_indexes=ti.map_index)
    return read_app_handle(handle).app_id if isinstance(handle, str) else None


def task_result(event: JobEvent, handle: str) -> dict[str, Any]:
    """The task's return value: the app, its end state, its restarts, the seconds it waited
    to run (``queued_seconds``: queued, admitted but not started, requeued) and ran
    (``running_seconds``) as the follow saw them, how often it was preempted or evicted and
    requeued (``preemptions``), and its replicas. The phase figures are ``None`` when the
    event did not carry them (a follow of an older version)."""
    return {
        "app_handle": handle,
        "app_id": event.app_id,
        "state": event.state.name,
        "num_restarts": event.num_restarts,
        "queued_seconds": event.queued_seconds,
        "running_seconds": event.running_seconds,
        "preemptions": event.preemptions,
        "replicas": replica_results(event),
        "timeline": final_timeline(event),
    }


def final_timeline(event: JobEvent) -> dict[str, Any] | None:
    """The app's timeline as the follow ended it, with its root cause (``None``: not told,
    a follow of an older version)."""
    from torchx_provider.triggers.timeline import merged_timeline

    return merged_timeline(event.timeline, event.root_cause, event.root_error, event.replicas)


def with_stored_timeline(ti: RuntimeTaskInstanceProtocol, event: JobEvent) -> JobEvent:
    """``event``, with the timeline of the try's checkpoint when the event came without one
    (too large for an event's payload): read before the checkpoint is dropped."""
    import dataclasses

    from torchx_provider.triggers.job import CHECKPOINT_XCOM_KEY

    if event.timeline is not None:
        return event
    try:
        stored = ti.xcom_pull(
            task_ids=ti.task_id, key=CHECKPOINT_XCOM_KEY, map_indexes=ti.map_index
        )
    except Exception:  # the view goes without; the task's outcome does not depend on it
        return event
    if not isinstance(stored, Mapping) or stored.get("app_id") != event.app_id:
        return event
    timeline = stored.get("timeline")
    return dataclasses.replace(event, timeline=timeline) if isinstance(timeline, Mapping) else event


def failure(event: JobEvent) -> str:
    """Why a finished app that did not succeed fails the task: the replica that failed
    first, its reason and Python error first, then the replica table."""
    message = f": {event.message}" if event.message else ""
    root = root_row(event)
    first = f"; first failed replica: {replica_failure(root)}" if root is not None else ""
    shown = root is None or not event.root_error or event.root_error in root.message
    error = "" if shown else f"\n{event.root_error}"
    return (
        f"TorchX app {event.app_id} ended {event.state.name}{message}{first}{error}\n"
        f"{replica_table(event.replicas)}"
    )
