"""One list + watch of one resource type in one namespace, kept as a cache of plain dicts.

An :class:`Informer` is what client-go calls a reflector with its store: it LISTs the objects
its :class:`WatchSource` selects, then WATCHes from the list's ``resourceVersion``, and keeps
every object as the API sent it (a ``dict``, ``metadata.managedFields`` dropped), grouped by
an index key (an object's name, or a pod's app label). The rules, each once, here:

* a watch ends when the server's ``timeoutSeconds`` pass; the next one starts from the last
  ``resourceVersion`` seen (bookmark events only move it forward);
* ``410 Gone`` -- as the HTTP status of the watch or as an ``ERROR`` event with code 410 --
  means that version is too old: LIST again (the difference with the cache is reported as
  changes and deletions);
* ``429`` waits the ``Retry-After`` the server sent; any other failure waits an exponential
  :class:`~torchx_provider.schedulers.backoff.Backoff` with jitter; after either, the
  informer lists again. From the failure to that list it is *unhealthy*
  (:attr:`Informer.healthy`): its cache may be stale;
* an optional source (``forbidden_wait``) refused with ``403`` is asked again only after that
  many seconds;
* a LIST answered ``404`` means the server does not serve the type (its CRD is missing): the
  cache is empty and correct, so the informer is healthy, and asks again after a while.

Every change is reported to :attr:`Informer.listener` as ``(key, last object if the object
was deleted else None)``; the cache becoming current again (the first list, the list after
a failure) as ``(None, None)`` -- not its failures: followers then keep to their own pace
instead of all asking the API server at once when it struggles. Nothing here imports a
Kubernetes client: :mod:`.io_async` provides the source.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

from torchx_provider.schedulers.backoff import Backoff

log = logging.getLogger(__name__)

#: Seconds a watch asks the server to keep it open (each watch adds up to 25 % at random, so
#: that watches started together do not all end together).
WATCH_TIMEOUT = 240
#: Seconds before a type the server did not serve (LIST answered 404) is asked for again.
UNSERVED_RETRY = 300.0

#: ``(key, last object when deleted)``; ``(None, None)``: the cache became current again.
Listener = Callable[[str | None, Mapping[str, Any] | None], None]
#: Whether a listed object is kept (an informer keeps only what its index keys).
Keep = Callable[[Mapping[str, Any]], bool]


class WatchError(Exception):
    """A LIST or WATCH the API server refused: its HTTP status (or the ``code`` of an
    ``ERROR`` event), and for 429 the ``Retry-After`` seconds it asked for."""

    def __init__(self, status: int | None, message: str, retry_after: float | None = None):
        self.status = status
        self.retry_after = retry_after
        super().__init__(f"{status}: {message}" if status else message)


class WatchSource(Protocol):
    """The two calls an informer makes (a raw-JSON implementation is in :mod:`.io_async`)."""

    async def list(self, keep: Keep | None = None) -> tuple[list[dict[str, Any]], str]:
        """The selected objects (those ``keep`` keeps, when given: the others may be
        dropped as they are read) and the list's ``resourceVersion``; raises
        :class:`WatchError` for an HTTP error status."""

    def watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[dict[str, Any]]:
        """The watch events after ``resource_version`` (``{"type": ..., "object": ...}``)
        until the server ends the stream; raises :class:`WatchError` for an HTTP error."""


def resource_version(obj: Mapping[str, Any]) -> str:
    """An object's ``metadata.resourceVersion`` (``""`` when it has none)."""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def object_name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without ``metadata.managedFields`` (large, and read by nothing here)."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


class Informer:
    """The cache of one :class:`WatchSource`, kept current by :meth:`run` (see the module
    docstring). ``index`` gives an object's key (``None``: not kept)."""

    def __init__(
        self,
        source: WatchSource,
        index: Callable[[Mapping[str, Any]], str | None],
        *,
        backoff: Backoff | None = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        watch_timeout: int = WATCH_TIMEOUT,
        forbidden_wait: float | None = None,
        shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.source = source
        #: What of an object is kept (``None``: all of it but ``managedFields``).
        self.shape = shape
        #: Seconds to wait after a refusal (403) before listing again (``None``: the
        #: backoff's); for a source that is optional, asked again rarely and quietly.
        self.forbidden_wait = forbidden_wait
        self.index = index
        self.backoff = backoff or Backoff()
        self.sleep = sleep
        self.watch_timeout = watch_timeout
        self.listener: Listener = lambda key, deleted: None
        #: key -> name -> object.
        self.groups: dict[str, dict[str, dict[str, Any]]] = {}
        self._key_of: dict[str, str] = {}
        #: The last ``resourceVersion`` seen; ``None`` until listed, and after 410.
        self.resource_version: str | None = None
        #: The last failure, until a list succeeds again.
        self.error: BaseException | None = None
        #: When (``time.monotonic()``) the current run of failures began; ``None`` when healthy.
        self.failing_since: float | None = None
        #: Set once the first list succeeded; the cache is then a true picture, unless
        #: :attr:`error` says it may be stale.
        self.synced = asyncio.Event()
        #: set by the first list or the first failure, whichever comes first
        self.settled = asyncio.Event()
        self.lists = 0
        self.watches = 0

    @property
    def healthy(self) -> bool:
        """Whether the cache is current: listed, and no failure since."""
        return self.synced.is_set() and self.error is None

    def get(self, key: str) -> list[dict[str, Any]]:
        """The objects kept under ``key``."""
        return list(self.groups.get(key, {}).values())

    # -- the cache --------------------------------------------------------------------------------
    def _put(self, obj: dict[str, Any]) -> None:
        if self.shape is not None:
            obj = self.shape(obj)
        name = object_name(obj)
        key = self.index(obj)
        old_key = self._key_of.get(name)
        if old_key is not None and old_key != key:
            self._drop(name)
        if key is None:
            return
        self.groups.setdefault(key, {})[name] = obj
        self._key_of[name] = key
        self.listener(key, None)

    def _keeps(self, obj: Mapping[str, Any]) -> bool:
        """Whether the cache would keep ``obj`` (its index gives it a key)."""
        return self.index(obj) is not None

    def forget(self, key: str) -> None:
        """Drop the objects kept under ``key`` (no one reads them any more), unreported."""
        for name in self.groups.pop(key, {}):
            self._key_of.pop(name, None)

    def _drop(self, name: str, last: Mapping[str, Any] | None = None) -> None:
        key = self._key_of.pop(name, None)
        if key is None:
            return
        group = self.groups.get(key, {})
        old = group.pop(name, None)
        if not group:
            self.groups.pop(key, None)
        self.listener(key, last or old)

    def _replace(self, items: list[dict[str, Any]]) -> None:
        """The cache becomes ``items``; what differs is reported."""
        fresh = {object_name(o): slim(o) for o in items}
        for name in [n for n in self._key_of if n not in fresh]:
            self._drop(name)
        for name, obj in fresh.items():
            key = self._key_of.get(name)
            old = self.groups.get(key, {}).get(name) if key is not None else None
            if old is None or resource_version(old) != resource_version(obj):
                self._put(obj)

    def failing_for(self, now: float | None = None) -> float:
        """Seconds since the current run of failures began (0 when not failing)."""
        if self.failing_since is None:
            return 0.0
        return max(0.0, (time.monotonic() if now is None else now) - self.failing_since)

    def _set_error(self, error: BaseException) -> None:
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        if self.healthy:
            status = getattr(error, "status", None)
            level = logging.WARNING if status in (401, 403) else logging.INFO
            if status == 403 and self.forbidden_wait is not None:
                level = logging.DEBUG  # optional: its users say what it costs, once
            log.log(level, "list/watch failed (%s); the API answers until it recovers", error)
        self.error = error
        self.settled.set()

    # -- the loop ---------------------------------------------------------------------------------
    async def run(self) -> None:
        """List, then watch for ever (until cancelled)."""
        while True:
            try:
                if self.resource_version is None:
                    await self._list()
                await self._watch()
            except asyncio.CancelledError:
                raise
            except WatchError as e:
                if e.status == 410:
                    log.debug("resourceVersion %s expired; listing again", self.resource_version)
                    self.resource_version = None
                    continue
                wait = e.retry_after if e.status == 429 else None
                if e.status == 403 and self.forbidden_wait is not None:
                    wait = self.forbidden_wait
                await self._failed(e, wait)
            except Exception as e:  # connection errors, broken streams
                await self._failed(e, None)

    async def _failed(self, error: BaseException, retry_after: float | None) -> None:
        """Wait after a failure (``retry_after`` if the server asked, else the backoff), then
        list again: a successful list is what proves the cache current."""
        log.debug("list/watch failed, waiting: %s", error)
        self._set_error(error)
        await self.sleep(retry_after if retry_after is not None else self.backoff.next())
        self.resource_version = None

    async def _list(self) -> None:
        self.lists += 1
        try:
            items, version = await self.source.list(self._keeps)
        except WatchError as e:
            if e.status != 404:
                raise
            # The type is not served here: nothing of it exists (yet).
            self._replace([])
            self._listed()
            await self.sleep(UNSERVED_RETRY)
            return
        self._replace(items)
        self.resource_version = version
        self._listed()

    def _listed(self) -> None:
        # The backoff is not reset here but by a watch event: a watch that keeps failing
        # after good lists (e.g. a role without ``watch``) waits longer and longer.
        was = self.healthy
        self.synced.set()
        self.settled.set()
        self.error = None
        self.failing_since = None
        if not was:
            self.listener(None, None)

    async def _watch(self) -> None:
        if self.resource_version is None:
            return
        self.watches += 1
        timeout = int(self.watch_timeout * random.uniform(1.0, 1.25))
        started, events = asyncio.get_running_loop().time(), 0
        async for event in self.source.watch(self.resource_version, timeout):
            events += 1
            self.backoff.reset()
            self._apply(event)
        if not events and asyncio.get_running_loop().time() - started < 1.0:
            # A stream that ends at once and empty is a broken one: do not spin on it.
            await self.sleep(self.backoff.next())

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            raise WatchError(obj.get("code"), str(obj.get("message") or obj))
        version = resource_version(obj)
        if kind in ("ADDED", "MODIFIED"):
            self._put(slim(dict(obj)))
        elif kind == "DELETED":
            self._drop(object_name(obj), slim(dict(obj)))
        if version:
            self.resource_version = version
