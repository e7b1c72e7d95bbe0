"""The async face of a Kubernetes backend: describe, logs and cancel for the triggerer.

:class:`KubeAsyncClient` awaits the operations of :class:`~.core.KubeCore` over the async
client (:class:`~.io_async.AsyncKube`): the same decisions as the worker's scheduler, and
the same rule for a log that cannot be read yet.

Following reads the event loop's shared caches (:class:`~.hub.InformerHub`): the first
:meth:`~KubeAsyncClient.describe` of an app subscribes to it and waits (up to
:data:`SYNC_WAIT` seconds) for the first list; from then on ``describe``, ``read_logs``'s
choice of pod and :meth:`~KubeAsyncClient.last_seen` make no request, and
:meth:`~KubeAsyncClient.wait_changed` sleeps until the app's object or pods change. The
client falls back to the API calls -- one GET of the object, one LIST of its pods (and, for
a Volcano job that waits, of its PodGroup's Events and its own), exactly what
:meth:`.core.KubeCore.describe` does -- whenever the cache cannot answer: before the
first list, while an informer is failing (its cache may be stale), and for an object the
informer has never seen (not labelled as this provider's, or created after the last event
arrived). The Events that say why a Volcano job waits come from the namespace's shared
Events watch, read at each describe; whether they can be read never sends a describe to
the API server.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from torchx_provider.errors import BackendUnavailableError, SubmissionError
from torchx_provider.schedulers.api import (
    AsyncSchedulerClient,
    DescribeAppResponse,
    ListAppResponse,
    Notice,
)
from torchx_provider.schedulers.kube.client_config import KubeClientConfig
from torchx_provider.schedulers.kube.core import KubeCore, with_owned
from torchx_provider.schedulers.kube.errors import Permission
from torchx_provider.schedulers.kube.hub import AppWatch, InformerHub
from torchx_provider.schedulers.kube.io import AsyncKubeIO
from torchx_provider.schedulers.kube.io_async import AsyncKube
from torchx_provider.schedulers.kube.logfollow import ReplicaLogFollower
from torchx_provider.schedulers.kube.podlogs import log_request, no_log_yet, started_replica_pod
from torchx_provider.schedulers.kube.request import KubeTranslation, parse_app_id
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.schedulers.logs import (
    LogCursor,
    LogSource,
    TimestampedLine,
    advance,
    timestamped_lines,
)
from torchx_provider.schedulers.wakeup import wait_raised
from torchx_provider.specs.api import NONE, AppState
from torchx_provider.specs.names import make_app_handle

if TYPE_CHECKING:
    from torchx_provider.schedulers.kube.status import PodDetails

#: Seconds the first describe of an app waits for the shared caches' first list.
SYNC_WAIT = 10.0


class KubeAsyncClient(AsyncSchedulerClient):
    """describe / read_logs / cancel (and list / find_apps) of a Kubernetes backend."""

    def __init__(
        self,
        translation: KubeTranslation,
        client_config: KubeClientConfig,
        hub: InformerHub | None = None,
        *,
        kube: AsyncKubeIO | None = None,
    ) -> None:
        self.translation = translation
        self.client_config = client_config
        #: The API calls (default: :class:`AsyncKube` over ``client_config``).
        self.kube: AsyncKubeIO = kube or AsyncKube(client_config)
        self.core = KubeCore(translation, self.kube)
        #: The shared caches (default: the running event loop's).
        self.hub = hub
        self._watches: dict[str, AppWatch] = {}
        #: apps this client changed (cancel) -> the version the cache held then; until the
        #: cache holds another, describe reads the API server
        self._changed_here: dict[str, str | None] = {}

    async def watch(self, app_id: str) -> AppWatch:
        """The app's subscription to the shared caches (made, and synced, on first use)."""
        found = self._watches.get(app_id)
        if found is None:
            namespace, name = parse_app_id(app_id)
            hub = self.hub or InformerHub.current()
            resources = self.translation.read_resources()
            found = hub.subscribe(
                self.client_config,
                namespace,
                resources,
                name,
                self.kube.list_watch,
                self.translation.event_kinds,
                self.kube.event_watch if self.translation.event_kinds else None,
                self.translation.owned,
                self.kube.owned_watch if self.translation.owned else None,
                self.translation.queues,
                self.kube.queue_watch if self.translation.queues else None,
            )
            self._watches[app_id] = found
            await found.wait_synced(SYNC_WAIT)
        return found

    async def describe(self, app_id: str) -> DescribeAppResponse | None:
        """As :meth:`KubeScheduler.describe`, from the shared cache when it can answer (see
        the module docstring); an app deleted since it was seen is ``None`` -- what it was
        before is :meth:`last_seen`. Clears the app's :meth:`wait_changed` flag."""
        watch = await self.watch(app_id)
        if app_id in self._changed_here:
            if _version(watch.object()) == self._changed_here[app_id]:
                # Changed through this client (cancel) and the watch has not shown it
                # yet: read your own write from the API server, not the older cache.
                return await self.core.describe(app_id)
            del self._changed_here[app_id]
        watch.changed.clear()
        if watch.healthy:
            obj = watch.object()
            if obj is not None:
                pods = watch.pods()
                owned = watch.owned()
                events = self._events(app_id, obj, watch)
                queue = None
                if self.translation.reads_queue(obj, owned):
                    # said with what its queue holds: once the queue was read (or refused)
                    await watch.queues_settled(SYNC_WAIT)
                    queue = watch.queue(obj)
                self.core.observe(obj, pods, events, owned, watch.app_of_uid, queue)
                return with_failures(with_owned(self._describe(app_id, obj, pods), owned), watch)
            if watch.last_seen is not None:
                return None
        try:
            return await self.core.describe(app_id)
        except BackendUnavailableError as e:
            # The watch may have been failing for a while before this describe: the
            # outage began then.
            e.unreachable_for = max(e.unreachable_for, watch.failing_for())
            raise

    def _events(
        self, app_id: str, obj: Mapping[str, Any], watch: AppWatch
    ) -> builtins.list[dict[str, Any]]:
        """The Events the watch keeps about the app, while it waits (when they cannot be
        read, that is said once per namespace)."""
        if not self.translation.event_subjects(obj):
            return []
        refused = watch.events_refused()
        if refused is not None:
            permission = refused if isinstance(refused, Permission) else None
            self.core.events_refused(parse_app_id(app_id)[0], permission)
        return watch.events()

    def _describe(
        self, app_id: str, obj: dict[str, Any], pods: builtins.list[dict[str, Any]]
    ) -> DescribeAppResponse:
        return self.translation.describe(
            app_id, obj, pods if self.translation.needs_pods(obj) else []
        )

    reports_changes = True

    def take_notices(self) -> builtins.list[Notice]:
        return self.core.take_notices()

    def notice(self, text: str, key: str) -> None:
        """Tell the task log ``text`` at the next describe, once per ``key``."""
        self.core.notice(text, key=key)

    async def last_seen(self, app_id: str) -> DescribeAppResponse | None:
        """What the app was when the cache last saw it, if it has been deleted since (by its
        TTL, or by someone) while this client followed it; ``None`` if it was not.

        A job that ended and was then deleted keeps the state it ended in here, though
        :meth:`describe` says ``None``: a follower ends with what the backend said."""
        watch = await self.watch(app_id)
        if watch.last_seen is None:
            return None
        obj, pods = watch.last_seen
        return with_failures(self._describe(app_id, obj, pods), watch)

    async def wait_changed(self, app_id: str, timeout: float) -> bool:
        """See :meth:`AsyncSchedulerClient.wait_changed`: woken by the app's watch events."""
        return await wait_raised((await self.watch(app_id)).changed, timeout)

    async def list(self, session_name: str = "") -> builtins.list[ListAppResponse]:
        """As :meth:`KubeScheduler.list` (handles name ``session_name``)."""
        return await self.core.list(
            self.client_config.default_namespace(), self._handle(session_name)
        )

    async def find_apps(
        self, ti_key: TaskInstanceKey, session_name: str = "", namespaces: Sequence[str] = ()
    ) -> builtins.list[ListAppResponse]:
        """As :meth:`KubeScheduler.find_apps` (handles name ``session_name``)."""
        searched = [*namespaces, self.client_config.default_namespace()]
        return await self.core.find_apps(searched, ti_key, self._handle(session_name))

    def _handle(self, session_name: str) -> Any:
        return lambda app_id: make_app_handle(self.translation.backend, session_name, app_id)

    async def read_logs(
        self, app_id: str, role_name: str, replica_id: int, cursor: LogCursor
    ) -> tuple[builtins.list[TimestampedLine], LogCursor]:
        namespace, name = parse_app_id(app_id)
        watch = await self.watch(app_id)
        if watch.healthy:
            pod = started_replica_pod(watch.pods(), role_name, replica_id)
        else:
            pod = await self.core.started_pod(namespace, name, role_name, replica_id)
        if pod is None:
            return [], cursor
        kwargs = log_request(pod, since=cursor.since)
        try:
            data = await self.kube.log_bytes(kwargs)
        except SubmissionError as e:
            if no_log_yet(e):
                return [], cursor
            raise
        return advance(cursor, timestamped_lines([data]))

    async def follow_logs(
        self, app_id: str, source: LogSource, cursor: LogCursor, ended: asyncio.Event
    ) -> AsyncIterator[tuple[builtins.list[TimestampedLine], LogCursor]]:
        """See :meth:`AsyncSchedulerClient.follow_logs`: every container instance of the
        replica as a stream (:mod:`.logfollow`)."""
        async for batch in ReplicaLogFollower(self, app_id, source, ended).follow(cursor):
            yield batch

    async def replica_pods(
        self, app_id: str, role_name: str, replica_id: int
    ) -> builtins.list[dict[str, Any]]:
        """A replica's pods from the API server (a log follower's fallback)."""
        namespace, name = parse_app_id(app_id)
        return await self.core.replica_pods(namespace, name, role_name, replica_id)

    async def open_log(
        self, namespace: str, pod: str, query: builtins.list[tuple[str, str]]
    ) -> Any:
        """A pod's log as a raw response (a log follower reads it)."""
        return await self.kube.open_log(namespace, pod, query)

    async def cancel(self, app_id: str) -> None:
        await self.core.cancel(app_id)
        watch = self._watches.get(app_id)
        if watch is not None:  # until the cache shows another version, it is older
            self._changed_here[app_id] = _version(watch.object())

    async def close(self) -> None:
        """Leave the shared caches and give the API client back (safe to call twice)."""
        watches, self._watches = self._watches, {}
        for watch in watches.values():
            watch.close()
        await self.kube.close()


class EndsSeen(Protocol):
    """What :func:`with_failures` reads of an app's watch (:class:`~.hub.AppWatch`)."""

    @property
    def failures(self) -> Mapping[tuple[str, int], PodDetails]:
        """``(role, replica)`` -> how its last failed pod ended."""

    @property
    def disrupted(self) -> Mapping[str, str]:
        """The app's pods the platform said it was ending, by UID, with its words."""


def with_failures(resp: DescribeAppResponse, watch: EndsSeen) -> DescribeAppResponse:
    """``resp`` with the exit code, error, reason, failure kind and end time of each failed
    replica whose pod is gone filled in from how the watch saw it end
    (:attr:`.hub.AppWatch.failures`): Volcano deletes the other pods of a job that failed,
    and the replica that failed first must keep what names its cause. Then
    :func:`with_disruptions`."""
    for role_status in resp.roles_statuses:
        for replica in role_status.replicas:
            seen = watch.failures.get((role_status.role, replica.id))
            if replica.state is not AppState.FAILED or seen is None:
                continue
            if replica.exit_code is None:
                replica.exit_code = seen.exit_code
            if replica.structured_error_msg in (None, NONE, ""):
                replica.structured_error_msg = seen.error
            if not replica.reason and seen.reason:
                replica.reason = seen.reason
                replica.failure = None if seen.failure is None else seen.failure.value
            if replica.finished_at is None:
                replica.finished_at = seen.finished_at
    return with_disruptions(resp, watch)


def with_disruptions(resp: DescribeAppResponse, watch: EndsSeen) -> DescribeAppResponse:
    """``resp`` with the evictions of its pods the watch saw (:attr:`.hub.AppWatch.disrupted`:
    a ``DisruptionTarget`` each, an eviction or a preemption by the platform), where they are
    more than the backend counts (Kueue's Workload counts its own, which suspend the workload
    rather than mark its pods): a replica the platform evicted and its job restarted is an
    eviction, not a failure of the replica's."""
    if watch.disrupted:
        resp.evictions = max(resp.evictions, len(watch.disrupted))
        resp.disruptions = list(watch.disrupted.values())
    return resp


def _version(obj: Mapping[str, Any] | None) -> str | None:
    """An object's ``resourceVersion`` (``None``: no object)."""
    return None if obj is None else str((obj.get("metadata") or {}).get("resourceVersion"))
