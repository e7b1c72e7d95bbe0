"""Log lines and cursors: resuming from a cursor emits every line exactly once, in order."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchx_provider.errors import InvalidOptionError
from torchx_provider.schedulers.logs import (
    LineDecoder,
    LogCursor,
    Resumed,
    TimestampedLine,
    advance,
    atimestamped_lines,
    format_timestamp,
    parse_timestamp,
    require_aware,
    split_timestamp,
    split_timestamps,
    timestamped_lines,
    within,
)

UTC = timezone.utc
BASE = datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)
PROPS = settings(max_examples=200, deadline=None)

# -- timestamps --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T10:00:00Z", BASE),
        ("2024-05-01T10:00:00.5Z", BASE.replace(microsecond=500000)),
        ("2024-05-01T10:00:00.123456789Z", BASE.replace(microsecond=123456)),
        ("2024-05-01T12:00:00+02:00", BASE),
        ("2024-05-01T05:30:00.000001-04:30", BASE.replace(microsecond=1)),
        ("2024-05-01T10:00:00Z ", BASE),
    ],
)
def test_parse_timestamp(text: str, expected: datetime) -> None:
    parsed = parse_timestamp(text)
    assert parsed == expected
    assert parsed.tzinfo == UTC


@pytest.mark.parametrize("text", ["", "yesterday", "2024-05-01 10:00:00Z", "2024-05-01T10:00:00"])
def test_parse_timestamp_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_timestamp(text)


def test_format_timestamp() -> None:
    assert format_timestamp(BASE.replace(microsecond=42)) == "2024-05-01T10:00:00.000042Z"
    plus2 = timezone(timedelta(hours=2))
    assert format_timestamp(datetime(2024, 5, 1, 12, tzinfo=plus2)) == "2024-05-01T10:00:00.000000Z"
    with pytest.raises(ValueError, match="timezone-aware"):
        format_timestamp(datetime(2024, 5, 1))


aware_datetimes = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)


@PROPS
@given(aware_datetimes)
def test_timestamp_round_trip(value: datetime) -> None:
    assert parse_timestamp(format_timestamp(value)) == value


def test_split_timestamp() -> None:
    line = split_timestamp("2024-05-01T10:00:00.000000001Z hello world\n")
    assert line == TimestampedLine(BASE, "hello world\n")
    assert split_timestamp("no timestamp") == TimestampedLine(None, "no timestamp\n")
    assert split_timestamp("2024-05-01T10:00:00Z") == TimestampedLine(BASE, "\n")
    assert split_timestamp("2024-05-01T10:00:00Z  indented").text == " indented\n"


STAMPS = st.one_of(
    st.just("2024-05-01T10:00:00.123456789Z "),  # Docker's: nine digits
    st.just("2024-05-01T10:00:00.1234Z "),  # the kubelet's: trailing zeros cut
    st.just("2024-05-01T10:00:00Z "),
    st.just("2024-05-01T12:00:00.123456789+02:00 "),
    st.just("2024-05-01X10:00:00.123456789Z "),  # not a stamp
    st.just(""),
    st.text(max_size=40),
)


@PROPS
@given(st.lists(st.tuples(STAMPS, st.text(max_size=30)), max_size=8))
def test_split_timestamps_splits_each_line_as_split_timestamp_does(
    parts: list[tuple[str, str]],
) -> None:
    """The batch form is only faster: same keys, same texts, for any line."""
    raws = [(stamp + text).replace("\n", " ") + "\n" for stamp, text in parts]
    got = split_timestamps(raws)
    assert [(g.key, g.text) for g in got] == [
        (w.key, w.text) for w in (split_timestamp(r) for r in raws)
    ]


def test_split_timestamps_of_docker_lines() -> None:
    got = split_timestamps(
        [
            "2024-05-01T10:00:00.000000001Z hello\n",
            "2024-05-01T10:00:00.500000000Z 50%\r100%\n",  # a redrawn line: its last state
            "2024-05-01T10:00:01.000000000Z \n",
        ]
    )
    assert [(g.timestamp, g.text) for g in got] == [
        (BASE, "hello\n"),
        (BASE + timedelta(milliseconds=500), "100%\n"),
        (BASE + timedelta(seconds=1), "\n"),
    ]


# -- line decoding -----------------------------------------------------------------------------


def test_line_decoder_basics() -> None:
    d = LineDecoder()
    assert d.decode(b"hel") == []
    assert d.decode("lo\nwor") == ["hello\n"]
    # a bare "\r" redraws the line (a progress bar): it stays one line, shaped later
    assert d.decode(b"ld\r\nx\ry\n") == ["world\n", "x\ry\n"]
    assert d.decode(b"") == []
    assert d.decode(b"tail") == []
    assert d.flush() == ["tail\n"]
    assert d.flush() == []


def test_line_decoder_keeps_split_utf8_characters() -> None:
    d = LineDecoder()
    data = "héllo ✓\n".encode()
    assert d.decode(data[:2]) == []  # ends in the middle of "é"
    assert d.decode(data[2:8]) == []  # ends in the middle of "✓"
    assert d.decode(data[8:]) == ["héllo ✓\n"]


def test_line_decoder_replaces_invalid_bytes() -> None:
    d = LineDecoder()
    assert d.decode(b"a\xffb\n") == ["a\ufffdb\n"]


def test_line_decoder_flushes_an_incomplete_character() -> None:
    d = LineDecoder()
    assert d.decode("é".encode()[:1]) == []
    assert d.flush() == ["\ufffd\n"]


def test_line_decoder_crlf_split_across_chunks() -> None:
    d = LineDecoder()
    lines = d.decode(b"a\r") + d.decode(b"\nb\n")
    assert lines == ["a\n", "b\n"]


line_text = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=20
)


@PROPS
@given(st.lists(line_text, max_size=10), st.data())
def test_line_decoder_is_independent_of_chunking(lines: list[str], data: st.DataObject) -> None:
    payload = "".join(f"{line}\n" for line in lines).encode()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(payload)), max_size=8)))
    d = LineDecoder()
    out: list[str] = []
    for start, end in zip([0, *cuts], [*cuts, len(payload)], strict=True):
        out += d.decode(payload[start:end])
    out += d.flush()
    assert out == [f"{line}\n" for line in lines]


# -- cursors -----------------------------------------------------------------------------------


def _lines(*pairs: tuple[int, str]) -> list[TimestampedLine]:
    return [TimestampedLine(BASE + timedelta(microseconds=us), f"{t}\n") for us, t in pairs]


def test_cursor_defaults_and_dict_form() -> None:
    assert LogCursor() == LogCursor(None, 0)
    assert LogCursor().to_dict() == {"since": None, "seen_at_since": 0}
    cursor = LogCursor(BASE.replace(microsecond=7), 2)
    assert cursor.to_dict() == {"since": "2024-05-01T10:00:00.000007Z", "seen_at_since": 2}
    assert LogCursor.from_dict(cursor.to_dict()) == cursor
    assert LogCursor.from_dict(None) == LogCursor.from_dict({}) == LogCursor()


def test_advance_from_the_start() -> None:
    lines = _lines((0, "a"), (0, "b"), (5, "c"))
    new, cursor = advance(LogCursor(), lines)
    assert new == lines
    assert cursor == LogCursor(BASE + timedelta(microseconds=5), 1)


def test_advance_skips_what_was_emitted_including_equal_timestamps() -> None:
    lines = _lines((0, "a"), (5, "b"), (5, "c"), (5, "d"), (9, "e"))
    _, cursor = advance(LogCursor(), lines[:3])  # stopped after "c": two lines at t=5 emitted
    assert cursor == LogCursor(BASE + timedelta(microseconds=5), 2)
    new, cursor = advance(cursor, lines)  # the backend sends everything again
    assert [line.text for line in new] == ["d\n", "e\n"]
    assert cursor == LogCursor(BASE + timedelta(microseconds=9), 1)


def test_advance_with_nothing_new() -> None:
    lines = _lines((0, "a"))
    _, cursor = advance(LogCursor(), lines)
    assert advance(cursor, lines) == ([], cursor)
    assert advance(cursor, []) == ([], cursor)


def test_lines_without_timestamp_are_emitted_and_do_not_move_the_cursor() -> None:
    plain = TimestampedLine(None, "plain\n")
    new, cursor = advance(LogCursor(), [plain])
    assert new == [plain] and cursor == LogCursor()
    lines = _lines((3, "a"))
    _, cursor = advance(LogCursor(), lines)
    new, after = advance(cursor, [plain, *lines])
    assert new == [plain] and after == cursor


def test_cursor_after_follows_every_emitted_line() -> None:
    lines = _lines((0, "a"), (5, "b"), (5, "c"), (9, "d"))
    cursor = LogCursor()
    for line in lines[:3]:
        cursor = cursor.after(line)
    assert cursor == LogCursor(BASE + timedelta(microseconds=5), 2)
    assert cursor.after(TimestampedLine(None, "plain\n")) == cursor
    assert cursor.after(lines[0]) == cursor  # an older line does not move it back
    # A reader that emitted every line and one that resumed agree on the cursor.
    assert cursor.after(lines[3]) == advance(LogCursor(), lines)[1]


@PROPS
@given(st.lists(st.sampled_from([0, 0, 1, 2]), max_size=20), st.integers(0, 20))
def test_following_with_after_then_resuming_emits_each_line_once(
    steps: list[int], cut: int
) -> None:
    # A follower emits lines one by one (keeping its cursor with ``after``), is cut off, and
    # the rest is read again from the start: ``advance`` drops exactly what it emitted.
    log = _lines(*((sum(steps[: i + 1]), str(i)) for i in range(len(steps))))
    cursor = LogCursor()
    for line in log[:cut]:
        cursor = cursor.after(line)
    rest, _ = advance(cursor, log)
    assert log[:cut] + rest == log


# -- the pipeline: chunks -> lines -> bounds -----------------------------------------------------


CHUNKS = [
    b"2024-05-01T10:00:00Z a\n2024-05-01T10:00:0",
    b"1.5Z b\nno stamp\n",
    b"2024-05-01T10:00:03Z c",
]
PIPELINE = [
    TimestampedLine(BASE, "a\n"),
    TimestampedLine(BASE + timedelta(seconds=1.5), "b\n"),
    TimestampedLine(None, "no stamp\n"),
    TimestampedLine(BASE + timedelta(seconds=3), "c\n"),
]


def test_timestamped_lines_decode_and_split_across_chunks() -> None:
    assert list(timestamped_lines(CHUNKS)) == PIPELINE
    assert list(timestamped_lines([])) == []


async def test_atimestamped_lines_equal_the_sync_ones() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for chunk in CHUNKS:
            yield chunk

    assert [line async for line in atimestamped_lines(chunks())] == PIPELINE


def test_within_is_inclusive_and_stops_after_until() -> None:
    one = BASE + timedelta(seconds=1.5)

    def texts(since: datetime | None, until: datetime | None) -> list[str]:
        return [line.text for line in within(PIPELINE, since, until)]

    assert texts(None, None) == ["a\n", "b\n", "no stamp\n", "c\n"]
    assert texts(one, None) == ["b\n", "no stamp\n", "c\n"]
    assert texts(None, one) == ["a\n", "b\n", "no stamp\n"]
    assert texts(one, one) == ["b\n", "no stamp\n"]

    def endless() -> Iterator[TimestampedLine]:
        yield from PIPELINE
        raise AssertionError("read past the first line after until")

    assert [line.text for line in within(endless(), None, one)] == ["a\n", "b\n", "no stamp\n"]


@pytest.mark.parametrize("bound", ["since", "until"])
def test_naive_bounds_are_refused_when_the_filter_is_made(bound: str) -> None:
    naive = datetime(2024, 5, 1, 10, 0, 0)
    with pytest.raises(InvalidOptionError, match=f"{bound} must be timezone-aware") as e:
        within(PIPELINE, **{"since": None, "until": None, bound: naive})  # not iterated
    assert e.value.option == bound
    with pytest.raises(InvalidOptionError, match="the naive 2024-05-01T10:00:00"):
        require_aware(naive, bound)
    require_aware(BASE, bound)
    require_aware(None, bound)


@st.composite
def logs(draw: st.DrawFn) -> list[TimestampedLine]:
    """A replica's log: non-decreasing timestamps with many repeats, as raw backend lines.

    Timestamps are nanoseconds apart at most a few seconds from each other, written the way
    Kubernetes writes them (RFC 3339 with 9 digits): several lines share a microsecond (the
    resolution we keep) and many share a second (the resolution of ``sinceTime``).
    """
    steps = draw(
        st.lists(
            st.one_of(st.just(0), st.integers(0, 999), st.integers(0, 2_000_000_000)), max_size=25
        )
    )
    raw: list[str] = []
    ns = 0
    for i, step in enumerate(steps):
        ns += step
        when = BASE + timedelta(microseconds=ns // 1000)
        stamp = when.strftime("%Y-%m-%dT%H:%M:%S") + f".{when.microsecond:06d}{ns % 1000:03d}Z"
        raw.append(f"{stamp} line {i}: {draw(line_text)}\n")
    return [split_timestamp(r) for r in raw]


def _backend(
    log: list[TimestampedLine], upto: int, since: datetime | None
) -> list[TimestampedLine]:
    """What a backend returns when asked for lines since ``since`` while ``upto`` exist.

    Like Kubernetes' ``sinceTime``, ``since`` is rounded down to the second.
    """
    if since is None:
        return log[:upto]
    floor = since.replace(microsecond=0)
    return [line for line in log[:upto] if line.timestamp is not None and line.timestamp >= floor]


def read_in_batches(
    log: list[TimestampedLine],
    ends: list[int],
    between: Callable[[LogCursor], LogCursor] = lambda cursor: cursor,
) -> tuple[list[TimestampedLine], LogCursor]:
    """Read ``log`` as a reader that finds it ending at each of ``ends`` in turn, then whole,
    resuming from its cursor each time (``between`` may change the cursor after each read):
    the lines emitted, and the final cursor."""
    cursor = LogCursor()
    emitted: list[TimestampedLine] = []
    for end in [*ends, len(log)]:
        new, cursor = advance(cursor, _backend(log, end, cursor.since))
        emitted += new
        cursor = between(cursor)
    return emitted, cursor


@PROPS
@given(logs(), st.data())
def test_resuming_emits_every_line_exactly_once_in_order(
    log: list[TimestampedLine], data: st.DataObject
) -> None:
    # Read the log in arbitrary batches (as it grows, or as reads are cut short), resuming
    # from the cursor each time; sometimes the cursor goes through its dict form, as it does
    # when a trigger is serialized and resumed on another triggerer.
    ends = sorted(data.draw(st.lists(st.integers(0, len(log)), max_size=8)))

    def maybe_serialized(cursor: LogCursor) -> LogCursor:
        return LogCursor.from_dict(cursor.to_dict()) if data.draw(st.booleans()) else cursor

    emitted, cursor = read_in_batches(log, ends, maybe_serialized)
    assert emitted == log
    # And a reader that starts again from the final cursor gets nothing twice.
    assert advance(cursor, _backend(log, len(log), cursor.since))[0] == []


@PROPS
@given(st.lists(st.sampled_from([0, 0, 0, 1]), min_size=1, max_size=30), st.data())
def test_resuming_inside_a_run_of_identical_timestamps(
    steps: list[int], data: st.DataObject
) -> None:
    # Mostly one timestamp: the count in the cursor is all that tells the lines apart.
    log: list[TimestampedLine] = []
    us = 0
    for i, step in enumerate(steps):
        us += step
        log.append(TimestampedLine(BASE + timedelta(microseconds=us), f"{i}\n"))
    ends = sorted(data.draw(st.lists(st.integers(0, len(log)), max_size=6)))
    emitted, _ = read_in_batches(log, ends)
    assert [line.text for line in emitted] == [line.text for line in log]


# -- lines as the user wrote them ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("10%\r50%\r100%\n", "100%\n"),
        ("10%\r50%\r100%\r\n", "100%\n"),  # tqdm ends a finished bar with "\r" too
        ("\rloading\n", "loading\n"),
        ("\r\r\n", "\n"),
        ("plain\n", "plain\n"),
    ],
)
def test_a_redrawn_line_is_its_last_state(raw: str, text: str) -> None:
    assert split_timestamp(f"2024-05-01T10:00:00Z {raw}").text == text
    assert split_timestamp(raw).text == text


def test_progress_lines_are_one_line_each_through_the_pipeline() -> None:
    chunks = [
        b"2024-05-01T10:00:00Z ep 1: 10%\r",
        b"ep 1: 90%\rep 1: 100%\n",
        b"2024-05-01T10:00:01Z done\n",
    ]
    assert [line.text for line in timestamped_lines(chunks)] == ["ep 1: 100%\n", "done\n"]


def test_a_long_line_is_cut_with_a_marker_and_never_buffered_whole() -> None:
    d = LineDecoder(max_chars=10)
    assert d.decode(b"0123456789abc") == []
    assert d.held == 10  # only what is kept
    assert d.decode(b"def\nshort\n") == ["0123456789 [... 6 more characters cut]\n", "short\n"]
    assert d.decode(b"x" * 25 + b"\n") == ["xxxxxxxxxx [... 15 more characters cut]\n"]
    assert d.decode(b"y" * 12) == []
    assert d.flush() == ["yyyyyyyyyy [... 2 more characters cut]\n"]


def test_invalid_utf8_in_the_middle_of_a_stream_is_replaced_not_dropped() -> None:
    d = LineDecoder()
    assert d.decode(b"ok \xc3") == []  # maybe the first half of a character
    assert d.decode(b"( bad\n") == ["ok \ufffd( bad\n"]


# -- cursors across container instances ----------------------------------------------------------


def test_cursor_instances_round_trip_and_stay_compatible() -> None:
    old = {"since": "2024-05-01T10:00:00.000007Z", "seen_at_since": 2}
    assert LogCursor.from_dict(old).to_dict() == old  # stored before instances existed
    cursor = LogCursor(BASE, 1, "uid-2/main/0", ("uid-1/main/0",))
    assert LogCursor.from_dict(cursor.to_dict()) == cursor
    assert cursor.to_dict()["done"] == ["uid-1/main/0"]


def test_cursor_at_an_instance_and_finished_instances() -> None:
    fresh = LogCursor()
    assert fresh.at("a") == LogCursor(instance="a")
    legacy = LogCursor(BASE, 3)  # no instance: its time applies to the first one read
    assert legacy.at("a") == LogCursor(BASE, 3, "a")
    in_a = LogCursor(BASE, 3, "a")
    assert in_a.at("a") is in_a
    assert in_a.at("b") == LogCursor(None, 0, "b")  # another instance starts at its start
    done = in_a.finished("a")
    assert done.is_done("a") and not done.is_done("b")
    assert done.at("b").done == ("a",)
    many = LogCursor()
    for i in range(40):
        many = many.finished(str(i))
    assert len(many.done) == 16 and many.is_done("39") and not many.is_done("0")


def test_resumed_drops_what_the_cursor_emitted_then_passes_everything() -> None:
    cursor = LogCursor(BASE + timedelta(seconds=1), 1)
    resumed = Resumed(cursor)
    first = resumed.feed(_lines((0, "old"), (1_000_000, "seen"), (1_000_000, "new-same-second")))
    assert [ln.text for ln in first] == ["new-same-second\n"]
    # a later batch repeating the cursor's timestamp is new lines, not old ones
    later = resumed.feed(_lines((1_000_000, "again"), (2_000_000, "next")))
    assert [ln.text for ln in later] == ["again\n", "next\n"]
    assert resumed.cursor == LogCursor(BASE + timedelta(seconds=2), 1)


@PROPS
@given(st.integers(1, 30), st.integers(0, 30), st.data())
def test_resumed_streams_lose_and_repeat_nothing(
    total: int, stop: int, data: st.DataObject
) -> None:
    """A stream cut anywhere and reopened from its cursor at the second's start: every line
    once (two lines share each timestamp, as the fake and real logs do)."""
    stamps = sorted(data.draw(st.lists(st.integers(0, 5), min_size=total, max_size=total)))
    lines = [TimestampedLine(BASE + timedelta(seconds=s), f"{i}\n") for i, s in enumerate(stamps)]
    stop = min(stop, total)
    first = Resumed(LogCursor())
    out = first.feed(lines[:stop])
    cursor = first.cursor
    floor = cursor.since.replace(microsecond=0) if cursor.since else None
    again = [
        ln for ln in lines if floor is None or (ln.timestamp is not None and ln.timestamp >= floor)
    ]
    out += Resumed(cursor).feed(again)
    assert out == lines


# -- time keys: lines are compared by key, which must order as their times ----------------------


def rfc3339(value: datetime, digits: int, offset_minutes: int) -> str:
    """``value`` written as a backend might: ``digits`` fractional digits (0-9; RFC 3339
    nano trims trailing zeros), in a zone ``offset_minutes`` from UTC."""
    local = value.astimezone(timezone(timedelta(minutes=offset_minutes)))
    text = local.strftime("%Y-%m-%dT%H:%M:%S")
    if digits:
        text += "." + f"{local.microsecond:06d}000"[:digits]
    if offset_minutes == 0:
        return text + "Z"
    sign = "+" if offset_minutes > 0 else "-"
    hours, minutes = divmod(abs(offset_minutes), 60)
    return f"{text}{sign}{hours:02d}:{minutes:02d}"


written = st.tuples(
    aware_datetimes, st.integers(0, 9), st.sampled_from([0, 0, 0, 60, -270, 330, 840])
)


@PROPS
@given(written, written)
def test_line_keys_order_as_their_times_whatever_the_digits_and_zone(
    a: tuple[datetime, int, int], b: tuple[datetime, int, int]
) -> None:
    first, second = (split_timestamp(f"{rfc3339(*w)} x\n") for w in (a, b))
    t1, t2 = (parse_timestamp(rfc3339(*w)) for w in (a, b))
    assert first.timestamp == t1 and second.timestamp == t2
    assert first.key is not None and second.key is not None
    assert (first.key < second.key, first.key == second.key) == (t1 < t2, t1 == t2)


def test_a_line_made_from_a_time_equals_the_same_line_parsed() -> None:
    parsed = split_timestamp("2024-05-01T12:00:00.5000009+02:00 hi\n")
    made = TimestampedLine(BASE.replace(microsecond=500000), "hi\n")
    assert parsed == made and hash(parsed) == hash(made)
    assert parsed.key == "2024-05-01T10:00:00.500000"
    assert repr(parsed) == f"TimestampedLine(timestamp={parsed.timestamp!r}, text='hi\\n')"
    assert TimestampedLine(None, "x\n").timestamp is None


def test_keys_of_bounds_at_the_ends_of_the_calendar_still_order() -> None:
    """A year before 1000 keeps four digits; a bound past what UTC can hold keeps its side."""
    early = datetime(500, 1, 1, tzinfo=UTC)
    line = TimestampedLine(BASE, "x\n")
    assert list(within([line], early, None)) == [line]
    late = datetime.max.replace(tzinfo=timezone(timedelta(hours=-5)))
    assert list(within([line], None, late)) == [line]
    very_early = datetime.min.replace(tzinfo=timezone(timedelta(hours=5)))
    assert list(within([line], very_early, None)) == [line]


@settings(max_examples=400, deadline=None)
@given(
    st.datetimes(
        min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(None)
    ),
    st.integers(0, 9),
    st.sampled_from(["Z", "+00:00", "-05:30", "z"]),
    st.sampled_from([" text\n", " \n", "\n", " a b\r\n", "", " 2026-01-01T00:00:00Z x\n"]),
)
def test_the_common_timestamp_form_splits_as_the_general_rule_does(
    when: datetime, digits: int, zone: str, rest: str
) -> None:
    """split_timestamp reads "...Z text" without its regex: the same key and text as the
    regex reading, for every fraction length, and other forms still go through the regex."""
    from torchx_provider.schedulers.logs import time_key

    frac = f"{when.microsecond:06d}{when.microsecond % 997:03d}"[:digits]
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S").rjust(19, "0") + (f".{frac}" if digits else "")
    stamp += zone
    raw = stamp + rest
    if zone == "z":  # the general rule reads an upper-case Z or an offset only
        with pytest.raises(ValueError):
            parse_timestamp(stamp)
        expected_key, expected_text = None, raw
    else:  # the general rule's reading, and the text after the stamp and one space
        expected_key = time_key(parse_timestamp(stamp))
        expected_text = rest.removeprefix(" ")
    line = split_timestamp(raw)
    assert line.key == expected_key
    if "\r" not in expected_text:
        assert line.text == (
            expected_text if expected_text.endswith("\n") else expected_text + "\n"
        )
