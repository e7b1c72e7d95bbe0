"""The ``local_docker`` scheduler and async client: thin faces over one :class:`DockerEngine`.

:class:`DockerScheduler` is the TorchX-compatible ``Scheduler``: its dry run is
:func:`~.translation.app_to_containers`, everything else an engine call.
:class:`DockerAsyncClient` runs the same engine methods in worker threads for the triggerer,
and inspects an app again only when the engine's event stream (:mod:`.events`) says it
changed.
What the backend does is told in :mod:`torchx_provider.schedulers.docker`; create both through
its ``create_scheduler`` and ``create_async_client``.
"""

from __future__ import annotations

import asyncio
import builtins
import os
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchx_provider.schedulers.api import (
    AsyncSchedulerClient,
    DescribeAppResponse,
    ListAppResponse,
    LogQuery,
    Notice,
    Scheduler,
)
from torchx_provider.schedulers.docker.client import DockerClientConfig
from torchx_provider.schedulers.docker.engine import DockerEngine
from torchx_provider.schedulers.docker.events import AppEvents, EngineEvents
from torchx_provider.schedulers.docker.options import DockerOpts
from torchx_provider.schedulers.docker.state import removed_from_outside
from torchx_provider.schedulers.docker.translation import (
    DockerJob,
    app_to_containers,
    new_app_id,
)
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.schedulers.logs import LogCursor, LogSource, TimestampedLine
from torchx_provider.schedulers.wakeup import wait_raised
from torchx_provider.specs.api import AppDef, AppDryRunInfo
from torchx_provider.specs.runopts import CfgVal, runopts

if TYPE_CHECKING:
    from torchx_provider.schedulers.docker.apitypes import DockerClient

BACKEND = "local_docker"


class DockerScheduler(Scheduler[DockerJob]):
    """The TorchX-compatible scheduler of ``local_docker`` (see the package docstring).

    Args:
        session_name: appears in app handles (``local_docker://{session}/{app_id}``).
        client: a ``docker.DockerClient`` to use instead of making one.
        **client_kwargs: :class:`~.client.DockerClientConfig` fields.
    """

    def __init__(
        self, session_name: str = "", client: DockerClient | None = None, **client_kwargs: Any
    ) -> None:
        super().__init__(BACKEND, session_name)
        self.engine = DockerEngine(DockerClientConfig.from_kwargs(**client_kwargs), client)

    # -- submission ------------------------------------------------------------------------------
    def _run_opts(self) -> runopts:
        return DockerOpts.run_opts()

    def _submit_dryrun(
        self, app: AppDef, cfg: Mapping[str, CfgVal], ti_key: TaskInstanceKey | None
    ) -> AppDryRunInfo[DockerJob]:
        opts = DockerOpts.from_cfg(cfg)
        app_id = new_app_id(app.name)
        job = app_to_containers(app, opts, app_id, dict(os.environ), ti_key)
        return AppDryRunInfo(job, str)

    def schedule(self, dryrun_info: AppDryRunInfo[DockerJob]) -> str:
        return self.engine.run(dryrun_info.request)

    def schedule_within(
        self, dryrun_info: AppDryRunInfo[DockerJob], wait_timeout: float | None
    ) -> str:
        """As :meth:`Scheduler.schedule_within`: the image pulls are what an app waits on
        before it runs, and are cancelled ``wait_timeout`` seconds after the call
        (:meth:`DockerEngine.run`)."""
        return self.engine.run(dryrun_info.request, wait_timeout)

    def planned_app_id(self, dryrun_info: AppDryRunInfo[DockerJob]) -> str:
        return dryrun_info.request.app_id

    # -- following -------------------------------------------------------------------------------
    def describe(self, app_id: str) -> DescribeAppResponse | None:
        return self.engine.describe(app_id)

    def list(self) -> list[ListAppResponse]:
        return self.engine.list_apps(self.app_handle)

    def cancel(self, app_id: str) -> None:
        """As :meth:`Scheduler.cancel`; a submission of the app still in progress here is
        stopped instead, which removes what it created (:meth:`DockerEngine.stop_submission`)."""
        if not self.engine.stop_submission(app_id):
            super().cancel(app_id)

    def delete(self, app_id: str) -> None:
        """As :meth:`Scheduler.delete`; a submission of the app still in progress here is
        stopped instead, which removes what it created."""
        if not self.engine.stop_submission(app_id):
            super().delete(app_id)

    def _cancel_existing(self, app_id: str) -> None:
        self.engine.cancel(app_id)

    def _delete_existing(self, app_id: str) -> None:
        # The containers (running ones are killed) and the workspace images built for the app.
        self.engine.delete(app_id)

    def find_apps(
        self, ti_key: TaskInstanceKey, namespaces: Sequence[str] = ()
    ) -> builtins.list[ListAppResponse]:
        # One engine, no namespaces: every app of the task instance is found without them.
        return self.engine.find_apps(ti_key, self.app_handle)

    def _log_lines(self, app_id: str, query: LogQuery) -> Iterable[str]:
        return self.engine.iter_logs(
            app_id,
            query.role_name,
            query.replica_id,
            since=query.since,
            until=query.until,
            follow=query.follow,
            streams=query.streams,
        )

    def close(self) -> None:
        self.engine.close()


class DockerAsyncClient(AsyncSchedulerClient):
    """Describe, read logs and cancel from the triggerer's event loop.

    The docker SDK blocks, so each call runs :class:`DockerEngine` -- the very code the sync
    scheduler uses -- in a worker thread (``asyncio.to_thread``). ``engine`` and ``events``
    replace the engine calls and the shared event stream (default: the process's for this
    engine).
    """

    def __init__(
        self,
        client: DockerClient | None = None,
        *,
        engine: DockerEngine | None = None,
        events: EngineEvents | None = None,
        **client_kwargs: Any,
    ) -> None:
        self.config = DockerClientConfig.from_kwargs(**client_kwargs)
        self.engine = engine or DockerEngine(self.config, client)
        self.events = events
        #: Each followed app's subscription to the engine's event stream, what describe
        #: said last, and the last description it found.
        self._events: dict[str, AppEvents] = {}
        self._described: dict[str, DescribeAppResponse | None] = {}
        self._found: dict[str, DescribeAppResponse] = {}

    def _subscription(self, app_id: str) -> AppEvents:
        found = self._events.get(app_id)
        if found is None:
            events = self.events or EngineEvents.of(self.config)
            found = self._events[app_id] = events.subscribe(app_id)
        return found

    async def describe(self, app_id: str) -> DescribeAppResponse | None:
        """As :meth:`DockerScheduler.describe`; the containers are inspected only when the
        engine's event stream said the app changed (or it is not open), else the last
        answer is given again."""
        sub = self._subscription(app_id)
        if sub.healthy and not sub.stale and app_id in self._described:
            return self._described[app_id]
        sub.stale = False  # an event during the inspection sets it again
        sub.changed.clear()
        # A follow enforces the app's stop_on_failure (the engine has no controller that
        # would): a replica failed for good stops the others, once the root-cause window
        # has passed -- the follow is woken for it then.
        found, again = await asyncio.to_thread(self.engine.follow_describe, app_id)
        if again is not None:
            asyncio.get_running_loop().call_later(again, sub.mark)
        self._described[app_id] = found
        if found is not None:
            self._found[app_id] = found
        return found

    async def last_seen(self, app_id: str) -> DescribeAppResponse | None:
        """See :meth:`AsyncSchedulerClient.last_seen`: how the app ended when this client's
        engine removed it after its end; else, when this client saw it before its end, the
        app FAILED with each replica not seen finished removed from outside
        (:func:`~.state.removed_from_outside`); ``None`` when it never saw the app."""
        ended = self.engine.removed_app(app_id)
        return ended if ended is not None else removed_from_outside(self._found.get(app_id))

    reports_changes = True

    def take_notices(self) -> builtins.list[Notice]:
        """See :meth:`AsyncSchedulerClient.take_notices`: the replicas stopped because
        another failed (:meth:`DockerEngine.stop_survivors`)."""
        return self.engine.take_notices()

    async def wait_changed(self, app_id: str, timeout: float) -> bool:
        """See :meth:`AsyncSchedulerClient.wait_changed`: woken by the app's containers'
        events, and by the event stream opening again after a break."""
        return await wait_raised(self._subscription(app_id).changed, timeout)

    async def read_logs(
        self, app_id: str, role_name: str, replica_id: int, cursor: LogCursor
    ) -> tuple[list[TimestampedLine], LogCursor]:
        return await asyncio.to_thread(self.engine.read_logs, app_id, role_name, replica_id, cursor)

    async def follow_logs(
        self, app_id: str, source: LogSource, cursor: LogCursor, ended: asyncio.Event
    ) -> AsyncIterator[tuple[builtins.list[TimestampedLine], LogCursor]]:
        """See :meth:`AsyncSchedulerClient.follow_logs`: the engine's log stream of the
        replica's container (:mod:`.logstream`)."""
        from torchx_provider.schedulers.docker.logstream import ContainerLogFollower

        async for batch in ContainerLogFollower(self.engine, app_id, source, ended).follow(cursor):
            yield batch

    async def cancel(self, app_id: str) -> None:
        """See :meth:`AsyncSchedulerClient.cancel`: one list call finds the app's unfinished
        containers (none: nothing to do), which are stopped. No describe first: on a task's
        kill the client is new, and its describe would open an event stream and inspect
        every container before the first is stopped."""
        await asyncio.to_thread(self.engine.cancel, app_id)

    async def close(self) -> None:
        subscriptions, self._events = self._events, {}
        self._found.clear()
        for sub in subscriptions.values():
            sub.close()
        await asyncio.to_thread(self.engine.close)
