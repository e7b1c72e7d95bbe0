"""The Docker engine's log body: read from its socket in bulk, decoded into lines.

Body (chunked HTTP) --:class:`RawLogStream`/:class:`Dechunked`--> bytes --:class:`FrameLines`-->
:class:`~torchx_provider.schedulers.logs.TimestampedLine`. Every Docker log read, followed
or not, sync or async, goes through here.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from torchx_provider.schedulers.logs import (
    MAX_LINE_CHARS,
    LineDecoder,
    TimestampedLine,
    split_timestamp,
    split_timestamps,
)

if TYPE_CHECKING:
    from torchx_provider.schedulers.docker.apitypes import DockerApi

#: Bytes read from the engine at once.
READ_BYTES = 64 * 1024
#: Lines of other streams held back while one stream's long line is still arriving (past
#: it they are passed on, and a resume at that moment may miss the open line's start).
MAX_HELD_LINES = 10_000

_STAMP = re.compile(rb"\d{4}-\d{2}-\d{2}T[0-9:.]+(?:Z|[+-]\d{2}:\d{2}) ")


class FrameLines:
    """Turns a Docker log body (frames of entries with timestamps) into whole lines.

    The engine stores a line longer than 16 KiB as several entries ("partial messages"),
    each a frame of its own with the line's timestamp in front and only the last ending
    with ``\n``. Their pieces are joined here, per stream (stdout and stderr entries can
    interleave), into one line with the pieces' timestamp; only :data:`MAX_LINE_CHARS` of
    it are held (the rest is counted, see :class:`LineDecoder`).

    A line is passed on once whole, so a cursor never points into one: a read resumed
    from the cursor gets every piece of a line that was open. While one stream's line is
    open, the lines the other stream completes are held back (up to
    :data:`MAX_HELD_LINES`) and passed on after it, in time order, so the cursor never
    moves past the open line's time. An unframed body (a TTY) is split at newlines.
    """

    HEADER = 8

    def __init__(self, multiplexed: bool = True, max_chars: int = MAX_LINE_CHARS) -> None:
        self.multiplexed = multiplexed
        self.max_chars = max_chars
        self._decoder = LineDecoder(max_chars)  # whole one-entry lines, in bulk
        self._pending = b""  # the start of a frame not complete yet
        self._open: dict[int, tuple[bytes, LineDecoder]] = {}  # stream -> (stamp, its text)
        self._held: list[TimestampedLine] = []

    def feed(self, data: bytes) -> list[TimestampedLine]:
        """The lines ``data`` completes, in order."""
        if not self.multiplexed:
            return split_timestamps(self._decoder.decode(data))
        buf = self._pending + data if self._pending else data
        size_of = len(buf)
        out: list[TimestampedLine] = []
        run: list[bytes] = []  # whole one-entry lines, decoded together
        at = 0
        from_bytes = int.from_bytes
        append = run.append
        header = self.HEADER  # stream byte, 3 zero bytes, big-endian payload length
        while size_of - at >= header:
            start = at + header
            end = start + from_bytes(buf[at + 4 : start], "big")
            if end > size_of:
                break
            if end > start and buf[end - 1] == 10 and not self._open:  # a whole line
                append(buf[start:end])
                at = end
                continue
            if run:
                out += self._whole(run)
                run = []
                append = run.append
            self._piece(buf[at], buf[start:end], out)
            at = end
        if run:
            out += self._whole(run)
        self._pending = buf[at:]
        return out

    def flush(self) -> list[TimestampedLine]:
        """What is left once the body ended cleanly: open lines end there. (After a broken
        body nothing is flushed: the read is resumed from the cursor and gets them whole.)"""
        if not self.multiplexed:
            return [split_timestamp(r) for r in self._decoder.flush()]
        out = self._held
        for stamp, decoder in self._open.values():
            out += [self._stamped(stamp, r) for r in decoder.flush()]
        self._open, self._held, self._pending = {}, [], b""
        return _in_time_order(out)

    def _whole(self, payloads: list[bytes]) -> list[TimestampedLine]:
        return split_timestamps(self._decoder.decode(b"".join(payloads)))

    def _piece(self, stream: int, payload: bytes, out: list[TimestampedLine]) -> None:
        """One entry while a line is open somewhere (or one that opens a line)."""
        opened = self._open.get(stream)
        if opened is None:
            m = _STAMP.match(payload)
            stamp = payload[: m.end()] if m else b""
            opened = (stamp, LineDecoder(self.max_chars))
            self._open[stream] = opened
        else:
            m = _STAMP.match(payload)  # every piece carries the line's stamp: dropped
        stamp, decoder = opened
        done = decoder.decode(payload[m.end() :] if m else payload)
        if not done:
            return  # the line goes on in a later entry
        del self._open[stream]
        lines = [self._stamped(stamp, r) for r in done]
        if self._open:
            self._held += lines
            if len(self._held) > MAX_HELD_LINES:
                out += self._held
                self._held = []
            return
        out += _in_time_order(self._held + lines)
        self._held = []

    @staticmethod
    def _stamped(stamp: bytes, text: str) -> TimestampedLine:
        return split_timestamp(stamp.decode("ascii") + text)


def _in_time_order(lines: list[TimestampedLine]) -> list[TimestampedLine]:
    """Lines of several streams by time (stable: each stream's lines are in order)."""
    if len(lines) < 2:
        return lines
    return sorted(lines, key=lambda line: line.key or "")


def lines_of(stream: RawLogStream) -> Iterator[TimestampedLine]:
    """Every line of a log body, read to its end (the sync readers)."""
    frames = FrameLines(stream.multiplexed)
    for data in stream:
        yield from frames.feed(data)
    yield from frames.flush()


class RawLogStream:
    """A container's log body as the engine sends it, read in large pieces.

    The engine sends every log entry as an HTTP chunk of its own, which the HTTP client
    hands out one at a time: a Python reader would pay a read per line. So a chunked body
    is read from the connection's buffered socket 64 KiB (or what has arrived) at a time
    and its chunks are decoded here (:class:`Dechunked`); any other body is read through the
    client. :attr:`multiplexed`: the body is frames (:class:`FrameLines`); a container with
    a TTY has none, its body is the log.
    """

    def __init__(self, response: Any, multiplexed: bool) -> None:
        self.response = response
        self.multiplexed = multiplexed

    @classmethod
    def open(
        cls, api: DockerApi, container_id: str, *, follow: bool, **params: Any
    ) -> RawLogStream:
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
        """The body's bytes as they arrive (frames and all: :class:`FrameLines` reads them)."""
        return self._body()

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
        """End the stream, also for a thread blocked reading it (:func:`shut`)."""
        shut(self.response)


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


def shut(response: Any) -> None:
    """Close a streamed response of the engine, also for a thread blocked reading it:
    closing alone waits for that read (the response's buffer is locked while it reads) --
    until the engine sends again -- so the socket is shut down first, which ends the read at
    once."""
    raw = response.raw
    try:
        if hasattr(raw, "shutdown"):  # urllib3 2.3 and later
            raw.shutdown()
        else:
            sock = getattr(getattr(raw, "_connection", None), "sock", None)
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
    except (OSError, ValueError, RuntimeError):
        pass  # already shut, or released: nothing is blocked on it
    response.close()


def close_quietly(stream: Any) -> None:
    """Close a log stream (unblocks its reader thread); its errors no longer matter."""
    with contextlib.suppress(Exception):
        stream.close()
