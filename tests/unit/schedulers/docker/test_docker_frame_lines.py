"""Docker's framed log entries become whole lines: long lines arrive as several entries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchx_provider.schedulers.docker import logbody
from torchx_provider.schedulers.docker.logbody import FrameLines
from torchx_provider.schedulers.logs import CUT_MARKER, LogCursor, Resumed, TimestampedLine

STAMP = "2026-11-27T11:36:48.175495247Z "
PIECE = 16 * 1024  # the engine's longest entry


def entry(text: str, stamp: str = STAMP, stream: int = 1) -> bytes:
    payload = (stamp + text).encode()
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def long_line(text: str, stamp: str = STAMP, stream: int = 1) -> bytes:
    """``text`` (ending with a newline) as the engine stores a long line: 16 KiB entries,
    each stamped with the line's time, only the last ending with the newline."""
    data = text.encode()
    pieces = [data[i : i + PIECE] for i in range(0, len(data), PIECE)]
    out = b""
    for piece in pieces:
        payload = stamp.encode() + piece
        out += bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload
    return out


def texts(lines: list[TimestampedLine]) -> list[str]:
    return [line.text for line in lines]


def test_a_40000_character_line_arrives_whole_without_stamps_inside() -> None:
    body = entry("before\n") + long_line("a" * 40_000 + "\n") + entry("after\n")
    lines = FrameLines().feed(body)
    assert texts(lines) == ["before\n", "a" * 40_000 + "\n", "after\n"]
    assert lines[1].key == "2026-11-27T11:36:48.175495"


def test_a_line_of_several_mib_is_cut_with_the_exact_count() -> None:
    n = 5_000_000
    frames = FrameLines()
    body = long_line("b" * n + "\n")
    out = []
    for i in range(0, len(body), 65536):  # as the reader hands it over
        out += frames.feed(body[i : i + 65536])
    assert texts(out) == ["b" * frames.max_chars + CUT_MARKER.format(n - frames.max_chars) + "\n"]


def test_a_multibyte_character_split_between_entries_stays_whole() -> None:
    text = "é" * 20_000 + "\n"  # 40,001 bytes: the 16 KiB cuts fall inside characters
    lines = FrameLines(max_chars=100_000).feed(long_line(text))
    assert texts(lines) == [text]


def test_the_other_streams_lines_wait_for_an_open_line_and_follow_it_in_time_order() -> None:
    t1, t2, t3 = (f"2026-11-27T11:36:4{i}.000000000Z " for i in (1, 2, 3))
    pieces = long_line("x" * 20_000 + "\n", stamp=t1)
    first_piece_end = 8 + len(t1) + PIECE
    frames = FrameLines()
    out = frames.feed(pieces[:first_piece_end] + entry("err\n", t2, stream=2))
    assert out == []  # stdout's line is open: stderr's line waits
    out = frames.feed(pieces[first_piece_end:] + entry("next\n", t3))
    assert texts(out) == ["x" * 20_000 + "\n", "err\n", "next\n"]
    assert [line.key for line in out] == sorted(line.key or "" for line in out)


def test_held_lines_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logbody, "MAX_HELD_LINES", 3)
    frames = FrameLines()
    out = frames.feed(long_line("x" * 20_000 + "\n")[: 8 + len(STAMP) + PIECE])
    out += frames.feed(b"".join(entry(f"e{i}\n", stream=2) for i in range(4)))
    assert texts(out) == [f"e{i}\n" for i in range(4)]


def test_a_body_that_ends_cleanly_inside_a_line_ends_it_there() -> None:
    frames = FrameLines()
    assert frames.feed(long_line("z" * 20_000 + "\n")[: 8 + len(STAMP) + PIECE]) == []
    assert texts(frames.flush()) == ["z" * PIECE + "\n"]


def test_a_read_resumed_in_the_middle_of_a_long_line_gets_it_once_and_whole() -> None:
    """The stream breaks after the first piece of a long line: nothing of it was passed on,
    so the cursor is before it, and the read from the cursor gets it whole, once."""
    t1, t2 = "2026-11-27T11:36:41.000000000Z ", "2026-11-27T11:36:42.000000000Z "
    body = entry("one\n", t1) + long_line("y" * 50_000 + "\n", stamp=t2) + entry("two\n", t2)
    broken_at = len(entry("one\n", t1)) + 8 + len(t2) + PIECE + 100
    resume = Resumed(LogCursor())
    first = resume.feed(FrameLines().feed(body[:broken_at]))  # then the connection breaks
    assert texts(first) == ["one\n"]
    # read again from the cursor: the engine sends every entry at or after its time
    again = Resumed(resume.cursor)
    rest = again.feed(FrameLines().feed(body))
    assert texts(rest) == ["y" * 50_000 + "\n", "two\n"]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([1, 2]), st.integers(0, 40_000), st.sampled_from("ab\u00e9")),
        max_size=8,
    ),
    st.lists(st.integers(1, 70_000), max_size=10),
)
def test_any_split_of_any_mix_of_lines_gives_each_line_once(
    specs: list[tuple[int, int, str]], cuts: list[int]
) -> None:
    """Lines of both streams, short and long, one after another: however the body is cut
    into reads, each line comes out once and whole (within the kept length)."""
    body = b""
    want = []
    for i, (stream, size, char) in enumerate(specs):
        stamp = f"2026-11-27T11:36:{i:02d}.000000000Z "
        text = char * size + "\n"
        body += long_line(text, stamp=stamp, stream=stream)
        want.append(text)
    frames = FrameLines(max_chars=100_000)
    out = []
    at = 0
    for cut in sorted(set(cuts)):
        out += frames.feed(body[at:cut])
        at = max(at, cut)
    out += frames.feed(body[at:]) + frames.flush()
    assert texts(out) == want
