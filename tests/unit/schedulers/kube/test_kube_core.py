"""The operations of both Kubernetes faces (sync scheduler, async client), on an in-memory API.

The fakes stand in for the two thin API wrappers (``SyncKube``/``AsyncKube``), so these tests
check what the core decides -- which calls, in which order, with which objects -- without a
server, and that both faces decide alike; the real calls run in tests/integration/kubernetes.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from kube_fakes import T0, FakeAsyncKube, FakeKube, add_pod, app, set_phase
from torchx_provider.errors import (
    AppConfigurationError,
    BackendUnavailableError,
    InvalidOptionError,
    SubmissionError,
)
from torchx_provider.schedulers.kube.mcad import create_async_client as mcad_async_client
from torchx_provider.schedulers.kube.mcad import create_scheduler as mcad_scheduler
from torchx_provider.schedulers.kube.volcano import create_async_client, create_scheduler
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.schedulers.logs import LogCursor, format_timestamp
from torchx_provider.specs.api import AppState


@pytest.fixture
def fake() -> FakeKube:
    return FakeKube()


@pytest.fixture
def volcano(fake: FakeKube) -> Any:
    scheduler = create_scheduler("s", namespace="ns", kube=fake)
    return scheduler


def test_schedule_describe_cancel_delete(volcano: Any, fake: FakeKube) -> None:
    info = volcano.submit_dryrun(app(), {"queue": "q", "validate_spec": True})
    app_id = volcano.schedule(info)
    assert app_id == info.request.app_id
    assert [c[0] for c in fake.calls] == ["get-cluster", "create", "create"]
    assert fake.calls[1][3] == "dry"  # server-side validation first
    assert volcano.describe(app_id).state is AppState.SUBMITTED
    assert volcano.describe("ns:missing") is None

    job = set_phase(fake, app_id, "Running")
    volcano.cancel(app_id)
    command = next(o for (plural, _, _), o in fake.objects.items() if plural == "commands")
    assert command["action"] == "AbortJob"
    assert command["target"] == {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"],
        "controller": True,
    }

    set_phase(fake, app_id, "Aborted")
    fake.calls.clear()
    volcano.cancel(app_id)  # finished: nothing to do
    assert [c[0] for c in fake.calls] == ["get", "get"]
    volcano.delete(app_id)
    assert volcano.describe(app_id) is None
    volcano.delete(app_id)  # idempotent


def test_a_queue_that_does_not_exist_or_is_closed_is_refused_before_anything_is_created(
    volcano: Any, fake: FakeKube
) -> None:
    fake.cluster_objects = {("queues", "open"): {"status": {"state": "Open"}}}
    fake.cluster_objects[("queues", "shut")] = {"status": {"state": "Closed"}}
    for queue, why in (("nope", "does not exist"), ("shut", "is Closed and admits no new job")):
        # what a retry cannot heal: AppConfigurationError, as the docs' retry section says
        with pytest.raises(AppConfigurationError, match=why) as raised:
            volcano.schedule(volcano.submit_dryrun(app(), {"queue": queue}))
        assert "run option queue" in str(raised.value)
        assert str(raised.value).endswith("(nothing was submitted)")
    assert not [c for c in fake.calls if c[0] == "create"]
    assert volcano.schedule(volcano.submit_dryrun(app(), {"queue": "open"}))
    # A Role that may not read queues (they are cluster-scoped): Volcano decides.
    fake.cluster_objects = None
    assert volcano.schedule(volcano.submit_dryrun(app(), {"queue": "nope"}))


async def test_the_async_face_checks_the_queue_and_validates_with_a_dry_run(
    fake: FakeKube,
) -> None:
    """The triggerer's client creates through the same core: the queue check and the
    server-side dry run (``validate_spec``) work there too."""
    from torchx_provider.schedulers.kube.core import KubeCore
    from torchx_provider.schedulers.kube.volcano.translation import VolcanoTranslation

    scheduler = create_scheduler("s", namespace="ns")
    request = scheduler.submit_dryrun(app(), {"queue": "q", "validate_spec": True}).request
    fake.cluster_objects = {}
    core = KubeCore(VolcanoTranslation(), FakeAsyncKube(fake))
    with pytest.raises(AppConfigurationError, match="does not exist"):
        await core.create(request)
    fake.cluster_objects = {("queues", "q"): {"status": {"state": "Open"}}}
    await core.create(request)
    assert [c[3] for c in fake.calls if c[0] == "create"] == ["dry", ""]


def test_a_job_volcano_gives_no_status_is_said_once_with_its_usual_cause(
    volcano: Any, fake: FakeKube
) -> None:
    app_id = volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"}))
    job = fake.objects[("jobs", "ns", app_id.split(":")[1])]
    job["metadata"]["creationTimestamp"] = format_timestamp(datetime.now(timezone.utc))
    assert volcano.describe(app_id).state is AppState.SUBMITTED
    assert volcano.core.take_notices() == []  # Volcano has not had the time yet
    old = datetime.now(timezone.utc) - timedelta(seconds=45)
    job["metadata"]["creationTimestamp"] = format_timestamp(old)
    for _ in range(3):
        volcano.describe(app_id)
    notices = [n.text for n in volcano.core.take_notices()]
    assert len(notices) == 1, notices
    assert "no status 45s after it was created; usually its queue 'q' does not exist" in notices[0]
    set_phase(fake, app_id, "Pending")
    volcano.describe(app_id)
    assert volcano.core.take_notices() == []


def test_list_and_find_apps(volcano: Any, fake: FakeKube) -> None:
    key = TaskInstanceKey("dag", "task", "manual__2024-05-01T10:00:00+00:00", 0, 1)
    first = volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"}, ti_key=key))
    second = volcano.schedule(
        volcano.submit_dryrun(
            app(), {"queue": "q"}, ti_key=key.__class__(**{**key.__dict__, "try_number": 2})
        )
    )
    other = volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"}))
    set_phase(fake, first, "Failed")
    listed = {r.app_id: r for r in volcano.list()}
    assert set(listed) == {first, second, other}
    assert listed[first].state is AppState.FAILED
    assert listed[first].app_handle == f"kubernetes://s/{first}"
    assert ("list", "jobs", "app.kubernetes.io/managed-by=airflow-provider-torchx") in fake.calls
    found = volcano.find_apps(key)
    assert [f.app_id for f in found] == [second, first]  # newest first, any try
    assert volcano.find_live_app(key) == second


def test_find_apps_searches_the_namespace_the_task_submitted_to(
    volcano: Any, fake: FakeKube
) -> None:
    """A job submitted with the ``namespace`` run option is outside the client's default
    namespace: a retry finds it only if it searches there too (else it submits again)."""
    key = TaskInstanceKey("dag", "task", "manual__2024-05-01T10:00:00+00:00", 0, 1)
    job = volcano.schedule(
        volcano.submit_dryrun(app(), {"queue": "q", "namespace": "team"}, ti_key=key)
    )
    assert job.startswith("team:")
    assert volcano.find_live_app(key) is None  # the default namespace "ns" only
    assert volcano.find_live_app(key, ["team"]) == job
    here = volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"}, ti_key=key))
    fake.calls.clear()
    found = volcano.find_apps(key, ["team", "ns", "team"])
    assert [f.app_id for f in found] == [here, job]  # both namespaces, newest first
    assert [c for c in fake.calls if c[0] == "list"] == [("list", "jobs", key.selector())] * 2


def test_find_apps_skips_a_later_namespace_it_may_not_list(fake: FakeKube) -> None:
    scheduler = create_scheduler("s", namespace="default-ns", kube=fake)
    key = TaskInstanceKey("dag", "task", "run", -1, 1)
    job = scheduler.schedule(
        scheduler.submit_dryrun(app(), {"queue": "q", "namespace": "team"}, ti_key=key)
    )
    fake.forbidden = {"default-ns"}
    assert scheduler.find_live_app(key, ["team"]) == job
    with pytest.raises(BackendUnavailableError):  # where the task submits: not skipped
        scheduler.find_apps(key)
    fake.forbidden = {"team"}
    with pytest.raises(BackendUnavailableError):
        scheduler.find_apps(key, ["team"])


def test_an_app_whose_pods_may_not_be_listed_is_described_from_its_object(
    volcano: Any, fake: FakeKube
) -> None:
    """Without ``list`` on pods the app's state still comes from its own object; what is
    missing is said once, not ridden out as an outage."""
    app_id = volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"}))
    add_pod(fake, set_phase(fake, app_id, "Running"), 0, "Running")
    fake.pods_forbidden = True
    assert volcano.describe(app_id).state is AppState.RUNNING
    set_phase(fake, app_id, "Completed")  # once ended, the pods are read for exit codes
    for _ in range(2):
        assert volcano.describe(app_id).state is AppState.SUCCEEDED
    notices = [n.text for n in volcano.core.take_notices()]
    assert len(notices) == 1, notices
    assert "cannot be read: its state is followed" in notices[0]
    assert "pods is forbidden" in notices[0]
    assert volcano.core.take_notices() == []


def test_log_iter_bounds_filters_and_picks_the_replica(volcano: Any, fake: FakeKube) -> None:
    app_id = volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"}))
    job = set_phase(fake, app_id, "Running")
    add_pod(fake, job, 0, "Running", ["zero"])
    add_pod(fake, job, 1, "Succeeded", ["a", "b", "c", "d"])
    assert list(volcano.log_iter(app_id, "my-role", 1)) == ["a\n", "b\n", "c\n", "d\n"]
    assert list(volcano.log_iter(app_id, "my-role", 0)) == ["zero\n"]
    assert list(
        volcano.log_iter(
            app_id, "my-role", 1, since=T0 + timedelta(seconds=1), until=T0 + timedelta(seconds=2)
        )
    ) == ["b\n", "c\n"]
    assert list(volcano.log_iter(app_id, "my-role", 1, regex="[cd]")) == ["c\n", "d\n"]
    # A finished pod is read, not followed, even with should_tail.
    assert list(volcano.log_iter(app_id, "my-role", 1, should_tail=True))[-1] == "d\n"
    assert fake.calls[-1][-1] == "None"
    assert list(volcano.log_iter(app_id, "other-role", 0)) == []
    with pytest.raises(InvalidOptionError):
        volcano.log_iter(app_id, "my-role", 0, streams="both")
    with pytest.raises(InvalidOptionError):
        volcano.log_iter(app_id, "my-role", 0, since=datetime(2024, 1, 1))


def test_tail_waits_for_the_pod_until_the_app_ends(
    volcano: Any, fake: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torchx_provider.schedulers.kube.scheduler as scheduler_module

    app_id = volcano.schedule(volcano.submit_dryrun(app(1), {"queue": "q"}))
    job = set_phase(fake, app_id, "Pending")
    sleeps = []

    def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            add_pod(fake, job, 0, "Running", ["late"])

    monkeypatch.setattr(scheduler_module.time, "sleep", fake_sleep)
    assert list(volcano.log_iter(app_id, "my-role", 0, should_tail=True)) == ["late\n"]
    assert fake.calls[-1][-1] == "True"  # followed
    set_phase(fake, app_id, "Failed")
    fake.pod_list.clear()
    assert list(volcano.log_iter(app_id, "my-role", 0, should_tail=True)) == []


def test_workspace_images_are_built_then_used(
    volcano: Any, fake: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torchx_provider.schedulers.workspace as workspace

    built = []

    def fake_build(ws: str, base: str, *, image_repo: str | None = None, **kw: Any) -> str:
        built.append((ws, base, image_repo))
        return f"{image_repo}:deadbeef"

    monkeypatch.setattr(workspace, "build_workspace_image", fake_build)
    a = app()
    a.roles[0].workspace = "./project"
    app_id = volcano.schedule(volcano.submit_dryrun(a, {"queue": "q", "image_repo": "reg.io/x"}))
    assert built == [("./project", "i", "reg.io/x")]
    ns, name = app_id.split(":")
    images = {
        t["template"]["spec"]["containers"][0]["image"]
        for t in fake.objects[("jobs", ns, name)]["spec"]["tasks"]
    }
    assert images == {"reg.io/x:deadbeef"}


def test_mcad_falls_back_to_the_legacy_group_and_cancel_deletes() -> None:
    fake = FakeKube(unserved={"workload.codeflare.dev"})
    scheduler = mcad_scheduler("s", namespace="ns", kube=fake)
    info = scheduler.submit_dryrun(app(), {"api_group": "mcad.ibm.com"})
    app_id = scheduler.schedule(info)
    ns, name = app_id.split(":")
    fake.objects[("appwrappers", ns, name)]["status"] = {"state": "Running"}
    resp = scheduler.describe(app_id)
    assert resp is not None and resp.state is AppState.RUNNING
    assert [r.state for r in resp.roles_statuses[0].replicas] == [AppState.PENDING] * 2
    scheduler.cancel(app_id)
    assert ("delete", "mcad.ibm.com", name) in fake.calls
    assert scheduler.describe(app_id) is None


def test_mcad_apps_are_found_under_either_group_when_both_are_served() -> None:
    """A cluster serving both AppWrapper groups: an app created under the legacy group
    (``api_group``) is described, listed, found and deleted there, not reported missing."""
    fake = FakeKube()
    scheduler = mcad_scheduler("s", namespace="ns", kube=fake)
    key = TaskInstanceKey("dag", "task", "run", -1, 1)
    current = scheduler.schedule(scheduler.submit_dryrun(app(), {}, ti_key=key))
    legacy = scheduler.schedule(
        scheduler.submit_dryrun(app(), {"api_group": "mcad.ibm.com"}, ti_key=key)
    )
    # knows nothing of how they were created
    other = mcad_scheduler("s", namespace="ns", kube=fake)
    assert other.describe(current) is not None
    fake.calls.clear()
    assert other.describe(legacy) is not None
    name = legacy.split(":")[1]
    gets = [c for c in fake.calls if c[0] == "get"]
    assert gets == [("get", "workload.codeflare.dev", name), ("get", "mcad.ibm.com", name)]
    fake.calls.clear()
    assert other.describe(legacy) is not None  # remembered: one look
    assert [c for c in fake.calls if c[0] == "get"] == [("get", "mcad.ibm.com", name)]
    assert {f.app_id for f in other.find_apps(key)} == {current, legacy}
    assert {a.app_id for a in other.list()} == {current, legacy}
    other.cancel(legacy)  # MCAD cancels by deleting, in the app's own group
    assert ("delete", "mcad.ibm.com", name) in fake.calls
    assert other.describe(legacy) is None
    assert other.describe(current) is not None
    assert other.describe("ns:missing") is None


def test_unserved_everywhere_is_a_backend_error() -> None:
    fake = FakeKube(unserved={"workload.codeflare.dev", "mcad.ibm.com"})
    scheduler = mcad_scheduler("s", namespace="ns", kube=fake)
    with pytest.raises(BackendUnavailableError):
        scheduler.describe("ns:x")


# ---------------------------------------------------------------------------------------------
# Async


async def test_async_client_follows_the_same_app(volcano: Any, fake: FakeKube) -> None:
    app_id = volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"}))
    job = set_phase(fake, app_id, "Running")
    pod = add_pod(fake, job, 0, "Running", ["a", "b"])
    client = create_async_client(namespace="ns", kube=FakeAsyncKube(fake))
    resp = await client.describe(app_id)
    assert resp == volcano.describe(app_id)
    lines, cursor = await client.read_logs(app_id, "my-role", 0, LogCursor())
    assert [line.text for line in lines] == ["a\n", "b\n"]
    assert cursor.since == T0 + timedelta(seconds=1)
    fake.logs[pod] += f"{format_timestamp(T0 + timedelta(seconds=1))} c\n".encode()
    lines, cursor2 = await client.read_logs(app_id, "my-role", 0, cursor)
    assert [line.text for line in lines] == ["c\n"]
    assert cursor2.seen_at_since == 2
    assert (await client.read_logs(app_id, "my-role", 1, LogCursor())) == ([], LogCursor())
    await client.cancel(app_id)
    assert any(plural == "commands" for (plural, _, _) in fake.objects)
    assert await client.describe("ns:gone") is None
    await client.close()


async def test_async_mcad_cancel_deletes() -> None:
    fake = FakeKube()
    scheduler = mcad_scheduler("s", namespace="ns", kube=fake)
    app_id = scheduler.schedule(scheduler.submit_dryrun(app(), {}))
    client = mcad_async_client(namespace="ns", kube=FakeAsyncKube(fake))
    await client.cancel(app_id)
    assert await client.describe(app_id) is None


# ---------------------------------------------------------------------------------------------
# Both faces alike


async def test_both_faces_read_a_restarting_container_as_no_log_yet(
    volcano: Any, fake: FakeKube
) -> None:
    app_id = volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"}))
    job = set_phase(fake, app_id, "Running")
    restarting = add_pod(fake, job, 0, "Running", ["old"])
    rejected = add_pod(fake, job, 1, "Running", ["x"])
    fake.log_errors.update({restarting: 400, rejected: 422})
    client = create_async_client(namespace="ns", kube=FakeAsyncKube(fake))

    assert list(volcano.log_iter(app_id, "my-role", 0)) == []
    assert (await client.read_logs(app_id, "my-role", 0, LogCursor())) == ([], LogCursor())
    with pytest.raises(SubmissionError):
        list(volcano.log_iter(app_id, "my-role", 1))
    with pytest.raises(SubmissionError):
        await client.read_logs(app_id, "my-role", 1, LogCursor())


async def test_both_faces_list_and_find_the_same_apps(volcano: Any, fake: FakeKube) -> None:
    key = TaskInstanceKey("dag", "task", "manual__2024-05-01T10:00:00+00:00", 0, 1)
    first = volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"}, ti_key=key))
    second = volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"}, ti_key=key))
    volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"}))
    client = create_async_client(namespace="ns", kube=FakeAsyncKube(fake))

    assert await client.list("s") == volcano.list()
    found = await client.find_apps(key, "s")
    assert found == volcano.find_apps(key)
    assert [f.app_id for f in found] == [second, first]


def test_run_sync_refuses_an_operation_that_waits() -> None:
    from torchx_provider.schedulers.kube.io import run_sync

    class Suspends:
        def __await__(self) -> Iterator[None]:
            yield None

    async def waits() -> None:
        await Suspends()

    with pytest.raises(RuntimeError, match="waited"):
        run_sync(waits())


def test_a_long_lived_core_remembers_a_bounded_number_of_homes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torchx_provider.schedulers.kube import core as core_module

    monkeypatch.setattr(core_module, "HOMES_KEPT", 3)
    fake = FakeKube()
    volcano = create_scheduler("s", namespace="ns", kube=fake)
    app_ids = [volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"})) for _ in range(5)]
    reader = create_scheduler("s", namespace="ns", kube=fake)  # finds them by reading
    for app_id in app_ids:
        assert reader.describe(app_id) is not None
    reader.describe(app_ids[2])  # found again: most recent
    names = [("ns", app_id.split(":")[1]) for app_id in app_ids]
    assert list(reader.core.homes) == [names[3], names[4], names[2]]
