"""Follow one replica's log on Kubernetes: every container instance, as a stream.

A replica's log is the logs of its container instances one after the other
(:func:`~.podlogs.replica_instances`: each pod that ran it, each restart of the container).
:class:`ReplicaLogFollower` reads them oldest first, each as a stream opened as soon as the
container has started (what it wrote so far, then followed: see below) and read to its end,
so a crashing replica's last lines are read while the backend still has them -- before
Volcano or the Job controller replaces the pod, before a TTL removes the job. Which pods
exist and when a container ends comes from the event loop's shared pod cache
(:class:`~.hub.AppWatch`); no request is made to find out.

Cursors are absolute: a stream is (re)opened with ``sinceTime`` (the kubelet compares it with
its own timestamps, so the triggerer's clock takes no part) and the lines of that second
already emitted are dropped by :class:`~torchx_provider.schedulers.logs.Resumed`.

The API server sends a followed log about a line at a time (it flushes each piece the
kubelet gives it), but a log that is not followed in large pieces. So a running instance's
log is first read without following, from the cursor to what exists now (its backlog: all
of it when a follow starts late, or after a triggerer restart), and then followed from the
cursor that read left, in the same turn of its stream slot; an instance is read that way
once per follower. An unfinished line at the backlog's end (the container is writing it;
the kubelet sends what there is, without its newline) is left to the follow, which
re-reads the backlog's last second (the API's resolution): the cursor drops the lines of it
already emitted.

Lines that come one at a time would cost a socket read, a parse and a wake-up each, so
after a small read (under :data:`GATHER_BELOW`) the socket is left unread for
:data:`GATHER` seconds and the lines written meanwhile come in one read; what the HTTP
client already holds is taken without waiting.

A kubelet ends a followed stream when the container exits. A stream may also stay open
after its container ended (a fake kubelet does, a stuck connection might): once the pod cache
shows the instance ended, the stream is closed after it has been quiet for
:data:`DRAIN_IDLE` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Protocol

from torchx_provider.errors import BackendUnavailableError, SubmissionError, UnknownAppError
from torchx_provider.schedulers.kube.podlogs import (
    ContainerInstance,
    no_log_yet,
    replica_instances,
)
from torchx_provider.schedulers.logs import (
    LineDecoder,
    LogCursor,
    LogSource,
    Resumed,
    TimestampedLine,
    split_timestamp,
)
from torchx_provider.schedulers.streams import Slot, StreamSlots, any_of

#: Seconds an ended container's stream must be quiet before it is closed.
DRAIN_IDLE = 1.0
#: Seconds between looks at the pod cache while waiting (a change wakes the reader sooner).
RECHECK = 5.0
#: Seconds between checks, while a stream is quiet, of whether its container ended, once
#: it or the app has (before that a quiet stream only wakes for a change of the pods).
QUIET_CHECK = 0.25
#: Seconds a quiet stream sleeps when nothing changes (then: is it its turn to yield?).
IDLE_CHECK = 5.0
#: Seconds a container still running after the app ended must be quiet to be left.
APP_ENDED_IDLE = 3.0
#: Bytes read from a stream at once (the most a single parse handles between yields).
READ_BYTES = 64 * 1024
#: Seconds to wait, after the server ended the stream of a container the cache still shows
#: running, before it is opened again (a change of its pod wakes the reader sooner).
EOF_RECHECK = 30.0
#: A read smaller than this many bytes means the server sends lines as they come: the
#: stream's bytes are then left to pile up for :data:`GATHER` seconds before the next read.
GATHER_BELOW = 16 * 1024
#: Seconds a trickling stream is not read, so that many lines come in one read (a server
#: sending each line on its own costs a socket read, a parse and a wake-up per line).
GATHER = 0.005
#: Streams of one instance that may break in a row, without a line read, before the
#: failure is reported (the caller then retries with backoff).
BREAKS_TOLERATED = 2


class WatchedPods(Protocol):
    """What a follower reads of an app's subscription (:class:`~.hub.AppWatch`)."""

    @property
    def healthy(self) -> bool:
        """Whether the pods cache is listed and current."""

    def pods(self) -> list[dict[str, Any]]:
        """The app's pods in the cache."""

    def listen(self) -> asyncio.Event:
        """An event set on every change of the app or its pods."""

    def unlisten(self, event: asyncio.Event) -> None:
        """Stop setting ``event``."""


class FollowedApp(Protocol):
    """What a follower reads (the triggerer's :class:`~.client.KubeAsyncClient`)."""

    async def watch(self, app_id: str) -> WatchedPods:
        """The app's subscription to the shared caches."""

    async def replica_pods(
        self, app_id: str, role_name: str, replica_id: int
    ) -> list[dict[str, Any]]:
        """A replica's pods from the API server (when the caches cannot answer)."""

    async def open_log(self, namespace: str, pod: str, query: list[tuple[str, str]]) -> Any:
        """A pod's log as a raw response (see :meth:`~.io.AsyncKubeIO.open_log`)."""


class ReplicaLogFollower:
    """Reads one :class:`LogSource` of one app (see the module docstring)."""

    def __init__(
        self, client: FollowedApp, app_id: str, source: LogSource, ended: asyncio.Event
    ) -> None:
        self.client = client
        self.app_id = app_id
        self.source = source
        self.ended = ended
        self.warn: list[str] = []  # instances whose end could not be read (for the caller)
        self._ended_cleanly = False  # the last stream was ended by the server
        self._backlog_read = False  # the last stream read an instance's backlog to its end
        self._caught_up: set[str] = set()  # instances whose backlog has been read

    async def follow(
        self, cursor: LogCursor
    ) -> AsyncIterator[tuple[list[TimestampedLine], LogCursor]]:
        """Batches of new lines with the cursor after each (the contract of
        :meth:`~torchx_provider.schedulers.api.AsyncSchedulerClient.follow_logs`)."""
        watch = await self.client.watch(self.app_id)
        changed = watch.listen()
        breaks = 0
        try:
            while True:
                ended_before = self.ended.is_set()
                changed.clear()
                instances = await self._instances(watch)
                todo = [i for i in instances if i.started and not cursor.is_done(i.key)]
                lost = self._lost(cursor, instances)
                if lost is not None:
                    cursor = cursor.finished(lost)
                    yield [], cursor
                    continue
                if not todo:
                    if ended_before:
                        return
                    await any_of(changed, self.ended, timeout=RECHECK)
                    continue
                instance = todo[0]
                progressed = False
                finished = False
                async for lines, moved, done in self._read(instance, cursor, watch, changed):
                    progressed = progressed or bool(lines)
                    cursor, finished = moved, done
                    yield lines, cursor
                if finished:
                    breaks = 0
                    continue
                if self._ended_cleanly:
                    breaks = 0
                    if self.ended.is_set():
                        # The app is over and the server has nothing more: read to its end.
                        cursor = cursor.finished(instance.key)
                        yield [], cursor
                        continue
                    # The kubelet ended the stream, so the container has exited, but the
                    # cache does not show it yet (the watch is a moment behind): wait for
                    # the change, then look again. Not a failure, and no busy loop.
                    await any_of(changed, self.ended, timeout=EOF_RECHECK)
                    continue
                breaks = 0 if progressed else breaks + 1
                if breaks > BREAKS_TOLERATED:
                    raise BackendUnavailableError(
                        f"the log stream of {self.source.key} (pod {instance.namespace}/"
                        f"{instance.pod}) keeps breaking"
                    )
                await any_of(changed, timeout=1.0)
        finally:
            watch.unlisten(changed)

    async def _instances(self, watch: WatchedPods) -> list[ContainerInstance]:
        s = self.source
        if watch.healthy:
            pods = watch.pods()
        else:
            pods = await self.client.replica_pods(self.app_id, s.role, s.replica_id)
        return replica_instances(pods, s.role, s.replica_id, s.container)

    def _lost(self, cursor: LogCursor, instances: list[ContainerInstance]) -> str | None:
        """The cursor's instance, if it was being read and its pod is gone (replaced or
        removed) before its end was read: what it wrote after the cursor cannot be read."""
        current = cursor.instance
        if current is None or cursor.is_done(current):
            return None
        if any(i.key == current for i in instances):
            return None
        if cursor.since is None and not any(i.started for i in instances):
            return None  # nothing of it was read: maybe not listed yet
        self.warn.append(current)
        return current

    async def _read(
        self,
        instance: ContainerInstance,
        cursor: LogCursor,
        watch: WatchedPods,
        changed: asyncio.Event,
    ) -> AsyncIterator[tuple[list[TimestampedLine], LogCursor, bool]]:
        """``instance`` read in one turn of a stream slot: ``(lines, cursor, finished)``
        batches; the last says whether the instance has been read to its end (else the caller
        opens it again). A backlog read to its end is followed on in the same turn."""
        async with StreamSlots.current().hold(self.ended) as slot:
            while True:
                stream = self._stream(instance, cursor, watch, changed, slot)
                async with contextlib.aclosing(stream):  # its response released at once
                    async for batch in stream:
                        cursor = batch[1]
                        yield batch
                if not self._backlog_read:
                    return

    async def _stream(
        self,
        instance: ContainerInstance,
        cursor: LogCursor,
        watch: WatchedPods,
        changed: asyncio.Event,
        slot: Slot,
    ) -> AsyncGenerator[tuple[list[TimestampedLine], LogCursor, bool], None]:
        """One response for ``instance``: its backlog, a follow, or its log once it ended."""
        resume = Resumed(cursor.at(instance.key))
        self._ended_cleanly = self._backlog_read = False
        # what the cache says now: a container that ended while this waited for its
        # turn is read to its end at once, without following
        instance = self._fresh(instance, watch)
        backlog = not instance.ended and instance.key not in self._caught_up
        try:
            resp = await self._open(
                instance,
                resume.cursor,
                watch,
                changed,
                follow=not instance.ended and not backlog,
            )
            if resp is None:
                # It ended while its follow was being opened (a server may answer a
                # follow of a quiet log only with its first line): look again, and
                # read what it wrote without following.
                if self.ended.is_set() and not self._has_ended(instance, watch):
                    yield [], resume.cursor.finished(instance.key), True  # lingering
                else:
                    yield [], resume.cursor, False
                return
        except UnknownAppError:
            # The pod is gone: if the cache agrees, so is its log (reported as lost by
            # the caller); else the cache is a moment behind.
            yield [], resume.cursor, False
            return
        except SubmissionError as e:
            if not no_log_yet(e):
                raise
            await any_of(changed, timeout=1.0)  # (re)starting: no log to read yet
            yield [], resume.cursor, False
            return
        decoder = LineDecoder()
        reads = _Reads(resp)
        woken: asyncio.Future[Any] | None = None  # the pods changed, or the app ended
        ended_at: float | None = None  # when the cache showed the instance ended
        last_data = time.monotonic()
        clean = app_over = False
        try:
            while True:
                try:
                    chunk = reads.take()
                except (OSError, asyncio.TimeoutError, _client_errors()):
                    break  # the stream broke: opened again from the cursor
                if chunk is not None:
                    if not chunk:
                        clean = True
                        if backlog:
                            # the log up to the answer: the follow reads on from here
                            self._caught_up.add(instance.key)
                            self._backlog_read = True
                        else:
                            self._ended_cleanly = True
                        break
                    last_data = time.monotonic()
                    new = resume.feed([split_timestamp(r) for r in decoder.decode(chunk)])
                    if new:
                        yield new, resume.cursor, False
                    if len(chunk) < GATHER_BELOW:
                        await _gather(resp)
                    if slot.urgent or not slot.should_yield:
                        continue
                    break  # an ended app's read (or a slice's end): queue again
                if woken is None:
                    # once the app ended, only a change of the pods is news; and, for
                    # a running app's stream, an ended app's read waiting for a slot
                    woken = asyncio.ensure_future(
                        changed.wait()
                        if self.ended.is_set()
                        else any_of(changed, self.ended, slot.slots.wanted)
                    )
                timeout = QUIET_CHECK if ended_at is not None or self.ended.is_set() else IDLE_CHECK
                done, _ = await asyncio.wait(
                    {reads.pending(), woken},
                    timeout=timeout,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if woken in done:
                    changed.clear()
                    woken = None
                if reads.pending().done():
                    continue  # taken at the top
                if slot.should_yield:
                    break  # others wait for a stream: queue again, resume at the cursor
                if ended_at is None and self._has_ended(instance, watch):
                    ended_at = time.monotonic()
                now = time.monotonic()
                # (A backlog ends by itself: one that stalls is read again, as if broken.)
                if ended_at is not None and now - max(ended_at, last_data) >= DRAIN_IDLE:
                    clean = not backlog
                    break
                if self.ended.is_set() and now - last_data >= APP_ENDED_IDLE:
                    # The app is over but this container lingers (being stopped, or a
                    # sidecar): what it wrote is read; its stopping is not waited for.
                    clean = app_over = not backlog
                    break
        finally:
            reads.cancel()
            if woken is not None:
                woken.cancel()
            resp.release()
        # A backlog may end inside a line the container is still writing (the kubelet sends
        # what there is of it, without its newline): the follow reads that line, whole. And
        # the backlog's end is not the instance's, even if the cache shows it ended by now.
        rest = (
            resume.feed([split_timestamp(r) for r in decoder.flush()])
            if clean and not backlog
            else []
        )
        finished = clean and (
            app_over or instance.ended or (not backlog and self._has_ended(instance, watch))
        )
        if finished:
            self._caught_up.discard(instance.key)
            yield rest, resume.cursor.finished(instance.key), True
        else:
            yield rest, resume.cursor, False

    async def _open(
        self,
        instance: ContainerInstance,
        cursor: LogCursor,
        watch: WatchedPods,
        changed: asyncio.Event,
        *,
        follow: bool,
    ) -> Any:
        """Open ``instance``'s log, following it or not; ``None`` when, before the server
        answered a follow, the cache showed the instance ended (or the app ended and the
        container lingers)."""
        opening = asyncio.ensure_future(
            self.client.open_log(
                instance.namespace, instance.pod, instance.query(cursor.since, follow=follow)
            )
        )
        if not follow:
            return await opening
        started = time.monotonic()
        woken: asyncio.Future[Any] | None = None
        try:
            while True:
                quick = self.ended.is_set()
                if woken is None:
                    woken = asyncio.ensure_future(
                        changed.wait() if quick else any_of(changed, self.ended)
                    )
                done, _ = await asyncio.wait(
                    {opening, woken},
                    timeout=QUIET_CHECK if quick else IDLE_CHECK,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if opening in done:
                    return opening.result()
                if woken in done:
                    changed.clear()
                    woken = None
                waited = time.monotonic() - started
                if self._has_ended(instance, watch) and waited >= DRAIN_IDLE:
                    return None
                if quick and waited >= APP_ENDED_IDLE:
                    return None
        finally:
            if woken is not None:
                woken.cancel()
            if not opening.done():
                opening.cancel()
                late: Any = (await asyncio.gather(opening, return_exceptions=True))[0]
                if late is not None and not isinstance(late, BaseException):
                    late.release()  # answered just as it was given up

    def _cached(self, instance: ContainerInstance, watch: WatchedPods) -> ContainerInstance | None:
        """``instance`` as the cache shows it now: ``None`` if the cache holds no such
        instance (restarted or gone)."""
        s = self.source
        now = replica_instances(watch.pods(), s.role, s.replica_id, s.container)
        return next((i for i in now if i.key == instance.key), None)

    def _fresh(self, instance: ContainerInstance, watch: WatchedPods) -> ContainerInstance:
        """``instance`` as the cache shows it now (as it was if the cache cannot tell)."""
        if not watch.healthy:
            return instance
        return self._cached(instance, watch) or instance

    def _has_ended(self, instance: ContainerInstance, watch: WatchedPods) -> bool:
        """Whether the cache shows ``instance`` ended, restarted or gone."""
        if not watch.healthy:
            return False
        found = self._cached(instance, watch)
        return found is None or found.ended


class _Reads:
    """The reads of one log response's body, one at a time: what the HTTP client already
    holds is taken at once; else a read task waits for more."""

    def __init__(self, resp: Any) -> None:
        self.content = resp.content
        self._task: asyncio.Future[bytes] | None = None

    def take(self) -> bytes | None:
        """The next bytes (``b""``: the body has ended), or ``None`` while the read waits
        (:meth:`pending`). A broken stream raises its client's error."""
        task = self._task
        if task is None:
            data: bytes = self.content.read_nowait(READ_BYTES)
            if data:
                return data
            self._task = asyncio.ensure_future(self.content.read(READ_BYTES))
            return None
        if not task.done():
            return None
        self._task = None
        return task.result()

    def pending(self) -> asyncio.Future[bytes]:
        """The read waiting for more (after :meth:`take` gave ``None``)."""
        assert self._task is not None
        return self._task

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None


async def _gather(resp: Any) -> None:
    """Leave ``resp``'s socket unread for :data:`GATHER` seconds: what the server sends
    meanwhile waits in the socket (TCP holds the sender back past its window) and comes in
    one read. Only the transport is paused, never the HTTP client's protocol (whose pause
    also holds its parser), and not at all when the connection is closing or the client
    has paused it itself."""
    protocol = getattr(getattr(resp, "connection", None), "protocol", None)
    transport: Any = getattr(protocol, "transport", None)
    paused = False
    if (
        transport is not None
        and not transport.is_closing()
        and not getattr(protocol, "_reading_paused", False)
    ):
        try:
            transport.pause_reading()
            paused = True
        except (AttributeError, NotImplementedError, RuntimeError):
            pass
    try:
        await asyncio.sleep(GATHER)
    finally:
        if paused and not transport.is_closing():
            with contextlib.suppress(AttributeError, NotImplementedError, RuntimeError):
                transport.resume_reading()


def _client_errors() -> Any:
    """The HTTP client's errors for a broken stream (imported when a stream is read)."""
    import aiohttp

    return aiohttp.ClientError
