"""Step 3 of :mod:`~torchx_provider.operators.torchx`: follow the job, deferred or here.

Deferred, the job is followed by a :class:`~torchx_provider.triggers.TorchXJobTrigger` built
by :func:`job_trigger` from plain values -- the connection id, never what it resolves to (the
triggerer resolves it; see :mod:`~torchx_provider.triggers.connections`). On the worker,
:func:`follow_here` runs the same loop (:class:`~torchx_provider.triggers.follow.JobFollower`)
with the worker's resolved target and the task's logger.

Both stop at the same :func:`follow_deadline`, computed once per task: Airflow does not apply
``execution_timeout`` while a task is deferred, so the follow applies it itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from torchx_provider.operators.options import Following, Lifecycle, OnKillAction
from torchx_provider.tasklog import TaskLogger
from torchx_provider.triggers.policy import DEFER_TIMEOUT_GRACE, monotonic_deadline

if TYPE_CHECKING:
    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.schedulers.labels import TaskInstanceKey
    from torchx_provider.triggers.events import JobEvent
    from torchx_provider.triggers.job import TorchXJobTrigger


def follow_deadline(
    started: datetime | None,
    execution_timeout: timedelta | None,
    follow_timeout: float | None,
    now: datetime,
) -> datetime | None:
    """When the follow must stop: ``started + execution_timeout`` or ``now + follow_timeout``,
    whichever is earlier; ``None`` when neither is set. ``started`` is the task's start
    (``now`` if unknown).

    >>> t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    >>> follow_deadline(t0, timedelta(hours=1), 600, t0 + timedelta(minutes=55)).minute
    0
    >>> follow_deadline(t0, timedelta(hours=1), 60, t0).minute
    1
    >>> follow_deadline(t0, None, None, t0) is None
    True
    """
    limits = _limits(started, execution_timeout, follow_timeout, now)
    return min(limits)[0] if limits else None


def deadline_cause(
    started: datetime | None,
    execution_timeout: timedelta | None,
    follow_timeout: float | None,
    now: datetime,
) -> str:
    """Which option sets :func:`follow_deadline`, with its value (``""``: neither is set),
    for the message of a task that timed out.

    >>> t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    >>> deadline_cause(t0, timedelta(hours=1), 600, t0 + timedelta(minutes=55))
    'execution_timeout=1:00:00'
    >>> deadline_cause(t0, timedelta(hours=1), 3, t0)
    'follow_timeout=3s'
    """
    limits = _limits(started, execution_timeout, follow_timeout, now)
    return min(limits)[1] if limits else ""


def deadline_options(execution_timeout: timedelta | None, follow_timeout: float | None) -> str:
    """The options that may set the follow's deadline, with their values, for a message
    that cannot tell which did (Airflow's deferral timeout, its backstop).

    >>> deadline_options(timedelta(minutes=5), None)
    'execution_timeout=0:05:00'
    >>> deadline_options(timedelta(minutes=5), 3)
    'the earlier of execution_timeout=0:05:00 and follow_timeout=3s'
    """
    given = []
    if execution_timeout is not None:
        given.append(f"execution_timeout={execution_timeout}")
    if follow_timeout is not None:
        given.append(f"follow_timeout={follow_timeout:g}s")
    return " and ".join(given) if len(given) < 2 else "the earlier of " + " and ".join(given)


def _limits(
    started: datetime | None,
    execution_timeout: timedelta | None,
    follow_timeout: float | None,
    now: datetime,
) -> list[tuple[datetime, str]]:
    """Each limit set: when it passes, and the option with its value."""
    if started is not None and started.tzinfo is None:  # Airflow's dates are UTC
        started = started.replace(tzinfo=timezone.utc)
    limits = []
    if execution_timeout is not None:
        limits.append(
            ((started or now) + execution_timeout, f"execution_timeout={execution_timeout}")
        )
    if follow_timeout is not None:
        limits.append(
            (now + timedelta(seconds=follow_timeout), f"follow_timeout={follow_timeout:g}s")
        )
    return limits


def defer_timeout(deadline: datetime | None, now: datetime) -> timedelta | None:
    """Airflow's backstop for a deferral: the follow's own ``deadline`` plus a grace, so that
    the trigger, not Airflow, is what acts on it (``None``: no deadline).

    >>> t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    >>> defer_timeout(t0 + timedelta(seconds=60), t0) == timedelta(seconds=60 + DEFER_TIMEOUT_GRACE)
    True
    """
    if deadline is None:
        return None
    return max(deadline - now, timedelta(0)) + timedelta(seconds=DEFER_TIMEOUT_GRACE)


def job_trigger(
    target: BackendTarget,
    app_id: str,
    ti_key: TaskInstanceKey,
    following: Following,
    lifecycle: Lifecycle,
    deadline: datetime | None = None,
    waiting_since: datetime | None = None,
) -> TorchXJobTrigger:
    """The trigger that follows ``app_id`` for the task instance ``ti_key``: it names the
    connection (``target.conn_id``) and carries no secret. ``waiting_since``: when the
    app's first wait to run began (its submission), for ``queue_timeout``."""
    from torchx_provider.triggers.job import JobTriggerArgs, TorchXJobTrigger

    args = JobTriggerArgs(
        scheduler=target.backend,
        app_id=app_id,
        conn_id=target.conn_id,
        poll_interval=following.poll_interval,
        log_replicas=None if following.log_replicas is None else list(following.log_replicas),
        cancel_on_kill=lifecycle.on_kill_action == OnKillAction.CANCEL,
        task_instance=ti_key.to_dict(),
        outage_budget=following.outage_budget,
        deadline=None if deadline is None else deadline.timestamp(),
        queue_timeout=following.queue_timeout,
        waiting_since=None if waiting_since is None else waiting_since.timestamp(),
        stall_timeout=following.stall_timeout,
        straggler_after=following.straggler_after,
        progress_pattern=following.progress_pattern,
    )
    return TorchXJobTrigger.from_args(args)


async def follow_here(
    target: BackendTarget,
    app_id: str,
    following: Following,
    lifecycle: Lifecycle,
    log: TaskLogger,
    deadline: datetime | None = None,
    publish: Callable[[dict[str, Any]], None] | None = None,
    killed: Callable[[], bool] = lambda: False,
) -> JobEvent:
    """Follow ``app_id`` on the worker until it ends (or ``deadline``); lines go to ``log``.
    ``publish`` (blocking; called in a thread) stores the follow's checkpoint as it moves,
    as a trigger does: what the "TorchX app" view shows while the task runs. ``killed``
    says whether the task's own kill has cancelled the app (``on_kill``)."""
    from torchx_provider.triggers.follow import JobFollower
    from torchx_provider.triggers.job import checkpoint_value
    from torchx_provider.triggers.timeline import Timeline
    from torchx_provider.triggers.watch import watch_options

    pattern, watch = watch_options(following)
    timeline = Timeline()

    async def checkpoint(cursors: Any, state: Any, progress: Any) -> None:
        if publish is not None:
            value = checkpoint_value(app_id, cursors, state, progress, timeline.snapshot())
            await asyncio.to_thread(publish, value)

    client = target.create_async_client()
    try:
        follower = JobFollower(
            client,
            app_id,
            log=log,
            poll_interval=following.poll_interval,
            selection=following.selection,
            outage_budget=following.outage_budget,
            deadline=None if deadline is None else monotonic_deadline(deadline.timestamp()),
            cancel_on_timeout=lifecycle.on_kill_action == OnKillAction.CANCEL,
            queue_timeout=following.queue_timeout,
            progress_pattern=pattern,
            watch=watch,
            checkpoint=checkpoint if publish is not None else None,
            timeline=timeline,
            killed=killed,
        )
        return await follower.run()
    finally:
        await client.close()
