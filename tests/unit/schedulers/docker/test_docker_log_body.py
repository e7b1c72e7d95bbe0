"""The Docker engine's chunked log body, decoded from the socket in pieces of any size."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from urllib3.exceptions import ProtocolError

from torchx_provider.schedulers.docker.logbody import Dechunked, RawLogStream, lines_of


def chunked(payloads: list[bytes], extension: bytes = b"") -> bytes:
    body = b"".join(b"%x%s\r\n%s\r\n" % (len(p), extension, p) for p in payloads if p)
    return body + b"0\r\n\r\n"


def pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    at = sorted({min(c, len(data)) for c in cuts})
    return [data[i:j] for i, j in zip([0, *at], [*at, len(data)], strict=True) if j > i]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.binary(min_size=0, max_size=300), max_size=12),
    st.lists(st.integers(0, 4000), max_size=20),
    st.sampled_from([b"", b";name=value"]),
)
def test_any_split_of_a_chunked_body_gives_its_payload_once_in_order(
    payloads: list[bytes], cuts: list[int], extension: bytes
) -> None:
    body = Dechunked()
    out = b""
    for piece in pieces(chunked(payloads, extension) + b"trailing", cuts):
        if body.ended:
            break
        out += body.feed(piece)
    assert body.ended
    assert out == b"".join(payloads)


def test_a_large_chunk_is_passed_on_as_it_arrives() -> None:
    body = Dechunked()
    assert body.feed(b"10000\r\n" + b"a" * 1000) == b"a" * 1000
    assert body.feed(b"b" * 64536) == b"b" * 64536
    assert not body.ended
    assert body.feed(b"\r\n0\r\n\r\n") == b""
    assert body.ended


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"zz\r\nhello\r\n", "bad chunk size"),
        (b"-5\r\nhello\r\n", "bad chunk size"),
        (b"5\r\nhelloXX", "no CRLF"),
        (b"1" * 5000, "too long"),
    ],
)
def test_a_malformed_body_is_a_broken_stream(data: bytes, what: str) -> None:
    """The reader treats it as a cut connection: opened again from the cursor."""
    with pytest.raises(ProtocolError, match=what):
        Dechunked().feed(data)


class Socket:
    """The connection's buffered socket: hands out the given pieces, then raises ``error``
    (or ends)."""

    def __init__(self, pieces: list[bytes], error: OSError | None = None) -> None:
        self.pieces = list(pieces)
        self.error = error

    def read1(self, n: int) -> bytes:
        if self.pieces:
            return self.pieces.pop(0)[:n]
        if self.error is not None:
            raise self.error
        return b""


class Response:
    """A requests response whose urllib3 body sits on an http.client response."""

    def __init__(self, sock: Socket) -> None:
        self.headers = {"Transfer-Encoding": "chunked"}
        inner = type("HTTPResponse", (), {"chunked": True, "chunk_left": None, "fp": sock})()
        self.raw = type("Raw", (), {"_fp": inner})()


def frame(text: bytes) -> bytes:
    return b"\x01\x00\x00\x00" + len(text).to_bytes(4, "big") + text


def test_the_engines_frames_come_from_the_socket_in_bulk() -> None:
    frames = [frame(b"line %d\n" % i) for i in range(50)]
    body = chunked(frames)
    sock = Socket([body[:333], body[333:]])
    stream = RawLogStream(Response(sock), multiplexed=True)
    assert len(list(stream)) == 2
    stream = RawLogStream(Response(Socket([body])), multiplexed=True)
    assert [line.text for line in lines_of(stream)] == [f"line {i}\n" for i in range(50)]


@pytest.mark.parametrize("error", [TimeoutError(110, "timed out"), OSError(113, "no route")])
def test_a_socket_error_is_a_broken_stream_as_the_http_client_says_it(error: OSError) -> None:
    """Any socket error (not only a reset) is an outage of the engine: ridden out."""
    sock = Socket([b"5\r\n" + frame(b"")[:5]], error=error)
    with pytest.raises(ProtocolError, match="Connection broken"):
        list(RawLogStream(Response(sock), multiplexed=True))


def test_a_body_cut_before_its_last_chunk_is_a_broken_stream() -> None:
    body = chunked([frame(b"a\n")])
    sock = Socket([body[:-5]])
    with pytest.raises(ProtocolError, match="before its last chunk"):
        list(RawLogStream(Response(sock), multiplexed=True))
