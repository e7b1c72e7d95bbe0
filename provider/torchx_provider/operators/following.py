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

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from torchx_provider.operators.options import Following, Lifecycle, OnKillAction
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
    if started is not None and started.tzinfo is None:  # Airflow's dates are UTC
        started = started.replace(tzinfo=timezone.utc)
    candidates = []
    if execution_timeout is not None:
        candidates.append((started or now) + execution_timeout)
    if follow_timeout is not None:
        candidates.append(now + timedelta(seconds=follow_timeout))
    return min(candidates) if candidates else None


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
    )
    return TorchXJobTrigger.from_args(args)


async def follow_here(
    target: BackendTarget,
    app_id: str,
    following: Following,
    lifecycle: Lifecycle,
    log: Any,
    deadline: datetime | None = None,
) -> JobEvent:
    """Follow ``app_id`` on the worker until it ends (or ``deadline``); lines go to ``log``."""
    from torchx_provider.triggers.follow import JobFollower

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
        )
        return await follower.run()
    finally:
        await client.close()
