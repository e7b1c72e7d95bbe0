"""Docker container attributes -> replica and app states (pure)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from docker_attrs import APP, APP_ID, inspect_attrs, labels_of
from torchx_provider.failures import FailureKind
from torchx_provider.schedulers.docker import DockerOpts
from torchx_provider.schedulers.docker.state import (
    CONTAINER_FAILURE,
    CONTAINER_STATE,
    ENGINE_STOP_MARGIN,
    ENGINE_STOPPED,
    OUTAGES_KEPT,
    REMOVED_FROM_OUTSIDE,
    STOPPED_AFTER_FAILURE,
    STOPPED_SUFFIX,
    ContainerInfo,
    EngineOutage,
    app_state,
    container_reason,
    describe_app,
    exec_failure,
    exit_code,
    failure_kind,
    image_failure,
    list_apps,
    may_have_failed_exec,
    missing_replica,
    oldest_network,
    ready_to_remove,
    record_answer,
    replica_state,
    stopped_by_engine,
    survivors_to_stop,
)
from torchx_provider.schedulers.docker.translation import LABEL_STOP_ON_FAILURE, app_to_containers
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.specs.api import AppState, is_terminal


def info(*args: Any, **kwargs: Any) -> ContainerInfo:
    return ContainerInfo.from_inspect(inspect_attrs(*args, **kwargs))


# ---------------------------------------------------------------------------- the table
def test_the_table_covers_every_docker_status() -> None:
    # https://docs.docker.com/reference/api/engine/version/v1.41/#tag/Container (State.Status)
    assert set(CONTAINER_STATE) == {
        "created",
        "restarting",
        "running",
        "removing",
        "paused",
        "exited",
        "dead",
    }


@pytest.mark.parametrize(
    ("status", "code", "extra", "expected"),
    [
        ("created", 0, {}, AppState.SUBMITTED),
        ("created", 127, {"error": "exec: nope: not found"}, AppState.FAILED),
        ("restarting", 1, {}, AppState.PENDING),
        ("running", 0, {}, AppState.RUNNING),
        ("paused", 0, {}, AppState.PENDING),
        ("removing", 0, {}, AppState.UNKNOWN),
        ("exited", 0, {}, AppState.SUCCEEDED),
        ("exited", 3, {}, AppState.FAILED),
        ("exited", 137, {"oom": True}, AppState.FAILED),
        ("dead", 0, {}, AppState.FAILED),
        ("exited", 143, {"cancelled": True}, AppState.CANCELLED),
        ("created", 0, {"cancelled": True}, AppState.CANCELLED),
        ("running", 0, {"cancelled": True}, AppState.RUNNING),  # still stopping
        ("exited", 143, {"cancelled": True, "removing": True}, AppState.CANCELLED),
        ("exited", 0, {"removing": True}, AppState.SUCCEEDED),
        ("something-new", 0, {}, AppState.UNKNOWN),
    ],
)
def test_replica_state(status: str, code: int, extra: dict[str, Any], expected: AppState) -> None:
    assert replica_state(info("trainer", 0, status, code, **extra)) == expected


def test_exit_codes_only_for_finished_replicas() -> None:
    assert exit_code(info("ps", 0, "exited", 3)) == 3
    assert exit_code(info("ps", 0, "running", 0)) is None
    assert exit_code(info("ps", 0, "restarting", 1)) is None
    assert exit_code(info("ps", 0, "created", 127, error="x")) == 127


def test_summary_reads_the_exit_code_from_the_status_text() -> None:
    summary = {
        "Id": "abc",
        "Names": ["/x-ps-0"],
        "State": "exited",
        "Status": "Exited (3) 2 seconds ago",
        "Labels": labels_of("ps", 0),
        "Created": 1714557600,
    }
    c = ContainerInfo.from_summary(summary)
    assert (c.name, c.status, c.exit_code, c.role_name, c.replica_id) == (
        "x-ps-0",
        "exited",
        3,
        "ps",
        0,
    )
    assert c.created == datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc)
    running = ContainerInfo.from_summary({**summary, "State": "running", "Status": "Up 2 seconds"})
    assert running.exit_code is None and replica_state(running) == AppState.RUNNING


# ---------------------------------------------------------------------------- app state
S, P, R, OK, F, C, U = (
    AppState.SUBMITTED,
    AppState.PENDING,
    AppState.RUNNING,
    AppState.SUCCEEDED,
    AppState.FAILED,
    AppState.CANCELLED,
    AppState.UNKNOWN,
)


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ([OK, OK, OK], OK),
        ([OK, F, OK], F),
        ([F, C], F),
        ([OK, C], C),
        ([R, F], R),  # a failure with others still running: not over yet
        ([R, P, OK], P),  # the earliest unfinished state
        ([S, R], S),
        ([R, U], R),
        ([], U),
    ],
)
def test_app_state(states: list[AppState], expected: AppState) -> None:
    assert app_state(states) == expected


@given(st.lists(st.sampled_from(list(AppState)), min_size=1))
def test_app_state_properties(states: list[AppState]) -> None:
    state = app_state(states)
    assert (state == OK) == all(s == OK for s in states)
    if all(is_terminal(s) for s in states):
        assert (state == F) == any(s == F for s in states)
    else:
        assert state == min((s for s in states if not is_terminal(s)), key=lambda s: s.value)


# ---------------------------------------------------------------------------- describe
def test_describe_rebuilds_roles_and_replicas() -> None:
    containers = [
        info("ps", 0, "exited", 0),
        info("trainer", 1, "exited", 0, restarts=2),
        info("trainer", 0, "exited", 0),
    ]
    resp = describe_app(APP_ID, containers)
    assert resp is not None
    assert resp.state == AppState.SUCCEEDED
    assert resp.roles == APP.roles
    assert [rs.role for rs in resp.roles_statuses] == ["trainer", "ps"]
    trainer = resp.roles_statuses[0].replicas
    assert [(r.id, r.state, r.exit_code, r.hostname) for r in trainer] == [
        (0, OK, 0, f"{APP_ID}-trainer-0"),
        (1, OK, 0, f"{APP_ID}-trainer-1"),
    ]
    assert trainer[1].num_restarts == 2
    assert resp.num_restarts == 2


def test_describe_reports_failures_with_exit_codes() -> None:
    resp = describe_app(
        APP_ID,
        [
            info("trainer", 0, "exited", 0),
            info("trainer", 1, "exited", 3),
            info("ps", 0, "exited", 137, oom=True),
        ],
    )
    assert resp is not None and resp.state == AppState.FAILED
    assert "trainer/1 exited with code 3" in resp.msg
    assert "ps/0 exited with code 137" in resp.msg and "memMB" in resp.msg
    codes = {(r.role, r.id): r.exit_code for rs in resp.roles_statuses for r in rs.replicas}
    assert codes == {("trainer", 0): 0, ("trainer", 1): 3, ("ps", 0): 137}


def test_a_replica_whose_container_is_gone_failed_and_is_named() -> None:
    """Removed from outside (``docker rm -f``): the engine never creates it again, so the
    app ends FAILED, naming it, once the others are finished -- never SUCCEEDED on partial
    evidence, and never waiting for a replica that no longer exists."""
    resp = describe_app(APP_ID, [info("trainer", 0, "exited", 0), info("ps", 0, "exited", 0)])
    assert resp is not None
    assert resp.state == AppState.FAILED
    missing = resp.roles_statuses[0].replicas[1]
    assert (missing.id, missing.state, missing.exit_code) == (1, AppState.FAILED, None)
    assert missing.structured_error_msg == REMOVED_FROM_OUTSIDE
    assert missing.hostname == f"{APP_ID}-trainer-1"
    assert resp.msg == f"trainer/1: {REMOVED_FROM_OUTSIDE}"
    assert "other than this task" in resp.msg


def test_a_gone_replica_fails_the_app_once_the_others_are_finished() -> None:
    running = [info("trainer", 0, "running"), info("ps", 0, "exited", 0)]
    resp = describe_app(APP_ID, running)
    assert resp is not None and resp.state == AppState.RUNNING  # as after any failure
    assert resp.roles_statuses[0].replicas[1].state == AppState.FAILED
    failed = [info("trainer", 0, "exited", 2), info("ps", 0, "exited", 0)]
    resp = describe_app(APP_ID, failed)
    assert resp is not None and resp.state == AppState.FAILED
    assert resp.msg == f"trainer/0 exited with code 2; trainer/1: {REMOVED_FROM_OUTSIDE}"
    # the same rule decides what list says
    ended = [info("trainer", 0, "exited", 0), info("ps", 0, "exited", 0)]
    apps = list_apps(ended, lambda app_id: app_id)
    assert [(a.app_id, a.state) for a in apps] == [(APP_ID, AppState.FAILED)]


def test_replicas_gone_while_the_provider_removes_the_app_are_not_blamed() -> None:
    """The provider marks one container before it removes an app's containers and removes
    it last: while it is left, the others are gone for that removal (UNKNOWN, as the app
    is about to vanish), not removed from outside."""
    left = [info("trainer", 0, "exited", 0, removing=True), info("ps", 0, "exited", 0)]
    resp = describe_app(APP_ID, left)
    assert resp is not None and resp.state == AppState.UNKNOWN
    assert resp.msg == "<NONE>"
    gone = resp.roles_statuses[0].replicas[1]
    assert (gone.role, gone.id, gone.state) == ("trainer", 1, AppState.UNKNOWN)
    assert missing_replica(APP_ID, "ps", 0, removing=True).state == AppState.UNKNOWN
    assert missing_replica(APP_ID, "ps", 0).state == AppState.FAILED


def test_describe_of_nothing_is_none() -> None:
    assert describe_app(APP_ID, []) is None


def test_a_container_without_the_role_label_still_describes() -> None:
    attrs = inspect_attrs("ps", 0, "running")
    del attrs["Config"]["Labels"]["torchx.pytorch.org/role"]
    resp = describe_app(APP_ID, [ContainerInfo.from_inspect(attrs)])
    assert resp is not None and resp.roles[0].name == "ps" and resp.state == AppState.RUNNING


# ---------------------------------------------------------------------------- list
def test_list_groups_by_app() -> None:
    other = inspect_attrs("ps", 0, "running")
    other["Config"]["Labels"] = {**other["Config"]["Labels"], "torchx.pytorch.org/app-id": "b-1"}
    containers = [
        info("trainer", 0, "exited", 0),
        ContainerInfo.from_inspect(other),
        info("ps", 0, "exited", 1),
    ]
    apps = list_apps(containers, lambda app_id: f"local_docker:///{app_id}")
    assert {(a.app_id, a.state, a.app_handle) for a in apps} == {
        (APP_ID, AppState.FAILED, f"local_docker:///{APP_ID}"),
        ("b-1", AppState.RUNNING, "local_docker:///b-1"),
    }
    assert all(a.name == "app" for a in apps)


# ---------------------------------------------------------------------------- removal
def test_removal_waits_for_the_end_and_for_every_log() -> None:
    done = [
        info("trainer", 0, "exited", 0),
        info("trainer", 1, "exited", 1),
        info("ps", 0, "exited", 0),
    ]
    every = {("trainer", 0), ("trainer", 1), ("ps", 0)}
    assert ready_to_remove(done, every)
    assert not ready_to_remove(done, every - {("ps", 0)})
    running = [*done[:2], info("ps", 0, "running")]
    assert not ready_to_remove(running, every)
    restarting = [*done[:2], info("ps", 0, "restarting", 1)]
    assert not ready_to_remove(restarting, every)
    kept = [info(r, i, "exited", 0, remove=False) for r, i in sorted(every)]
    assert not ready_to_remove(kept, every)
    # A replica whose container is gone is never drained, so nothing is removed by surprise.
    assert not ready_to_remove(done[1:], every - {("trainer", 0)})


# ---------------------------------------------------------------------------- networks
def test_oldest_network_wins() -> None:
    nets = [
        {"Name": "torchx", "Id": "b", "Created": "2024-05-01T10:00:00.2Z"},
        {"Name": "torchx", "Id": "a", "Created": "2024-05-01T10:00:00.2Z"},
        {"Name": "torchx", "Id": "c", "Created": "2024-05-01T10:00:00.3Z"},
        {"Name": "torchx-other", "Id": "0", "Created": "2024-05-01T09:00:00Z"},
    ]
    found = oldest_network(nets, "torchx")
    assert found is not None and found["Id"] == "a"
    assert oldest_network(nets, "nope") is None


def test_task_instance_is_matched_on_its_full_values() -> None:
    key = TaskInstanceKey("dag", "task", "manual__2024-05-01T10:00:00+00:00", try_number=1)
    job = app_to_containers(APP, DockerOpts(), APP_ID, {}, key)
    c = ContainerInfo(id="x", name="n", status="running", labels=job.containers[0]["labels"])
    assert c.task_instance == key
    assert TaskInstanceKey(key.dag_id, key.task_id, key.run_id, try_number=4).same_instance(
        c.task_instance
    )
    assert not TaskInstanceKey("dag", "task", "manual__other").same_instance(c.task_instance)
    # submitted outside Airflow
    assert not key.same_instance(info("ps", 0, "running").task_instance)


def test_role_json_survives_in_labels() -> None:
    raw = labels_of("trainer", 1)["torchx.pytorch.org/role"]
    assert json.loads(raw)["num_replicas"] == 2


# ---------------------------------------------------------------- why a replica failed


@pytest.mark.parametrize(
    ("code", "extra", "reason", "kind"),
    [
        (1, {}, "Error", FailureKind.USER),
        (3, {}, "Error", FailureKind.USER),
        (127, {}, "Error", FailureKind.USER),
        (137, {"oom": True}, "OOMKilled", FailureKind.USER),
        (139, {}, "Signal", FailureKind.USER),  # SIGSEGV
        (134, {}, "Signal", FailureKind.USER),  # SIGABRT
        # docker kill/stop from outside, or an engine shutdown no outage was seen of
        (137, {}, "Killed", None),
        (143, {}, "Terminated", None),
        (0, {}, "", None),
    ],
)
def test_exited_containers(code: int, extra: dict[str, Any], reason: str, kind: Any) -> None:
    c = info("trainer", 0, "exited", code, **extra)
    assert container_reason(c) == reason
    assert failure_kind(c, reason) is kind


def test_a_container_the_engine_could_not_start_is_a_configuration_failure() -> None:
    c = info("trainer", 0, "created", 127, error='exec: "nope": executable file not found')
    assert container_reason(c) == "ContainerCannotRun"
    assert CONTAINER_FAILURE["ContainerCannotRun"] is FailureKind.CONFIGURATION


def test_a_container_still_running_has_no_reason() -> None:
    assert container_reason(info("trainer", 0, "running")) == ""
    assert container_reason(info("trainer", 0, "restarting", 1)) == ""


def test_a_container_removed_from_outside_is_an_infrastructure_failure() -> None:
    gone = missing_replica(APP_ID, "trainer", 1)
    assert (gone.reason, gone.failure) == ("RemovedFromOutside", "infrastructure")
    removing = missing_replica(APP_ID, "trainer", 1, removing=True)
    assert (removing.reason, removing.failure) == ("", None)


def test_describe_carries_reason_kind_and_finish_time_of_failed_replicas_only() -> None:
    def ended(role: str, replica: int, code: int, at: str, **kw: Any) -> ContainerInfo:
        attrs = inspect_attrs(role, replica, "exited", code, **kw)
        attrs["State"]["FinishedAt"] = at
        return ContainerInfo.from_inspect(attrs)

    resp = describe_app(
        APP_ID,
        [
            ended("trainer", 0, 0, "2024-05-01T10:00:05.5Z"),
            ended("trainer", 1, 137, "2024-05-01T10:00:03.25Z", oom=True),
            ended("ps", 0, 1, "2024-05-01T10:00:04Z"),
        ],
    )
    assert resp is not None and resp.state == AppState.FAILED
    got = {
        (r.role, r.id): (r.reason, r.failure, r.finished_at and r.finished_at.isoformat())
        for rs in resp.roles_statuses
        for r in rs.replicas
    }
    assert got == {
        ("trainer", 0): ("", None, "2024-05-01T10:00:05.500000+00:00"),
        ("trainer", 1): ("OOMKilled", "user", "2024-05-01T10:00:03.250000+00:00"),
        ("ps", 0): ("Error", "user", "2024-05-01T10:00:04+00:00"),
    }


# ------------------------------------------------- a replica the engine stopped on its way down

T0 = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)
#: the engine refused a new connection at T0 and answered again 10 s later
RESTART = EngineOutage(T0, T0 + timedelta(seconds=10))


def ended_at(code: int, seconds: float, **kw: Any) -> ContainerInfo:
    """trainer/0, exited ``code`` at ``T0 + seconds``."""
    attrs = inspect_attrs("trainer", 0, "exited", code, **kw)
    at = T0 + timedelta(seconds=seconds)
    attrs["State"]["FinishedAt"] = at.isoformat().replace("+00:00", "Z")
    return ContainerInfo.from_inspect(attrs)


@pytest.mark.parametrize(
    ("code", "seconds", "outages", "extra", "reason", "kind"),
    [
        # SIGTERM/SIGKILL within the outage: the engine's shutdown stopped it
        (143, 0.5, [RESTART], {}, "EngineStopped", FailureKind.INFRASTRUCTURE),
        (137, 9.0, [RESTART], {}, "EngineStopped", FailureKind.INFRASTRUCTURE),
        # just before the first failed request, within the margin (connections already open
        # are answered while the engine stops its containers)
        (143, -1.5, [RESTART], {}, "EngineStopped", FailureKind.INFRASTRUCTURE),
        # an outage still open (the engine not answering yet)
        (143, 30.0, [EngineOutage(T0)], {}, "EngineStopped", FailureKind.INFRASTRUCTURE),
        # before the outage, past the margin: stopped from outside while the engine was up
        (143, -3.0, [RESTART], {}, "Terminated", None),
        (137, -60.0, [RESTART], {}, "Killed", None),
        # after the engine answered again, past the margin
        (143, 13.0, [RESTART], {}, "Terminated", None),
        # no outage seen: the engine does not say who stopped it
        (143, 0.5, [], {}, "Terminated", None),
        (137, 0.5, [], {}, "Killed", None),
        # within the outage but not the way the engine stops a container: its own doing
        (1, 0.5, [RESTART], {}, "Error", FailureKind.USER),
        (139, 0.5, [RESTART], {}, "Signal", FailureKind.USER),
        (137, 0.5, [RESTART], {"oom": True}, "OOMKilled", FailureKind.USER),
        (0, 0.5, [RESTART], {}, "", None),
    ],
)
def test_signal_exits_within_an_engine_outage_are_the_engines(
    code: int,
    seconds: float,
    outages: list[EngineOutage],
    extra: dict[str, Any],
    reason: str,
    kind: FailureKind | None,
) -> None:
    c = ended_at(code, seconds, **extra)
    assert container_reason(c, outages) == reason
    assert failure_kind(c, reason) is kind


def test_an_outage_covers_its_span_and_the_margin_on_each_side() -> None:
    end = RESTART.ended
    assert end is not None
    assert RESTART.covers(T0 - ENGINE_STOP_MARGIN) and RESTART.covers(end + ENGINE_STOP_MARGIN)
    tick = timedelta(milliseconds=1)
    assert not RESTART.covers(T0 - ENGINE_STOP_MARGIN - tick)
    assert not RESTART.covers(end + ENGINE_STOP_MARGIN + tick)


def test_any_outage_of_several_may_cover_it() -> None:
    earlier = EngineOutage(T0 - timedelta(hours=1), T0 - timedelta(minutes=59))
    assert stopped_by_engine(
        ended_at(
            143,
            1,
        ),
        [earlier, RESTART],
    )
    assert not stopped_by_engine(ended_at(143, 1), [earlier])


def test_a_cancelled_replica_is_cancelled_whatever_the_engine_did() -> None:
    c = ended_at(143, 0.5, cancelled=True)
    assert replica_state(c) == AppState.CANCELLED
    assert not stopped_by_engine(c, [RESTART])
    resp = describe_app(APP_ID, [c], [RESTART])
    assert resp is not None
    replica = resp.roles_statuses[0].replicas[0]
    assert (replica.state, replica.reason, replica.failure) == (AppState.CANCELLED, "", None)


def test_a_finish_time_not_known_is_no_evidence() -> None:
    # a list entry (``docker ps``) carries no finish time
    c = ContainerInfo.from_summary(
        {"Id": "x", "Names": ["/x"], "State": "exited", "Status": "Exited (143) 1 second ago"}
    )
    assert c.exit_code == 143 and c.finished is None
    assert container_reason(c, [EngineOutage(T0)]) == "Terminated"


def test_describe_names_the_engine_as_what_stopped_the_replica() -> None:
    resp = describe_app(APP_ID, [ended_at(143, 0.5)], [RESTART])
    assert resp is not None and resp.state == AppState.FAILED
    replica = resp.roles_statuses[0].replicas[0]
    assert (replica.reason, replica.failure) == ("EngineStopped", "infrastructure")
    assert replica.structured_error_msg == ENGINE_STOPPED
    assert "trainer/0 exited with code 143 (the Docker engine stopped" in resp.msg
    # the same replica, no outage seen: the base class, no message of its own
    resp = describe_app(APP_ID, [ended_at(143, 0.5)])
    assert resp is not None
    replica = resp.roles_statuses[0].replicas[0]
    assert (replica.reason, replica.failure) == ("Terminated", None)
    assert "Docker engine" not in resp.msg


def test_outages_begin_at_the_first_failure_and_end_at_the_first_answer() -> None:
    at = [T0 + timedelta(seconds=i) for i in range(8)]
    outages: tuple[EngineOutage, ...] = ()
    outages = record_answer(outages, True, at[0])
    assert outages == ()  # answering: nothing to record
    outages = record_answer(outages, False, at[1])
    outages = record_answer(outages, False, at[2])
    assert outages == (EngineOutage(at[1]),)
    outages = record_answer(outages, True, at[3])
    outages = record_answer(outages, True, at[4])
    assert outages == (EngineOutage(at[1], at[3]),)
    outages = record_answer(outages, False, at[5])
    assert outages == (EngineOutage(at[1], at[3]), EngineOutage(at[5]))


def test_only_the_latest_outages_are_kept() -> None:
    outages: tuple[EngineOutage, ...] = ()
    for i in range(OUTAGES_KEPT + 5):
        outages = record_answer(outages, False, T0 + timedelta(seconds=2 * i))
        outages = record_answer(outages, True, T0 + timedelta(seconds=2 * i + 1))
    assert len(outages) == OUTAGES_KEPT
    assert outages[-1].began == T0 + timedelta(seconds=2 * (OUTAGES_KEPT + 4))


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        ("manifest unknown: manifest unknown", FailureKind.CONFIGURATION),
        ("pull access denied for nope, repository does not exist", FailureKind.CONFIGURATION),
        ("invalid reference format: repository name must be lowercase", FailureKind.CONFIGURATION),
        ("docker.io/library/nope:1: not found", FailureKind.CONFIGURATION),
        # the registry cannot be reached: may be back on a retry, not known to be the app's
        ('Get "https://localhost:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused', None),
        ("net/http: TLS handshake timeout", None),
        ("received unexpected HTTP status: 503 Service Unavailable", None),
        # a rate limit or refused credentials: a retry may pull it (the shared image table)
        ("toomanyrequests: You have reached your pull rate limit", None),
        ('Head "https://r.example/v2/x/manifests/1": unauthorized: authentication required', None),
    ],
)
def test_image_failures(answer: str, kind: FailureKind | None) -> None:
    assert image_failure(answer) is kind


# ---------------------------------------------------------------- an entrypoint not in the image
TINI_NOT_FOUND = "[FATAL tini (7)] exec /no/such/binary failed: No such file or directory"


@pytest.mark.parametrize(
    ("code", "words", "reason", "kind"),
    [
        (
            127,
            "exec /no/such/binary failed: No such file or directory",
            "EntrypointNotFound",
            FailureKind.CONFIGURATION,
        ),
        (
            126,
            "exec /etc/passwd failed: Permission denied",
            "EntrypointNotExecutable",
            FailureKind.CONFIGURATION,
        ),
        # a command its own script did not find (``sh: x: not found``): its code's doing
        (127, "", "Error", FailureKind.USER),
        # the init's words but another exit: the entrypoint ran, and failed on its own
        (1, "exec x failed: No such file or directory", "Error", FailureKind.USER),
    ],
)
def test_an_entrypoint_the_init_could_not_start_is_a_configuration_failure(
    code: int, words: str, reason: str, kind: FailureKind
) -> None:
    c = replace(info("trainer", 0, "exited", code), exec_error=words)
    assert container_reason(c) == reason
    assert failure_kind(c, reason) is kind


def test_the_init_words_are_found_at_the_end_of_the_log() -> None:
    assert exec_failure(["starting", TINI_NOT_FOUND]) == (
        "exec /no/such/binary failed: No such file or directory"
    )
    assert exec_failure(["sh: python: not found", "done"]) == ""


def test_only_a_container_that_exited_as_the_init_does_is_read_for_its_words() -> None:
    assert may_have_failed_exec(info("trainer", 0, "exited", 127))
    assert may_have_failed_exec(info("trainer", 0, "exited", 126))
    assert not may_have_failed_exec(info("trainer", 0, "exited", 1))
    assert not may_have_failed_exec(info("trainer", 0, "running"))
    assert not may_have_failed_exec(info("trainer", 0, "restarting", 127))


def test_describe_names_the_entrypoint_and_the_image() -> None:
    attrs = inspect_attrs("trainer", 0, "exited", 127)
    attrs["Config"]["Image"] = "team/app:1"
    failed = replace(ContainerInfo.from_inspect(attrs), exec_error=TINI_NOT_FOUND[19:])
    resp = describe_app(APP_ID, [failed, info("trainer", 1, "exited", 0), info("ps", 0, "exited")])
    assert resp is not None and resp.state == AppState.FAILED
    replica = resp.roles_statuses[0].replicas[0]
    assert (replica.reason, replica.failure) == ("EntrypointNotFound", "configuration")
    for text in (str(replica.structured_error_msg), resp.msg):
        assert "entrypoint 'python'" in text and "image 'team/app:1'" in text, text
        assert "No such file or directory" in text, text


# ------------------------------------------------------------- a failed replica ends the app
def survivors(*containers: ContainerInfo) -> tuple[str, list[str]]:
    decided = survivors_to_stop(list(containers), datetime.now(timezone.utc))
    assert decided.again_in is None  # no finish time told: no window to wait out
    return decided.failed, [f"{c.role_name}/{c.replica_id}" for c in decided.survivors]


def test_a_replica_failed_for_good_stops_the_apps_unfinished_ones() -> None:
    running = info("trainer", 0, "running")
    failed = info("trainer", 1, "exited", 1)
    waiting = info("ps", 0, "restarting", 1, restarts=1)
    assert survivors(running, failed, waiting) == ("trainer/1", ["trainer/0", "ps/0"])
    # a replica that is restarting has restarts left: not failed for good
    assert survivors(running, info("trainer", 1, "restarting", 1), waiting) == ("", [])
    # nothing left to stop
    ended = (info("trainer", 0, "exited", 0), failed, info("ps", 0, "exited", 2))
    assert survivors(*ended) == ("trainer/1", [])


def test_a_replica_whose_container_is_gone_has_failed_for_good_too() -> None:
    assert survivors(info("trainer", 0, "running"), info("ps", 0, "running")) == (
        "trainer/1",
        ["trainer/0", "ps/0"],
    )
    # but not while the provider removes the app
    removing = info("ps", 0, "running", removing=True)
    assert survivors(info("trainer", 0, "running"), removing) == ("", [])


def test_replicas_stopped_or_cancelled_already_are_not_stopped_again() -> None:
    stopped = ContainerInfo.from_inspect(
        {**inspect_attrs("trainer", 0, "running"), "Name": f"/{APP_ID}-trainer-0{STOPPED_SUFFIX}"}
    )
    cancelled = info("ps", 0, "running", cancelled=True)
    assert survivors(stopped, info("trainer", 1, "exited", 1), cancelled) == ("trainer/1", [])


def test_an_app_created_without_stop_on_failure_runs_on() -> None:
    def without(c: ContainerInfo) -> ContainerInfo:
        return replace(c, labels={**c.labels, LABEL_STOP_ON_FAILURE: "false"})

    app = [info("trainer", 0, "running"), info("trainer", 1, "exited", 1), info("ps", 0, "running")]
    assert survivors(*map(without, app)) == ("", [])
    # containers made before the option existed carry no label: they run on too
    bare = [
        replace(c, labels={k: v for k, v in c.labels.items() if k != LABEL_STOP_ON_FAILURE})
        for c in app
    ]
    assert survivors(*bare) == ("", [])


def test_a_stopped_replica_is_cancelled_saying_why_and_the_app_failed() -> None:
    attrs = inspect_attrs("trainer", 0, "exited", 143)
    attrs["Name"] += STOPPED_SUFFIX
    stopped = ContainerInfo.from_inspect(attrs)
    assert replica_state(stopped) == AppState.CANCELLED
    resp = describe_app(APP_ID, [stopped, info("trainer", 1, "exited", 1), info("ps", 0, "exited")])
    assert resp is not None and resp.state == AppState.FAILED
    replica = resp.roles_statuses[0].replicas[0]
    assert (replica.state, replica.reason) == (AppState.CANCELLED, "")
    assert replica.structured_error_msg == STOPPED_AFTER_FAILURE


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (143, AppState.CANCELLED),
        (137, AppState.CANCELLED),
        (2, AppState.FAILED),
        (0, AppState.SUCCEEDED),
    ],
)
def test_a_replica_that_ended_on_its_own_as_it_was_being_stopped_says_how_it_ended(
    code: int, expected: AppState
) -> None:
    """On a busy engine a survivor chosen for the stop may exit with its own code before the
    stop reaches it: its own exit counts (it may be the root cause), not the stop."""
    attrs = inspect_attrs("trainer", 1, "exited", code)
    attrs["Name"] += STOPPED_SUFFIX
    assert replica_state(ContainerInfo.from_inspect(attrs)) == expected


def test_survivors_are_stopped_once_the_root_cause_window_has_passed() -> None:
    """A replica that fails on its own within a second of the first failure counts as
    failing at the same moment: its own exit, not the stop's, may name the root cause."""
    attrs = inspect_attrs("trainer", 1, "exited", 137)
    attrs["State"]["FinishedAt"] = "2024-05-01T10:00:03.250000Z"
    failed = ContainerInfo.from_inspect(attrs)
    app = [info("trainer", 0, "running"), failed, info("ps", 0, "running")]
    ended = datetime(2024, 5, 1, 10, 0, 3, 250000, tzinfo=timezone.utc)
    soon = survivors_to_stop(app, ended + timedelta(seconds=0.4))
    assert (soon.failed, soon.survivors, soon.again_in) == ("trainer/1", (), pytest.approx(0.6))
    later = survivors_to_stop(app, ended + timedelta(seconds=1.01))
    assert [f"{c.role_name}/{c.replica_id}" for c in later.survivors] == ["trainer/0", "ps/0"]
    assert later.again_in is None
    # an engine clock ahead of ours: never more than the window
    assert survivors_to_stop(app, ended - timedelta(seconds=30)).again_in == 1.0
