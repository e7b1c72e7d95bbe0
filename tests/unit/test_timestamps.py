"""One reader of the backends' timestamps: the log pipeline and the root cause read a time
alike."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from torchx_provider import failures, timestamps
from torchx_provider.schedulers import logs
from torchx_provider.specs.api import AppState
from torchx_provider.timestamps import parse_timestamp, read_timestamp
from torchx_provider.triggers.events import ReplicaRow

UTC = timezone.utc


def test_the_log_pipeline_reads_times_with_the_same_function() -> None:
    assert logs.parse_timestamp is timestamps.parse_timestamp


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0001-01-01T00:30:00+01:00", datetime.min.replace(tzinfo=UTC)),
        ("9999-12-31T23:30:00-01:00", datetime.max.replace(tzinfo=UTC)),
    ],
)
def test_a_time_past_the_calendar_in_utc_is_its_end(text: str, expected: datetime) -> None:
    """As a log key of such a line is (the first or the last key)."""
    assert parse_timestamp(text) == expected
    line = logs.split_timestamp(f"{text} x\n")
    assert line.key == logs.time_key(expected)


@pytest.mark.parametrize("value", [None, "", "soon", "2024-05-01T10:00:00", "2024-13-01T00:00:00Z"])
def test_a_time_not_told_or_not_a_timestamp_is_none(value: object) -> None:
    assert read_timestamp(value) is None


def test_the_root_cause_reads_finish_times_in_any_zone() -> None:
    """Two replicas that ended 0.5 s apart, one time told in UTC and one with an offset:
    the same moment, so the exit that is not a signal's is the root cause."""
    killed = ReplicaRow("t", 0, AppState.FAILED, 137, finished_at="2024-05-01T10:00:00.1Z")
    error = ReplicaRow("t", 1, AppState.FAILED, 1, finished_at="2024-05-01T12:00:00.6+02:00")
    late = ReplicaRow("t", 1, AppState.FAILED, 1, finished_at="2024-05-01T12:00:02+02:00")
    assert failures.root_cause([killed, error], {}) is error
    assert failures.root_cause([killed, late], {}) is killed


#: Odd but valid forms of one moment, 2024-05-01 10:00:00.123456 UTC (or its whole second).
ODD_FORMS = [
    ("2024-05-01T10:00:00Z", datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)),
    ("2024-05-01T10:00:00+00:00", datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)),
    ("2024-05-01T10:00:00-00:00", datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)),
    ("2024-05-01T12:00:00.123456+02:00", datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=UTC)),
    ("2024-05-01T10:00:00.123456789Z", datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=UTC)),
    ("2024-05-01T10:00:00.1Z", datetime(2024, 5, 1, 10, 0, 0, 100000, tzinfo=UTC)),
    ("2024-05-01T04:30:00.000001-05:30", datetime(2024, 5, 1, 10, 0, 0, 1, tzinfo=UTC)),
]


@pytest.mark.parametrize(("text", "expected"), ODD_FORMS)
def test_every_reader_reads_a_time_as_the_one_parser_does(text: str, expected: datetime) -> None:
    """The parser, the log keys (the pipeline's fast paths included), a pod's times on
    Kubernetes and a container's on Docker: one reading of each form."""
    from torchx_provider.schedulers.docker.state import _time
    from torchx_provider.schedulers.kube.status import pod_details

    parsed = parse_timestamp(text)
    assert parsed == expected and parsed.tzinfo is UTC
    assert read_timestamp(text) == expected
    assert logs.split_timestamp(f"{text} a\n").key == logs.time_key(expected)
    [line] = logs.split_timestamps([f"{text} a\n"])
    assert line.key == logs.time_key(expected) and line.timestamp == expected
    assert logs.key_time(logs.time_key(expected)) == expected
    pod = {
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": 1, "startedAt": text, "finishedAt": text}}}
            ],
        }
    }
    details = pod_details(pod)
    assert (details.started_at, details.finished_at) == (expected, expected)
    assert _time(text) == expected


@pytest.mark.parametrize(
    "text",
    ["2024-05-01T10:00:00", "2024-05-01", "2024-05-01 10:00:00Z", "2024-05-01T10:00Z", "x"],
)
def test_a_form_that_is_not_rfc_3339_is_not_a_time_to_any_reader(text: str) -> None:
    from torchx_provider.schedulers.docker.state import _time
    from torchx_provider.schedulers.kube.status import pod_details

    with pytest.raises(ValueError, match="not an RFC 3339 timestamp"):
        parse_timestamp(text)
    assert read_timestamp(text) is None
    assert logs.split_timestamp(f"{text} a\n").key is None
    pod = {"status": {"containerStatuses": [{"state": {"terminated": {"finishedAt": text}}}]}}
    assert pod_details(pod).finished_at is None
    assert _time(text) is None
