"""The provider's own removal of an app's containers: one is marked first and goes last,
so that a describe meanwhile never takes the others for replicas removed from outside."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import docker.errors

from docker_attrs import APP_ID, labels_of
from torchx_provider.schedulers.docker.engine import DockerEngine
from torchx_provider.schedulers.docker.state import REMOVING_SUFFIX, ContainerInfo, describe_app

REPLICAS = [("trainer", 0), ("trainer", 1), ("ps", 0)]


class Api:
    """The engine's API as removal uses it: containers, renamed and removed, in a log."""

    def __init__(self, gone: Iterable[str] = ()) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str]] = []
        self.names = {f"id-{r}-{k}": f"{APP_ID}-{r}-{k}" for r, k in REPLICAS}
        self.gone = set(gone)  # removed from outside after they were listed
        self.seen_while_removing: list[Any] = []

    def containers(self, all: bool, filters: Any) -> list[dict[str, Any]]:
        return [self.summary(cid) for cid in self.names]

    def summary(self, cid: str) -> dict[str, Any]:
        role, k = cid.split("-")[1:]
        return {
            "Id": cid,
            "Names": ["/" + self.names[cid]],
            "State": "exited",
            "Status": "Exited (0) 1 second ago",
            "Labels": labels_of(role, int(k)),
        }

    def rename(self, cid: str, name: str) -> None:
        with self.lock:
            if cid in self.gone:
                raise docker.errors.NotFound(f"No such container: {cid}")
            self.calls.append(("rename", cid))
            self.names[cid] = name

    def remove_container(self, cid: str, force: bool) -> None:
        with self.lock:
            self.calls.append(("remove", cid))
            self.names.pop(cid, None)
            # what a describe would make of the containers left at this moment
            left = [ContainerInfo.from_summary(self.summary(c)) for c in self.names]
            self.seen_while_removing.append(describe_app(APP_ID, left))

    def images(self, filters: Any) -> list[Any]:
        return []


class Client:
    def __init__(self, api: Api) -> None:
        self.api = api


def delete(api: Api) -> None:
    engine = DockerEngine(client=Client(api))
    try:
        engine.delete(APP_ID)
    finally:
        engine.close()


def test_one_container_is_marked_first_and_removed_last() -> None:
    api = Api()
    delete(api)
    assert api.calls[0] == ("rename", "id-trainer-0")
    assert sorted(api.calls[1:3]) == [("remove", "id-ps-0"), ("remove", "id-trainer-1")]
    assert api.calls[3:] == [("remove", "id-trainer-0")]
    assert api.names == {}
    # Meanwhile the replicas already gone were never blamed on something else.
    for described in api.seen_while_removing:
        assert described is None or "other than this task" not in described.msg


def test_a_container_gone_before_it_is_marked_leaves_the_mark_to_another() -> None:
    api = Api(gone={"id-trainer-0"})
    delete(api)
    assert api.calls[0] == ("rename", "id-trainer-1")
    assert api.calls[-1] == ("remove", "id-trainer-1")
    renamed = [cid for kind, cid in api.calls if kind == "rename"]
    assert renamed == ["id-trainer-1"]


def test_the_mark_is_a_suffix_of_the_name() -> None:
    api = Api()
    api.rename("id-ps-0", api.names["id-ps-0"] + REMOVING_SUFFIX)
    assert ContainerInfo.from_summary(api.summary("id-ps-0")).removing
    assert not ContainerInfo.from_summary(api.summary("id-trainer-0")).removing
