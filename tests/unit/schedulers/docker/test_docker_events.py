"""One event stream per engine: apps woken by their containers' events, inspected on change."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Iterator
from typing import Any

from torchx_provider.schedulers.docker.events import EngineEvents, event_app
from torchx_provider.schedulers.docker.scheduler import DockerAsyncClient
from torchx_provider.schedulers.labels import LABEL_APP_ID, label_value


class FakeStream:
    """Events pushed by the test; ``None`` breaks the stream."""

    def __init__(self, opened: list[FakeStream]) -> None:
        self.events: queue.Queue[Any] = queue.Queue()
        self.closed = threading.Event()
        opened.append(self)

    def __iter__(self) -> Iterator[Any]:
        while not self.closed.is_set():
            try:
                event = self.events.get(timeout=0.01)
            except queue.Empty:
                continue
            if event is None:
                raise ConnectionError("stream broke")
            yield event

    def close(self) -> None:
        self.closed.set()


def container_event(app_id: str, action: str = "die") -> dict[str, Any]:
    return {
        "Type": "container",
        "Action": action,
        "Actor": {"Attributes": {LABEL_APP_ID: label_value(app_id)}},
    }


async def until(check: Any, timeout: float = 5) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not check():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.01)


class CountingEngine:
    def __init__(self) -> None:
        self.describes = 0

    def follow_describe(self, app_id: str) -> tuple[str, None]:
        self.describes += 1
        return f"{app_id}#{self.describes}", None

    def close(self) -> None:
        pass


async def test_events_wake_their_app_and_describe_inspects_only_on_change() -> None:
    opened: list[FakeStream] = []
    events = EngineEvents(lambda: FakeStream(opened), linger=0.05)
    engine = CountingEngine()
    client = DockerAsyncClient(engine=engine, events=events)  # type: ignore[arg-type]
    other = events.subscribe("app-2")
    await until(lambda: events.healthy)

    assert await client.describe("app-1") == "app-1#1"
    assert await client.describe("app-1") == "app-1#1"  # no event: no inspection
    assert engine.describes == 1
    opened[0].events.put(container_event("app-2"))
    assert await client.wait_changed("app-1", 0.1) is False
    assert other.changed.is_set()
    opened[0].events.put(container_event("app-1", "start"))
    assert await client.wait_changed("app-1", 5) is True
    assert await client.describe("app-1") == "app-1#2"

    # A broken stream: everyone is stale, the stream reopens, inspections resume.
    opened[0].events.put(None)
    await until(lambda: len(opened) == 2 and events.healthy)
    assert await client.describe("app-1") == "app-1#3"  # stale: inspected again

    other.close()
    await client.close()
    await until(lambda: opened[-1].closed.is_set())
    assert event_app(container_event("x")) == label_value("x")
