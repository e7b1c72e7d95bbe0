"""Follow one replica's log on Docker: the engine's own log stream, read in a worker thread.

The docker SDK blocks, so :class:`ContainerLogFollower` reads the engine's ``follow`` stream
of the replica's container in a thread and hands its chunks to the event loop through a
bounded buffer (the thread waits while :data:`QUEUE_CHUNKS` are not taken: memory stays flat
however long the log; the loop takes all there is at each wake-up, decoding at most
:data:`BATCH_BYTES` at a time). The engine's body is read whole and demultiplexed here
(:class:`RawLogStream`).

The container is the log's instance (its id): a container restarted by its restart policy
keeps one log, so its stream is opened again from the cursor -- an absolute time, the
engine's own -- when a run ends and another starts; the log has been read to its end once
the container is finished and its stream has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
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
from torchx_provider.schedulers.streams import StreamSlots, any_of
from torchx_provider.specs.api import is_terminal

if TYPE_CHECKING:
    from torchx_provider.schedulers.docker.scheduler import DockerAsyncClient

#: Chunks in flight between a reader thread and the loop, each up to :data:`READ_BYTES`
#: (frames demultiplexed together): at most 4 MiB of log per replica waits for the loop.
QUEUE_CHUNKS = 64
#: Bytes of log the event loop decodes in one go (then it lets other work run).
BATCH_BYTES = 64 * 1024
#: Bytes read from the engine at once.
READ_BYTES = 64 * 1024
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
            async with StreamSlots.current().hold(self.ended):
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
        await any_of(self.ended, timeout=RECHECK)

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
                    raw = decoder.decode(b"".join(taken))
                    if item is _END:
                        raw += decoder.flush()
                    new = resume.feed([split_timestamp(r) for r in raw])
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
            await asyncio.to_thread(_close, stream)


class RawLogStream:
    """A container's log as the engine sends it, demultiplexed in large chunks.

    The engine sends every log entry as an HTTP chunk of its own, which the HTTP client
    hands out one at a time: a Python reader would pay a read per line. So a chunked body
    is read from the connection's buffered socket 64 KiB (or what has arrived) at a time
    and its chunks are decoded here (:class:`Dechunked`); any other body is read through the
    client. Then the payload of every whole frame in it is taken (an 8-byte header: stream,
    3 zero bytes, big-endian length). A container with a TTY has no frames: its body is
    the log.
    """

    HEADER = 8

    def __init__(self, response: Any, multiplexed: bool) -> None:
        self.response = response
        self.multiplexed = multiplexed

    @classmethod
    def open(cls, api: Any, container_id: str, *, follow: bool, **params: Any) -> RawLogStream:
        query = {
            "stdout": 1 if params.get("stdout", True) else 0,
            "stderr": 1 if params.get("stderr", True) else 0,
            "timestamps": 1 if params.get("timestamps", True) else 0,
            "follow": 1 if follow else 0,
            "tail": "all",
        }
        for bound in ("since", "until"):
            if params.get(bound) is not None:
                query[bound] = params[bound]
        inspect = api.inspect_container(container_id)
        tty = bool((inspect.get("Config") or {}).get("Tty"))
        response = api._get(
            api._url("/containers/{0}/logs", container_id), params=query, stream=True
        )
        api._raise_for_status(response)
        return cls(response, multiplexed=not tty)

    def __iter__(self) -> Iterator[bytes]:
        pending = b""
        for data in self._body():
            if not self.multiplexed:
                yield data
                continue
            pending += data
            out: list[bytes] = []
            at = 0
            while len(pending) - at >= self.HEADER:
                size = int.from_bytes(pending[at + 4 : at + 8], "big")
                end = at + self.HEADER + size
                if end > len(pending):
                    break
                out.append(pending[at + self.HEADER : end])
                at = end
            pending = pending[at:]
            if out:
                yield b"".join(out)

    def _body(self) -> Iterator[bytes]:
        """The body's bytes as they arrive, in pieces of up to :data:`READ_BYTES`."""
        sock = self._chunked_socket()
        if sock is None:
            raw = self.response.raw
            while True:
                data = raw.read1(READ_BYTES) if hasattr(raw, "read1") else raw.read(READ_BYTES)
                if not data:
                    return
                yield data
        body = Dechunked()
        while not body.ended:
            try:
                data = sock.read1(READ_BYTES)
            except OSError as e:  # as the HTTP client says it: a broken connection
                raise broken_stream(f"Connection broken: {e!r}") from e
            if not data:
                raise broken_stream("the engine's log stream ended before its last chunk")
            payload = body.feed(data)
            if payload:
                yield payload

    def _chunked_socket(self) -> Any:
        """The buffered socket under a chunked body nothing has read yet (else ``None``)."""
        inner = getattr(self.response.raw, "_fp", None)  # the http.client response
        if not getattr(inner, "chunked", False) or getattr(inner, "chunk_left", 0) is not None:
            return None
        if self.response.headers.get("Content-Encoding", "identity") != "identity":
            return None
        sock = getattr(inner, "fp", None)
        return sock if hasattr(sock, "read1") else None

    def close(self) -> None:
        """End the stream, also for a thread blocked reading it: closing alone waits for that
        read (the response's buffer is locked while it reads) -- until the container writes
        again or exits -- so the socket is shut down first, which ends the read at once."""
        raw = self.response.raw
        try:
            if hasattr(raw, "shutdown"):  # urllib3 2.3 and later
                raw.shutdown()
            else:
                sock = getattr(getattr(raw, "_connection", None), "sock", None)
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
        except (OSError, ValueError, RuntimeError):
            pass  # already shut, or released: nothing is blocked on it
        self.response.close()


class Dechunked:
    """Decodes an HTTP/1.1 chunked body fed in pieces of any size: :meth:`feed` returns the
    payload bytes they complete; :attr:`ended` once the last (empty) chunk is read. A
    chunk's payload is passed on as it arrives, so a large chunk is never held whole."""

    #: Longest chunk-size line accepted (hex size and extensions).
    MAX_SIZE_LINE = 4096

    def __init__(self) -> None:
        self.ended = False
        self._buffer = b""
        self._left = 0  # payload bytes of the current chunk still to come
        self._crlf = False  # the CRLF after a chunk's payload is still to come

    def feed(self, data: bytes) -> bytes:
        buf = self._buffer + data if self._buffer else data
        size_of = len(buf)
        at = 0
        out: list[bytes] = []
        while at < size_of and not self.ended:
            if self._left:
                take = min(self._left, size_of - at)
                out.append(buf[at : at + take])
                at += take
                self._left -= take
                self._crlf = not self._left
                continue
            if self._crlf:
                if size_of - at < 2:
                    break
                if buf[at : at + 2] != b"\r\n":
                    self._malformed("no CRLF after a chunk")
                at += 2
                self._crlf = False
                continue
            eol = buf.find(b"\r\n", at)
            if eol < 0:
                if size_of - at > self.MAX_SIZE_LINE:
                    self._malformed("a chunk-size line too long")
                break
            try:
                size = int(buf[at:eol].split(b";", 1)[0].strip(), 16)
            except ValueError:
                size = -1
            if size < 0:
                self._malformed(f"a bad chunk size {bytes(buf[at:eol][:40])!r}")
            at = eol + 2
            if size == 0:
                self.ended = True
            self._left = size
        self._buffer = b"" if self.ended else buf[at:]
        return out[0] if len(out) == 1 else b"".join(out)

    @staticmethod
    def _malformed(what: str) -> None:
        raise broken_stream(f"the engine's log stream is malformed: {what}")


def broken_stream(message: str) -> Exception:
    """A broken log stream, as the HTTP client reports one (urllib3's ``ProtocolError``,
    which the callers treat as a broken connection)."""
    from urllib3.exceptions import ProtocolError

    return ProtocolError(message)


def _close(stream: Any) -> None:
    """Close a log stream (unblocks its reader thread); its errors no longer matter."""
    with contextlib.suppress(Exception):
        stream.close()
