"""Step 3 of :mod:`~torchx_provider.operators.torchx`: follow the job, deferred or here.

Deferred, the job is followed by a :class:`~torchx_provider.triggers.TorchXJobTrigger` built
by :func:`job_trigger` from plain values; on the worker, :func:`follow_here` runs the same
loop (:class:`~torchx_provider.triggers.follow.JobFollower`) with the task's logger.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchx_provider.operators.options import Following, Lifecycle, OnKillAction

if TYPE_CHECKING:
    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.schedulers.labels import TaskInstanceKey
    from torchx_provider.triggers.events import JobEvent
    from torchx_provider.triggers.job import TorchXJobTrigger


def job_trigger(
    target: BackendTarget,
    app_id: str,
    ti_key: TaskInstanceKey,
    following: Following,
    lifecycle: Lifecycle,
) -> TorchXJobTrigger:
    """The trigger that follows ``app_id`` for the task instance ``ti_key``."""
    from torchx_provider.triggers.job import JobTriggerArgs, TorchXJobTrigger

    args = JobTriggerArgs(
        scheduler=target.backend,
        app_id=app_id,
        client_kwargs=dict(target.client_kwargs),
        poll_interval=following.poll_interval,
        log_replicas=None if following.log_replicas is None else list(following.log_replicas),
        cancel_on_kill=lifecycle.on_kill_action == OnKillAction.CANCEL,
        task_instance=ti_key.to_dict(),
        secret_keys=list(target.secret_keys),
    )
    return TorchXJobTrigger.from_args(args)


async def follow_here(
    target: BackendTarget, app_id: str, following: Following, log: Any
) -> JobEvent:
    """Follow ``app_id`` on the worker until it ends; its lines go to ``log``."""
    from torchx_provider.triggers.follow import JobFollower

    client = target.create_async_client()
    try:
        follower = JobFollower(
            client,
            app_id,
            log=log,
            poll_interval=following.poll_interval,
            selection=following.selection,
        )
        return await follower.run()
    finally:
        await client.close()
