"""The typed trigger event: payload round trip and the human-readable renderings."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchx_provider.schedulers.api import DescribeAppResponse
from torchx_provider.specs.api import AppState, ReplicaStatus, RoleStatus
from torchx_provider.triggers.events import (
    EventKind,
    JobEvent,
    ReplicaRow,
    replica_rows,
    replica_table,
    status_line,
)

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)
rows = st.builds(
    ReplicaRow,
    role=names,
    replica_id=st.integers(0, 1000),
    state=st.sampled_from(list(AppState)),
    exit_code=st.none() | st.integers(-255, 255),
    hostname=names,
    message=names,
    reason=names,
    failure=st.sampled_from(["", "user", "infrastructure", "configuration", "cancelled"]),
    finished_at=st.sampled_from(["", "2024-05-01T10:00:03+00:00"]),
    restarts=st.none() | st.integers(0, 50),
)
cursor = st.fixed_dictionaries(
    {
        "since": st.none() | st.just("2024-05-01T10:00:00.123456Z"),
        "seen_at_since": st.integers(0, 5),
    }
)
events = st.builds(
    JobEvent,
    kind=st.sampled_from(list(EventKind)),
    app_id=names,
    state=st.sampled_from(list(AppState)),
    message=names,
    replicas=st.lists(rows, max_size=5).map(tuple),
    log_cursors=st.dictionaries(names, cursor, max_size=4),
    ui_url=st.none() | names,
    root_cause=st.sampled_from(["", "trainer/1"]),
    root_error=names,
    num_restarts=st.integers(-1, 5),
)


@given(events)
def test_payload_round_trips_through_json(event: JobEvent) -> None:
    payload = json.loads(json.dumps(event.to_payload()))
    expected = event if event.root_cause else dataclasses.replace(event, root_error="")
    assert JobEvent.from_payload(payload) == expected


def test_a_payload_from_before_the_failure_facts_still_reads() -> None:
    """A trigger of an older version may still fire into this operator."""
    old = {
        "version": 1,
        "kind": "finished",
        "app_id": "a",
        "state": "FAILED",
        "message": "",
        "replicas": [
            {"role": "t", "replica_id": 0, "state": "FAILED", "exit_code": 3, "hostname": "h"}
        ],
        "log_cursors": {},
        "ui_url": None,
    }
    event = JobEvent.from_payload(old)
    assert event.replicas == (ReplicaRow("t", 0, AppState.FAILED, 3, "h"),)
    assert (event.root_cause, event.replicas[0].reason, event.replicas[0].restarts) == (
        "",
        "",
        None,
    )
    assert event.num_restarts == -1


def test_unknown_payload_version_is_refused() -> None:
    payload = JobEvent(EventKind.FINISHED, "a", AppState.SUCCEEDED).to_payload()
    payload["version"] = 99
    with pytest.raises(ValueError, match="unknown TorchX job event version 99"):
        JobEvent.from_payload(payload)


def test_succeeded_only_for_a_finished_succeeded_app() -> None:
    assert JobEvent(EventKind.FINISHED, "a", AppState.SUCCEEDED).succeeded
    assert not JobEvent(EventKind.ERROR, "a", AppState.SUCCEEDED).succeeded
    assert not JobEvent(EventKind.FINISHED, "a", AppState.FAILED).succeeded


def test_rows_status_line_and_table_from_a_describe() -> None:
    resp = DescribeAppResponse(
        app_id="a",
        state=AppState.FAILED,
        roles_statuses=[
            RoleStatus(
                "trainer",
                [
                    ReplicaStatus(1, AppState.FAILED, "trainer", "h1", "OOMKilled", exit_code=137),
                    ReplicaStatus(0, AppState.SUCCEEDED, "trainer", "h0", exit_code=0),
                ],
            ),
            RoleStatus("ps", [ReplicaStatus(0, AppState.RUNNING, "ps", "h2")]),
        ],
    )
    got = replica_rows(resp)
    assert [r.key for r in got] == ["trainer/0", "trainer/1", "ps/0"]
    assert got[1].message == "OOMKilled"
    assert status_line(got) == "trainer[0 SUCCEEDED(0), 1 FAILED(137)] ps[0 RUNNING]"
    table = replica_table(got).splitlines()
    assert table[0].split() == [
        *("role", "replica", "state", "exit", "code", "reason", "restarts", "host", "message")
    ]
    assert "trainer  1        FAILED     137                          h1    OOMKilled" in table
    assert status_line([]) == "(no replicas yet)"


def test_a_large_roles_status_line_counts_by_state_and_names_a_few_failures() -> None:
    from torchx_provider.triggers.status import folded_line

    rows = [ReplicaRow("w", i, AppState.RUNNING) for i in range(30)]
    rows += [ReplicaRow("w", 30 + i, AppState.FAILED, 1) for i in range(7)]
    rows += [ReplicaRow("ps", 0, AppState.RUNNING)]
    assert folded_line(rows) == (
        "w[37: 30 RUNNING, 7 FAILED: 30(1), 31(1), 32(1), 33(1), 34(1) and 2 more] ps[0 RUNNING]"
    )
