"""Timestamps as the backends write them, read once for the whole provider. Pure.

Docker (``State.FinishedAt``, log lines), the Kubernetes API (``finishedAt``,
``creationTimestamp``) and the kubelet's log lines all write RFC 3339: a date, a time, any
number of fractional digits and ``Z`` or an offset. :func:`parse_timestamp` reads one (and
:func:`read_timestamp` where a missing or bad value only means "not told") as a
timezone-aware UTC datetime, its fraction cut to microseconds (a datetime holds no more).
It is the one reader of a timestamp: a pod's times and a job's creation on Kubernetes
(:mod:`~torchx_provider.schedulers.kube.status`), a container's on Docker
(:mod:`~torchx_provider.schedulers.docker.state`), the root cause's finish times
(:mod:`torchx_provider.failures`) and the log pipeline
(:mod:`torchx_provider.schedulers.logs`), which matches the same grammar, :data:`RFC3339`,
at the start of each line (its fast paths for the forms the engines write cut the fraction
as :func:`parse_timestamp` does).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

#: An RFC 3339 timestamp: its groups are the date and time to the second, the fractional
#: digits (``None``: none) and the zone (``Z`` or ``±HH:MM``).
RFC3339 = r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})"
_WHOLE = re.compile(RFC3339)


def parse_timestamp(value: str) -> datetime:
    """``value`` (RFC 3339, surrounding blanks ignored) as an aware UTC datetime, its
    fraction cut to microseconds; a time whose UTC falls outside the calendar a datetime
    holds (the first or last hours of it, in a zone) is the calendar's first or last
    moment. Anything else is a :class:`ValueError`.

    >>> parse_timestamp("2024-05-01T10:00:00.123456789Z").isoformat()
    '2024-05-01T10:00:00.123456+00:00'
    >>> parse_timestamp("2024-05-01T12:00:00+02:00").isoformat()
    '2024-05-01T10:00:00+00:00'
    >>> parse_timestamp("2024-05-01 10:00:00")
    Traceback (most recent call last):
    ...
    ValueError: not an RFC 3339 timestamp: '2024-05-01 10:00:00'
    """
    m = _WHOLE.fullmatch(value.strip())
    if m is None:
        raise ValueError(f"not an RFC 3339 timestamp: {value.strip()!r}")
    whole, fraction, zone = m.groups()
    micros = (fraction or "")[:6].ljust(6, "0")
    local = datetime.fromisoformat(f"{whole}.{micros}{'+00:00' if zone == 'Z' else zone}")
    try:
        return local.astimezone(timezone.utc)
    except OverflowError:
        end = datetime.max if zone.startswith("-") else datetime.min
        return end.replace(tzinfo=timezone.utc)


def read_timestamp(value: object) -> datetime | None:
    """``value`` read as :func:`parse_timestamp` reads it; ``None`` when it is empty or not a
    timestamp (a time the backend did not tell, or told in a form it does not promise).

    >>> read_timestamp("2024-05-01T10:00:00Z").isoformat(), read_timestamp(""), read_timestamp(None)
    ('2024-05-01T10:00:00+00:00', None, None)
    """
    if not value:
        return None
    try:
        return parse_timestamp(str(value))
    except ValueError:
        return None
