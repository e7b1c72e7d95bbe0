"""A follow's describe stops the other replicas of an app one of whose replicas failed for
good, marking them first, and says so once (the decision: test_docker_state)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Any

from docker_attrs import APP_ID, inspect_attrs
from torchx_provider.schedulers.docker.engine import STOP_TIMEOUT, DockerEngine
from torchx_provider.schedulers.docker.state import STOPPED_AFTER_FAILURE, STOPPED_SUFFIX
from torchx_provider.specs.api import AppState


class Api:
    """trainer/1 exited 1; trainer/0 and ps/0 run until stopped (then exit 143)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.attrs = {}
        for role, k, status, code in (
            ("trainer", 0, "running", 0),
            ("trainer", 1, "exited", 1),
            ("ps", 0, "running", 0),
        ):
            attrs = inspect_attrs(role, k, status, code)
            self.attrs[attrs["Id"]] = attrs
        self.calls: list[tuple[str, str, Any]] = []
        self.api_version = "1.41"

    def containers(self, all: bool, filters: Any) -> list[dict[str, Any]]:
        return [
            {
                "Id": i,
                "Names": [a["Name"]],
                "State": a["State"]["Status"],
                "Labels": a["Config"]["Labels"],
            }
            for i, a in self.attrs.items()
        ]

    def inspect_container(self, cid: str) -> dict[str, Any]:
        return self.attrs[cid]

    def rename(self, cid: str, name: str) -> None:
        with self.lock:
            self.calls.append(("rename", cid, name))
            self.attrs[cid]["Name"] = "/" + name

    def stop(self, cid: str, timeout: int) -> None:
        with self.lock:
            self.calls.append(("stop", cid, timeout))
            self.attrs[cid]["State"].update(Status="exited", ExitCode=143)


class Client:
    def __init__(self, api: Api) -> None:
        self.api = api


def test_a_follow_stops_the_survivors_marked_and_describes_them_ended() -> None:
    api = Api()
    engine = DockerEngine(client=Client(api))
    plain = engine.describe(APP_ID)  # a status query acts on nothing
    assert plain is not None and plain.state == AppState.RUNNING and api.calls == []

    resp, again = engine.follow_describe(APP_ID)
    assert again is None
    assert sorted(api.calls) == [
        ("rename", "id-ps-0", f"{APP_ID}-ps-0{STOPPED_SUFFIX}"),
        ("rename", "id-trainer-0", f"{APP_ID}-trainer-0{STOPPED_SUFFIX}"),
        ("stop", "id-ps-0", STOP_TIMEOUT),
        ("stop", "id-trainer-0", STOP_TIMEOUT),
    ]
    assert resp is not None and resp.state == AppState.FAILED
    rows = {(rs.role, r.id): r for rs in resp.roles_statuses for r in rs.replicas}
    assert rows[("trainer", 1)].state == AppState.FAILED
    for key in (("trainer", 0), ("ps", 0)):
        assert rows[key].state == AppState.CANCELLED
        assert rows[key].structured_error_msg == STOPPED_AFTER_FAILURE
    [notice] = engine.take_notices()
    assert notice.text.startswith(
        f"app {APP_ID}: trainer/1 failed with no restarts left; stopping its other replicas "
        "trainer/0, ps/0"
    )
    assert "stop_on_failure=False" in notice.text
    assert engine.take_notices() == []

    engine.follow_describe(APP_ID)  # nothing left to stop
    assert len(api.calls) == 4 and engine.take_notices() == []


def test_within_a_second_of_the_failure_the_follow_is_told_when_to_look_again() -> None:
    api = Api()
    ended = datetime.now(timezone.utc)
    api.attrs["id-trainer-1"]["State"]["FinishedAt"] = ended.isoformat()
    engine = DockerEngine(client=Client(api))
    resp, again = engine.follow_describe(APP_ID)
    assert resp is not None and resp.state == AppState.RUNNING and api.calls == []
    assert again is not None and 0 < again <= 1.0
    time.sleep(again + 0.05)
    resp, again = engine.follow_describe(APP_ID)
    assert again is None and resp is not None and resp.state == AppState.FAILED
    assert len(api.calls) == 4


class RunningApi(Api):
    """Every replica runs; ``gone`` is removed as the cancel marks it; ``refused`` is a name
    the engine refuses to give."""

    def __init__(self, gone: str = "", refused: str = "") -> None:
        super().__init__()
        self.attrs["id-trainer-1"]["State"].update(Status="running", ExitCode=0)
        self.gone, self.refused = gone, refused

    def rename(self, cid: str, name: str) -> None:
        import docker.errors

        if cid == self.gone:
            del self.attrs[cid]
            raise docker.errors.NotFound(f"No such container: {cid}")
        if cid == self.refused:
            raise docker.errors.APIError("Conflict", explanation="name already in use")
        super().rename(cid, name)


def test_a_cancel_marks_every_replica_before_it_stops_the_first() -> None:
    """Docker 20.10 loses a network's endpoint count when a running container on it is
    renamed while others stop: a cancel renames them all first, then stops them, and a
    replica removed meanwhile is neither marked nor stopped."""
    api = RunningApi(gone="id-trainer-1")
    engine = DockerEngine(client=Client(api))
    engine.cancel(APP_ID)
    kinds = [kind for kind, _, _ in api.calls]
    assert kinds == ["rename"] * 2 + ["stop"] * 2
    assert "id-trainer-1" not in {cid for _, cid, _ in api.calls}
    resp = engine.describe(APP_ID)
    assert resp is not None
    rows = {(rs.role, r.id): r.state for rs in resp.roles_statuses for r in rs.replicas}
    assert rows[("trainer", 0)] == rows[("ps", 0)] == AppState.CANCELLED


def test_a_mark_refused_is_raised_once_the_marked_replicas_are_stopped() -> None:
    """A replica whose mark the engine refuses is left running and the refusal raised, after
    the others were stopped (a cancel never ends with marked replicas still running)."""
    from torchx_provider.errors import SubmissionError

    api = RunningApi(refused="id-trainer-1")
    engine = DockerEngine(client=Client(api))
    try:
        engine.cancel(APP_ID)
    except SubmissionError as e:
        assert "name already in use" in str(e)
    else:
        raise AssertionError("the refused mark was not raised")
    stopped = sorted(cid for kind, cid, _ in api.calls if kind == "stop")
    assert stopped == ["id-ps-0", "id-trainer-0"]
