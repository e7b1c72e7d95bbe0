"""``TorchXJobTrigger``: follows a submitted app from the triggerer.

The operator submits on the worker and defers here with :class:`JobTriggerArgs`: the backend
name, the app id, the connection id and plain settings -- never a secret. Airflow stores
trigger kwargs as plain JSON in its metadata database, so the triggerer resolves the
connection itself (:mod:`~torchx_provider.triggers.connections`: Airflow's async connection
API, cached per process for a minute, re-resolved when the backend answers 401 so that rotated
tokens are picked up). The triggerer needs the same connection as the workers (the same
secrets backend) and, for ``conn_id=None``, its own environment (``KUBECONFIG``, in-cluster
service account, ``DOCKER_HOST``).

While the app runs the trigger writes every selected replica's new log lines through
``self.log`` (they land in the task's log), state transitions and per-replica status lines
(see :mod:`~torchx_provider.triggers.follow`), and yields exactly one event: a
:class:`~torchx_provider.triggers.events.JobEvent` payload. A ``deadline`` (the operator's
``execution_timeout`` / ``follow_timeout``, as an absolute time) ends it with a ``timeout``
event, after cancelling the app unless ``on_kill_action="keep"``.

Triggerer restarts and redistribution: the trigger is rebuilt from its kwargs, whose log
cursors are the ones it was deferred with. To resume where it was, it stores its progress --
log cursors and the last state the backend reported -- in an XCom of the task instance (key
:data:`CHECKPOINT_XCOM_KEY`; the operator writes the first one before deferring), and a
rebuilt trigger starts from the furthest cursors; if the app is gone by then, the stored
state says how it ended. Progress is stored a little late (see
:mod:`~torchx_provider.triggers.follow`), so every line it covers has been written to the
task log: nothing is lost even when the triggerer is killed hard; a graceful stop stores the
last progress on the way out and repeats nothing.

``cleanup`` runs on every exit, restarts included, and only closes connections.
``on_kill`` -- Airflow 3.3+, run when a user marks the deferred task failed or success,
clears it or deletes its run, but also (an Airflow bug) when the trigger moves to another
triggerer -- asks Airflow for the task instance's state and cancels the app only if the task
is no longer deferred (:func:`~torchx_provider.triggers.policy.kill_cancels`), and never with
``on_kill_action="keep"``. Once it cancelled the app it reads the app's logs on from where
the follow left them, to the app's end or for :data:`~torchx_provider.triggers.policy.KILL_DRAIN`
seconds: what the replicas say as they stop (a checkpoint saved on SIGTERM) reaches the task
log. Airflow 3.3.2 cancels the trigger again about every second until it has ended, and closes
its log once it has: the kill begins in ``run`` itself, as the follow is cancelled with
Airflow's user-action message, and ``run`` waits for it through those cancels, within the
kill's own bounds (``on_kill`` then joins the kill done). It runs only for a trigger a
triggerer is running: a task marked
failed in the second or so between deferring and being picked up by a triggerer leaves its
app running (as on Airflow < 3.3, where ``on_kill`` does not exist); cancel it with the app
handle from the task's XCom.

Trigger rows written by earlier versions carry ``client_kwargs`` (the connection as the worker
resolved it) and ``secret_keys`` instead of ``conn_id``: they still load, follow with those
client parameters as before (no re-resolution on 401), and are not written back.

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

from torchx_provider.triggers.policy import (
    CANCEL_TIMEOUT,
    KILL_DRAIN,
    KILL_WAIT,
    OUTAGE_BUDGET,
    kill_cancels,
    monotonic_deadline,
    positive_seconds,
)
from torchx_provider.triggers.thaw import LOOP_WATCH

if TYPE_CHECKING:
    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.schedulers.api import AsyncSchedulerClient
    from torchx_provider.schedulers.logs import LogCursor
    from torchx_provider.specs.api import AppState
    from torchx_provider.triggers.progress import ReplicaProgress
    from torchx_provider.triggers.timeline import Timeline

_FOLLOW_MODULE = "torchx_provider.triggers.follow"


def _follow_module() -> ModuleType:
    return importlib.import_module(_FOLLOW_MODULE)


#: XCom key under which a running trigger stores its progress for its successor
CHECKPOINT_XCOM_KEY = "torchx_log_cursors"
#: kwargs of trigger rows written by earlier versions (the connection resolved on the worker)
LEGACY_KWARGS = ("client_kwargs", "secret_keys")

__all__ = ["CANCEL_TIMEOUT", "CHECKPOINT_XCOM_KEY", "JobTriggerArgs", "TorchXJobTrigger"]


@dataclass(frozen=True)
class JobTriggerArgs:
    """Everything a :class:`TorchXJobTrigger` is built from; its kwargs are exactly these fields.

    Args:
        scheduler: backend name, as in :mod:`torchx_provider.backends`.
        app_id: the app to follow.
        conn_id: the connection the triggerer resolves; ``None``: the triggerer's environment.
        poll_interval: seconds between status/log reads.
        log_replicas: which replicas' logs to forward (see ``LogSelection``); ``None``: all.
        log_cursors: ``role/replica`` -> cursor dict where forwarding starts.
        cancel_on_kill: whether ``on_kill`` and the deadline cancel the app.
        task_instance: the deferred task's key (``TaskInstanceKey.to_dict()``): where progress
            is checkpointed and whose state ``on_kill`` asks; ``None`` turns both off.
        outage_budget: seconds of backend outage ridden out before giving up.
        deadline: when to stop following (POSIX seconds, UTC); ``None``: never.
        queue_timeout: seconds the app may wait to run, per wait; ``None``: no limit.
        waiting_since: when its first wait began (POSIX seconds): the submission.
        stall_timeout: seconds no replica of the running app may go without moving;
            ``None``: no limit.
        straggler_after: seconds without moving after which a replica whose peers went on
            is named; ``None``: none is named.
        progress_pattern: the regular expression that finds a replica's step in its lines.
    """

    scheduler: str
    app_id: str
    conn_id: str | None = None
    poll_interval: float = 10.0
    log_replicas: list[str] | None = None
    log_cursors: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancel_on_kill: bool = True
    task_instance: dict[str, Any] | None = None
    outage_budget: float = OUTAGE_BUDGET
    deadline: float | None = None
    queue_timeout: float | None = None
    waiting_since: float | None = None
    stall_timeout: float | None = None
    straggler_after: float | None = None
    progress_pattern: str | None = None

    def __post_init__(self) -> None:
        # A stored row is checked as a new one is: a wait that never ends is refused.
        positive_seconds(self.poll_interval, "poll_interval")
        positive_seconds(self.outage_budget, "outage_budget")
        for name in ("queue_timeout", "stall_timeout", "straggler_after"):
            if getattr(self, name) is not None:
                positive_seconds(getattr(self, name), name)

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


#: The message Airflow (3.3+) cancels a trigger's task with for a user's action (its
#: triggerer's ``_USER_ACTION_CANCEL_MSG``); a shutdown or a move cancels without it.
USER_ACTION_CANCEL = "__airflow_user_action__"


def _user_action(cancel: asyncio.CancelledError) -> bool:
    """Whether a cancel is Airflow's for a user's action (not a shutdown or a move)."""
    return bool(cancel.args) and cancel.args[0] == USER_ACTION_CANCEL


#: The kills (:meth:`TorchXJobTrigger.on_kill`) and closes under way, held while one outlives
#: what began it (asyncio keeps only a weak reference to a task).
_KEPT: set[asyncio.Future[None]] = set()


def _kept(task: asyncio.Future[None]) -> asyncio.Future[None]:
    """``task``, held until it is done."""
    _KEPT.add(task)
    task.add_done_callback(_KEPT.discard)
    return task


class TorchXJobTrigger(BaseTrigger):
    """Follows one TorchX app; see the module documentation. Takes :class:`JobTriggerArgs`
    fields as keyword arguments (and the :data:`LEGACY_KWARGS` of older trigger rows)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        legacy = kwargs.pop("client_kwargs", None)
        kwargs.pop("secret_keys", None)
        self.args = JobTriggerArgs.from_kwargs(kwargs)
        self._legacy_client_kwargs: dict[str, Any] | None = None if legacy is None else dict(legacy)
        self._checkpoints = bool(self.args.task_instance)
        self._fired = False
        #: the app's timeline, as the checkpoint stored it and as the follow goes on with it
        self._stored_timeline: Any = None
        #: a checkpoint was there to read but could not be read (nothing says the app never ran)
        self._checkpoint_unread = False
        self._timeline: Timeline | None = None
        self._target: BackendTarget | None = None
        self._clients: list[AsyncSchedulerClient] = []
        #: the follow under way (``on_kill`` reads the logs on from its cursors)
        self._follower: Any = None
        #: the kill of a user's action, once begun (:meth:`_begin_kill`)
        self._killing: asyncio.Future[None] | None = None

    @classmethod
    def from_args(cls, args: JobTriggerArgs) -> TorchXJobTrigger:
        return cls(**args.to_kwargs())

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", self.args.to_kwargs()

    # -- clients -----------------------------------------------------------------------------------
    async def _resolve(self, stale: BackendTarget | None = None) -> BackendTarget:
        """The backend target: the connection resolved here, or an older row's client kwargs."""
        from torchx_provider.hooks.base import BackendTarget
        from torchx_provider.triggers.connections import resolve_target

        if self._legacy_client_kwargs is not None:
            return BackendTarget(self.args.scheduler, client_kwargs=self._legacy_client_kwargs)
        return await resolve_target(self.args.scheduler, self.args.conn_id, stale=stale)

    async def _client(self, stale: BackendTarget | None = None) -> AsyncSchedulerClient:
        """A client of a (freshly) resolved target; closed by :meth:`_close_clients`."""
        client = await self._new_client(stale)
        self._clients.append(client)
        return client

    async def _new_client(self, stale: BackendTarget | None = None) -> AsyncSchedulerClient:
        """A client of a (freshly) resolved target, for the caller to close."""
        self._target = await self._resolve(stale)
        # Creating a client may import its library and read files: off the loop.
        return await asyncio.to_thread(self._target.create_async_client)

    async def _reconnect(self) -> AsyncSchedulerClient:
        """After a 401: the connection resolved again, a new client, the old one closed."""
        old = list(self._clients)
        client = await self._client(stale=self._target)
        for c in old:
            self._clients.remove(c)
            await c.close()
        return client

    async def _close_clients(self) -> None:
        """Close the follow's clients, to the last, whatever cancels this trigger meanwhile
        (Airflow's repeated cancels of a user's action come about every second)."""
        closing = _kept(asyncio.ensure_future(self._close_each()))
        await asyncio.shield(closing)

    async def _close_each(self) -> None:
        while self._clients:
            await self._clients.pop().close()

    # -- running -----------------------------------------------------------------------------------
    async def run(self) -> AsyncIterator[TriggerEvent]:
        args = self.args
        try:
            follow = await asyncio.to_thread(_follow_module)
        except asyncio.CancelledError as e:
            if _user_action(e):  # cancelled as it began: the kill as below
                await self._kill_through_recancels()
            raise
        from torchx_provider.schedulers.logs import cursors_from_json, merge_cursors  # loaded
        from torchx_provider.triggers.watch import watch_options  # loaded with it

        try:
            client = await self._client()
            stored_cursors, stored_state, stored_progress = await self._load_checkpoint()
            from torchx_provider.triggers.timeline import Timeline  # loaded with follow

            self._timeline = Timeline.from_dict(self._stored_timeline)
            if args.waiting_since is not None:
                self._timeline.submitted(args.waiting_since)
            # the start of the wait a resumed follow times (queue_timeout is per wait): a wait
            # after the app ran (preempted, requeued) from its own start, not the submission;
            # with no checkpoint to tell whether it ran, from this follow's first describe
            waiting_since = (
                None
                if self._checkpoint_unread
                else self._timeline.waiting_again_since() or args.waiting_since
            )
            pattern, watch = watch_options(args)
            follower = follow.JobFollower(
                client,
                args.app_id,
                log=self.log,
                poll_interval=args.poll_interval,
                selection=follow.LogSelection.parse(args.log_replicas),
                cursors=merge_cursors(cursors_from_json(args.log_cursors), stored_cursors),
                state=stored_state,
                checkpoint=self._store_checkpoint if self._checkpoints else None,
                outage_budget=args.outage_budget,
                deadline=None if args.deadline is None else monotonic_deadline(args.deadline),
                cancel_on_timeout=args.cancel_on_kill,
                queue_timeout=args.queue_timeout,
                waiting_since=None if waiting_since is None else monotonic_deadline(waiting_since),
                # an older row has no connection id to resolve again
                reconnect=None if self._legacy_client_kwargs is not None else self._reconnect,
                progress_pattern=pattern,
                progress=stored_progress,
                watch=watch,
                timeline=self._timeline,
                hold_lines=LOOP_WATCH.get().wait_if_back,
                loop_back=LOOP_WATCH.get().came_back,
            )
            self._follower = follower
            event = await follower.run()
        except asyncio.CancelledError as e:
            if _user_action(e):
                # the kill begins and ends here, before Airflow's own handling (on_kill then
                # joins the kill done): see _kill_through_recancels
                await self._kill_through_recancels()
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
            await self._close_clients()
        self._fired = True
        yield TriggerEvent(event.to_payload())

    async def cleanup(self) -> None:
        """Runs on every exit, triggerer restarts included: it must not (and does not) cancel
        the app. Connections are closed by ``run`` itself."""

    async def on_kill(self) -> None:
        """The triggerer cancelled this trigger for a "user action" (Airflow 3.3+): cancel the
        app, within a bound, if the task really left the deferred state, then read its last
        lines (module doc). The kill runs as a task of its own, begun and waited for in
        ``run`` (:meth:`_kill_through_recancels`) when Airflow cancelled the follow for the
        action; here it is joined (done by then, on Airflow 3.3.2), shielded from Airflow's
        cancels. The kill's own bounds (:data:`CANCEL_TIMEOUT`, :data:`KILL_DRAIN`) end it."""
        if self._fired:
            return
        await asyncio.shield(self._begin_kill())

    async def _kill_through_recancels(self) -> None:
        """The kill of a user's action, begun in the follow and waited for there, through the
        cancels Airflow 3.3.2 repeats for the same action.

        Airflow's triggerer cancels a trigger again at every turn of its runner's loop (about
        a second) until the trigger has ended, and once it has, it closes the trigger's log:
        what the trigger says after that goes to the triggerer's own output, not the task
        log. Its ``on_kill`` would be cut by the second cancel (on Python 3.11 its
        ``wait_for`` gives way to it), so the trigger would end a second in, with the app's
        cancel or the ranks' last words still to come. Waited for here, the kill keeps the
        trigger, and so its log, until it is done, within its own bounds
        (:data:`CANCEL_TIMEOUT`, :data:`KILL_DRAIN`), and for :data:`KILL_WAIT` at most (a
        kill stuck asking Airflow or connecting must not keep the trigger for ever). A cancel
        of another kind (a shutdown) is not held up: it ends the wait, with a warning that the
        kill may not end (a triggerer that stops cancels its tasks, this kill among them)."""
        kill = self._begin_kill()
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        until = loop.time() + KILL_WAIT
        while not kill.done() and loop.time() < until:
            try:
                # (asyncio.wait cancels nothing it waits on when its waiter is cancelled)
                await asyncio.wait({kill}, timeout=until - loop.time())
            except asyncio.CancelledError as again:
                if not _user_action(again):
                    self.log.warning(
                        "the triggerer is stopping during the kill of app %s: if it is still "
                        "running, cancel it with the handle in the task's XCom",
                        self.args.app_id,
                    )
                    raise
                if task is not None:
                    task.uncancel()  # the same action's cancel again: taken
        if not kill.done():
            self.log.warning(
                "stopped waiting for the kill of app %s after %.0fs; it goes on, and what it "
                "says from now on is not in this log",
                self.args.app_id,
                KILL_WAIT,
            )

    def _begin_kill(self) -> asyncio.Future[None]:
        """The kill under way, begun now if it was not (once per trigger)."""
        if self._killing is None:
            self._killing = _kept(asyncio.ensure_future(self._kill()))
        return self._killing

    async def _kill(self) -> None:
        """:meth:`on_kill`'s work. Raises nothing (nothing may be left to hear it): a cancel
        that failed is said in the task log, with what to do."""
        # The client is made while Airflow is asked (where a kill can cancel at all): the user
        # waits on both, each a round trip, more than a second on a loaded machine.
        # (its own client: the follow's are closed as the follow ends, which can be now)
        connecting = asyncio.ensure_future(self._new_client()) if self.args.cancel_on_kill else None
        try:
            state, known = await self._task_state()
            if not kill_cancels(self.args.cancel_on_kill, state, known=known):
                why = "on_kill_action=keep" if not self.args.cancel_on_kill else "still deferred"
                self.log.info("trigger stopped; app %s left running (%s)", self.args.app_id, why)
                return
            assert connecting is not None  # kill_cancels is False without cancel_on_kill
            client = await connecting
            await asyncio.wait_for(client.cancel(self.args.app_id), CANCEL_TIMEOUT)
            self.log.info("task killed; cancelled app %s", self.args.app_id)
            await self._last_lines(client)
        except Exception as e:
            self.log.error(
                "task killed, but app %s could not be cancelled (%s: %s): cancel it with the "
                "handle in the task's XCom",
                self.args.app_id,
                type(e).__name__,
                e,
            )
        finally:
            if connecting is not None:
                # not cancelled: a client made in a thread meanwhile would never be closed
                [made] = await asyncio.gather(connecting, return_exceptions=True)
                if not isinstance(made, BaseException):
                    await made.close()

    async def _last_lines(self, client: AsyncSchedulerClient) -> None:
        """After the kill's cancel: the app's logs read on from where the follow left them
        (its cursors), to the app's end or for :data:`KILL_DRAIN` seconds -- the lines the
        replicas write as they stop. Nothing is stored: the task has ended."""
        stopped = self._follower
        if stopped is None:  # the follow had not started: nothing was read to go on from
            return
        follow = await asyncio.to_thread(_follow_module)
        last = follow.JobFollower(
            client,
            self.args.app_id,
            log=self.log,
            poll_interval=1.0,
            selection=stopped.selection,
            cursors=dict(stopped.cursors),
            state=stopped.state,
            cancel_on_timeout=False,
        )
        try:
            await asyncio.wait_for(last.run(), KILL_DRAIN)
        except TimeoutError:
            self.log.info(
                "stopped reading app %s's last lines after %.0fs", self.args.app_id, KILL_DRAIN
            )
        except Exception as e:  # the cancel is done; its last lines are a courtesy
            self.log.warning("could not read app %s's last lines: %s", self.args.app_id, e)

    async def _task_state(self) -> tuple[str | None, bool]:
        """``(state, known)`` of the deferred task instance, asked from Airflow."""
        if not self.args.task_instance:
            return None, False
        try:
            from airflow.sdk.execution_time import task_runner
            from airflow.sdk.execution_time.comms import GetTaskStates

            from torchx_provider.schedulers.labels import TaskInstanceKey

            key = TaskInstanceKey.from_dict(self.args.task_instance)
            reply: Any = await task_runner.SUPERVISOR_COMMS.asend(
                GetTaskStates(
                    dag_id=key.dag_id,
                    map_index=key.map_index,
                    task_ids=[key.task_id],
                    run_ids=[key.run_id],
                )
            )
            # the reply names a mapped instance "<task_id>_<map_index>"
            name = f"{key.task_id}_{key.map_index}" if key.map_index >= 0 else key.task_id
            return reply.task_states[key.run_id][name], True
        except Exception as e:
            self.log.warning("could not read the task's state (%s); taking the kill as real", e)
            return None, False

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

    async def _load_checkpoint(
        self,
    ) -> tuple[dict[str, LogCursor], AppState | None, dict[str, ReplicaProgress]]:
        """The cursors, last state and replicas' progress a predecessor stored (empty
        without a checkpoint)."""
        if not self.args.task_instance:
            return {}, None, {}
        try:
            from torchx_provider.compat import xcom_get_one

            stored = await xcom_get_one(CHECKPOINT_XCOM_KEY, **self._xcom_scope())
        except AttributeError:
            # No async supervisor channel (dag.test() runs triggers in-process without one):
            # nothing to resume from, and nowhere to store progress.
            self.log.info("log cursors are not checkpointed in this process")
            self._checkpoints = False
            return {}, None, {}
        except Exception as e:
            self.log.warning("could not read stored log cursors (%s); starting from kwargs", e)
            self._checkpoint_unread = True
            return {}, None, {}
        if not isinstance(stored, Mapping) or stored.get("app_id") != self.args.app_id:
            return {}, None, {}
        self._stored_timeline = stored.get("timeline")  # absent in earlier checkpoints
        follow = _follow_module()
        from torchx_provider.schedulers.logs import cursors_from_json  # loaded with it
        from torchx_provider.triggers.progress import progress_from_json  # loaded with it

        cursors: dict[str, LogCursor] = cursors_from_json(stored.get("cursors"))
        state = stored.get("state")  # absent in checkpoints of earlier versions
        known = state in follow.AppState.__members__
        last: AppState | None = follow.AppState[state] if known else None
        if cursors:
            self.log.info("resuming logs from stored cursors of %d replica(s)", len(cursors))
        progress = stored.get("progress")  # absent in checkpoints of earlier versions
        return cursors, last, progress_from_json(progress if isinstance(progress, Mapping) else {})

    async def _store_checkpoint(
        self,
        cursors: dict[str, LogCursor],
        state: AppState | None = None,
        progress: Mapping[str, Any] | None = None,
    ) -> None:
        from torchx_provider.compat import xcom_set

        timeline = self._timeline.snapshot() if self._timeline is not None else None
        value = checkpoint_value(self.args.app_id, cursors, state, progress, timeline)
        await xcom_set(CHECKPOINT_XCOM_KEY, value, **self._xcom_scope())


def checkpoint_value(
    app_id: str,
    cursors: Mapping[str, LogCursor],
    state: AppState | None = None,
    progress: Mapping[str, Any] | None = None,
    timeline: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The XCom value of a checkpoint: the app, its log cursors, (once seen) its last state,
    (once lines were read) each replica's progress
    (:meth:`~torchx_provider.triggers.progress.ProgressBook.snapshot`) and (once seen) the
    app's timeline (:meth:`~torchx_provider.triggers.timeline.Timeline.snapshot`), which
    the task's "TorchX app" view shows while the app runs. The operator stores
    the first one before deferring, so that a trigger always finds one (and Airflow logs no
    "XCom not found")."""
    value: dict[str, Any] = {
        "app_id": app_id,
        "cursors": {k: c.to_dict() for k, c in sorted(cursors.items())},
    }
    if state is not None:
        value["state"] = state.name
    if progress:
        value["progress"] = {str(k): dict(v) for k, v in sorted(progress.items())}
    if timeline:
        value["timeline"] = timeline
    return value
