"""A describe reads the end of the log of a replica that exited as the container's init does
when it cannot start the entrypoint, once per container (the decision: test_docker_state)."""

from __future__ import annotations

from typing import Any

import docker.errors

from docker_attrs import APP_ID, inspect_attrs
from torchx_provider.schedulers.docker.engine import DockerEngine

TINI = b"[FATAL tini (7)] exec python failed: No such file or directory\n"


class Api:
    """trainer/0 exited ``code`` with ``log``; trainer/1 and ps/0 exited 0."""

    def __init__(self, code: int, log: bytes, removed: bool = False) -> None:
        self.attrs = {}
        for role, k, c in (("trainer", 0, code), ("trainer", 1, 0), ("ps", 0, 0)):
            attrs = inspect_attrs(role, k, "exited", c)
            attrs["Config"]["Image"] = "team/app:1"
            self.attrs[attrs["Id"]] = attrs
        self.log = log
        self.removed = removed
        self.reads: list[str] = []
        self.api_version = "1.41"

    def containers(self, all: bool, filters: Any) -> list[dict[str, Any]]:
        return [
            {"Id": i, "Names": [a["Name"]], "State": "exited", "Labels": a["Config"]["Labels"]}
            for i, a in self.attrs.items()
        ]

    def inspect_container(self, cid: str) -> dict[str, Any]:
        return self.attrs[cid]

    def logs(self, cid: str, **params: Any) -> bytes:
        self.reads.append(cid)
        assert params["tail"] > 0 and params["stderr"]
        if self.removed:
            raise docker.errors.NotFound(f"No such container: {cid}")
        return self.log


class Client:
    def __init__(self, api: Api) -> None:
        self.api = api


def trainer0(engine: DockerEngine) -> tuple[str, str | None, str]:
    resp = engine.describe(APP_ID)
    assert resp is not None
    r = resp.roles_statuses[0].replicas[0]
    return r.reason, r.failure, str(r.structured_error_msg)


def test_the_init_not_finding_the_entrypoint_is_read_once_and_named() -> None:
    api = Api(127, b"starting\n" + TINI)
    engine = DockerEngine(client=Client(api))
    reason, failure, message = trainer0(engine)
    assert (reason, failure) == ("EntrypointNotFound", "configuration")
    assert "entrypoint 'python' is not in image 'team/app:1'" in message, message
    assert trainer0(engine)[0] == "EntrypointNotFound"
    assert api.reads == ["id-trainer-0"]  # once, only the replica that exited so


def test_a_127_without_the_init_words_stays_the_code_s_own() -> None:
    api = Api(127, b"sh: train: not found\n")
    assert trainer0(DockerEngine(client=Client(api)))[:2] == ("Error", "user")


def test_a_container_removed_before_its_log_was_read_stays_the_code_s_own() -> None:
    api = Api(127, TINI, removed=True)
    assert trainer0(DockerEngine(client=Client(api)))[:2] == ("Error", "user")
