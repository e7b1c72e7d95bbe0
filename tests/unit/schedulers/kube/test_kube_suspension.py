"""Kueue's hold on what a task cancels and on what it submits: a cancel by suspension
deactivates the Workload first (or deletes, saying why, where it cannot), an app a task
cancelled is never followed again, and a LocalQueue that does not exist is refused before
anything is created -- or, where it cannot be read, given up after the start grace."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kube_fakes import FakeAsyncKube, FakeKube, add_local_queue
from torchx_provider import specs
from torchx_provider.errors import AppConfigurationError, BackendConfigurationError
from torchx_provider.schedulers.kube import appwrapper, jobset
from torchx_provider.schedulers.kube.kueue import JOB_UID_LABEL
from torchx_provider.schedulers.kube.resources import KUEUE_WORKLOAD
from torchx_provider.schedulers.kube.suspension import ANNOTATION_CANCELLED, cancel_action
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import replica_rows
from torchx_provider.triggers.policy import START_GRACE, cannot_start, waiting_on_configuration

BACKENDS = {"jobsets": jobset, "appwrappers": appwrapper}
RUNNING = {
    "jobsets": {"restarts": 0, "replicatedJobsStatus": [{"name": "trainer-0", "ready": 1}]},
    "appwrappers": {"phase": "Running"},
}
KEY = TaskInstanceKey("d", "t", "r", -1, 1)


def app() -> specs.AppDef:
    return specs.AppDef("a", [specs.Role("trainer", image="img", entrypoint="x", num_replicas=1)])


def submitted(fake: FakeKube, plural: str, **cfg: Any) -> tuple[Any, str, dict[str, Any]]:
    """A scheduler of the backend storing ``plural``, the app it submitted with ``cfg``
    (running, admitted by Kueue) and its object."""
    scheduler = BACKENDS[plural].create_scheduler("s", namespace="ns", kube=fake)
    add_local_queue(fake)
    app_id = scheduler.schedule(scheduler.submit_dryrun(app(), cfg, ti_key=KEY))
    obj = fake.objects[(plural, "ns", app_id.split(":")[1])]
    obj["spec"]["suspend"] = False
    obj["status"] = dict(RUNNING[plural])
    return scheduler, app_id, obj


def add_workload(fake: FakeKube, obj: dict[str, Any]) -> dict[str, Any]:
    name = f"{obj['kind'].lower()}-{obj['metadata']['name']}-1"
    wl = {
        "apiVersion": KUEUE_WORKLOAD.api_version,
        "kind": "Workload",
        "metadata": {"name": name, "uid": "w1", "labels": {JOB_UID_LABEL: obj["metadata"]["uid"]}},
        "spec": {"active": True, "queueName": "lq"},
        "status": {"conditions": []},
    }
    fake.objects[("workloads", "ns", name)] = wl
    return wl


# -- item: a cancel that keeps the object holds under Kueue ---------------------------------------
def test_suspend_under_kueue_is_what_the_user_asked_and_holds_the_workload() -> None:
    from torchx_provider.schedulers.kube.suspension import cancel_hold

    assert cancel_action("suspend", "lq") == "suspend"
    assert cancel_action(None, "lq") == "delete"
    job = {"metadata": {"uid": "u1", "labels": {"kueue.x-k8s.io/queue-name": "lq"}}}
    hold = cancel_hold(job)
    assert hold is not None and hold.resource == KUEUE_WORKLOAD
    assert hold.patch.ops == [{"op": "add", "path": "/spec/active", "value": False}]
    assert cancel_hold({"metadata": {"uid": "u1"}}) is None  # not Kueue's: nothing to hold


@pytest.mark.parametrize("plural", sorted(BACKENDS))
def test_a_cancel_by_suspension_under_kueue_deactivates_the_workload_first(plural: str) -> None:
    fake = FakeKube()
    scheduler, app_id, obj = submitted(fake, plural, local_queue="lq", cancel_by="suspend")
    wl = add_workload(fake, obj)
    fake.calls.clear()
    scheduler.cancel(app_id)
    patches = [c[1] for c in fake.calls if c[0] == "patch"]
    assert patches == ["workloads", plural]  # the Workload first: Kueue will not admit it again
    assert wl["spec"]["active"] is False
    # Kueue suspends it on the deactivation: its own suspension could race Kueue's view of
    # the Workload still admitted (seen undone for a moment); the object is marked cancelled
    assert obj["spec"]["suspend"] is False
    assert obj["metadata"]["annotations"][ANNOTATION_CANCELLED] == "true"
    assert scheduler.describe(app_id).state is AppState.CANCELLED
    assert not scheduler.core.take_notices()


async def test_the_triggerers_cancel_holds_the_same_way() -> None:
    fake = FakeKube()
    _, app_id, obj = submitted(fake, "jobsets", local_queue="lq", cancel_by="suspend")
    wl = add_workload(fake, obj)
    client = jobset.create_async_client(namespace="ns", kube=FakeAsyncKube(fake))
    await client.cancel(app_id)
    assert wl["spec"]["active"] is False
    assert obj["metadata"]["annotations"][ANNOTATION_CANCELLED] == "true"


FORBIDDEN = (
    'workloads.kueue.x-k8s.io "w" is forbidden: User "system:serviceaccount:ns:airflow" cannot '
    'patch resource "workloads" in API group "kueue.x-k8s.io" in the namespace "ns"'
)


@pytest.mark.parametrize("why", ["no workload yet", "may not patch workloads"])
def test_a_suspension_that_would_not_hold_deletes_and_says_why(why: str) -> None:
    fake = FakeKube()
    scheduler, app_id, obj = submitted(fake, "jobsets", local_queue="lq", cancel_by="suspend")
    if why == "may not patch workloads":
        add_workload(fake, obj)
        fake.patch_errors["workloads"] = BackendConfigurationError(FORBIDDEN, status=403)
    scheduler.cancel(app_id)
    assert scheduler.describe(app_id) is None  # deleted: a suspended JobSet would run again
    [said] = [n.text for n in scheduler.core.take_notices()]
    assert said.startswith(f"app {app_id!r} is deleted rather than suspended")
    if why == "no workload yet":
        assert said.endswith("it has no Workload yet"), said
    else:
        assert 'verbs: ["patch"]' in said and "workloads" in said, said


def test_a_cancel_without_kueue_only_suspends() -> None:
    fake = FakeKube()
    scheduler, app_id, obj = submitted(fake, "jobsets")
    scheduler.cancel(app_id)
    assert [c[1] for c in fake.calls if c[0] == "patch"] == ["jobsets"]
    assert obj["spec"]["suspend"] is True


@pytest.mark.parametrize("plural", sorted(BACKENDS))
def test_an_app_a_task_cancelled_is_never_followed_again(plural: str) -> None:
    """Started again after its cancel (a suspension Kueue admitted again before the
    Workload was held): still CANCELLED, so a later try does not reattach to it."""
    fake = FakeKube()
    scheduler, app_id, obj = submitted(fake, plural, local_queue="lq", cancel_by="suspend")
    obj["metadata"].setdefault("annotations", {})[ANNOTATION_CANCELLED] = "true"
    assert obj["spec"]["suspend"] is False  # running again
    assert scheduler.describe(app_id).state is AppState.CANCELLED
    later_try = dataclasses.replace(KEY, try_number=2)
    [listed] = scheduler.find_apps(later_try, ["ns"])
    assert listed.state is AppState.CANCELLED


# -- item: a LocalQueue that does not exist -------------------------------------------------------
@pytest.mark.parametrize("plural", sorted(BACKENDS))
def test_a_local_queue_that_does_not_exist_is_refused_naming_those_of_the_namespace(
    plural: str,
) -> None:
    fake = FakeKube()
    scheduler = BACKENDS[plural].create_scheduler("s", namespace="ns", kube=fake)
    add_local_queue(fake, "team-b")
    add_local_queue(fake, "team-a")
    with pytest.raises(AppConfigurationError) as refused:
        scheduler.schedule(scheduler.submit_dryrun(app(), {"local_queue": "no-such-lq"}))
    message = str(refused.value)
    assert message.startswith("Kueue LocalQueue 'no-such-lq' does not exist in namespace 'ns'")
    assert "(its LocalQueues: team-a, team-b)" in message and "run option local_queue" in message
    assert message.endswith("(nothing was submitted)")
    assert not [c for c in fake.calls if c[0] == "create"]
    assert scheduler.schedule(scheduler.submit_dryrun(app(), {"local_queue": "team-a"}))


def test_the_local_queue_check_says_what_it_could_not_list_and_skips_what_it_cannot_read() -> None:
    fake = FakeKube()
    scheduler = jobset.create_scheduler("s", namespace="ns", kube=fake)
    fake.list_errors["localqueues"] = BackendConfigurationError("forbidden", status=403)
    with pytest.raises(AppConfigurationError, match=r"kubectl get localqueues -n ns"):
        scheduler.schedule(scheduler.submit_dryrun(app(), {"local_queue": "nope"}))
    # may not read LocalQueues at all: Kueue decides (and says so on the Workload)
    fake.forbidden_plurals = {"localqueues"}
    assert scheduler.schedule(scheduler.submit_dryrun(app(), {"local_queue": "nope"}))
    # Kueue not installed: the LocalQueue's type is not served
    fake = FakeKube(unserved={"kueue.x-k8s.io"})
    scheduler = jobset.create_scheduler("s", namespace="ns", kube=fake)
    assert scheduler.schedule(scheduler.submit_dryrun(app(), {"local_queue": "nope"}))


async def test_the_triggerers_client_refuses_it_too() -> None:
    fake = FakeKube()
    scheduler = jobset.create_scheduler("s", namespace="ns", kube=fake)
    request = scheduler.submit_dryrun(app(), {"local_queue": "nope"}).request
    client = jobset.create_async_client(namespace="ns", kube=FakeAsyncKube(fake))
    with pytest.raises(AppConfigurationError, match="does not exist"):
        await client.core.create(request)


INADMISSIBLE = {
    "type": "QuotaReserved",
    "status": "False",
    "reason": "Inadmissible",
    "message": "LocalQueue nope doesn't exist",
    "lastTransitionTime": "t1",
}


def test_unread_a_missing_local_queue_is_given_up_after_the_start_grace() -> None:
    """Without ``get`` on LocalQueues the app is submitted; Kueue then says the LocalQueue
    does not exist, and the follow gives the app up after the start grace, as configuration
    (a replica waiting for that reason), not without end."""
    fake = FakeKube()
    fake.forbidden_plurals = {"localqueues"}
    scheduler = jobset.create_scheduler("s", namespace="ns", kube=fake)
    app_id = scheduler.schedule(scheduler.submit_dryrun(app(), {"local_queue": "nope"}))
    obj = fake.objects[("jobsets", "ns", app_id.split(":")[1])]
    obj["status"] = {"conditions": [{"type": "Suspended", "status": "True"}]}
    wl = add_workload(fake, obj)
    wl["status"]["conditions"] = [INADMISSIBLE]
    from torchx_provider.schedulers.kube.kueue import missing_queue

    assert missing_queue(wl) == "Inadmissible: LocalQueue nope doesn't exist"
    resp = scheduler.describe(app_id)
    assert resp.state is AppState.PENDING
    rows = replica_rows(resp)
    assert [(r.key, r.reason, r.failure, r.message) for r in rows] == [
        (
            "trainer/0",
            "Inadmissible",
            "configuration",
            "Inadmissible: LocalQueue nope doesn't exist",
        )
    ]
    since = waiting_on_configuration({}, rows, 0.0)
    assert cannot_start(since, START_GRACE - 1, START_GRACE) is None
    assert cannot_start(since, START_GRACE, START_GRACE) == "trainer/0"
    # waiting for quota is no configuration: no limit but queue_timeout
    wl["status"]["conditions"] = [{**INADMISSIBLE, "reason": "Pending", "message": "no quota"}]
    assert not [r for r in replica_rows(scheduler.describe(app_id)) if r.failure]


@pytest.mark.parametrize("plural", sorted(BACKENDS))
def test_a_kueue_priority_without_a_local_queue_is_refused(plural: str) -> None:
    """Only Kueue reads a WorkloadPriorityClass: without local_queue it would do nothing."""
    from torchx_provider.errors import InvalidOptionError

    scheduler = BACKENDS[plural].create_scheduler("s", namespace="ns", kube=FakeKube())
    with pytest.raises(InvalidOptionError, match="set local_queue too") as refused:
        scheduler.submit_dryrun(app(), {"priority_class": "high"})
    assert refused.value.option == "priority_class"
    assert scheduler.submit_dryrun(app(), {"priority_class": "high", "local_queue": "lq"})
