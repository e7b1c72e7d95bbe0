"""One status source per (cluster, namespace, resource type) per event loop, shared.

A triggerer runs every trigger of the process on one event loop, so module state is shared
by all of them. :class:`InformerHub` (one per running loop: :meth:`InformerHub.current`)
keeps, for each cluster, one API client (connection pool, SSL context), and for each
(cluster, namespace, resource type) one :class:`~.informer.Informer` -- a LIST then WATCH
of the objects this provider manages (label ``app.kubernetes.io/managed-by``). The pods of
a namespace are one more informer, indexed by their app label. A cluster is known by the
content of its :class:`~.client_config.KubeClientConfig` (:meth:`cache_key`), not by who
asks.

A follower calls :meth:`InformerHub.subscribe` for its app and gets an :class:`AppWatch`:
the app's object and pods read from the caches, and a flag raised when either changes.
Informers are reference counted: the first subscriber starts one, and it stops
:data:`LINGER` seconds after the last one left (a follow that restarts finds it still
running). Its API client is given back when the informer stops, and closed with its last
user.

A backend whose controllers say why an app waits in Events (Volcano: on the job's PodGroup,
:attr:`~.request.KubeTranslation.event_kinds`) adds one more informer per namespace: a
watch of the Events about that kind of object (a field selector; Events have no labels).
It keeps only the Events of followed apps (an involved object named as the app, or as the
app with a ``-<uid>`` suffix, as Volcano names a PodGroup), forgets an app's when its last
subscriber leaves, does not wake followers (a describe reads them), and does not count
toward :attr:`AppWatch.healthy`: an account that may not read Events (403) only loses the
reasons (:meth:`AppWatch.events_refused`), and the informer asks again every
:data:`~.informer.UNSERVED_RETRY` seconds.

A backend whose app names a queue object by label (Kueue's LocalQueue,
:attr:`~.request.KubeTranslation.queues`) adds one more informer per namespace and kind: a
watch of every such object of the namespace, kept by name (metadata and status only). It
wakes no follower (its counts change with other people's work; a describe reads it), does
not count toward :attr:`AppWatch.healthy`, and refused (403), only loses what it says.

A backend whose app is admitted through an object another controller makes and owns by it
(Kueue's Workload of an AppWrapper, :attr:`~.request.KubeTranslation.owned`) adds one more
informer per namespace and kind: a watch of every such object of the namespace (they carry
none of this provider's labels), each kept by the name of its owner, only its metadata and
status (:func:`metadata_and_status`): a follow that starts later finds its app's there
without a request of its own. It wakes the followers of the object's app (an admission, an
eviction is news), and does not count toward :attr:`AppWatch.healthy`; refused (403), it
only loses the reasons, quietly.

The informers' tasks are our own: they have no Airflow greenback portal, so they only ever
await async APIs (nothing here calls Airflow).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from torchx_provider.perloop import PerLoop
from torchx_provider.schedulers.kube.client_config import KubeClientConfig
from torchx_provider.schedulers.kube.errors import Permission
from torchx_provider.schedulers.kube.informer import (
    UNSERVED_RETRY,
    Informer,
    WatchError,
    WatchSource,
    object_name,
)
from torchx_provider.schedulers.kube.kueue import owner_name
from torchx_provider.schedulers.kube.resources import (
    CustomResource,
    EventsAbout,
    OwnedBy,
    QueuedIn,
)
from torchx_provider.schedulers.kube.status import (
    DISRUPTION_FAILURE,
    PodDetails,
    pod_details,
    replica_of,
    telling,
)
from torchx_provider.schedulers.labels import LABEL_APP_ID, label_value

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

#: Seconds an informer keeps running after its last subscriber left.
LINGER = 30.0

#: Builds an informer's source: ``(resource type, or None for pods; namespace)``.
SourceFactory = Callable[[CustomResource | None, str], WatchSource]
#: Builds an Events informer's source: ``(the Events' involved kind, namespace)``.
EventSourceFactory = Callable[[EventsAbout, str], WatchSource]

#: Builds an owned objects' informer's source: ``(what they are, namespace)``.
OwnedSourceFactory = Callable[[OwnedBy, str], WatchSource]

#: Builds a queue objects' informer's source: ``(what they are, namespace)``.
QueueSourceFactory = Callable[[QueuedIn, str], WatchSource]

#: What an informer is of, in its namespace: a resource type, pods (``None``), Events,
#: objects owned by apps, or queue objects apps name.
Subject = CustomResource | EventsAbout | OwnedBy | QueuedIn | None

#: A ``-<uid>`` at the end of an object's name (Volcano's PodGroup: ``<job>-<job uid>``).
_UID_SUFFIX = re.compile(r"-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def metadata_and_status(obj: dict[str, Any]) -> dict[str, Any]:
    """What is kept of an owned object (Kueue's Workload): its metadata and status, not its
    spec (the pod templates of the app, again).

    >>> metadata_and_status({"metadata": {"name": "w"}, "spec": {"podSets": []}, "status": {}})
    {'metadata': {'name': 'w'}, 'status': {}}
    """
    return {"metadata": obj.get("metadata") or {}, "status": obj.get("status") or {}}


def queue_shape(obj: dict[str, Any]) -> dict[str, Any]:
    """What is kept of a queue object: its metadata and status, and of its spec only the
    ClusterQueue a Kueue LocalQueue points to (named when the LocalQueue admits nothing).

    >>> queue_shape({"metadata": {}, "spec": {"clusterQueue": "cq", "x": 1}, "status": {}})
    {'metadata': {}, 'status': {}, 'spec': {'clusterQueue': 'cq'}}
    """
    kept = metadata_and_status(obj)
    cluster_queue = (obj.get("spec") or {}).get("clusterQueue")
    if cluster_queue:
        kept["spec"] = {"clusterQueue": cluster_queue}
    return kept


def cache_key(config: KubeClientConfig) -> str:
    """Which cluster (and user) ``config`` reaches, as a digest of its content: two configs
    with the same content share a client; the digest keeps credentials out of the key."""
    text = json.dumps(asdict(config), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def pod_app(pod: Mapping[str, Any]) -> str | None:
    """The index key of a pod: its app label (``label_value`` of its app object's name)."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_APP_ID)


def event_app(event: Mapping[str, Any]) -> str | None:
    """The index key of an Event: the name of the app its involved object belongs to (the
    object's name, less a ``-<uid>`` suffix).

    >>> event_app({"involvedObject": {"name": "job-a1-12345678-aaaa-bbbb-cccc-1234567890ab"}})
    'job-a1'
    """
    name = (event.get("involvedObject") or {}).get("name")
    return _UID_SUFFIX.sub("", str(name)) if name else None


@dataclass
class _Client:
    users: int = 0
    api: ApiClient | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class _Shared:
    """One running informer, its users and its subscribers by index key."""

    informer: Informer
    task: asyncio.Task[None] | None = None
    users: int = 0
    subscribers: dict[str, set[AppWatch]] = field(default_factory=dict)
    linger: asyncio.TimerHandle | None = None
    #: keeps only what its subscribers' keys index, and wakes no one (Events)
    followed_only: bool = False


class AppWatch:
    """One app seen through the hub: its object (from the informer of each resource type
    it may be stored as), its pods, and :attr:`changed`, set when either changes or an
    informer's health does. :meth:`close` gives the subscription back."""

    def __init__(
        self,
        hub: InformerHub,
        name: str,
        objects: list[_Shared],
        pods: _Shared,
        events: list[_Shared] | None = None,
        owned: list[_Shared] | None = None,
        queues: list[tuple[QueuedIn, _Shared]] | None = None,
    ):
        self.hub = hub
        self.name = name
        self._objects = objects
        self._pods = pods
        #: the Events informers (read at each describe; never part of :attr:`healthy`)
        self._events = events or []
        #: the owned objects' informers (never part of :attr:`healthy`)
        self._owned = owned or []
        #: the queue objects' informers, by what they keep (never part of :attr:`healthy`)
        self._queues = queues or []
        self.changed = asyncio.Event()
        self._listeners: set[asyncio.Event] = set()
        #: ``(role, replica)`` -> how its last failed pod ended (exit code, reason), kept
        #: after the pod is replaced or removed (Volcano and the Job controller delete
        #: failed pods, often before a describe could see them)
        self.failures: dict[tuple[str, int], PodDetails] = {}
        #: the pods the platform said it was ending (``DisruptionTarget``: an eviction, a
        #: preemption by the scheduler, a node going away), by UID, with its words
        #: (``role/replica: reason: message``), kept after they are gone: what the app's
        #: evictions count outside Kueue
        self.disrupted: dict[str, str] = {}
        #: ``(object, pods)`` as last seen when the object was deleted, else ``None``.
        self.last_seen: tuple[dict[str, Any], list[dict[str, Any]]] | None = None
        self.closed = False

    @property
    def healthy(self) -> bool:
        """Whether every cache this app is read from is listed and current."""
        return all(s.informer.healthy for s in (*self._objects, self._pods))

    def failing_for(self) -> float:
        """Seconds since the longest-failing cache this app is read from began failing."""
        return max(s.informer.failing_for() for s in (*self._objects, self._pods))

    def object(self) -> dict[str, Any] | None:
        for shared in self._objects:
            found = shared.informer.get(self.name)
            if found:
                return found[0]
        return None

    def pods(self) -> list[dict[str, Any]]:
        return self._pods.informer.get(label_value(self.name))

    def events(self) -> list[dict[str, Any]]:
        """The Events kept about the app's objects (none where they cannot be read)."""
        return [e for shared in self._events for e in shared.informer.get(self.name)]

    def owned(self) -> list[dict[str, Any]]:
        """The objects kept that the app owns (Kueue's Workload; none where unreadable)."""
        return [o for shared in self._owned for o in shared.informer.get(self.name)]

    def queue(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        """The queue object app ``obj`` names, as kept (``None``: it names none, or it is
        not kept: unreadable, or not listed yet)."""
        for queued, shared in self._queues:
            name = queued.name(obj)
            found = shared.informer.get(name) if name else []
            if found:
                return found[0]
        return None

    async def queues_settled(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for each queue objects' informer to have listed
        once or failed (before that, :meth:`queue` cannot tell "none" from "not read yet")."""
        waits = [s.informer.settled.wait() for _, s in self._queues]
        if waits:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waits), timeout)

    def app_of_uid(self, uid: str) -> str | None:
        """The name of the followed app of UID ``uid`` among those this app's informers
        keep (``None``: not one followed here)."""
        for shared in self._objects:
            for key in shared.subscribers:
                for obj in shared.informer.get(key):
                    if (obj.get("metadata") or {}).get("uid") == uid:
                        return object_name(obj)
        return None

    def events_refused(self) -> Permission | WatchError | None:
        """Why the app's Events cannot be read, if the API server refused them (403): the
        permission the refusal names, else the refusal."""
        for shared in self._events:
            error = shared.informer.error
            if isinstance(error, WatchError) and error.status == 403:
                return Permission.from_message(str(error)) or error
        return None

    async def wait_synced(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every cache's first list; whether they have."""
        waits = [s.informer.synced.wait() for s in (*self._objects, self._pods)]
        try:
            await asyncio.wait_for(asyncio.gather(*waits), timeout)
        except TimeoutError:
            return False
        return True

    def note_failures(self) -> None:
        """Remember how each replica's failed pods ended (see :attr:`failures`), and which
        of its pods the platform said it is ending (a ``DisruptionTarget`` condition: an
        eviction, a preemption), whatever their phase: the API server marks a pod it evicts
        and deletes it, and a pod deleted before its kubelet reports it failed (or without a
        kubelet that does) leaves no other trace of why its replica ended."""
        for pod in self.pods():
            details = pod_details(pod)
            if not telling(details):
                continue
            meta = pod.get("metadata") or {}
            key = replica_of(meta)
            if details.reason in DISRUPTION_FAILURE and meta.get("uid"):
                who = "" if key is None else f"{key.role}/{key.replica_id}: "
                self.disrupted.setdefault(str(meta["uid"]), who + (details.error or details.reason))
            if key is not None:
                self.failures[(key.role, key.replica_id)] = details

    def listen(self) -> asyncio.Event:
        """An event of its own, set on every change :attr:`changed` is set for (a log
        stream waits on one without taking :attr:`changed` from the follow loop);
        :meth:`unlisten` it when done."""
        event = asyncio.Event()
        self._listeners.add(event)
        return event

    def unlisten(self, event: asyncio.Event) -> None:
        self._listeners.discard(event)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.hub.unsubscribe(self)

    def entries(self) -> list[tuple[_Shared, str]]:
        """Each cache this app is read from, with its key there."""
        return [
            *((s, self.name) for s in self._objects),
            (self._pods, label_value(self.name)),
            *((s, self.name) for s in self._events),
            *((s, self.name) for s in self._owned),
            *((s, self.name) for _, s in self._queues),
        ]


class InformerHub:
    """The shared clients and informers of one event loop (see the module docstring)."""

    def __init__(self, *, linger: float = LINGER) -> None:
        self.linger = linger
        self.clients: dict[str, _Client] = {}
        self.informers: dict[tuple[str, str, Subject], _Shared] = {}

    @classmethod
    def current(cls) -> InformerHub:
        """The hub of the running event loop (made on first use)."""
        return _HUBS.get()

    # -- API clients ------------------------------------------------------------------------------
    async def acquire_client(self, config: KubeClientConfig, *, count: bool = True) -> ApiClient:
        """The cluster's shared API client; ``count``: one more user, who must
        :meth:`release_client` it."""
        entry = self.clients.setdefault(cache_key(config), _Client())
        async with entry.lock:
            if entry.api is None:
                entry.api = await config.async_api_client()
        if count:
            entry.users += 1
        return entry.api

    async def release_client(self, config: KubeClientConfig) -> None:
        """One user less; the last one closes the client."""
        key = cache_key(config)
        entry = self.clients.get(key)
        if entry is None:
            return
        entry.users -= 1
        if entry.users <= 0:
            del self.clients[key]
            if entry.api is not None:
                await entry.api.close()

    # -- informers --------------------------------------------------------------------------------
    def subscribe(
        self,
        config: KubeClientConfig,
        namespace: str,
        resources: Sequence[CustomResource],
        name: str,
        source: SourceFactory,
        events: Sequence[EventsAbout] = (),
        event_source: EventSourceFactory | None = None,
        owned: Sequence[OwnedBy] = (),
        owned_source: OwnedSourceFactory | None = None,
        queues: Sequence[QueuedIn] = (),
        queue_source: QueueSourceFactory | None = None,
    ) -> AppWatch:
        """Follow object ``name`` in ``namespace``, stored as one of ``resources``: its
        informers (and the namespace's pods informer) start if they are not running, over
        the sources ``source`` makes (which select
        :data:`~torchx_provider.schedulers.labels.MANAGED_SELECTOR`); one informer of
        the namespace's Events about each kind of ``events``, over ``event_source``; and
        one of the objects of each kind of ``owned``, over ``owned_source``; and one of the
        queue objects of each kind of ``queues``, over ``queue_source``."""
        objects = [
            self._use(config, namespace, r, object_name, partial(source, r, namespace))
            for r in resources
        ]
        pods = self._use(config, namespace, None, pod_app, partial(source, None, namespace))
        use = partial(self._use, config, namespace)
        told = []
        if event_source is not None:
            for about in events:
                about_source = partial(event_source, about, namespace)
                told.append(use(about, event_app, about_source, followed_only=True))
        kept = []
        if owned_source is not None:
            for what in owned:
                index = partial(owner_name, kind=what.owner_kind)
                kept.append(use(what, index, partial(owned_source, what, namespace), owned=True))
        queued = []
        if queue_source is not None:
            for held in queues:
                where = held.namespace(namespace)
                source_of = partial(queue_source, held, where)
                kept_queues = self._use(config, where, held, object_name, source_of, kept=True)
                queued.append((held, kept_queues))
        watch = AppWatch(self, name, objects, pods, told, kept, queued)
        for shared, key in watch.entries():
            shared.subscribers.setdefault(key, set()).add(watch)
        return watch

    def unsubscribe(self, watch: AppWatch) -> None:
        for shared, key in watch.entries():
            group = shared.subscribers.get(key, set())
            group.discard(watch)
            if not group:
                shared.subscribers.pop(key, None)
                if shared.followed_only:
                    shared.informer.forget(key)
            shared.users -= 1
            if shared.users == 0:
                loop = asyncio.get_running_loop()
                shared.linger = loop.call_later(self.linger, self._stop, shared)

    def _use(
        self,
        config: KubeClientConfig,
        namespace: str,
        subject: Subject,
        index: Callable[[Mapping[str, Any]], str | None],
        source: Callable[[], WatchSource],
        *,
        followed_only: bool = False,
        owned: bool = False,
        kept: bool = False,
    ) -> _Shared:
        """The running informer of ``subject`` in ``namespace`` (started over ``source()``
        if there is none), one user more. ``followed_only``: an Events informer;
        ``owned``: an owned objects' informer; ``kept``: a queue objects' informer (see the
        module docstring)."""
        key = (cache_key(config), namespace, subject)
        shared = self.informers.get(key)
        if shared is None:
            if followed_only:
                informer = Informer(source(), index, forbidden_wait=UNSERVED_RETRY)
                shared = self.informers[key] = _Shared(informer, followed_only=True)
                informer.index = partial(_followed, shared, index)
            elif owned or kept:
                shape = queue_shape if kept else metadata_and_status
                informer = Informer(source(), index, forbidden_wait=UNSERVED_RETRY, shape=shape)
                shared = self.informers[key] = _Shared(informer)
                if owned:
                    informer.listener = partial(self._woken, shared)
            else:
                informer = Informer(source(), index)
                shared = self.informers[key] = _Shared(informer)
                informer.listener = lambda k, deleted: self._changed(shared, k, deleted)
            shared.task = asyncio.get_running_loop().create_task(self._run(shared, config))
        if shared.linger is not None:
            shared.linger.cancel()
            shared.linger = None
        shared.users += 1
        return shared

    async def _run(self, shared: _Shared, config: KubeClientConfig) -> None:
        self.clients.setdefault(cache_key(config), _Client()).users += 1
        try:
            await shared.informer.run()
        finally:
            await self.release_client(config)

    def _stop(self, shared: _Shared) -> None:
        if shared.users > 0:
            return
        for key, found in list(self.informers.items()):
            if found is shared:
                del self.informers[key]
        if shared.task is not None:
            shared.task.cancel()

    async def close(self) -> None:
        """Stop every informer now (their clients go back); subscriptions stay readable."""
        stopping = [s for s in self.informers.values() if s.task is not None]
        self.informers.clear()
        for shared in stopping:
            if shared.linger is not None:
                shared.linger.cancel()
            assert shared.task is not None
            shared.task.cancel()
        await asyncio.gather(*(s.task for s in stopping if s.task), return_exceptions=True)

    def _woken(self, shared: _Shared, key: str | None, deleted: Mapping[str, Any] | None) -> None:
        """An owned object changed: its app's followers look (the app itself did not)."""
        self._changed(shared, key, None)

    def _changed(self, shared: _Shared, key: str | None, deleted: Mapping[str, Any] | None) -> None:
        if key is None:
            watches = {w for group in shared.subscribers.values() for w in group}
        else:
            watches = set(shared.subscribers.get(key, ()))
        for watch in watches:
            if deleted is not None and shared in watch._objects:
                watch.last_seen = (dict(deleted), watch.pods())
            if shared is watch._pods:
                watch.note_failures()
            watch.changed.set()
            for event in watch._listeners:
                event.set()


def _followed(
    shared: _Shared, index: Callable[[Mapping[str, Any]], str | None], obj: Mapping[str, Any]
) -> str | None:
    """The key ``index`` gives ``obj`` if an app of that key is followed through
    ``shared``, else ``None`` (not kept)."""
    key = index(obj)
    return key if key is not None and key in shared.subscribers else None


_HUBS: PerLoop[InformerHub] = PerLoop(InformerHub)
