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

A response's body is read through :class:`~.logbody.LogBody` (the HTTP library's side of
it: taking what is held, gathering a trickle of lines into one read). Each response ends
with a :class:`StreamEnd` that says what the follower does next.

A kubelet ends a followed stream when the container exits; one that stays open after (a fake
kubelet's, a stuck connection) is closed once the pod cache shows the instance ended and the
stream has been quiet for :data:`DRAIN_IDLE` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Protocol

from torchx_provider.errors import BackendUnavailableError, SubmissionError, UnknownAppError
from torchx_provider.schedulers.kube.logbody import LogBody, broken_errors
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
from torchx_provider.schedulers.pauses import Clock, Sleep, any_of, first_of
from torchx_provider.schedulers.streams import Slot, StreamSlots

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
#: Seconds to wait, after the server ended the stream of a container the cache still shows
#: running, before it is opened again (a change of its pod wakes the reader sooner).
EOF_RECHECK = 30.0
#: Streams of one instance that may break in a row, without a line read, before the
#: failure is reported (the caller then retries with backoff).
BREAKS_TOLERATED = 2


class StreamEnd(enum.Enum):
    """How one response of an instance's log ended: what the follower does next."""

    #: the instance's log was read to its end
    FINISHED = "finished"
    #: its backlog was read to the answer's end: follow on from the cursor, same turn
    BACKLOG = "backlog"
    #: the server ended a follow (the container exited) before the cache shows it ended
    SERVER_ENDED = "server-ended"
    #: broken, its turn over, or nothing to read yet: open it again from the cursor
    AGAIN = "again"


#: New lines, the cursor after them, how the response ended (``None``: not yet).
Batch = tuple[list["TimestampedLine"], "LogCursor", StreamEnd | None]


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

    def notice(self, text: str, key: str) -> None:
        """Tell the task log ``text``, once per ``key`` (see :meth:`~.core.KubeCore.notice`)."""


class ReplicaLogFollower:
    """Reads one :class:`LogSource` of one app (see the module docstring).

    :param clock: monotonic seconds; :param sleep: waits (both replaced in tests).
    """

    def __init__(
        self,
        client: FollowedApp,
        app_id: str,
        source: LogSource,
        ended: asyncio.Event,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.client = client
        self.app_id = app_id
        self.source = source
        self.ended = ended
        self.clock = clock
        self.sleep = sleep
        self.warn: list[str] = []  # instances (or ranges of runs) whose lines could not be read
        self._caught_up: set[str] = set()  # instances whose backlog has been read
        #: instances seen started and not yet read to their end, by key: one whose pod is
        #: gone before its log was opened is said to be lost (:meth:`_vanished`)
        self._started: dict[str, ContainerInstance] = {}

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
                lost = self._lost(cursor, instances) or self._vanished(cursor, instances)
                if lost is not None:
                    cursor = cursor.finished(lost)
                    yield [], cursor
                    continue
                if not todo:
                    if ended_before:
                        return
                    await any_of(changed, self.ended, timeout=RECHECK, sleep=self.sleep)
                    continue
                instance = todo[0]
                self._unlisted(cursor, instance)
                progressed = False
                end: StreamEnd | None = None
                async for batch in self._read(instance, cursor, watch, changed):
                    lines, cursor, end = batch
                    progressed = progressed or bool(lines)
                    yield lines, cursor
                if end is StreamEnd.FINISHED:
                    breaks = 0
                    continue
                if end is StreamEnd.SERVER_ENDED:
                    breaks = 0
                    if self.ended.is_set():
                        # The app is over and the server has nothing more: read to its end.
                        cursor = cursor.finished(instance.key)
                        yield [], cursor
                        continue
                    # The kubelet ended the stream, so the container has exited, but the
                    # cache does not show it yet (the watch is a moment behind): wait for
                    # the change, then look again. Not a failure, and no busy loop.
                    await any_of(changed, self.ended, timeout=EOF_RECHECK, sleep=self.sleep)
                    continue
                breaks = 0 if progressed else breaks + 1
                if breaks > BREAKS_TOLERATED:
                    raise BackendUnavailableError(
                        f"the log stream of {self.source.key} (pod {instance.namespace}/"
                        f"{instance.pod}) keeps breaking"
                    )
                await any_of(changed, timeout=1.0, sleep=self.sleep)
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
        """The cursor's instance, if it was being read and is gone before its end was read
        (its pod replaced or removed, or the run no longer kept by the kubelet: a container
        restarted twice since, as a resumed follow may find): what it wrote after the cursor
        cannot be read."""
        current = cursor.instance
        if current is None or cursor.is_done(current):
            return None
        if any(i.key == current for i in instances):
            return None
        if cursor.since is None and not any(i.started for i in instances):
            return None  # nothing of it was read: maybe not listed yet
        self.warn.append(current)
        pod_uid, _, rest = current.partition("/")
        container, _, restart = rest.rpartition("/")
        after = "" if cursor.since is None else f" after {cursor.since.isoformat()}"
        self.client.notice(
            f"[{self.source.key}] the end of an earlier run's log cannot be read: it was "
            "gone (its pod removed or replaced, or the run no longer kept by the kubelet) "
            f"before its log was read to the end (pod uid {pod_uid}, container {container}, "
            f"restart {restart}); what it wrote{after} is not in the task log",
            key=f"log end lost:{self.app_id}:{current}",
        )
        return current

    def _vanished(self, cursor: LogCursor, instances: list[ContainerInstance]) -> str | None:
        """An instance seen started that is gone before its log was opened: its pod removed
        or replaced (Volcano deletes a crashed pod at once; kwok, or a busy triggerer, can
        take longer than its run to answer), or a container restarted twice in place before
        its older run was read (the kubelet keeps one ended run). None of its lines can be
        read; said once, so the task log tells of every run this follow saw start. Said
        after the instance being read is read to its end (the cursor stays on it). (The
        cursor's own instance, read in part, is :meth:`_lost`'s.)"""
        present = {i.key for i in instances}
        for key in [k for k in self._started if cursor.is_done(k)]:
            del self._started[key]
        for i in instances:
            if i.started and not cursor.is_done(i.key):
                self._started.setdefault(i.key, i)
        current = cursor.instance
        if current is not None and not cursor.is_done(current) and current in present:
            return None  # an instance is being read: the cursor is its until its end
        gone = [i for k, i in self._started.items() if k not in present and k != current]
        if not gone:
            return None
        instance = gone[0]
        del self._started[instance.key]
        self.warn.append(instance.key)
        self.client.notice(
            f"[{self.source.key}] an earlier run's log cannot be read: it was gone (its pod "
            "removed or replaced, or the run no longer kept by the kubelet) before its log "
            f"could be opened (pod uid {instance.uid}, container {instance.container}, "
            f"restart {instance.restart}); its lines are not in the task log",
            key=f"log lost:{self.app_id}:{instance.key}",
        )
        return instance.key

    def _unlisted(self, cursor: LogCursor, instance: ContainerInstance) -> None:
        """Before ``instance`` is read: the runs of its container in the same pod between the
        last one this follow knows of and it, which were never listed (the kubelet keeps one
        ended run; a container that restarted twice between two looks, or before a follow
        that began or resumed late, leaves runs no one can read). None of their lines can be
        read; said once, before the lines of the run after them. A cursor that starts from a
        time and names no run (one stored before runs were tracked) asks for no earlier run."""
        if cursor.since is not None and cursor.instance is None:
            return
        prefix = f"{instance.uid}/{instance.container}/"
        last = instance.restart - 1
        # the runs before it this follow read, is reading or saw start
        known = [
            int(key[len(prefix) :])
            for key in (*cursor.done, cursor.instance or "", *self._started)
            if key.startswith(prefix) and key[len(prefix) :].isdigit()
        ]
        first = max((n for n in known if n <= last), default=-1) + 1
        if last < first:
            return
        runs = f"run {first}" if first == last else f"runs {first} to {last}"
        self.warn.append(f"{prefix}{first}-{last}")  # (one entry, however many restarts)
        self.client.notice(
            f"[{self.source.key}] {last - first + 1} earlier run(s) of its container cannot "
            "be read: they ended before this follow could read them, and the kubelet keeps "
            f"only the last ended run (pod {instance.pod}, uid {instance.uid}, container "
            f"{instance.container}, {runs} of its restarts); their lines are not in the task "
            "log",
            key=f"log lost:{self.app_id}:{prefix}{first}-{last}",
        )

    def _gone(self, instance: ContainerInstance, cursor: LogCursor) -> LogCursor:
        """``instance``, a container's previous run, finished unread: the API answers 400
        for its log. The kubelet keeps the log of one ended run of a container, and of none
        once its pod has ended (it removes the dead container, and ``lastState`` with it),
        so a follow that comes to it late -- resumed, or started after the pod ended --
        cannot read it; waiting would hold up every later run's lines."""
        self.warn.append(instance.key)
        what = "its lines are"
        if cursor.instance == instance.key and cursor.since is not None:
            what = f"what it wrote after {cursor.since.isoformat()} is"
        self.client.notice(
            f"[{self.source.key}] an earlier run's log cannot be read: the kubelet no longer "
            f"keeps it (pod {instance.pod}, uid {instance.uid}, container {instance.container}, "
            f"restart {instance.restart}); {what} not in the task log",
            key=f"log gone:{self.app_id}:{instance.key}",
        )
        return cursor.finished(instance.key)

    async def _read(
        self,
        instance: ContainerInstance,
        cursor: LogCursor,
        watch: WatchedPods,
        changed: asyncio.Event,
    ) -> AsyncIterator[Batch]:
        """``instance`` read in one turn of a stream slot: batches, the last with how it
        ended (:class:`StreamEnd`). A backlog read to its end is followed on in the same
        turn."""
        async with StreamSlots.current().hold(self.ended) as slot:
            while True:
                stream = self._stream(instance, cursor, watch, changed, slot)
                last: StreamEnd | None = None
                async with contextlib.aclosing(stream):  # its response released at once
                    async for lines, cursor, last in stream:
                        yield lines, cursor, None if last is StreamEnd.BACKLOG else last
                if last is not StreamEnd.BACKLOG:
                    return

    async def _stream(
        self,
        instance: ContainerInstance,
        cursor: LogCursor,
        watch: WatchedPods,
        changed: asyncio.Event,
        slot: Slot,
    ) -> AsyncGenerator[Batch, None]:
        """One response for ``instance``: its backlog, a follow, or its log once it ended."""
        resume = Resumed(cursor.at(instance.key))
        # what the cache says now: a container that ended while this waited for its
        # turn is read to its end at once, without following
        instance = self._fresh(instance, watch)
        backlog = not instance.ended and instance.key not in self._caught_up
        opened = await self._start(instance, resume, watch, changed, backlog)
        if isinstance(opened, tuple):
            yield opened
            return
        decoder = LineDecoder()
        body = LogBody(opened, sleep=self.sleep)
        woken: asyncio.Future[Any] | None = None  # the pods changed, or the app ended
        ended_at: float | None = None  # when the cache showed the instance ended
        last_data = self.clock()
        clean = server_ended = app_over = False
        try:
            while True:
                try:
                    chunk = body.take()
                except broken_errors():
                    break  # the stream broke: opened again from the cursor
                if chunk is not None:
                    if not chunk:  # the server ended it
                        clean = server_ended = True
                        break
                    last_data = self.clock()
                    new = resume.feed([split_timestamp(r) for r in decoder.decode(chunk)])
                    if new:
                        yield new, resume.cursor, None
                    await body.after(chunk)
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
                done = await first_of({body.pending(), woken}, timeout, self.sleep)
                if woken in done:
                    changed.clear()
                    woken = None
                if body.pending().done():
                    continue  # taken at the top
                if slot.should_yield:
                    break  # others wait for a stream: queue again, resume at the cursor
                if ended_at is None and self._has_ended(instance, watch):
                    ended_at = self.clock()
                now = self.clock()
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
            if woken is not None:
                woken.cancel()
            body.close()
        if backlog:
            if server_ended:
                self._caught_up.add(instance.key)  # the follow reads on from the cursor
                yield [], resume.cursor, StreamEnd.BACKLOG
            else:
                yield [], resume.cursor, StreamEnd.AGAIN  # read again, as if broken
        elif clean:
            yield self._ending(instance, watch, resume, decoder, server_ended, app_over)
        else:
            yield [], resume.cursor, StreamEnd.AGAIN

    async def _start(
        self,
        instance: ContainerInstance,
        resume: Resumed,
        watch: WatchedPods,
        changed: asyncio.Event,
        backlog: bool,
    ) -> Any:
        """``instance``'s log response (its backlog when ``backlog``, else followed unless
        it ended), or the batch that ends this turn when there is none to read."""
        try:
            resp = await self._open(
                instance,
                resume.cursor,
                watch,
                changed,
                follow=not instance.ended and not backlog,
            )
        except UnknownAppError:
            # The pod is gone: if the cache agrees, so is its log (reported as lost by
            # the caller); else the cache is a moment behind.
            return [], resume.cursor, StreamEnd.AGAIN
        except SubmissionError as e:
            if not no_log_yet(e):
                raise
            if instance.previous:
                # Not "no log yet": an ended run whose log the kubelet no longer keeps.
                return [], self._gone(instance, resume.cursor), StreamEnd.FINISHED
            await any_of(changed, timeout=1.0, sleep=self.sleep)  # (re)starting: no log to read yet
            return [], resume.cursor, StreamEnd.AGAIN
        if resp is not None:
            return resp
        # It ended while its follow was being opened (a server may answer a follow of a
        # quiet log only with its first line): look again, and read what it wrote without
        # following -- unless the app is over and the container lingers.
        if self.ended.is_set() and not self._has_ended(instance, watch):
            return [], resume.cursor.finished(instance.key), StreamEnd.FINISHED
        return [], resume.cursor, StreamEnd.AGAIN

    def _ending(
        self,
        instance: ContainerInstance,
        watch: WatchedPods,
        resume: Resumed,
        decoder: LineDecoder,
        server_ended: bool,
        app_over: bool,
    ) -> Batch:
        """The last batch of a followed response that ended cleanly: the server ended it
        (``server_ended``), the instance ended and its stream went quiet, or the app is over
        and the container lingers (``app_over``). Its unfinished last line is read whole."""
        rest = resume.feed([split_timestamp(r) for r in decoder.flush()])
        if app_over or instance.ended or self._has_ended(instance, watch):
            self._caught_up.discard(instance.key)
            return rest, resume.cursor.finished(instance.key), StreamEnd.FINISHED
        return rest, resume.cursor, StreamEnd.SERVER_ENDED if server_ended else StreamEnd.AGAIN

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
        started = self.clock()
        woken: asyncio.Future[Any] | None = None
        try:
            while True:
                quick = self.ended.is_set()
                if woken is None:
                    woken = asyncio.ensure_future(
                        changed.wait() if quick else any_of(changed, self.ended)
                    )
                done = await first_of(
                    {opening, woken}, QUIET_CHECK if quick else IDLE_CHECK, self.sleep
                )
                if opening in done:
                    return opening.result()
                if woken in done:
                    changed.clear()
                    woken = None
                waited = self.clock() - started
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
        """``instance`` as the cache shows it now (``None``: restarted or gone)."""
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
