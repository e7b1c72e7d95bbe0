"""Follow one replica's log on Docker: the engine's own log stream, read in a worker thread.

The docker SDK blocks, so :class:`ContainerLogFollower` reads the engine's ``follow`` stream
of the replica's container in a thread and hands its chunks to the event loop through a
bounded queue (the thread waits while the queue is full: memory stays flat however long the
log). The loop decodes at most :data:`BATCH_BYTES` at a time. The container is the log's
instance (its id): a container restarted by its restart policy keeps one log, so its stream
is opened again from the cursor -- an absolute time, the engine's own -- when a run ends and
another starts; the log has been read to its end once the container is finished and its
stream has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from torchx_provider.errors import InvalidOptionError, UnknownAppError
from torchx_provider.schedulers.docker.client import docker_call
from torchx_provider.schedulers.docker.state import ContainerInfo, replica_state
from torchx_provider.schedulers.docker.translation import log_params
from torchx_provider.schedulers.logs import (
    LineDecoder,
    LogCursor,
    LogSource,
    Resumed,
    TimestampedLine,
    split_timestamp,
)
from torchx_provider.schedulers.streams import StreamSlots
from torchx_provider.specs.api import is_terminal

if TYPE_CHECKING:
    from torchx_provider.schedulers.docker.scheduler import DockerAsyncClient

#: Chunks in flight between a reader thread and the event loop.
QUEUE_CHUNKS = 64
#: Bytes of log the event loop decodes in one go (then it lets other work run).
BATCH_BYTES = 64 * 1024
#: Seconds between looks at a container that has not started, or at an app's replica that
#: does not exist yet.
RECHECK = 1.0

_END = object()


class ContainerLogFollower:
    """Reads one replica's log (the contract of
    :meth:`~torchx_provider.schedulers.api.AsyncSchedulerClient.follow_logs`)."""

    def __init__(
        self, client: DockerAsyncClient, app_id: str, source: LogSource, ended: asyncio.Event
    ) -> None:
        if source.container is not None:
            raise InvalidOptionError(
                f"log_replicas selects container {source.container!r} of {source.key}, but "
                "a Docker replica is one container; select the replica without ':<container>'",
                option="log_replicas",
            )
        self.client = client
        self.app_id = app_id
        self.source = source
        self.ended = ended

    async def follow(
        self, cursor: LogCursor
    ) -> AsyncIterator[tuple[list[TimestampedLine], LogCursor]]:
        engine = self.client.engine
        role, replica_id = self.source.role, self.source.replica_id
        while True:
            ended_before = self.ended.is_set()
            try:
                container = await asyncio.to_thread(engine.replica, self.app_id, role, replica_id)
            except UnknownAppError:
                if ended_before:
                    return  # never created, or removed: nothing (more) to read
                await self._pause()
                continue
            finished = is_terminal(replica_state(container))
            if cursor.is_done(container.id) or container.status == "created":
                if ended_before:
                    return
                await self._pause()
                continue
            async with StreamSlots.current().hold():
                async for lines, moved in self._stream(container, cursor, follow=not finished):
                    cursor = moved
                    yield lines, cursor
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
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ended.wait(), RECHECK)

    async def _stream(
        self, container: ContainerInfo, cursor: LogCursor, *, follow: bool
    ) -> AsyncIterator[tuple[list[TimestampedLine], LogCursor]]:
        """One read of ``container``'s log from ``cursor``, following it if it runs."""
        engine = self.client.engine
        resume = Resumed(cursor.at(container.id))
        params = log_params(None, resume.cursor.since, None)
        client = engine.stream_client if follow else engine.client
        what = f"reading the log of replica {self.source.key} of app {self.app_id!r}"

        def open_stream() -> Any:
            with docker_call(what, app_id=self.app_id):
                return client.api.logs(container.id, stream=True, follow=follow, **params)

        stream = await asyncio.to_thread(open_stream)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=QUEUE_CHUNKS)
        stop = threading.Event()

        def put(item: Any) -> None:
            if not stop.is_set():
                asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()

        def read() -> None:
            try:
                with docker_call(what, app_id=self.app_id):
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
        decoder = LineDecoder()
        try:
            while True:
                item = await queue.get()
                chunks: list[bytes] = []
                size = 0
                while True:
                    if item is _END:
                        break
                    if isinstance(item, BaseException):
                        raise item
                    chunks.append(item)
                    size += len(item)
                    if size >= BATCH_BYTES or queue.empty():
                        break
                    item = queue.get_nowait()
                raw = [r for chunk in chunks for r in decoder.decode(chunk)]
                if item is _END:
                    raw += decoder.flush()
                new = resume.feed([split_timestamp(r) for r in raw])
                if new:
                    yield new, resume.cursor
                if item is _END:
                    return
        finally:
            stop.set()
            while not queue.empty():  # a reader waiting to put gets room, sees stop, ends
                queue.get_nowait()
            await asyncio.to_thread(_close, stream)


def _close(stream: Any) -> None:
    """Close a log stream (unblocks its reader thread); its errors no longer matter."""
    with contextlib.suppress(Exception):
        stream.close()
