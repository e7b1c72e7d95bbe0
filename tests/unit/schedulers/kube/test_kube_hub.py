"""The shared caches: one informer per (cluster, namespace, type), reference counted, and the
async client answering describe / wait_changed / last_seen / read_logs from them."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kube_fakes import (
    FakeAsyncKube,
    FakeKube,
    FakeListWatch,
    add_local_queue,
    add_pod,
    app,
    job_event,
    podgroup_event,
    set_phase,
)
from torchx_provider.errors import BackendUnavailableError
from torchx_provider.schedulers.kube.client_config import KubeClientConfig
from torchx_provider.schedulers.kube.hub import InformerHub, cache_key
from torchx_provider.schedulers.kube.informer import UNSERVED_RETRY, Keep
from torchx_provider.schedulers.kube.resources import (
    VOLCANO_JOB,
    VOLCANO_JOB_EVENTS,
    VOLCANO_PODGROUP_EVENTS,
    VOLCANO_QUEUES,
    CustomResource,
    EventsAbout,
    OwnedBy,
    QueuedIn,
    appwrapper,
)
from torchx_provider.schedulers.kube.scheduler import KubeScheduler
from torchx_provider.schedulers.kube.volcano import create_async_client, create_scheduler
from torchx_provider.schedulers.logs import LogCursor
from torchx_provider.specs.api import AppState


class PushSource(FakeListWatch):
    """Lists what :class:`FakeKube` holds, counting its lists; the test pushes watch events."""

    def __init__(
        self,
        fake: FakeKube,
        resource: CustomResource | EventsAbout | OwnedBy | QueuedIn | None,
        namespace: str,
    ):
        super().__init__(fake, resource, namespace)
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.lists = 0
        self.down = False

    async def list(self, keep: Keep | None = None) -> tuple[list[dict[str, Any]], str]:
        self.lists += 1
        if self.down:
            raise ConnectionError("API server unreachable")
        return await super().list(keep)

    async def watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[Any]:
        while True:
            yield await self.events.get()


class PushKube(FakeAsyncKube):
    def __init__(self, sync: FakeKube) -> None:
        super().__init__(sync)
        self.sources: dict[tuple[Any, str], PushSource] = {}

    def list_watch(self, resource: CustomResource | None, namespace: str) -> PushSource:
        source = self.sources[(resource, namespace)] = PushSource(self.sync, resource, namespace)
        return source

    def event_watch(self, about: EventsAbout, namespace: str) -> PushSource:
        source = self.sources[(about, namespace)] = PushSource(self.sync, about, namespace)
        return source

    def owned_watch(self, owned: OwnedBy, namespace: str) -> PushSource:
        source = self.sources[(owned, namespace)] = PushSource(self.sync, owned, namespace)
        return source

    def queue_watch(self, queued: QueuedIn, namespace: str) -> PushSource:
        source = self.sources[(queued, namespace)] = PushSource(self.sync, queued, namespace)
        return source


@pytest.fixture
async def hub() -> AsyncIterator[InformerHub]:
    hub = InformerHub(linger=0.05)
    yield hub
    await hub.close()


@pytest.fixture
def fake() -> FakeKube:
    return FakeKube()


@pytest.fixture
def volcano(fake: FakeKube) -> KubeScheduler:
    """Volcano's scheduler in namespace ``ns``, over ``fake``."""
    return create_scheduler("s", namespace="ns", kube=fake)


def submitted(volcano: KubeScheduler) -> str:
    """The id of a new app submitted to Volcano queue ``q``."""
    return volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"}))


def client_for(hub: InformerHub, kube: PushKube) -> Any:
    client = create_async_client(namespace="ns", kube=kube)
    client.hub = hub
    return client


def pushed_client(hub: InformerHub, fake: FakeKube) -> tuple[PushKube, Any]:
    """A Volcano client of namespace ``ns`` over ``fake`` through ``hub``, and the watch
    sources the test pushes events to."""
    kube = PushKube(fake)
    return kube, client_for(hub, kube)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_one_informer_per_namespace_and_type_shared_and_lingering(
    hub: InformerHub, fake: FakeKube
) -> None:
    kube = PushKube(fake)
    first, second = client_for(hub, kube), client_for(hub, kube)
    await first.describe("ns:a")
    await second.describe("ns:b")
    await first.describe("other:c")
    # (jobs, pods, PodGroup Events, job Events) x (ns, other), each once; the cluster's
    # Volcano Queues (cluster-scoped) once for both
    assert len(kube.sources) == 9
    assert {k[1:] for k in hub.informers} == {
        (namespace, subject)
        for namespace in ("ns", "other")
        for subject in (VOLCANO_JOB, None, VOLCANO_PODGROUP_EVENTS, VOLCANO_JOB_EVENTS)
    } | {("", VOLCANO_QUEUES)}
    await first.close()
    await settle()
    assert ("other", VOLCANO_JOB) in {k[1:] for k in hub.informers}  # lingering
    await asyncio.sleep(0.1)
    assert {k[1:] for k in hub.informers} == {
        ("ns", VOLCANO_JOB),
        ("ns", None),
        ("ns", VOLCANO_PODGROUP_EVENTS),
        ("ns", VOLCANO_JOB_EVENTS),
        ("", VOLCANO_QUEUES),
    }
    # Back within the linger: the same informer, no new list.
    await second.close()
    third = client_for(hub, kube)
    await third.describe("ns:a")
    await asyncio.sleep(0.1)
    assert len(kube.sources) == 9
    assert kube.sources[(VOLCANO_JOB, "ns")].lists == 1
    await third.close()
    await asyncio.sleep(0.1)
    assert hub.informers == {}


async def test_describe_reads_the_cache_and_wait_changed_wakes_on_its_app_only(
    hub: InformerHub, fake: FakeKube, volcano: KubeScheduler
) -> None:
    mine = submitted(volcano)
    other = submitted(volcano)
    job = set_phase(fake, mine, "Running")
    add_pod(fake, job, 0, "Running", ["a"])
    kube, client = pushed_client(hub, fake)
    assert await client.describe(mine) == volcano.describe(mine)
    fake.calls.clear()
    assert (await client.describe(mine)).state is AppState.RUNNING
    lines, _ = await client.read_logs(mine, "my-role", 0, LogCursor())
    assert [line.text for line in lines] == ["a\n"]
    assert [c[0] for c in fake.calls] == ["log"]  # no GET, no LIST: the cache answered

    jobs = kube.sources[(VOLCANO_JOB, "ns")]
    other_job = copy.deepcopy(fake.objects[("jobs", "ns", other.split(":")[1])])
    other_job["metadata"]["resourceVersion"] = "2"
    await jobs.events.put({"type": "MODIFIED", "object": other_job})
    assert await client.wait_changed(mine, 0.05) is False  # another app's change
    done = set_phase(fake, mine, "Completed")
    done["metadata"]["resourceVersion"] = "3"
    await jobs.events.put({"type": "MODIFIED", "object": copy.deepcopy(done)})
    assert await client.wait_changed(mine, 5) is True
    fake.calls.clear()
    described = await client.describe(mine)
    assert described is not None and described.state is AppState.SUCCEEDED
    assert [c[0] for c in fake.calls] == []
    assert await client.wait_changed(mine, 0.01) is False  # describe consumed the change
    await client.close()


async def test_deleted_app_is_none_but_last_seen_keeps_its_final_state(
    hub: InformerHub, fake: FakeKube, volcano: KubeScheduler
) -> None:
    app_id = submitted(volcano)
    kube, client = pushed_client(hub, fake)
    assert (await client.describe(app_id)).state is AppState.SUBMITTED
    assert await client.last_seen(app_id) is None
    done = copy.deepcopy(set_phase(fake, app_id, "Completed"))
    fake.objects.clear()  # deleted by its TTL
    await kube.sources[(VOLCANO_JOB, "ns")].events.put({"type": "DELETED", "object": done})
    assert await client.wait_changed(app_id, 5) is True
    fake.calls.clear()
    assert await client.describe(app_id) is None
    assert fake.calls == []
    last = await client.last_seen(app_id)
    assert last is not None and last.state is AppState.SUCCEEDED
    await client.close()


async def test_after_its_own_cancel_the_client_reads_the_api_until_the_watch_shows_it(
    hub: InformerHub,
) -> None:
    # MCAD's cancel deletes the AppWrapper: a describe right after must not answer from a
    # cache whose DELETED event has not arrived yet.
    from torchx_provider.schedulers.kube.mcad import create_async_client as mcad_client
    from torchx_provider.schedulers.kube.mcad import create_scheduler as mcad_scheduler

    fake = FakeKube()
    mcad = mcad_scheduler("s", namespace="ns", kube=fake)
    app_id = mcad.schedule(mcad.submit_dryrun(app(), {}))
    kube = PushKube(fake)
    client = mcad_client(namespace="ns", kube=kube)
    client.hub = hub
    assert (await client.describe(app_id)).state is AppState.SUBMITTED
    resource = appwrapper()  # the group it was created in (the default api_group)
    deleted = copy.deepcopy(fake.get(resource, "ns", app_id.partition(":")[2]))
    await client.cancel(app_id)
    fake.calls.clear()
    assert await client.describe(app_id) is None  # read from the API server
    assert fake.calls and {c[0] for c in fake.calls} == {"get"}
    await kube.sources[(resource, "ns")].events.put({"type": "DELETED", "object": deleted})
    assert await client.wait_changed(app_id, 5) is True
    fake.calls.clear()
    assert await client.describe(app_id) is None  # the watch has caught up: the cache again
    assert fake.calls == []
    await client.close()


async def test_unseen_or_unhealthy_falls_back_to_the_api(
    hub: InformerHub, fake: FakeKube, volcano: KubeScheduler
) -> None:
    kube, client = pushed_client(hub, fake)
    assert await client.describe("ns:later") is None  # never seen: one GET says none
    assert ("get", VOLCANO_JOB.group, "later") in fake.calls
    app_id = submitted(volcano)
    fake.calls.clear()
    # Created after the list, its event not arrived yet: the GET finds it.
    assert (await client.describe(app_id)).state is AppState.SUBMITTED
    assert [c[0] for c in fake.calls] == ["get"]
    # A failing watch: the cache may be stale, so the API answers until the relist.
    jobs = kube.sources[(VOLCANO_JOB, "ns")]
    jobs.down = True
    await jobs.events.put({"type": "ERROR", "object": {"code": 500, "message": "boom"}})
    informer = hub.informers[(cache_key(client.client_config), "ns", VOLCANO_JOB)].informer
    for _ in range(500):
        if not informer.healthy:
            break
        await asyncio.sleep(0.01)
    assert not informer.healthy
    fake.calls.clear()
    set_phase(fake, app_id, "Running")
    assert (await client.describe(app_id)).state is AppState.RUNNING
    assert [c[0] for c in fake.calls] == ["get"]
    # Back: the relist makes the cache current, and wakes the follower.
    await client.wait_changed(app_id, 0)
    jobs.down = False
    assert await client.wait_changed(app_id, 10) is True
    fake.calls.clear()
    assert (await client.describe(app_id)).state is AppState.RUNNING
    assert fake.calls == []
    await client.close()


async def test_one_api_client_per_cluster_content(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Any] = []

    class Api:
        closed = False

        async def close(self) -> None:
            self.closed = True

    async def fake_client(self: KubeClientConfig) -> Api:
        made.append(Api())
        return made[-1]

    monkeypatch.setattr(KubeClientConfig, "async_api_client", fake_client)
    hub = InformerHub.current()
    a = KubeClientConfig.from_kwargs(kubeconfig={"k": "v"}, namespace="n")
    b = KubeClientConfig.from_kwargs(kubeconfig={"k": "v"}, namespace="n")
    c = KubeClientConfig.from_kwargs(kubeconfig={"k": "w"}, namespace="n")
    assert cache_key(a) == cache_key(b) != cache_key(c)
    assert "v" not in cache_key(a)
    first = await hub.acquire_client(a)
    assert await hub.acquire_client(b) is first
    assert await hub.acquire_client(c) is not first
    await hub.release_client(a)
    assert not first.closed
    await hub.release_client(b)
    assert first.closed and len(made) == 2


async def test_default_wait_changed_sleeps() -> None:
    from torchx_provider.schedulers.api import AsyncSchedulerClient

    class Plain(AsyncSchedulerClient):
        async def describe(self, app_id: str) -> None:
            return None

        async def read_logs(self, *args: Any) -> Any:
            return [], None

        async def cancel(self, app_id: str) -> None:
            pass

    loop = asyncio.get_running_loop()
    start = loop.time()
    assert await Plain().wait_changed("x", 0.05) is False
    assert loop.time() - start >= 0.04


async def test_an_outage_found_by_a_describe_is_timed_from_when_the_watch_broke(
    hub: InformerHub, fake: FakeKube, volcano: KubeScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube, client = pushed_client(hub, fake)
    app_id = submitted(volcano)
    assert (await client.describe(app_id)).state is AppState.SUBMITTED
    informer = hub.informers[(cache_key(client.client_config), "ns", VOLCANO_JOB)].informer
    assert informer.failing_for() == 0.0
    relist = asyncio.Event()

    async def backoff(seconds: float) -> None:  # until the test lets it list again
        await relist.wait()

    informer.sleep = backoff
    # The watch broke 42 s ago (its relists failing since); now the API refuses the GET too.
    broken = {"type": "ERROR", "object": {"code": 500, "message": "connection reset"}}
    await kube.sources[(VOLCANO_JOB, "ns")].events.put(broken)
    for _ in range(100):
        if informer.error is not None:
            break
        await settle()
    assert informer.failing_since is not None
    informer.failing_since = time.monotonic() - 42.0

    async def refused(app_id: str) -> Any:
        raise BackendUnavailableError("API server down", status=503)

    monkeypatch.setattr(client.core, "describe", refused)
    with pytest.raises(BackendUnavailableError) as caught:
        await client.describe(app_id)
    assert 42.0 <= caught.value.unreachable_for < 60.0
    # A successful list ends the run of failures.
    relist.set()
    for _ in range(100):
        if informer.failing_since is None:
            break
        await settle()
    assert informer.failing_since is None and informer.failing_for() == 0.0
    await client.close()


async def test_podgroup_events_are_watched_once_per_namespace_kept_for_followed_apps_only(
    hub: InformerHub, fake: FakeKube, volcano: KubeScheduler
) -> None:
    mine = submitted(volcano)
    other = submitted(volcano)
    unfollowed = submitted(volcano)
    jobs = {a: set_phase(fake, a, "Pending") for a in (mine, other, unfollowed)}
    quota = "queue resource quota insufficient: insufficient cpu"
    fake.event_list = [podgroup_event(jobs[a], quota) for a in (mine, unfollowed)]
    kube = PushKube(fake)
    first, second = client_for(hub, kube), client_for(hub, kube)
    await first.describe(mine)
    fake.calls.clear()
    await first.describe(mine)
    await second.describe(other)
    assert fake.calls == []  # the caches answer: no GET, no list of Events per app
    said = [n.text for n in first.take_notices()]
    assert said == [
        f"PodGroup {mine.split(':')[1]}-{jobs[mine]['metadata']['uid']} waits: "
        f"Unschedulable: {quota}"
    ]
    events = kube.sources[(VOLCANO_PODGROUP_EVENTS, "ns")]
    assert events.lists == 1  # one watch for the namespace, however many apps
    shared = hub.informers[(cache_key(first.client_config), "ns", VOLCANO_PODGROUP_EVENTS)]
    assert set(shared.informer.groups) == {mine.split(":")[1]}  # not the unfollowed app's

    # The count goes up every scheduling cycle: said once. A new message is said, and an
    # Event changes wake no follower (a describe reads them).
    await first.wait_changed(mine, 0)
    await events.events.put({"type": "MODIFIED", "object": podgroup_event(jobs[mine], quota, 9)})
    gang = "0/0 tasks in gang unschedulable: pod group is not ready, 2 minAvailable"
    await events.events.put({"type": "ADDED", "object": podgroup_event(jobs[mine], gang, 10)})
    await events.events.put({"type": "ADDED", "object": podgroup_event(jobs[other], gang, 10)})
    assert await first.wait_changed(mine, 0.05) is False
    await first.describe(mine)
    assert [n.text.rpartition(": ")[2] for n in first.take_notices()] == [gang.rpartition(": ")[2]]
    await second.describe(other)
    assert [n.text.endswith(gang) for n in second.take_notices()] == [True]
    # Running: Events are not read (nothing waits).
    running = copy.deepcopy(set_phase(fake, mine, "Running"))
    running["metadata"]["resourceVersion"] = "5"
    await kube.sources[(VOLCANO_JOB, "ns")].events.put({"type": "MODIFIED", "object": running})
    assert await first.wait_changed(mine, 5) is True
    await events.events.put({"type": "ADDED", "object": podgroup_event(jobs[mine], "late", 11)})
    await settle()
    assert (await first.describe(mine)).state is AppState.RUNNING
    assert first.take_notices() == []
    # Unfollowed: the app's Events are forgotten.
    await first.close()
    assert set(shared.informer.groups) == {other.split(":")[1]}
    await second.close()


async def test_pods_a_volcano_job_cannot_create_are_said_from_the_namespace_s_job_events(
    hub: InformerHub, fake: FakeKube, volcano: KubeScheduler
) -> None:
    mine = submitted(volcano)
    job = set_phase(fake, mine, "Pending")
    name = job["metadata"]["name"]
    refused = "Error creating pods: [pods is forbidden: exceeded quota: q, limited: pods=0]"
    fake.event_list = [job_event(job, "CommandIssued", "Start", 1)]
    kube, client = pushed_client(hub, fake)
    await client.describe(mine)
    assert client.take_notices() == []  # a routine step says nothing
    fake.calls.clear()
    events = kube.sources[(VOLCANO_JOB_EVENTS, "ns")]
    await events.events.put({"type": "ADDED", "object": job_event(job, "FailedCreate", refused, 2)})
    # a PodGroup's Event that names the job is not the job's
    odd = podgroup_event(job, "odd")
    odd["involvedObject"]["name"] = name
    await kube.sources[(VOLCANO_PODGROUP_EVENTS, "ns")].events.put({"type": "ADDED", "object": odd})
    await settle()
    await client.describe(mine)
    assert fake.calls == []  # from the caches
    assert [n.text for n in client.take_notices()] == [f"Job {name} waits: FailedCreate: {refused}"]
    await client.close()


def volcano_queue(name: str, state: str, version: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version}, "status": {"state": state}}


async def test_a_volcano_queue_closed_while_a_job_waits_there_is_said_once(
    hub: InformerHub, fake: FakeKube, volcano: KubeScheduler
) -> None:
    """Volcano says nothing about a pending job whose queue was closed after it was
    submitted: the cluster's Queues (one shared watch, cluster-scoped) say it, once, to the
    triggerer's follow and to the worker's describe; not once the job runs."""
    fake.cluster_objects = {("queues", "q"): volcano_queue("q", "Open")}
    mine = submitted(volcano)
    set_phase(fake, mine, "Pending")
    kube, client = pushed_client(hub, fake)
    await client.describe(mine)
    assert client.take_notices() == []  # open: nothing to say
    queues = kube.sources[(VOLCANO_QUEUES, "")]
    closed = volcano_queue("q", "Closed", "2")
    fake.cluster_objects[("queues", "q")] = closed
    await queues.events.put({"type": "MODIFIED", "object": closed})
    await settle()
    fake.calls.clear()
    for _ in range(3):
        await client.describe(mine)
    assert fake.calls == []  # from the caches
    said = [n.text for n in client.take_notices()]
    assert said == [
        "Volcano queue 'q' is Closed and admits no new job: the job waits until an "
        "administrator opens it (kubectl get queue q), or cancel it and name another queue "
        "in run option queue"
    ]
    # the worker's describe: one GET of the Queue while the job is pending
    assert volcano.describe(mine).state is AppState.PENDING
    assert [n.text for n in volcano.core.take_notices()] == said
    assert ("get-cluster", "queues", "q") in fake.calls
    set_phase(fake, mine, "Running")
    fake.calls.clear()
    assert volcano.describe(mine).state is AppState.RUNNING
    assert ("get-cluster", "queues", "q") not in fake.calls  # runs: not read
    await client.close()


async def test_a_volcano_queue_the_account_may_not_read_is_skipped_quietly(
    hub: InformerHub, fake: FakeKube, volcano: KubeScheduler
) -> None:
    """The shipped Role is namespaced: a cluster-scoped Queue is refused (403), and
    nothing is said about it, in the follow or the worker's describe."""
    # a FakeKube refuses cluster-scoped objects
    mine = submitted(volcano)
    set_phase(fake, mine, "Pending")
    kube, client = pushed_client(hub, fake)
    assert (await client.describe(mine)).state is AppState.PENDING
    assert volcano.describe(mine).state is AppState.PENDING
    assert client.take_notices() == [] and volcano.core.take_notices() == []
    assert kube.sources[(VOLCANO_QUEUES, "")].lists == 1
    await client.close()


async def test_events_refused_say_so_once_per_namespace_and_keep_describes_on_the_cache(
    hub: InformerHub, fake: FakeKube, volcano: KubeScheduler
) -> None:
    fake.events_forbidden = True
    apps = [submitted(volcano) for _ in range(2)]
    for a in apps:
        set_phase(fake, a, "Pending")
    kube, client = pushed_client(hub, fake)
    for a in apps:
        await client.describe(a)
    fake.calls.clear()
    for _ in range(3):
        for a in apps:
            assert (await client.describe(a)).state is AppState.PENDING
    assert fake.calls == []  # the cache answers: Events do not count toward its health
    said = [n.text for n in client.take_notices()]
    assert len(said) == 1, said
    assert "why a job waits in namespace 'ns' is not said" in said[0]
    assert 'add the rule {apiGroups: [""], resources: ["events"], verbs: ["list"]}' in said[0]
    shared = hub.informers[(cache_key(client.client_config), "ns", VOLCANO_PODGROUP_EVENTS)]
    assert shared.informer.forbidden_wait == UNSERVED_RETRY  # asked again rarely
    assert kube.sources[(VOLCANO_PODGROUP_EVENTS, "ns")].lists == 1
    await client.close()


async def test_other_backends_watch_no_events(hub: InformerHub) -> None:
    from torchx_provider.schedulers.kube.mcad import create_async_client as mcad_client

    client = mcad_client(namespace="ns", kube=PushKube(FakeKube()))
    client.hub = hub
    await client.describe("ns:x")
    assert not any(isinstance(k[2], EventsAbout) for k in hub.informers)
    await client.close()


async def test_a_workload_change_wakes_its_apps_follower_and_names_a_followed_preemptor(
    hub: InformerHub,
) -> None:
    """Kueue's Workloads: one informer per namespace, each kept by its owner's name; a
    change of one wakes its app's follower only, and a preemption names the preemptor where
    it is an app followed through the same hub."""
    from torchx_provider.schedulers.kube import appwrapper as aw
    from torchx_provider.schedulers.kube.resources import APPWRAPPER_WORKLOADS, KUEUE_WORKLOAD

    fake = FakeKube()
    add_local_queue(fake)
    sched = aw.create_scheduler("s", namespace="ns", kube=fake)
    low = sched.schedule(sched.submit_dryrun(app(), {"local_queue": "lq"}))
    high = sched.schedule(sched.submit_dryrun(app(), {"local_queue": "lq"}))
    low_name, high_name = low.split(":")[1], high.split(":")[1]
    high_uid = fake.objects[("appwrappers", "ns", high_name)]["metadata"]["uid"]

    def workload(owner: str, conditions: list[dict[str, Any]], version: str) -> dict[str, Any]:
        return {
            "apiVersion": KUEUE_WORKLOAD.api_version,
            "kind": "Workload",
            "metadata": {
                "name": f"appwrapper-{owner}",
                "uid": f"w-{owner}",
                "resourceVersion": version,
                "ownerReferences": [{"kind": "AppWrapper", "name": owner, "controller": True}],
            },
            "status": {"conditions": conditions},
        }

    for name in (low_name, high_name):
        fake.objects[("workloads", "ns", f"appwrapper-{name}")] = workload(name, [], "1")
    fake.objects[("workloads", "ns", "appwrapper-stranger")] = workload("stranger", [], "1")
    kube = PushKube(fake)
    clients = [aw.create_async_client(namespace="ns", kube=kube) for _ in range(2)]
    for c in clients:
        c.hub = hub
    try:
        await clients[0].describe(low)
        await clients[1].describe(high)
        owned = [s for k, s in hub.informers.items() if k[2] == APPWRAPPER_WORKLOADS]
        # one informer; every Workload kept by its owner's name (a later follow finds its
        # app's at once), without its spec
        assert len(owned) == 1
        assert sorted(owned[0].informer.groups) == sorted([low_name, high_name, "stranger"])
        assert all("spec" not in o for o in owned[0].informer.get(low_name))
        preempted = (
            f"Preempted to accommodate a workload (UID: w-{high_name}, JobUID: {high_uid}) "
            "due to prioritization in the ClusterQueue"
        )
        evicted = {
            "type": "Evicted",
            "status": "True",
            "reason": "Preempted",
            "message": preempted,
            "lastTransitionTime": "t2",
        }
        how = {**evicted, "type": "Preempted", "reason": "InClusterQueue"}
        watches = [await c.watch(a) for c, a in zip(clients, (low, high), strict=True)]
        for w in watches:
            w.changed.clear()
        source = kube.sources[(APPWRAPPER_WORKLOADS, "ns")]
        await source.events.put(
            {"type": "MODIFIED", "object": workload(low_name, [evicted, how], "2")}
        )
        await settle()
        assert watches[0].changed.is_set() and not watches[1].changed.is_set()
        await clients[0].describe(low)
        [text] = [n.text for n in clients[0].take_notices() if "preempted" in n.text]
        assert f"(the preemptor is app {high_name})" in text
    finally:
        for c in clients:
            await c.close()
