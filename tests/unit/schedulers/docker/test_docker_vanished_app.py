"""An app whose containers all went before it was seen finished: removed from outside
(FAILED, the platform's doing), whether it had one container or several; unless the engine
that follows it removed it itself after its end."""

from __future__ import annotations

import asyncio
from typing import Any

from docker_attrs import APP_ID, inspect_attrs
from torchx_provider.schedulers.docker.scheduler import DockerAsyncClient
from torchx_provider.schedulers.docker.state import (
    REMOVED_FROM_OUTSIDE,
    ContainerInfo,
    describe_app,
    removed_from_outside,
)
from torchx_provider.specs.api import AppState


def described(*containers: tuple[str, int, str, int]) -> Any:
    return describe_app(
        APP_ID,
        [
            ContainerInfo.from_inspect(inspect_attrs(r, k, status, code))
            for r, k, status, code in containers
        ],
    )


def states(resp: Any) -> dict[str, tuple[AppState, str]]:
    return {
        f"{rs.role}/{r.id}": (r.state, r.reason) for rs in resp.roles_statuses for r in rs.replicas
    }


def test_what_was_not_seen_finished_was_removed_from_outside() -> None:
    last = described(
        ("trainer", 0, "exited", 0), ("trainer", 1, "running", 0), ("ps", 0, "removing", 0)
    )
    assert last.state == AppState.RUNNING
    ended = removed_from_outside(last)
    assert ended is not None and ended.state == AppState.FAILED
    assert states(ended) == {
        "trainer/0": (AppState.SUCCEEDED, ""),
        "trainer/1": (AppState.FAILED, "RemovedFromOutside"),
        "ps/0": (AppState.FAILED, "RemovedFromOutside"),
    }
    failure = ended.roles_statuses[0].replicas[1].failure
    assert failure == "infrastructure"
    assert ended.msg.count(REMOVED_FROM_OUTSIDE) == 2 and "trainer/1" in ended.msg


def test_an_app_of_one_replica_is_no_different() -> None:
    last = describe_app(APP_ID, [ContainerInfo.from_inspect(inspect_attrs("ps", 0, "running"))])
    ended = removed_from_outside(last)
    assert ended is not None and ended.state == AppState.FAILED
    assert states(ended)["ps/0"] == (AppState.FAILED, "RemovedFromOutside")


def test_an_app_seen_finished_or_never_seen_is_told_as_it_was() -> None:
    done = described(
        ("trainer", 0, "exited", 0), ("trainer", 1, "exited", 3), ("ps", 0, "exited", 0)
    )
    assert removed_from_outside(done) is done
    assert removed_from_outside(None) is None


# ---------------------------------------------------------------------------- the async client
class Events:
    """An event stream that is never open: every describe inspects."""

    def subscribe(self, app_id: str) -> Any:
        return Sub()


class Sub:
    healthy = False
    stale = True

    def __init__(self) -> None:
        self.changed = asyncio.Event()

    def close(self) -> None:
        pass


class Engine:
    """Describes as told; ``removed`` is what it removed itself after the app's end."""

    def __init__(self, answers: list[Any], removed: Any = None) -> None:
        self.answers = answers
        self.removed = removed

    def follow_describe(self, app_id: str) -> tuple[Any, None]:
        return self.answers.pop(0), None

    def removed_app(self, app_id: str) -> Any:
        return self.removed

    def close(self) -> None:
        pass


async def test_the_client_tells_containers_gone_while_it_ran_as_removed_from_outside() -> None:
    running = described(
        ("trainer", 0, "running", 0), ("trainer", 1, "running", 0), ("ps", 0, "running", 0)
    )
    client = DockerAsyncClient(engine=Engine([running, None]), events=Events())  # type: ignore[arg-type]
    assert await client.last_seen(APP_ID) is None  # never seen
    assert await client.describe(APP_ID) is running
    assert await client.describe(APP_ID) is None
    ended = await client.last_seen(APP_ID)
    assert ended is not None and ended.state == AppState.FAILED
    assert {reason for _, reason in states(ended).values()} == {"RemovedFromOutside"}
    await client.close()


async def test_the_client_tells_an_app_its_engine_removed_after_its_end_as_it_ended() -> None:
    running = described(("trainer", 0, "running", 0))
    done = described(
        ("trainer", 0, "exited", 0), ("trainer", 1, "exited", 0), ("ps", 0, "exited", 0)
    )
    engine = Engine([running, None], removed=done)
    client = DockerAsyncClient(engine=engine, events=Events())  # type: ignore[arg-type]
    await client.describe(APP_ID)
    assert await client.describe(APP_ID) is None
    assert await client.last_seen(APP_ID) is done
    await client.close()
