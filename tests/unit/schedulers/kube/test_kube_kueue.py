"""Why an AppWrapper waits under Kueue, and that it was preempted, from its Workload: the
pure reading of the Workload's conditions, and both faces saying each reason once (the
triggerer from one shared watch of the namespace's Workloads)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kube_fakes import FakeAsyncKube, FakeKube, add_local_queue
from torchx_provider import specs
from torchx_provider.errors import BackendConfigurationError, BackendUnavailableError
from torchx_provider.schedulers.kube.appwrapper import create_async_client, create_scheduler
from torchx_provider.schedulers.kube.hub import InformerHub
from torchx_provider.schedulers.kube.kueue import (
    JOB_UID_LABEL,
    evictions,
    never_fits,
    owner_name,
    preemptor_uid,
    waits_for_admission,
    workload_waits,
)
from torchx_provider.schedulers.kube.resources import (
    KUEUE_LOCAL_QUEUE,
    KUEUE_WORKLOAD,
    OwnedBy,
    QueuedIn,
)
from torchx_provider.specs.api import AppState

PENDING = (
    "couldn't assign flavors to pod set w-0: insufficient unused quota for cpu in flavor "
    "default, 1 more needed"
)
TOO_BIG = (
    "couldn't assign flavors to pod set w-0: insufficient quota for cpu in flavor default, "
    "previously considered podsets requests (0) + current podset request (8) > maximum "
    "capacity (4)"
)
PREEMPTED = (
    "Preempted to accommodate a workload (UID: w-high, JobUID: "
    "0d8e8a1c-1111-2222-3333-444455556666) due to prioritization in the ClusterQueue"
)


def cond(kind: str, status: str, reason: str, message: str, when: str = "t1") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": when,
    }


def workload(*conditions: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "appwrapper-a-1", "uid": "w1"},
        "status": {"conditions": list(conditions), **status},
    }


def texts(wl: dict[str, Any], **kw: Any) -> list[str]:
    return [w.text for w in workload_waits(wl, **kw)]


def test_waiting_for_quota_is_said_in_kueues_words() -> None:
    assert texts(workload(cond("QuotaReserved", "False", "Pending", PENDING))) == [
        f"Kueue workload appwrapper-a-1 waits for quota: Pending: {PENDING}"
    ]


def test_a_request_larger_than_the_queue_is_never_admissible() -> None:
    too_big = cond("QuotaReserved", "False", "Pending", TOO_BIG)
    assert never_fits(too_big)
    [text] = texts(workload(too_big))
    assert text.startswith("Kueue workload appwrapper-a-1 can never be admitted")
    assert "maximum capacity (4)" in text
    assert not never_fits(cond("QuotaReserved", "False", "Pending", PENDING))


@pytest.mark.parametrize(
    "condition",
    [
        cond("QuotaReserved", "False", "Pending", TOO_BIG),
        cond("QuotaReserved", "False", "Pending", PENDING),
        cond("QuotaReserved", "False", "Inadmissible", TOO_BIG),
        cond("QuotaReserved", "True", "Pending", TOO_BIG),
        # a long message whose "maximum capacity" comes after what the task log shows
        cond("QuotaReserved", "False", "Pending", "x" * 600 + " " + TOO_BIG),
    ],
)
def test_the_task_log_says_never_admitted_exactly_when_the_rule_says_so(
    condition: dict[str, Any],
) -> None:
    said = any("can never be admitted" in text for text in texts(workload(condition)))
    assert said is never_fits(condition)


def test_inadmissible_names_the_missing_or_inactive_queue() -> None:
    for message in ("LocalQueue nope doesn't exist", "ClusterQueue cq is inactive"):
        wl = workload(cond("QuotaReserved", "False", "Inadmissible", message))
        assert texts(wl) == [
            f"Kueue workload appwrapper-a-1 cannot be admitted: Inadmissible: {message}"
        ]


def test_a_preemption_names_the_preemptor_followed_here_and_is_not_a_failure() -> None:
    wl = workload(
        cond("QuotaReserved", "False", "Preempted", PREEMPTED, when="t2"),
        cond("Evicted", "True", "Preempted", PREEMPTED, when="t2"),
        cond("Preempted", "True", "InClusterQueue", PREEMPTED, when="t2"),
    )
    [evicted] = texts(wl, app_of={"0d8e8a1c-1111-2222-3333-444455556666": "high-x1"}.get)
    assert evicted.startswith(
        f"Kueue workload appwrapper-a-1 was preempted: InClusterQueue: {PREEMPTED}"
    )
    assert "(the preemptor is app high-x1)" in evicted
    assert "not failed" in evicted
    # the requeued Workload's QuotaReserved=False repeats the eviction's words: said once
    # a preemptor this process does not follow is left as Kueue names it
    assert "preemptor is app" not in texts(wl)[0]
    assert preemptor_uid("no uid here") is None


def test_other_evictions_and_the_admission_are_said() -> None:
    wl = workload(
        cond("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout", "t1"),
        cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq", "t2"),
    )
    assert texts(wl) == [
        "Kueue workload appwrapper-a-1 was evicted: PodsReadyTimeout: Exceeded the PodsReady "
        "timeout; the app is suspended and requeued",
        "Kueue workload appwrapper-a-1 admitted: QuotaReserved: Quota reserved in ClusterQueue cq",
    ]
    # the eviction asks for attention; the admission is news that the wait is over
    assert [w.warning for w in workload_waits(wl)] == [True, False]


def test_each_reason_is_keyed_by_its_transition_and_message() -> None:
    first = workload_waits(workload(cond("QuotaReserved", "False", "Pending", PENDING)))[0]
    same = workload_waits(workload(cond("QuotaReserved", "False", "Pending", PENDING)))[0]
    more = workload_waits(
        workload(cond("QuotaReserved", "False", "Pending", PENDING.replace("1 more", "2 more")))
    )[0]
    later = workload_waits(workload(cond("QuotaReserved", "False", "Pending", PENDING, "t9")))[0]
    assert first.key == same.key
    assert len({first.key, more.key, later.key}) == 3


def test_a_finished_workload_says_nothing_and_evictions_are_counted() -> None:
    done = workload(
        cond("QuotaReserved", "True", "QuotaReserved", "ok"), cond("Finished", "True", "x", "")
    )
    assert texts(done) == []
    counted = workload(schedulingStats={"evictions": [{"reason": "Preempted", "count": 2}]})
    assert evictions(counted) == 2
    assert evictions(workload()) == 0
    assert owner_name({"metadata": {}}, "AppWrapper") is None


# -- both faces ---------------------------------------------------------------------------------


def app() -> specs.AppDef:
    role = specs.Role(
        "w", image="img", entrypoint="python", resource=specs.Resource(cpu=1, gpu=0, memMB=64)
    )
    return specs.AppDef("a", [role])


def pending_workload(kind: str, owner: dict[str, Any], message: str) -> dict[str, Any]:
    """Kueue's Workload ``{kind}-{name}-1`` (uid ``w1``) of the ``owner`` object, of kind
    ``kind``, with no quota reserved: ``QuotaReserved`` False (``Pending``) with ``message``."""
    name = owner["metadata"]["name"]
    return {
        "apiVersion": KUEUE_WORKLOAD.api_version,
        "kind": "Workload",
        "metadata": {
            "name": f"{kind.lower()}-{name}-1",
            "uid": "w1",
            "labels": {JOB_UID_LABEL: owner["metadata"]["uid"]},
            "ownerReferences": [{"kind": kind, "name": name, "controller": True}],
        },
        "status": {"conditions": [cond("QuotaReserved", "False", "Pending", message)]},
    }


def queued(fake: FakeKube) -> tuple[str, dict[str, Any]]:
    """An AppWrapper of a LocalQueue, and the Workload Kueue made for it (over quota)."""
    aws = create_scheduler("s", namespace="ns", kube=fake)
    add_local_queue(fake)
    app_id = aws.schedule(aws.submit_dryrun(app(), {"local_queue": "lq"}))
    _, name = app_id.split(":")
    obj = fake.objects[("appwrappers", "ns", name)]
    obj["status"] = {"phase": "Suspended"}
    wl = pending_workload("AppWrapper", obj, PENDING)
    stranger = copy.deepcopy(wl)
    stranger["metadata"].update(
        name="appwrapper-other-1",
        uid="w2",
        labels={JOB_UID_LABEL: "other"},
        ownerReferences=[{"kind": "AppWrapper", "name": "other", "controller": True}],
    )
    fake.objects[("workloads", "ns", wl["metadata"]["name"])] = wl
    fake.objects[("workloads", "ns", "appwrapper-other-1")] = stranger
    return app_id, wl


def test_the_worker_lists_the_apps_workload_by_its_uid_and_says_it_once() -> None:
    fake = FakeKube()
    aws = create_scheduler("s", namespace="ns", kube=fake)
    app_id, wl = queued(fake)
    for _ in range(3):
        resp = aws.describe(app_id)
        assert resp is not None and resp.state is AppState.PENDING
    uid = wl["metadata"]["labels"][JOB_UID_LABEL]
    assert [c for c in fake.calls if c[:2] == ("list", "workloads")] == [
        ("list", "workloads", f"{JOB_UID_LABEL}={uid}")
    ] * 3
    assert [n.text for n in aws.core.take_notices()] == [
        f"Kueue workload {wl['metadata']['name']} waits for quota: Pending: {PENDING}"
    ]


def test_the_worker_reads_no_workload_of_an_app_without_a_queue() -> None:
    fake = FakeKube()
    aws = create_scheduler("s", namespace="ns", kube=fake)
    app_id = aws.schedule(aws.submit_dryrun(app(), {}))
    aws.describe(app_id)
    assert not [c for c in fake.calls if c[:2] == ("list", "workloads")]


async def test_the_triggerer_reads_workloads_from_one_shared_watch() -> None:
    fake = FakeKube()
    app_id, wl = queued(fake)
    wl["status"]["schedulingStats"] = {"evictions": [{"reason": "Preempted", "count": 1}]}
    hub = InformerHub.current()
    client = create_async_client(namespace="ns", kube=FakeAsyncKube(fake))
    try:
        for _ in range(3):
            resp = await client.describe(app_id)
            assert resp is not None and resp.evictions == 1
        texts = [n.text for n in client.take_notices()]
        shared = [s for k, s in hub.informers.items() if isinstance(k[2], OwnedBy)]
        assert len(shared) == 1
        # the namespace's Workloads, kept by their owner's name
        assert sorted(shared[0].informer.groups) == sorted([app_id.split(":")[1], "other"])
    finally:
        await client.close()
        await hub.close()
    assert texts == [f"Kueue workload {wl['metadata']['name']} waits for quota: Pending: {PENDING}"]
    assert not [c for c in fake.calls if c[:2] == ("list", "workloads") and c[2]]


def refusing(fake: FakeKube, error: Exception) -> None:
    """``fake`` answers every list of Workloads with ``error``."""
    fake.list_errors["workloads"] = error


async def test_a_refused_workload_watch_is_quiet() -> None:
    fake = FakeKube()
    app_id, _ = queued(fake)
    # the account may read AppWrappers and pods, not Workloads
    refusing(fake, BackendConfigurationError("workloads is forbidden", status=403))
    hub = InformerHub.current()
    client = create_async_client(namespace="ns", kube=FakeAsyncKube(fake))
    try:
        resp = await client.describe(app_id)
        assert resp is not None and resp.state is AppState.PENDING
        assert client.take_notices() == []
    finally:
        await client.close()
        await hub.close()


def test_the_worker_skips_workloads_it_may_not_read_or_the_cluster_does_not_serve() -> None:
    for refusal in (
        BackendConfigurationError("workloads is forbidden", status=403),
        BackendUnavailableError("the server could not find the requested resource", status=404),
    ):
        fake = FakeKube()
        app_id, _ = queued(fake)
        refusing(fake, refusal)
        aws = create_scheduler("s", namespace="ns", kube=fake)
        resp = aws.describe(app_id)
        assert resp is not None and resp.state is AppState.PENDING and resp.evictions == -1
        assert aws.core.take_notices() == []


def test_a_jobset_of_a_local_queue_reads_its_workload_the_same_way() -> None:
    from torchx_provider.schedulers.kube import jobset

    fake = FakeKube()
    js = jobset.create_scheduler("s", namespace="ns", kube=fake)
    add_local_queue(fake)
    app_id = js.schedule(js.submit_dryrun(app(), {"local_queue": "lq"}))
    name = app_id.split(":")[1]
    obj = fake.objects[("jobsets", "ns", name)]
    fake.objects[("workloads", "ns", f"jobset-{name}-1")] = pending_workload("JobSet", obj, TOO_BIG)
    js.describe(app_id)
    [text] = [n.text for n in js.core.take_notices()]
    assert text.startswith(f"Kueue workload jobset-{name}-1 can never be admitted")


# ------------------------------------------------------------------ the LocalQueue's counts
def local_queue(pending: int, admitted: int, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_LOCAL_QUEUE.api_version,
        "kind": "LocalQueue",
        "metadata": {"name": "lq", "namespace": "ns"},
        "spec": {"clusterQueue": "cq"},
        "status": {"pendingWorkloads": pending, "admittedWorkloads": admitted, **status},
    }


def test_a_workload_waiting_for_quota_says_what_waits_in_its_local_queue_when_said() -> None:
    wl = workload(cond("QuotaReserved", "False", "Pending", PENDING))
    [wait] = workload_waits(wl, queue=local_queue(3, 1))
    assert wait.text == (
        f"Kueue workload appwrapper-a-1 waits for quota: Pending: {PENDING}; "
        "LocalQueue lq holds 3 pending workloads, 1 admitted"
    )
    # the counts move with other people's work: the same reason, not said again
    assert workload_waits(wl, queue=local_queue(7, 0))[0].key == wait.key
    assert workload_waits(wl)[0].key == wait.key
    inactive = local_queue(
        0,
        0,
        conditions=[cond("Active", "False", "ClusterQueueDoesNotExist", "Can't submit")],
    )
    inadmissible = workload(
        cond("QuotaReserved", "False", "Inadmissible", "ClusterQueue cq is inactive")
    )
    assert texts(inadmissible, queue=inactive) == [
        "Kueue workload appwrapper-a-1 cannot be admitted: Inadmissible: ClusterQueue cq is "
        "inactive; LocalQueue lq is inactive: ClusterQueueDoesNotExist: Can't submit"
    ]
    # admitted, evicted or never admissible: the queue's counts are not said
    admitted = workload(cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved"))
    assert "LocalQueue" not in texts(admitted, queue=local_queue(3, 1))[0]
    assert not waits_for_admission(admitted) and waits_for_admission(wl)
    too_big = workload(cond("QuotaReserved", "False", "Pending", TOO_BIG))
    assert "LocalQueue" not in texts(too_big, queue=local_queue(3, 1))[0]


def test_the_worker_reads_the_local_queue_only_while_its_workload_waits() -> None:
    fake = FakeKube()
    aws = create_scheduler("s", namespace="ns", kube=fake)
    app_id, wl = queued(fake)
    fake.objects[("localqueues", "ns", "lq")] = local_queue(2, 5)
    fake.calls.clear()  # the LocalQueue read before submission
    for _ in range(2):
        aws.describe(app_id)
    assert [c for c in fake.calls if c[:2] == ("get", "kueue.x-k8s.io")] == [
        ("get", "kueue.x-k8s.io", "lq")
    ] * 2
    assert [n.text for n in aws.core.take_notices()] == [
        f"Kueue workload {wl['metadata']['name']} waits for quota: Pending: {PENDING}; "
        "LocalQueue lq holds 2 pending workloads, 5 admitted"
    ]
    wl["status"]["conditions"] = [cond("QuotaReserved", "True", "QuotaReserved", "ok", "t2")]
    fake.calls.clear()
    aws.describe(app_id)
    assert not [c for c in fake.calls if c[:2] == ("get", "kueue.x-k8s.io")]


async def test_the_triggerer_reads_local_queues_from_one_watch_quiet_when_refused() -> None:
    for refused in (False, True):
        fake = FakeKube()
        app_id, wl = queued(fake)
        fake.objects[("localqueues", "ns", "lq")] = local_queue(1, 0)
        fake.calls.clear()  # the LocalQueue read before submission
        if refused:
            fake.forbidden_plurals = {"localqueues"}
        hub = InformerHub.current()
        client = create_async_client(namespace="ns", kube=FakeAsyncKube(fake))
        try:
            for _ in range(2):
                await client.describe(app_id)
            said = [n.text for n in client.take_notices()]
            shared = [s for k, s in hub.informers.items() if isinstance(k[2], QueuedIn)]
            assert len(shared) == 1
        finally:
            await client.close()
            await hub.close()
        assert not [c for c in fake.calls if c[:2] == ("get", "kueue.x-k8s.io")]
        summary = "" if refused else "; LocalQueue lq holds 1 pending workload, 0 admitted"
        assert said == [
            f"Kueue workload {wl['metadata']['name']} waits for quota: Pending: {PENDING}{summary}"
        ]


# ------------------------------------------------------------------ a LocalQueue that stops
INACTIVE = cond(
    "Active", "False", "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue", "t9"
)


def test_a_cluster_queue_stopped_while_a_job_waits_is_said_from_its_local_queue() -> None:
    """Kueue updates the LocalQueue of a stopped ClusterQueue at once but may leave the
    waiting Workload's last reason (no quota) standing: the LocalQueue's own ``Active``
    condition is said, once, naming its ClusterQueue."""
    fake = FakeKube()
    aws = create_scheduler("s", namespace="ns", kube=fake)
    app_id, _ = queued(fake)
    fake.objects[("localqueues", "ns", "lq")] = local_queue(1, 0)
    aws.describe(app_id)
    [first] = [n.text for n in aws.core.take_notices()]
    assert first.endswith("LocalQueue lq holds 1 pending workload, 0 admitted"), first
    fake.objects[("localqueues", "ns", "lq")] = local_queue(1, 0, conditions=[INACTIVE])
    for _ in range(2):
        aws.describe(app_id)
    assert [n.text for n in aws.core.take_notices()] == [
        "Kueue LocalQueue lq (ClusterQueue cq) admits no workload: ClusterQueueIsInactive: "
        "Can't submit new workloads to clusterQueue; the app waits until an administrator "
        "makes it active again, or cancel it and name another LocalQueue in run option "
        "local_queue"
    ]


async def test_the_triggerer_says_a_stopped_local_queue_from_its_watch() -> None:
    fake = FakeKube()
    app_id, _ = queued(fake)
    fake.objects[("localqueues", "ns", "lq")] = local_queue(1, 0, conditions=[INACTIVE])
    hub = InformerHub.current()
    client = create_async_client(namespace="ns", kube=FakeAsyncKube(fake))
    try:
        await client.describe(app_id)
        said = [n.text for n in client.take_notices()]
    finally:
        await client.close()
        await hub.close()
    assert any(t.startswith("Kueue LocalQueue lq (ClusterQueue cq) admits no") for t in said), said
