"""A Kubernetes job deleted before it finished, by something other than the task (a user's
``kubectl delete``, a clean-up): the follow ends it FAILED on the platform
(``InfrastructureError``), as Docker does for containers removed from outside; a cancel
that stops the job in place stays a cancellation. Over the in-memory API, through the real
async client and its shared watch."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kube_fakes import FakeAsyncKube, FakeKube, FakeListWatch, app, set_phase
from task_log import TaskLog
from torchx_provider import errors
from torchx_provider.operators.finishing import failure_error
from torchx_provider.schedulers.kube.hub import InformerHub
from torchx_provider.schedulers.kube.resources import VOLCANO_JOB, CustomResource
from torchx_provider.schedulers.kube.volcano import create_async_client, create_scheduler
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import EventKind
from torchx_provider.triggers.follow import JobFollower


class PushedJobs(FakeListWatch):
    """The jobs' watch: lists what the fake holds; the test pushes the watch events."""

    def __init__(self, fake: FakeKube, resource: Any, namespace: str) -> None:
        super().__init__(fake, resource, namespace)
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[Any]:
        while True:
            yield await self.events.get()


class PushKube(FakeAsyncKube):
    def __init__(self, sync: FakeKube) -> None:
        super().__init__(sync)
        self.jobs: PushedJobs | None = None

    def list_watch(self, resource: CustomResource | None, namespace: str) -> Any:
        if resource == VOLCANO_JOB:
            self.jobs = PushedJobs(self.sync, resource, namespace)
            return self.jobs
        return super().list_watch(resource, namespace)


@pytest.fixture
async def hub() -> AsyncIterator[InformerHub]:
    hub = InformerHub(linger=0.05)
    yield hub
    await hub.close()


async def follow_until_seen(follower: JobFollower) -> asyncio.Task[Any]:
    running = asyncio.create_task(follower.run())
    for _ in range(2000):
        if follower.state is AppState.RUNNING:
            return running
        await asyncio.sleep(0.005)
    raise AssertionError(f"the follow never saw the job run ({follower.state})")


async def test_a_running_job_deleted_from_outside_is_an_infrastructure_error(
    hub: InformerHub,
) -> None:
    fake = FakeKube()
    volcano = create_scheduler("s", namespace="ns", kube=fake)
    app_id = volcano.schedule(volcano.submit_dryrun(app(2), {"queue": "q"}))
    set_phase(fake, app_id, "Running")
    kube = PushKube(fake)
    client = create_async_client(namespace="ns", kube=kube)
    client.hub = hub
    log = TaskLog()
    follower = JobFollower(client, app_id, log=log, poll_interval=0.01)
    running = await follow_until_seen(follower)

    job = copy.deepcopy(fake.objects[("jobs", "ns", app_id.partition(":")[2])])
    fake.objects.clear()  # kubectl delete vcjob
    assert kube.jobs is not None
    await kube.jobs.events.put({"type": "DELETED", "object": job})
    event = await asyncio.wait_for(running, timeout=5)
    await client.close()

    # before: CANCELLED, "deleted from the backend before it finished": AppCancelledError
    assert event.kind == EventKind.FINISHED and event.state == AppState.FAILED
    assert "not by this task" in event.message or "other than this task" in event.message
    error = failure_error(event)
    assert type(error) is errors.InfrastructureError, error
    assert error.reason == "RemovedFromOutside"
    assert [(r.key, r.state, r.reason) for r in event.replicas] == [
        ("my-role/0", AppState.FAILED, "RemovedFromOutside"),
        ("my-role/1", AppState.FAILED, "RemovedFromOutside"),
    ]
    assert any("RUNNING -> FAILED (removed from the backend" in ln for ln in log.lines)


async def test_a_job_cancelled_in_place_from_outside_stays_a_cancellation(
    hub: InformerHub,
) -> None:
    fake = FakeKube()
    volcano = create_scheduler("s", namespace="ns", kube=fake)
    app_id = volcano.schedule(volcano.submit_dryrun(app(2), {"queue": "q"}))
    set_phase(fake, app_id, "Running")
    kube = PushKube(fake)
    client = create_async_client(namespace="ns", kube=kube)
    client.hub = hub
    follower = JobFollower(client, app_id, log=TaskLog(), poll_interval=0.01)
    running = await follow_until_seen(follower)

    aborted = copy.deepcopy(set_phase(fake, app_id, "Aborted"))  # Volcano's abort command
    aborted["metadata"]["resourceVersion"] = "99"
    assert kube.jobs is not None
    await kube.jobs.events.put({"type": "MODIFIED", "object": aborted})
    event = await asyncio.wait_for(running, timeout=5)
    await client.close()

    assert event.state == AppState.CANCELLED
    assert type(failure_error(event)) is errors.AppCancelledError
