"""Log lines and log cursors: the one piece of log logic every reader shares.

Docker and Kubernetes both return log lines prefixed with an RFC 3339 timestamp when asked
(``timestamps=True``). A :class:`LogCursor` remembers, per replica, the timestamp of the last
line emitted and how many lines carried exactly that timestamp. A reader that resumes (the
trigger after a triggerer restart, a retried task) asks the backend for lines *since* that
timestamp and lets :func:`advance` drop the ones it already emitted. Backends round ``since``
down (Kubernetes' ``sinceTime`` has one-second precision), which is fine: anything before the
cursor is dropped here too. No line is lost; a line is repeated only if the backend gives two
lines the same timestamp and then changes their order, which neither engine does.

Every reader, sync and async, Docker and Kubernetes, uses the one pipeline here::

    chunks (bytes) --timestamped_lines / atimestamped_lines--> TimestampedLine
                   --within(since, until)--> lines in the asked time range
                   --advance(cursor)--> only the lines a cursor has not emitted yet

A line's time is kept as a key that sorts as the times do (:func:`time_key`); lines are
compared by key, and a key becomes a datetime only for a cursor. A reader that emits every
line it gets (a followed stream) keeps its cursor with
:meth:`LogCursor.after`. Every time bound a caller gives is checked by :func:`require_aware`
(a naive datetime is refused with the same message on every backend).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from torchx_provider.errors import InvalidOptionError
from torchx_provider.timestamps import RFC3339, parse_timestamp

#: the timestamp a log line starts with, and the blank after it
_TS = re.compile(rf"^{RFC3339} ?")


# A line's time is kept as its *key*: ``YYYY-MM-DDTHH:MM:SS.ffffff`` in UTC, which sorts as
# the times do. A long log's lines are compared by key as they stream by; a key becomes a
# datetime only where one is asked for (a cursor's time, once per batch).


#: The keys of times before the first and past the last a datetime can hold in UTC.
_KEY_MIN, _KEY_MAX = "0001-01-01T00:00:00.000000", "9999-12-31T23:59:59.999999"


def time_key(value: datetime) -> str:
    """The key of an aware datetime (µs precision, as :class:`LogCursor` keeps times)."""
    offset = value.utcoffset()
    if offset is None:
        raise ValueError("timestamps must be timezone-aware")
    if offset:
        try:
            value = value.astimezone(timezone.utc)
        except OverflowError:  # a bound at the very end of the calendar, in its zone
            return _KEY_MAX if offset.total_seconds() < 0 else _KEY_MIN
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:"
        f"{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}"
    )


#: The last key turned into a datetime, and that datetime (one tuple: threads reading it
#: never see a key with another's value).
_LAST_KEY: tuple[str, datetime] | None = None


def key_time(key: str) -> datetime:
    """The aware UTC datetime of a key (a key is a UTC time without its ``Z``, read as any
    other timestamp by :func:`~torchx_provider.timestamps.parse_timestamp`)."""
    global _LAST_KEY
    cached = _LAST_KEY
    if cached is not None and cached[0] == key:
        return cached[1]
    value = parse_timestamp(key + "Z")
    _LAST_KEY = (key, value)
    return value


def _key_of(m: re.Match[str]) -> str:
    """The key of a matched timestamp, as :func:`~torchx_provider.timestamps.parse_timestamp`
    reads it (fractions past µs dropped, any zone in UTC)."""
    return time_key(parse_timestamp(m.group(0)))


def format_timestamp(value: datetime) -> str:
    """UTC RFC 3339 with microseconds, e.g. ``2024-05-01T10:00:00.123456Z``."""
    return time_key(value) + "Z"


class TimestampedLine:
    """One log line (ending with ``\\n``) and when the backend recorded it.

    ``TimestampedLine(timestamp, text)``; :attr:`key` is the time as a key (see
    :func:`time_key`), which is what readers compare (``None``: the line had no timestamp).
    """

    __slots__ = ("key", "text")

    def __init__(self, timestamp: datetime | None, text: str, key: str | None = None) -> None:
        self.key = key if timestamp is None else time_key(timestamp)
        self.text = text

    @property
    def timestamp(self) -> datetime | None:
        return None if self.key is None else key_time(self.key)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TimestampedLine):
            return NotImplemented
        return (self.key, self.text) == (other.key, other.text)

    def __hash__(self) -> int:
        return hash((self.key, self.text))

    def __repr__(self) -> str:
        return f"TimestampedLine(timestamp={self.timestamp!r}, text={self.text!r})"


def split_timestamp(raw: str) -> TimestampedLine:
    """Split ``"<RFC 3339> text"`` into its parts; a line without a timestamp keeps ``None``.

    The text is the line as the user last saw it: a line redrawn with ``\\r`` (a progress
    bar) is its last state, see :func:`last_state`.
    """
    # The common form first (UTC, "Z", as Docker and the kubelet write it), without a regex:
    # "YYYY-MM-DDTHH:MM:SS[.fraction]Z text".
    sp = raw.find(" ", 19, 42)
    if (
        sp > 0
        and raw[sp - 1] == "Z"
        and raw[10] == "T"
        and raw[4] == raw[7] == "-"
        and raw[13] == raw[16] == ":"
        and (sp == 20 or (raw[19] == "." and raw[20 : sp - 1].isdigit()))
        and raw[:4].isdigit()
    ):
        if sp >= 27:  # six fractional digits or more: the key is the first 26 characters
            key: str | None = raw[:26]
        else:
            key = raw[:19] + "." + raw[20 : sp - 1].ljust(6, "0")
        text = raw[sp + 1 :]
    else:
        m = _TS.match(raw)
        if m is None:
            key, text = None, raw
        else:
            key, text = _key_of(m), raw[m.end() :]
    if "\r" in text:
        text = last_state(text)
    if text[-1:] != "\n":
        text += "\n"
    return TimestampedLine(None, text, key)


def split_timestamps(raws: list[str]) -> list[TimestampedLine]:
    """:func:`split_timestamp` of each of ``raws`` (whole lines, each ending with ``\\n``).

    Docker stamps every line with nine fractional digits (``2024-05-01T10:00:00.123456789Z``):
    such a line, without a ``\\r``, is split here without a call per line (the text after
    the stamp, the key its first 26 characters); any other goes through
    :func:`split_timestamp`, with the same result.

    >>> [(line.key, line.text) for line in split_timestamps(
    ...     ["2024-05-01T10:00:00.123456789Z a\\n", "2024-05-01T10:00:01Z b\\n", "c\\n"])]
    [('2024-05-01T10:00:00.123456', 'a\\n'), ('2024-05-01T10:00:01.000000', 'b\\n'), (None, 'c\\n')]
    """
    out: list[TimestampedLine] = []
    append = out.append
    line = TimestampedLine
    split = split_timestamp
    for raw in raws:
        if (
            raw[30:31] == " "
            and raw[29] == "Z"
            and raw[19] == "."
            and raw[10] == "T"
            and raw[4] == raw[7] == "-"
            and raw[13] == raw[16] == ":"
            and raw[-1] == "\n"
            and "\r" not in raw
        ):
            append(line(None, raw[31:], raw[:26]))
        else:
            append(split(raw))
    return out


def last_state(text: str) -> str:
    """What a terminal shows of a line redrawn with carriage returns: the text after the
    last ``\\r`` that is followed by anything (tqdm ends its bars with ``\\r`` too).

    >>> last_state("10%\\r50%\\r100%\\r\\n")
    '100%\\n'
    """
    end = "\n" if text.endswith("\n") else ""
    states = [s for s in text.removesuffix("\n").split("\r") if s]
    return (states[-1] if states else "") + end


#: Characters of one line kept in the task log; the rest is cut, and the line ends with
#: :data:`CUT_MARKER` saying how much (a line without a newline never grows a buffer past it).
MAX_LINE_CHARS = 64 * 1024
#: What ends a cut line, formatted with the number of characters cut.
CUT_MARKER = " [... {} more characters cut]"


class LineDecoder:
    """Turn a stream of byte/str chunks into complete lines.

    A chunk may end in the middle of a line (or of a UTF-8 character); the rest is kept until
    the next chunk or :meth:`flush`. Lines end with ``\\n`` (a ``\\r`` before it is dropped);
    a bare ``\\r`` stays in the line (a redrawn progress line, see :func:`last_state`).
    Invalid UTF-8 is replaced with U+FFFD, never dropped. A line longer than ``max_chars``
    is cut there and ends with :data:`CUT_MARKER`; only ``max_chars`` of it are ever held.
    """

    def __init__(self, max_chars: int = MAX_LINE_CHARS) -> None:
        self.max_chars = max_chars
        self._buffer = ""
        self._pending = b""
        self._cut = 0  # characters of the current line dropped so far

    def decode(self, chunk: bytes | str) -> list[str]:
        """The complete lines (each with ``\\n``) that ``chunk`` finishes."""
        if isinstance(chunk, bytes):
            data = self._pending + chunk
            try:
                text = data.decode("utf-8")
                self._pending = b""
            except UnicodeDecodeError as e:
                if e.reason == "unexpected end of data" and len(data) - e.start < 4:
                    text = data[: e.start].decode("utf-8", errors="replace")
                    self._pending = data[e.start :]
                else:
                    text = data.decode("utf-8", errors="replace")
                    self._pending = b""
        else:
            text = chunk
        if not text:
            return []
        joined = self._buffer + text if self._buffer else text
        parts = joined.split("\n")
        rest = parts.pop()
        if self._cut or "\r\n" in joined or (parts and len(max(parts, key=len)) > self.max_chars):
            lines = [self._finish(part.removesuffix("\r")) for part in parts]
        else:  # the common case: nothing to cut or strip
            lines = [part + "\n" for part in parts]
        self._buffer = rest
        if len(rest) > self.max_chars:
            self._cut += len(rest) - self.max_chars
            self._buffer = rest[: self.max_chars]
        return lines

    def _finish(self, line: str) -> str:
        cut, self._cut = self._cut, 0
        if len(line) > self.max_chars:
            cut += len(line) - self.max_chars
            line = line[: self.max_chars]
        return line + (CUT_MARKER.format(cut) if cut else "") + "\n"

    @property
    def held(self) -> int:
        """Characters of the open line held (at most ``max_chars``)."""
        return len(self._buffer)

    def flush(self) -> list[str]:
        """Whatever is left, as a last line (when the stream ended without ``\\n``)."""
        rest = self._buffer + self._pending.decode("utf-8", errors="replace")
        self._buffer, self._pending = "", b""
        if not rest and not self._cut:
            return []
        return [self._finish(rest.removesuffix("\r"))]


def timestamped_lines(chunks: Iterable[bytes | str]) -> Iterator[TimestampedLine]:
    """The lines of a stream of chunks, each split from its timestamp (the sync readers)."""
    decoder = LineDecoder()
    for chunk in chunks:
        for raw in decoder.decode(chunk):
            yield split_timestamp(raw)
    for raw in decoder.flush():
        yield split_timestamp(raw)


async def atimestamped_lines(chunks: AsyncIterable[bytes | str]) -> AsyncIterator[TimestampedLine]:
    """:func:`timestamped_lines` of an async stream of chunks (the async readers)."""
    decoder = LineDecoder()
    async for chunk in chunks:
        for raw in decoder.decode(chunk):
            yield split_timestamp(raw)
    for raw in decoder.flush():
        yield split_timestamp(raw)


def require_aware(value: datetime | None, option: str) -> None:
    """Refuse a naive time bound: whose clock it means would be a guess."""
    if value is not None and value.tzinfo is None:
        raise InvalidOptionError(
            f"{option} must be timezone-aware, e.g. datetime.now(timezone.utc), got the naive "
            f"{value.isoformat()}",
            option=option,
        )


def within(
    lines: Iterable[TimestampedLine], since: datetime | None, until: datetime | None
) -> Iterator[TimestampedLine]:
    """The lines stamped in ``[since, until]`` (both inclusive, aware datetimes).

    Lines come in time order, so the first line after ``until`` ends the iteration (a
    followed stream stops there). A line without a timestamp is kept. A naive bound is
    refused here, when the filter is made, not when the first line is asked for.
    """
    require_aware(since, "since")
    require_aware(until, "until")
    return _within(lines, since, until)


def _within(
    lines: Iterable[TimestampedLine], since: datetime | None, until: datetime | None
) -> Iterator[TimestampedLine]:
    low = None if since is None else time_key(since)
    high = None if until is None else time_key(until)
    for line in lines:
        key = line.key
        if key is None:
            yield line
            continue
        if high is not None and key > high:
            return
        if low is None or key >= low:
            yield line


#: Finished container instances a cursor remembers (a replica restarting more often than
#: this while its follow is down has its oldest instances read again).
DONE_KEPT = 16


@dataclass(frozen=True)
class LogCursor:
    """Where a reader is in one replica's log.

    ``since`` is the timestamp of the last line emitted (``None``: nothing emitted yet) and
    ``seen_at_since`` how many emitted lines carried exactly that timestamp.

    A replica's log may come from several container instances one after the other (a pod
    replaced after a crash, a container restarted in place): ``instance`` names the one
    ``since`` belongs to, and ``done`` the instances read to their end (the last
    :data:`DONE_KEPT`). A cursor without ``instance`` (a reader that does not tell instances
    apart, or one stored before instances were tracked) applies ``since`` to every instance.
    """

    since: datetime | None = None
    seen_at_since: int = 0
    instance: str | None = None
    done: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (for trigger kwargs and events)."""
        out: dict[str, Any] = {
            "since": format_timestamp(self.since) if self.since else None,
            "seen_at_since": self.seen_at_since,
        }
        if self.instance is not None:
            out["instance"] = self.instance
        if self.done:
            out["done"] = list(self.done)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> LogCursor:
        if not data:
            return cls()
        since = data.get("since")
        instance = data.get("instance")
        return cls(
            parse_timestamp(since) if since else None,
            int(data.get("seen_at_since", 0)),
            None if instance is None else str(instance),
            tuple(str(d) for d in data.get("done") or ()),
        )

    def after(self, line: TimestampedLine) -> LogCursor:
        """The cursor once ``line`` has been emitted too (a reader that emits every line it
        gets, such as a followed stream, keeps its cursor with this).

        A line without a timestamp, or one older than the cursor, does not move it.
        """
        if line.key is None:
            return self
        passed = Resumed(self, catching_up=False)
        passed.feed((line,))
        return passed.cursor

    def is_done(self, instance: str) -> bool:
        """Whether ``instance`` was read to its end."""
        return instance in self.done

    def at(self, instance: str) -> LogCursor:
        """The cursor to read ``instance`` from: this one if it is the cursor's instance (or
        the cursor names none), else the start of that instance's log."""
        if self.instance is None:
            return replace(self, instance=instance)
        if self.instance == instance:
            return self
        return LogCursor(None, 0, instance, self.done)

    def finished(self, instance: str) -> LogCursor:
        """The cursor once ``instance`` has been read to its end."""
        done = (*(d for d in self.done if d != instance), instance)
        return replace(self, instance=instance, done=done[-DONE_KEPT:])


def cursors_from_json(data: Mapping[str, Any] | None) -> dict[str, LogCursor]:
    """``role/replica`` -> cursor, from the JSON form (trigger kwargs, events, checkpoints)."""
    return {str(k): LogCursor.from_dict(v) for k, v in (data or {}).items()}


def cursors_to_json(cursors: Mapping[str, LogCursor]) -> dict[str, dict[str, Any]]:
    return {k: c.to_dict() for k, c in sorted(cursors.items())}


def furthest(a: LogCursor, b: LogCursor) -> LogCursor:
    """The cursor that has emitted more (``since`` first, then the count at ``since``)."""
    if a.since is None:
        return b
    if b.since is None:
        return a
    return max(a, b, key=lambda c: (c.since, c.seen_at_since))


def merge_cursors(*maps: Mapping[str, LogCursor]) -> dict[str, LogCursor]:
    """Per replica, the furthest of the given cursors."""
    out: dict[str, LogCursor] = {}
    for cursors in maps:
        for key, cursor in cursors.items():
            out[key] = furthest(out[key], cursor) if key in out else cursor
    return out


class Resumed:
    """The one cursor rule: drop the lines of a log read again from a cursor that the cursor
    has emitted, across the batches of one stream, and keep the cursor after each line
    passed on.

    Lines come in backend order (non-decreasing timestamps). While catching up, a line
    older than the cursor, or one of the ``seen_at_since`` lines at its time, is dropped; the
    first line past the cursor ends the catching up (later lines with the cursor's timestamp
    are new ones). Lines without a timestamp are always passed on and do not move the cursor.
    ``catching_up=False``: every line given was emitted (nothing is dropped; the cursor only
    moves, never back).
    """

    def __init__(self, cursor: LogCursor, *, catching_up: bool = True) -> None:
        self.cursor = cursor
        self._skip = cursor.seen_at_since
        self._catching_up = catching_up and cursor.since is not None
        # the cursor's time as a key, and its count (the cursor itself is remade only when
        # a batch moves them)
        self._since = None if cursor.since is None else time_key(cursor.since)
        self._seen = cursor.seen_at_since

    def feed(self, lines: Iterable[TimestampedLine]) -> list[TimestampedLine]:
        """The lines of ``lines`` not emitted yet (the cursor moves past them)."""
        new: list[TimestampedLine] = []
        append = new.append
        since, seen = self._since, self._seen
        catching_up = self._catching_up
        for line in lines:
            key = line.key
            if catching_up and key is not None:
                if since is not None:
                    if key < since:
                        continue
                    if key == since and self._skip > 0:
                        self._skip -= 1
                        continue
                catching_up = False
            append(line)
            # the cursor after the line: it runs for every line of a followed log
            if key is None or (since is not None and key < since):
                continue
            if key == since:
                seen += 1
            else:
                since, seen = key, 1
        self._catching_up = catching_up
        if since is not None and (since, seen) != (self._since, self._seen):
            self._since, self._seen = since, seen
            self.cursor = replace(self.cursor, since=key_time(since), seen_at_since=seen)
        return new


def advance(
    cursor: LogCursor, lines: Iterable[TimestampedLine]
) -> tuple[list[TimestampedLine], LogCursor]:
    """One batch read from ``cursor`` (see :class:`Resumed`): the lines not emitted yet,
    and the cursor after them."""
    resumed = Resumed(cursor)
    new = resumed.feed(lines)
    return new, resumed.cursor


@dataclass(frozen=True)
class LogSource:
    """One log a follow forwards: a replica's main container, or another container of it
    (an init container, a sidecar) when ``container`` names one."""

    role: str
    replica_id: int
    container: str | None = None

    @property
    def key(self) -> str:
        """``role/replica`` or ``role/replica:container``: its cursor's key and log prefix."""
        base = f"{self.role}/{self.replica_id}"
        return base if self.container is None else f"{base}:{self.container}"
