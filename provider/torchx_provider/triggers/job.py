"""``TorchXJobTrigger``: follows a submitted app from the triggerer.

The operator submits on the worker and defers here with :class:`JobTriggerArgs`: the backend
name, the app id and the plain client parameters the worker resolved from the connection
(the triggerer never reads the connection; Airflow stores trigger kwargs encrypted and its
API does not show them; :meth:`TorchXJobTrigger.__repr__` redacts the secret ones).

While the app runs the trigger writes every selected replica's new log lines through
``self.log`` (they land in the task's log), state transitions and per-replica status lines
(see :mod:`~torchx_provider.triggers.follow`), and yields exactly one event: a
:class:`~torchx_provider.triggers.events.JobEvent` payload.

Triggerer restarts and redistribution: the trigger is rebuilt from its kwargs, whose log
cursors are the ones it was deferred with. To resume where it was, it stores its cursors in
an XCom of the task instance (key :data:`CHECKPOINT_XCOM_KEY`; the operator writes the first
one before deferring), and a rebuilt trigger starts from the furthest of the two. Cursors are
stored one poll cycle late, so every line they cover has long been written to the task log:
nothing is lost even when the triggerer is killed hard, and a restart repeats at most the
lines forwarded in the one cycle before it -- per replica, what the replica wrote in about one
``poll_interval`` (the deployment test, 4 lines/s with a 1 s interval, repeats 4 per replica).

``cleanup`` runs on every exit, restarts included, and only closes connections.
``on_kill`` -- Airflow 3.3+, run when a user marks the deferred task failed or success or
clears it -- cancels the app (unless the operator said ``on_kill_action="keep"``). It runs
only for a trigger a triggerer is running: a task marked failed in the second or so between
deferring and being picked up by a triggerer leaves its app running (as on Airflow < 3.3,
where ``on_kill`` does not exist); cancel it with the app handle from the task's XCom.

The triggerer imports this module on its event loop, so it imports nothing heavy at the top;
clients are created and the follow machinery is loaded in worker threads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

if TYPE_CHECKING:
    from torchx_provider.schedulers.logs import LogCursor

_FOLLOW_MODULE = "torchx_provider.triggers.follow"


def _follow_module() -> ModuleType:
    return importlib.import_module(_FOLLOW_MODULE)


#: XCom key under which a running trigger stores its log cursors for its successor
CHECKPOINT_XCOM_KEY = "torchx_log_cursors"
#: seconds ``on_kill`` may spend cancelling (Airflow bounds it too, by default at 30 s)
CANCEL_TIMEOUT = 20.0


@dataclass(frozen=True)
class JobTriggerArgs:
    """Everything a :class:`TorchXJobTrigger` is built from; its kwargs are exactly these fields.

    Args:
        scheduler: backend name, as for ``create_async_client``.
        app_id: the app to follow.
        client_kwargs: the backend's client parameters, resolved on the worker.
        poll_interval: seconds between status/log reads.
        log_replicas: which replicas' logs to forward (see ``LogSelection``); ``None``: all.
        log_cursors: ``role/replica`` -> cursor dict where forwarding starts.
        cancel_on_kill: whether ``on_kill`` cancels the app.
        task_instance: the deferred task's key (``TaskInstanceKey.to_dict()``): where log
            cursors are checkpointed; ``None`` turns checkpoints off.
        secret_keys: which ``client_kwargs`` are secret (redacted in ``repr``).
    """

    scheduler: str
    app_id: str
    client_kwargs: dict[str, Any] = field(default_factory=dict)
    poll_interval: float = 10.0
    log_replicas: list[str] | None = None
    log_cursors: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancel_on_kill: bool = True
    task_instance: dict[str, Any] | None = None
    secret_keys: list[str] = field(default_factory=list)

    def to_kwargs(self) -> dict[str, Any]:
        """The trigger kwargs: one entry per field, JSON-safe."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> JobTriggerArgs:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise TypeError(f"TorchXJobTrigger got unknown argument(s) {unknown}")
        return cls(**dict(kwargs))


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class TorchXJobTrigger(BaseTrigger):
    """Follows one TorchX app; see the module documentation. Takes :class:`JobTriggerArgs`
    fields as keyword arguments."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.args = JobTriggerArgs.from_kwargs(kwargs)
        self._checkpoints = bool(self.args.task_instance)

    @classmethod
    def from_args(cls, args: JobTriggerArgs) -> TorchXJobTrigger:
        return cls(**args.to_kwargs())

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", self.args.to_kwargs()

    def __repr__(self) -> str:
        kwargs = self.args.to_kwargs()
        kwargs["client_kwargs"] = {
            k: ("***" if k in self.args.secret_keys and v else v)
            for k, v in self.args.client_kwargs.items()
        }
        return self.repr(self.serialize()[0], kwargs)

    # -- running -----------------------------------------------------------------------------------
    def _create_client(self) -> Any:
        from torchx_provider.backends import get_backend

        return get_backend(self.args.scheduler).create_async_client(**self.args.client_kwargs)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        args = self.args
        client = None
        follow = await asyncio.to_thread(_follow_module)
        try:
            # Creating a client may import its library and open connections: off the loop.
            client = await asyncio.to_thread(self._create_client)
            cursors = follow.merge_cursors(
                follow.cursors_from_json(args.log_cursors), await self._load_checkpoint()
            )
            follower = follow.JobFollower(
                client,
                args.app_id,
                log=self.log,
                poll_interval=args.poll_interval,
                selection=follow.LogSelection.parse(args.log_replicas),
                cursors=cursors,
                checkpoint=self._store_checkpoint if self._checkpoints else None,
            )
            event = await follower.run()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.log.exception("following app %s failed", args.app_id)
            event = follow.JobEvent(
                kind=follow.EventKind.ERROR,
                app_id=args.app_id,
                state=follow.AppState.UNKNOWN,
                message=f"{type(e).__name__}: {e}",
                log_cursors=args.log_cursors,
            )
        finally:
            if client is not None:
                await client.close()
        yield TriggerEvent(event.to_payload())

    async def cleanup(self) -> None:
        """Runs on every exit, triggerer restarts included: it must not (and does not) cancel
        the app. Connections are closed by ``run`` itself."""

    async def on_kill(self) -> None:
        """A user killed the deferred task (Airflow 3.3+): cancel the app, within a bound."""
        if not self.args.cancel_on_kill:
            self.log.info(
                "task killed; app %s left running (on_kill_action=keep)", self.args.app_id
            )
            return
        client = await asyncio.to_thread(self._create_client)
        try:
            await asyncio.wait_for(client.cancel(self.args.app_id), CANCEL_TIMEOUT)
            self.log.info("task killed; cancelled app %s", self.args.app_id)
        finally:
            await client.close()

    # -- checkpoints -------------------------------------------------------------------------------
    def _xcom_scope(self) -> dict[str, Any]:
        from torchx_provider.schedulers.labels import TaskInstanceKey

        key = TaskInstanceKey.from_dict(self.args.task_instance or {})
        return {
            "dag_id": key.dag_id,
            "task_id": key.task_id,
            "run_id": key.run_id,
            "map_index": key.map_index,
        }

    async def _load_checkpoint(self) -> dict[str, LogCursor]:
        if not self.args.task_instance:
            return {}
        try:
            from airflow.sdk.execution_time.xcom import XCom

            stored = await XCom.aget_one(key=CHECKPOINT_XCOM_KEY, **self._xcom_scope())
        except AttributeError:
            # No async supervisor channel (dag.test() runs triggers in-process without one):
            # nothing to resume from, and nowhere to store progress.
            self.log.info("log cursors are not checkpointed in this process")
            self._checkpoints = False
            return {}
        except Exception as e:
            self.log.warning("could not read stored log cursors (%s); starting from kwargs", e)
            return {}
        if not isinstance(stored, Mapping) or stored.get("app_id") != self.args.app_id:
            return {}
        cursors: dict[str, LogCursor] = _follow_module().cursors_from_json(stored.get("cursors"))
        if cursors:
            self.log.info("resuming logs from stored cursors of %d replica(s)", len(cursors))
        return cursors

    async def _store_checkpoint(self, cursors: dict[str, LogCursor]) -> None:
        from airflow.sdk.execution_time.xcom import XCom

        value = checkpoint_value(self.args.app_id, cursors)
        await XCom.aset(CHECKPOINT_XCOM_KEY, value, **self._xcom_scope())


def checkpoint_value(app_id: str, cursors: Mapping[str, LogCursor]) -> dict[str, Any]:
    """The XCom value of a checkpoint. The operator stores the first one before deferring,
    so that a trigger always finds one (and Airflow logs no "XCom not found")."""
    return {"app_id": app_id, "cursors": {k: c.to_dict() for k, c in sorted(cursors.items())}}
