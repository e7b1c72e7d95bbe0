"""The body of a log response of the async Kubernetes client (aiohttp), read as a log follower
needs it: every use of the HTTP library's internals is here.

A followed log comes about a line at a time (the API server flushes each piece the kubelet
gives it). Lines that come one at a time would cost a socket read, a parse and a wake-up
each, so after a small read (under :data:`GATHER_BELOW`) the socket is left unread for
:data:`GATHER` seconds and the lines written meanwhile come in one read; what the HTTP
client already holds is taken without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from torchx_provider.schedulers.pauses import Sleep

#: Bytes read from a stream at once (the most a single parse handles between yields).
READ_BYTES = 64 * 1024
#: A read smaller than this many bytes means the server sends lines as they come: the
#: stream's bytes are then left to pile up for :data:`GATHER` seconds before the next read.
GATHER_BELOW = 16 * 1024
#: Seconds a trickling stream is not read, so that many lines come in one read.
GATHER = 0.005


class LogBody:
    """The reads of one log response's body, one at a time: what the HTTP client already
    holds is taken at once; else a read task waits for more (:meth:`pending`). Its pauses
    are waited by ``sleep``."""

    def __init__(self, resp: Any, sleep: Sleep = asyncio.sleep) -> None:
        self.resp = resp
        self.content = resp.content
        self.sleep = sleep
        self._task: asyncio.Future[bytes] | None = None

    def take(self) -> bytes | None:
        """The next bytes (``b""``: the body has ended), or ``None`` while the read waits
        (:meth:`pending`). A broken stream raises one of :func:`broken_errors`."""
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

    async def after(self, chunk: bytes) -> None:
        """After reading ``chunk``: when it was small (a trickling stream), leave the
        socket unread for :data:`GATHER` seconds (:func:`gather`)."""
        if len(chunk) < GATHER_BELOW:
            await gather(self.resp, self.sleep)

    def close(self) -> None:
        """Stop reading and give the connection back (a body left half-read is closed)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.resp.release()


async def gather(resp: Any, sleep: Sleep = asyncio.sleep) -> None:
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
        await sleep(GATHER)
    finally:
        if paused and not transport.is_closing():
            with contextlib.suppress(AttributeError, NotImplementedError, RuntimeError):
                transport.resume_reading()


def broken_errors() -> tuple[type[BaseException], ...]:
    """The errors of a broken stream (the HTTP client's imported when a stream is read)."""
    import aiohttp

    return (OSError, asyncio.TimeoutError, aiohttp.ClientError)
