"""One ``/events`` stream per Docker engine per event loop, shared by every app followed.

The engine tells what happens to containers (create, start, die, oom, kill, stop, destroy,
restart...) on one long-lived ``GET /events`` stream; :class:`EngineEvents` reads it, for
the containers this provider manages (label filter
:data:`~torchx_provider.schedulers.labels.MANAGED_SELECTOR`), in one daemon thread (the
docker SDK blocks), and marks the :class:`AppEvents` of the app a container belongs to
(its ``LABEL_APP_ID`` label) as *changed*. A follower then inspects its app only when it
changed, instead of on every poll. When the stream breaks, it is opened again after a
:class:`~torchx_provider.schedulers.backoff.Backoff` (meanwhile the client inspects on every
describe); once it is open again every app is marked changed, as what happened while it
was closed is unknown.

Reference counted per (event loop, engine): the first subscriber opens the stream, which is
closed :data:`LINGER` seconds after the last one left.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from torchx_provider.perloop import PerLoop
from torchx_provider.schedulers.backoff import Backoff
from torchx_provider.schedulers.docker.client import DockerClientConfig, make_client
from torchx_provider.schedulers.labels import LABEL_APP_ID, MANAGED_SELECTOR, label_value

if TYPE_CHECKING:
    from torchx_provider.schedulers.docker.apitypes import DockerClient

log = logging.getLogger(__name__)

#: Seconds the stream stays open after its last subscriber left.
LINGER = 30.0

#: Opens the engine's event stream: an iterator of decoded events with a ``close()``.
StreamOpener = Callable[[], Any]


def open_events(config: DockerClientConfig) -> StreamOpener:
    """The opener of ``config``'s engine's container events, for this provider's containers."""

    def opener() -> Any:
        client = make_client(config, streaming=True)
        filters = {"type": ["container"], "label": [MANAGED_SELECTOR]}
        return _ClientStream(client, client.events(decode=True, filters=filters))

    return opener


class _ClientStream:
    """An event stream that closes its own client with it."""

    def __init__(self, client: DockerClient, stream: Any) -> None:
        self.client, self.stream = client, stream

    def __iter__(self) -> Iterator[Any]:
        return iter(self.stream)

    def close(self) -> None:
        try:
            self.stream.close()
        finally:
            self.client.close()


def engine_key(config: DockerClientConfig) -> str:
    """Which engine ``config`` reaches, as a digest of its content."""
    return hashlib.sha256(json.dumps(asdict(config), sort_keys=True).encode()).hexdigest()


def event_app(event: Any) -> str | None:
    """The app label of the container an event is about."""
    attributes = ((event or {}).get("Actor") or {}).get("Attributes") or {}
    value = attributes.get(LABEL_APP_ID)
    return str(value) if value else None


class AppEvents:
    """One app's subscription. When one of its containers has an event, or the stream
    opens (again), both :attr:`changed` (what ``DockerAsyncClient.wait_changed`` waits for) and
    :attr:`stale` (the last inspection is out of date) are set; each reader clears its own.
    :attr:`healthy` says whether the stream is open."""

    def __init__(self, events: EngineEvents, app_id: str) -> None:
        self.events = events
        self.key = label_value(app_id)
        self.changed = asyncio.Event()
        self.stale = True
        self.closed = False

    def mark(self) -> None:
        self.stale = True
        self.changed.set()

    @property
    def healthy(self) -> bool:
        return self.events.healthy

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.events.unsubscribe(self)


class EngineEvents:
    """The event stream of one engine on one event loop (see the module docstring)."""

    def __init__(self, opener: StreamOpener, *, linger: float = LINGER) -> None:
        self.opener = opener
        self.linger = linger
        self.loop = asyncio.get_running_loop()
        self.subscribers: dict[str, set[AppEvents]] = {}
        self.healthy = False
        self.events_seen = 0
        self._stop = threading.Event()
        self._stream: Any = None
        self._lock = threading.Lock()
        self._linger: asyncio.TimerHandle | None = None
        self._thread = threading.Thread(target=self._pump, name="torchx-docker-events", daemon=True)
        self._thread.start()

    @classmethod
    def of(cls, config: DockerClientConfig) -> EngineEvents:
        """The running event loop's stream of ``config``'s engine (opened on first use)."""
        streams = cls.on_this_loop()
        key = engine_key(config)
        found = streams.get(key)
        if found is None or found._stop.is_set():
            found = streams[key] = cls(open_events(config))
        return found

    @staticmethod
    def on_this_loop() -> dict[str, EngineEvents]:
        """The running event loop's streams, by engine."""
        return _STREAMS.get()

    def subscribe(self, app_id: str) -> AppEvents:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        sub = AppEvents(self, app_id)
        self.subscribers.setdefault(sub.key, set()).add(sub)
        return sub

    def unsubscribe(self, sub: AppEvents) -> None:
        group = self.subscribers.get(sub.key, set())
        group.discard(sub)
        if not group:
            self.subscribers.pop(sub.key, None)
        if not self.subscribers:
            self._linger = self.loop.call_later(self.linger, self._close_if_unused)

    def _close_if_unused(self) -> None:
        if not self.subscribers:
            self.close()

    def close(self) -> None:
        """Stop reading (the thread ends with the stream)."""
        self._stop.set()
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    # -- the reader thread ---------------------------------------------------------------------
    def _pump(self) -> None:
        backoff = Backoff()
        while not self._stop.is_set():
            try:
                stream = self.opener()
                with self._lock:
                    self._stream = stream
                if self._stop.is_set():
                    stream.close()
                    return
                self._post(None, healthy=True)
                for event in stream:
                    backoff.reset()
                    app = event_app(event)
                    if app is not None:
                        self._post(app, healthy=True)
            except Exception as e:  # the engine went away, the stream broke
                log.debug("docker event stream failed: %s", e)
            with self._lock:
                stream, self._stream = self._stream, None
            if stream is not None:
                with contextlib.suppress(Exception):
                    stream.close()
            if self._stop.is_set():
                return
            self._post(None, healthy=False)  # no wake-up: followers keep their own pace
            self._stop.wait(backoff.next())

    def _post(self, app: str | None, *, healthy: bool) -> None:
        try:
            self.loop.call_soon_threadsafe(self._changed, app, healthy)
        except RuntimeError:  # the loop is closed: nobody is listening
            self._stop.set()

    def _changed(self, app: str | None, healthy: bool) -> None:
        was, self.healthy = self.healthy, healthy
        if app is None and not healthy:
            return
        if app is None:
            # (Re)connected: what happened while the stream was closed is unknown.
            subs = [s for group in self.subscribers.values() for s in group] if not was else []
        else:
            self.events_seen += 1
            subs = list(self.subscribers.get(app, ()))
        for sub in subs:
            sub.mark()


_STREAMS: PerLoop[dict[str, EngineEvents]] = PerLoop(dict)
