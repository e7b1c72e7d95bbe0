"""The engine's outages as the Docker backend's calls see them, and the probe a describe
makes when replicas newly end by SIGKILL/SIGTERM (the decision itself: test_docker_state)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import docker.errors
import pytest
import requests.exceptions

from docker_attrs import inspect_attrs
from torchx_provider.errors import BackendUnavailableError, SubmissionError, UnknownAppError
from torchx_provider.schedulers.docker.client import DockerClientConfig, EngineConnection
from torchx_provider.schedulers.docker.engine import DockerEngine
from torchx_provider.schedulers.docker.state import ENGINE_STOPPED, EngineOutage
from torchx_provider.specs.api import NONE


def test_a_call_the_engine_does_not_answer_opens_an_outage_and_an_answer_ends_it() -> None:
    conn = EngineConnection()
    with conn.call("listing containers"):
        pass
    assert conn.outages == ()
    for _ in range(2):
        with pytest.raises(BackendUnavailableError), conn.call("listing containers"):
            raise requests.exceptions.ConnectionError("refused")
    began = conn.outages[0].began
    assert conn.outages == (EngineOutage(began),)
    with conn.call("listing containers"):
        pass
    (outage,) = conn.outages
    assert outage.began == began and outage.ended is not None and outage.ended >= began


@pytest.mark.parametrize(
    ("error", "raised"),
    [
        (docker.errors.APIError("boom", explanation="driver failed"), SubmissionError),
        (docker.errors.NotFound("No such container"), UnknownAppError),
    ],
)
def test_a_request_the_engine_refused_is_an_answer(error: Exception, raised: type) -> None:
    conn = EngineConnection()
    with pytest.raises(BackendUnavailableError), conn.call("x"):
        raise requests.exceptions.ConnectionError("refused")
    with pytest.raises(raised), conn.call("x", app_id="app"):
        raise error
    assert conn.outages[-1].ended is not None


class Api:
    """Two replicas, exited as told, each with its finish time."""

    def __init__(self, code: int, finished: datetime) -> None:
        self.attrs = {}
        for k in (0, 1):
            attrs = inspect_attrs("trainer", k, "exited", code)
            attrs["State"]["FinishedAt"] = finished.isoformat().replace("+00:00", "Z")
            self.attrs[attrs["Id"]] = attrs
        self.api_version = "1.41"

    def containers(self, all: bool, filters: Any) -> list[dict[str, Any]]:
        return [
            {"Id": i, "Names": [a["Name"]], "State": "exited", "Labels": a["Config"]["Labels"]}
            for i, a in self.attrs.items()
        ]

    def inspect_container(self, cid: str) -> dict[str, Any]:
        return self.attrs[cid]


class Client:
    def __init__(self, api: Api) -> None:
        self.api = api


class Probed(DockerEngine):
    """An engine whose probe gives ``answers`` (recorded as a real probe's is)."""

    def __init__(self, api: Api, answers: bool) -> None:
        super().__init__()  # no caller's client: it makes its own, so it is probed
        self.made = Client(api)
        self.answers = answers
        self.probes = 0

    @property
    def client(self) -> Any:
        """The client it made (this one, not one from the config)."""
        return self.made

    def probe(self) -> bool:
        self.probes += 1
        self.answered(self.answers)
        return self.answers


def replicas(engine: DockerEngine) -> list[tuple[str, str | None, str]]:
    resp = engine.describe("app-abcd1234")
    assert resp is not None
    return [(r.reason, r.failure, r.structured_error_msg) for r in resp.roles_statuses[0].replicas]


def test_an_engine_refusing_new_connections_as_replicas_end_by_sigterm_stopped_them() -> None:
    engine = Probed(Api(143, datetime.now(timezone.utc)), answers=False)
    stopped = ("EngineStopped", "infrastructure", ENGINE_STOPPED)
    assert replicas(engine) == [stopped, stopped]
    assert engine.probes == 1  # once for both
    assert replicas(engine) == [stopped, stopped]
    assert engine.probes == 1  # not again for the same replicas


def test_an_engine_taking_new_connections_as_they_end_did_not_stop_them() -> None:
    ended = datetime.now(timezone.utc) - timedelta(seconds=60)
    engine = Probed(Api(143, ended), answers=True)
    assert replicas(engine) == [("Terminated", None, NONE)] * 2
    assert engine.probes == 1 and engine.outages == ()
    # an outage a minute after they ended does not explain them
    engine.answered(False)
    engine.answered(True)
    assert replicas(engine) == [("Terminated", None, NONE)] * 2


def test_other_ends_are_not_probed() -> None:
    engine = Probed(Api(1, datetime.now(timezone.utc)), answers=False)
    assert replicas(engine) == [("Error", "user", NONE)] * 2
    assert engine.probes == 0


def test_an_outage_seen_by_other_calls_explains_them_without_a_probe() -> None:
    ended = datetime.now(timezone.utc) - timedelta(seconds=30)
    engine = Probed(Api(137, ended), answers=True)
    engine.answered(False, ended - timedelta(seconds=1))
    engine.answered(True, ended + timedelta(seconds=5))
    assert [r[:2] for r in replicas(engine)] == [("EngineStopped", "infrastructure")] * 2


def test_a_callers_client_is_not_probed() -> None:
    engine = DockerEngine(client=Client(Api(143, datetime.now(timezone.utc))))
    assert [r[:2] for r in replicas(engine)] == [("Terminated", None)] * 2
    assert engine.outages == ()


def test_the_probe_makes_a_new_connection_and_records_a_refusal(tmp_path: Any) -> None:
    engine = DockerEngine(
        DockerClientConfig(base_url=f"unix://{tmp_path}/none.sock", version="1.41")
    )
    try:
        assert engine.probe() is False
        assert len(engine.outages) == 1 and engine.outages[0].ended is None
    finally:
        engine.close()
