"""Follow one replica's log on Docker: the engine's own log stream, read in a worker thread.

The docker SDK blocks, so :class:`ContainerLogFollower` reads the engine's ``follow`` stream
of the replica's container in a thread and hands its chunks to the event loop through a
bounded buffer (the thread waits while :data:`QUEUE_CHUNKS` are not taken: memory stays flat
however long the log; the loop takes all there is at each wake-up, decoding at most
:data:`BATCH_BYTES` at a time). The engine's body is read and decoded by :mod:`.logbody`.

The container is the log's instance (its id): a container restarted by its restart policy
keeps one log, so its stream is opened again from the cursor -- an absolute time, the
engine's own -- when a run ends and another starts; the log has been read to its end once
the container is finished and its stream has ended, or once the container is gone (removed
from outside, its log with it: the follower stops, whether or not the app has ended).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from torchx_provider.errors import InvalidOptionError, UnknownAppError
from torchx_provider.schedulers.docker.engine import DockerEngine
from torchx_provider.schedulers.docker.logbody import FrameLines, RawLogStream, close_quietly
from torchx_provider.schedulers.docker.state import ContainerInfo, replica_state
from torchx_provider.schedulers.docker.translation import log_params
from torchx_provider.schedulers.logs import LogCursor, LogSource, Resumed, TimestampedLine
from torchx_provider.schedulers.pauses import Sleep, any_of
from torchx_provider.schedulers.streams import StreamSlots
from torchx_provider.specs.api import is_terminal

#: Chunks of the body in flight between a reader thread and the loop, each up to
#: :data:`~.logbody.READ_BYTES`: at most 4 MiB of log per replica waits for the loop.
QUEUE_CHUNKS = 64
#: Bytes of log the event loop decodes in one go (then it lets other work run).
BATCH_BYTES = 64 * 1024
#: Seconds between looks at a container that has not started, or whose run has ended.
RECHECK = 1.0

_END = object()


class ContainerLogFollower:
    """Reads one replica's log (the contract of
    :meth:`~torchx_provider.schedulers.api.AsyncSchedulerClient.follow_logs`).

    :param sleep: waits (replaced in tests).
    """

    def __init__(
        self,
        engine: DockerEngine,
        app_id: str,
        source: LogSource,
        ended: asyncio.Event,
        *,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if source.container is not None:
            raise InvalidOptionError(
                f"log_replicas selects container {source.container!r} of {source.key}, but "
                "a Docker replica is one container; select the replica without ':<container>'",
                option="log_replicas",
            )
        self.engine = engine
        self.app_id = app_id
        self.source = source
        self.ended = ended
        self.sleep = sleep

    async def follow(
        self, cursor: LogCursor
    ) -> AsyncIterator[tuple[list[TimestampedLine], LogCursor]]:
        engine = self.engine
        role, replica_id = self.source.role, self.source.replica_id
        while True:
            ended_before = self.ended.is_set()
            try:
                container = await asyncio.to_thread(engine.replica, self.app_id, role, replica_id)
            except UnknownAppError:
                # Removed (every container of an app exists once it is submitted), and the
                # engine never creates it again: nothing more to read, ever.
                return
            finished = is_terminal(replica_state(container))
            if cursor.is_done(container.id) or container.status == "created":
                if ended_before:
                    return
                await self._pause()
                continue
            try:
                async with StreamSlots.current().hold(self.ended):
                    async for lines, moved in self._stream(container, cursor, follow=not finished):
                        cursor = moved
                        yield lines, cursor
            except UnknownAppError:
                return  # removed while its log was opened or read: as above
            if finished:
                # Read to its end after it finished: done (and removable, if asked for).
                cursor = cursor.finished(container.id)
                yield [], cursor
                await asyncio.to_thread(engine.mark_drained, self.app_id, role, replica_id)
            else:
                # The run ended: the container finishes or restarts. Look again (the engine's
                # state may lag its stream by a moment).
                await self._pause()

    async def _pause(self) -> None:
        await any_of(self.ended, timeout=RECHECK, sleep=self.sleep)

    async def _stream(
        self, container: ContainerInfo, cursor: LogCursor, *, follow: bool
    ) -> AsyncIterator[tuple[list[TimestampedLine], LogCursor]]:
        """One read of ``container``'s log from ``cursor``, following it if it runs."""
        engine = self.engine
        resume = Resumed(cursor.at(container.id))
        params = log_params(None, resume.cursor.since, None)
        client = engine.stream_client if follow else engine.client
        what = f"reading the log of replica {self.source.key} of app {self.app_id!r}"

        def open_stream() -> RawLogStream:
            with engine.call(what, app_id=self.app_id):
                return RawLogStream.open(client.api, container.id, follow=follow, **params)

        stream = await asyncio.to_thread(open_stream)
        loop = asyncio.get_running_loop()
        # The reader thread appends chunks and wakes the loop (once until it looks); it waits
        # while QUEUE_CHUNKS of them are not taken yet (memory stays flat).
        chunks: deque[Any] = deque()
        room = threading.Semaphore(QUEUE_CHUNKS)
        wake = asyncio.Event()
        stop = threading.Event()
        signalled = threading.Event()  # a wake-up is on its way: no need for another

        def put(item: Any) -> None:
            room.acquire()
            chunks.append(item)
            if not signalled.is_set():
                signalled.set()
                loop.call_soon_threadsafe(wake.set)

        def read() -> None:
            try:
                with engine.call(what, app_id=self.app_id):
                    for chunk in stream:
                        if stop.is_set():
                            return
                        put(chunk)
            except BaseException as e:  # handed to the loop, raised there
                if not stop.is_set():
                    put(e)
            finally:
                if not stop.is_set():
                    put(_END)

        reader = threading.Thread(target=read, name="torchx-docker-log", daemon=True)
        reader.start()
        frames = FrameLines(stream.multiplexed)
        try:
            while True:
                await wake.wait()
                wake.clear()
                signalled.clear()  # from here, a new chunk wakes the loop again
                while chunks:
                    taken: list[bytes] = []
                    size = 0
                    item: Any = None
                    while chunks and size < BATCH_BYTES:
                        item = chunks.popleft()
                        room.release()
                        if item is _END or isinstance(item, BaseException):
                            break
                        taken.append(item)
                        size += len(item)
                        item = None
                    if isinstance(item, BaseException):
                        raise item
                    lines = frames.feed(b"".join(taken))
                    if item is _END:
                        lines += frames.flush()
                    new = resume.feed(lines)
                    if new:
                        yield new, resume.cursor
                    if item is _END:
                        return
        finally:
            stop.set()
            while chunks:  # a reader waiting for room gets it, sees stop, ends
                chunks.popleft()
                room.release()
            room.release()
            await asyncio.to_thread(close_quietly, stream)
