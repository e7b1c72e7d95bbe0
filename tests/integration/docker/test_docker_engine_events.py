"""The async client follows apps on the engine's event stream: woken by their containers'
events, inspecting only when something happened."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from docker_barrier import Barrier
from torchx_provider.schedulers.docker import create_async_client
from torchx_provider.schedulers.docker.events import EngineEvents
from torchx_provider.specs.api import AppDef, AppState, Role, is_terminal

pytestmark = pytest.mark.docker

IMAGE = "torchx-provider/busybox:latest"


async def test_three_apps_one_stream_woken_by_their_events(
    scheduler: Any, cfg: dict[str, Any], barrier: Barrier
) -> None:
    # The apps end 1, 2 and 3 s after the follows have begun (the barrier), however long
    # their submission took on a busy machine.
    apps = [
        AppDef(
            f"ev{i}",
            [
                Role(
                    "r",
                    image=IMAGE,
                    entrypoint="sh",
                    args=["-c", barrier.wait_then(f"sleep {1 + i}")],
                    mounts=[barrier.mount],
                )
            ],
        )
        for i in range(3)
    ]
    app_ids = [scheduler.submit(app, cfg) for app in apps]
    clients = [create_async_client() for _ in app_ids]
    inspections = [0] * len(clients)
    for i, client in enumerate(clients):
        describe = client.engine.follow_describe

        def counted(app_id: str, i: int = i, describe: Any = describe) -> Any:
            inspections[i] += 1
            return describe(app_id)

        client.engine.follow_describe = counted

    async def follow(i: int) -> tuple[AppState, int, float]:
        client, app_id = clients[i], app_ids[i]
        loop = asyncio.get_running_loop()
        woken = 0
        while True:
            resp = await client.describe(app_id)
            assert resp is not None
            if is_terminal(resp.state):
                return resp.state, woken, loop.time()
            # A long timeout: only an event can end the wait in time.
            woken += await client.wait_changed(app_id, 60)

    async def release() -> None:
        await asyncio.sleep(1.0)  # every follow has described its app and waits
        barrier.release()

    try:
        start = asyncio.get_running_loop().time()
        results = await asyncio.wait_for(
            asyncio.gather(*(follow(i) for i in range(3)), release()), 30
        )
        results = results[:3]
        streams = EngineEvents.on_this_loop()
    finally:
        for client in clients:
            await client.close()
    assert [state for state, _, _ in results] == [AppState.SUCCEEDED] * 3
    assert all(woken >= 1 for _, woken, _ in results), results
    # Ended within seconds of the container (2, 3, 4 s), not at the 60 s timeout.
    assert all(end - start < 20 for _, _, end in results), (start, results)
    assert len(streams) == 1  # one stream for the engine, shared by the three clients
    # Inspected when something happened, not in a loop: a handful of times per app.
    assert all(n <= 6 for n in inspections), inspections
