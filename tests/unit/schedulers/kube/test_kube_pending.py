"""Why an app waits: the reasons read from pod status and from the Events on a Volcano job's
PodGroup, said once per reason, by both faces of a Kubernetes backend."""

from __future__ import annotations

from typing import Any

import pytest

from kube_fakes import (
    FakeAsyncKube,
    FakeKube,
    add_pod,
    app,
    job_event,
    podgroup_event,
    set_phase,
)
from torchx_provider.schedulers.kube import core as core_module
from torchx_provider.schedulers.kube.pending import COMBINED, MESSAGE_CHARS, event_waits, pod_waits
from torchx_provider.schedulers.kube.volcano import create_async_client, create_scheduler
from torchx_provider.specs.api import AppState


def pod(phase: str = "Pending", **status: Any) -> dict[str, Any]:
    """A pod whose replica runs in container ``main``, beside a sidecar ``proxy``."""
    return {
        "metadata": {"name": "p", "uid": "u"},
        "spec": {"containers": [{"name": "main"}, {"name": "proxy"}]},
        "status": {"phase": phase, **status},
    }


def unscheduled(message: str) -> dict[str, Any]:
    return {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
    }


def waiting(name: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": reason, "message": message}}}


def test_an_unscheduled_pod_says_the_schedulers_words() -> None:
    [wait] = pod_waits(
        [pod(conditions=[unscheduled("0/2 nodes are available: 2 Insufficient cpu.")])]
    )
    assert wait.text == (
        "pod p is not scheduled: Unschedulable: 0/2 nodes are available: 2 Insufficient cpu."
    )


@pytest.mark.parametrize(
    "reason",
    ["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"],
)
def test_a_sidecar_that_cannot_start_says_why(reason: str) -> None:
    status = {"containerStatuses": [waiting("proxy", reason, 'secret "s" not found')]}
    [wait] = pod_waits([pod(**status)])
    assert wait.text == f'pod p container proxy waits: {reason}: secret "s" not found'


def test_init_containers_are_read_and_routine_waits_are_not_said() -> None:
    status = {
        "initContainerStatuses": [waiting("setup", "ErrImagePull", "not found")],
        "containerStatuses": [waiting("main", "PodInitializing")],
    }
    assert [w.text for w in pod_waits([pod(**status)])] == [
        "pod p container setup waits: ErrImagePull: not found"
    ]
    assert pod_waits([pod(containerStatuses=[waiting("proxy", "ContainerCreating")])]) == []


def test_the_replicas_own_container_is_left_to_the_replica_rows() -> None:
    status = {"containerStatuses": [waiting("main", "ErrImagePull", "not found")]}
    assert pod_waits([pod(**status)]) == []
    named = pod(containerStatuses=[waiting("proxy", "ErrImagePull")])
    named["metadata"]["annotations"] = {"kubectl.kubernetes.io/default-container": "proxy"}
    assert pod_waits([named]) == []


def test_pods_that_run_or_ended_say_nothing_and_scheduled_pods_neither() -> None:
    assert pod_waits([pod("Running", conditions=[unscheduled("x")])]) == []
    assert pod_waits([pod("Failed", containerStatuses=[waiting("proxy", "ErrImagePull")])]) == []
    scheduled = {"type": "PodScheduled", "status": "True"}
    assert pod_waits([pod(conditions=[scheduled])]) == []


def test_a_changed_reason_has_another_key_and_a_long_message_is_cut() -> None:
    first = pod_waits([pod(conditions=[unscheduled("2 Insufficient cpu.")])])
    again = pod_waits([pod(conditions=[unscheduled("2 Insufficient cpu.")])])
    other = pod_waits([pod(conditions=[unscheduled("2 Insufficient memory.")])])
    assert first[0].key == again[0].key != other[0].key
    [long] = pod_waits([pod(conditions=[unscheduled("y" * 10_000)])])
    assert len(long.text) < MESSAGE_CHARS + 100 and long.text.endswith("...")


def waiting_app(fake: FakeKube) -> list[str]:
    """A job Volcano took up whose first pod the scheduler cannot place."""
    volcano = create_scheduler("s", namespace="ns", kube=fake)
    app_id = volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"}))
    job = set_phase(fake, app_id, "Pending")
    name = add_pod(fake, job, 0, "Pending")
    [p] = [p for p in fake.pod_list if p["metadata"]["name"] == name]
    p["status"]["conditions"] = [unscheduled("0/4 nodes are available: 4 Insufficient cpu.")]
    return [app_id, name]


def describe_three_times(scheduler: Any, app_id: str) -> None:
    """Describe the app three times, as three polls of the worker would."""
    for _ in range(3):
        scheduler.describe(app_id)


def test_the_worker_says_each_reason_once() -> None:
    fake = FakeKube()
    volcano = create_scheduler("s", namespace="ns", kube=fake)
    app_id, name = waiting_app(fake)
    describe_three_times(volcano, app_id)
    texts = [n.text for n in volcano.core.take_notices()]
    assert texts == [
        f"pod {name} is not scheduled: Unschedulable: 0/4 nodes are available: 4 Insufficient cpu."
    ]


async def test_the_triggerer_says_the_same_once() -> None:
    fake = FakeKube()
    app_id, name = waiting_app(fake)
    client = create_async_client(namespace="ns", kube=FakeAsyncKube(fake))
    try:
        for _ in range(3):
            await client.core.describe(app_id)
        texts = [n.text for n in client.take_notices()]
    finally:
        await client.close()
    assert len(texts) == 1 and f"pod {name} is not scheduled" in texts[0]


def test_a_long_lived_core_forgets_the_oldest_said_reasons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(core_module, "NOTICES_KEPT", 2)
    volcano = create_scheduler("s", namespace="ns", kube=FakeKube())
    for key in ("a", "b", "c", "a"):
        volcano.core.notice(f"text {key}", key=key)
    assert [n.key for n in volcano.core.take_notices()] == ["a", "b", "c", "a"]


QUOTA = "queue resource quota insufficient: insufficient cpu"
GANG = "0/0 tasks in gang unschedulable: pod group is not ready, 2 minAvailable"


def test_podgroup_events_say_each_reason_once_whatever_their_count_oldest_first() -> None:
    job = {"metadata": {"name": "big-1", "uid": "u1"}}
    events = [
        podgroup_event(job, GANG, count=3),
        podgroup_event(job, QUOTA, count=2),
        podgroup_event(job, QUOTA, count=9),
        podgroup_event(job, "", reason=""),
    ]
    waits = event_waits(events)
    assert [w.text for w in waits] == [
        f"PodGroup big-1-u1 waits: Unschedulable: {QUOTA}",
        f"PodGroup big-1-u1 waits: Unschedulable: {GANG}",
    ]
    again = event_waits([podgroup_event(job, QUOTA, count=40)])
    assert again[0].key == waits[0].key  # a higher count is the same reason
    other = event_waits([podgroup_event({"metadata": {"name": "b", "uid": "u2"}}, QUOTA)])
    assert other[0].key != waits[0].key  # another PodGroup's is its own
    assert event_waits([]) == []


def test_of_events_of_one_instant_the_reason_is_said_after_the_gang_summary() -> None:
    """Volcano writes its gang summary and the reason in the same second: the reason is
    said last, so that a queue timeout, which names the last reason said, names it."""
    job = {"metadata": {"name": "big-1", "uid": "u1"}}
    events = [podgroup_event(job, QUOTA, count=4), podgroup_event(job, GANG, count=4)]
    assert [w.text for w in event_waits(events)] == [
        f"PodGroup big-1-u1 waits: Unschedulable: {GANG}",
        f"PodGroup big-1-u1 waits: Unschedulable: {QUOTA}",
    ]


def over_quota(fake: FakeKube) -> tuple[str, dict[str, Any]]:
    volcano = create_scheduler("s", namespace="ns", kube=fake)
    app_id = volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"}))
    job = set_phase(fake, app_id, "Pending")
    stranger = {"metadata": {"name": "not-mine", "uid": "u9"}}
    fake.event_list = [podgroup_event(job, QUOTA, 4), podgroup_event(stranger, GANG)]
    return app_id, job


def test_the_worker_lists_podgroup_events_only_while_the_job_is_pending() -> None:
    fake = FakeKube()
    volcano = create_scheduler("s", namespace="ns", kube=fake)
    app_id, job = over_quota(fake)
    describe_three_times(volcano, app_id)
    events = [c for c in fake.calls if c[0] == "events"]
    podgroup = f"{job['metadata']['name']}-{job['metadata']['uid']}"
    assert (
        events
        == [
            (
                "events",
                "involvedObject.kind=PodGroup,involvedObject.apiVersion=scheduling.volcano.sh/v1beta1,"
                f"involvedObject.name={podgroup}",
            ),
            (
                "events",
                "involvedObject.kind=Job,involvedObject.apiVersion=batch.volcano.sh/v1alpha1,"
                f"involvedObject.name={job['metadata']['name']}",
            ),
        ]
        * 3
    )  # two lists per describe, filtered to the job's PodGroup and to the job
    assert [n.text for n in volcano.core.take_notices()] == [
        f"PodGroup {podgroup} waits: Unschedulable: {QUOTA}"
    ]
    for phase in ("Running", "Completed"):
        set_phase(fake, app_id, phase)
        fake.calls.clear()
        volcano.describe(app_id)
        assert not [c for c in fake.calls if c[0] == "events"]


def test_the_worker_says_once_per_namespace_that_events_cannot_be_read() -> None:
    fake = FakeKube()
    fake.events_forbidden = True
    volcano = create_scheduler("s", namespace="ns", kube=fake)
    app_id, _ = over_quota(fake)
    other, _ = over_quota(fake)
    for _ in range(2):
        assert volcano.describe(app_id).state is AppState.PENDING
        assert volcano.describe(other).state is AppState.PENDING
    texts = [n.text for n in volcano.core.take_notices()]
    assert len(texts) == 1, texts
    assert "why a job waits in namespace 'ns' is not said" in texts[0]
    assert 'add the rule {apiGroups: [""], resources: ["events"], verbs: ["list"]}' in texts[0]


def test_only_volcano_reads_events() -> None:
    from torchx_provider.schedulers.kube.appwrapper.translation import AppWrapperTranslation
    from torchx_provider.schedulers.kube.mcad.translation import McadTranslation

    assert AppWrapperTranslation.event_kinds == McadTranslation.event_kinds == ()


# -- MCAD: the AppWrapper's own conditions ---------------------------------------------
def _appwrapper(state: str | None, *conditions: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "aw", "uid": "u-1"},
        "status": {
            **({"state": state} if state is not None else {}),
            "conditions": [
                {"type": t, "status": "True", "reason": r, "message": m} for t, r, m in conditions
            ],
        },
    }


BACKOFF = ("Backoff", "AppWrapperNotRunnable.", "Insufficient resources to dispatch AppWrapper.")
ROUTINE = (
    ("Init", "", ""),
    ("Queueing", "AwaitingHeadOfLine", ""),
    ("HeadOfLine", "FrontOfQueue.", ""),
)


def test_mcad_says_why_it_does_not_dispatch_in_its_own_words() -> None:
    from torchx_provider.schedulers.kube.mcad.state import holding_waits

    (wait,) = holding_waits(_appwrapper("Pending", *ROUTINE, BACKOFF))
    assert wait.text == (
        "MCAD: AppWrapper aw not dispatched: AppWrapperNotRunnable: "
        "Insufficient resources to dispatch AppWrapper."
    )
    # the same condition again is the same key (said once); another message is a new one
    assert holding_waits(_appwrapper("Pending", *ROUTINE, BACKOFF))[0].key == wait.key
    other = ("Backoff", "AppWrapperNotRunnable.", "Quota exceeded.")
    assert holding_waits(_appwrapper("Pending", *ROUTINE, other))[0].key != wait.key


def test_mcad_routine_steps_and_a_dispatched_app_say_nothing() -> None:
    from torchx_provider.schedulers.kube.mcad.state import holding_waits

    assert holding_waits(_appwrapper("Pending", *ROUTINE)) == []
    assert holding_waits(_appwrapper(None)) == []
    # dispatched after a backoff: the latest condition is no longer the backoff
    dispatched = ("Dispatched", "AppWrapperRunnable", "")
    assert holding_waits(_appwrapper("Pending", *ROUTINE, BACKOFF, dispatched)) == []
    # an AppWrapper that runs says nothing, whatever its conditions
    assert holding_waits(_appwrapper("Running", *ROUTINE, BACKOFF)) == []


def test_mcad_preemption_conditions_are_said() -> None:
    from torchx_provider.schedulers.kube.mcad.state import holding_waits

    (wait,) = holding_waits(
        _appwrapper("Pending", ("Preempted", "PreemptionTriggered", "Minimum pods not running."))
    )
    assert wait.text == (
        "MCAD: AppWrapper aw preempted: PreemptionTriggered: Minimum pods not running."
    )
    (bare,) = holding_waits(_appwrapper("", ("PreemptCandidate", "", "")))
    assert bare.text == "MCAD: AppWrapper aw to be preempted"


QUOTA_REFUSED = (
    'Error creating pods: [failed to create pod j-w-0, err: pods "j-w-0" is forbidden: '
    "exceeded quota: no-pods, requested: pods=1, used: pods=0, limited: pods=0]"
)


def go_printed(pointer: str) -> str:
    """The same refusal as Volcano's controller prints it: the API error's whole struct,
    with a pointer that differs at every retry."""
    return (
        "Error creating pods: [failed to create pod j-w-0, err: &errors.StatusError{ErrStatus:"
        'v1.Status{TypeMeta:v1.TypeMeta{Kind:"", APIVersion:""}, Status:"Failure", '
        'Message:"pods \\"j-w-0\\" is forbidden: exceeded quota: no-pods, requested: pods=1, '
        'used: pods=0, limited: pods=0", Reason:"Forbidden", '
        f"Details:(*v1.StatusDetails)({pointer}), Code:403}}}}]"
    )


def test_pods_volcano_cannot_create_are_said_from_the_job_s_events_and_routine_steps_not() -> None:
    fake = FakeKube()
    volcano = create_scheduler("s", namespace="ns", kube=fake)
    app_id = volcano.schedule(volcano.submit_dryrun(app(), {"queue": "q"}))
    job = set_phase(fake, app_id, "Pending")
    stranger = {"metadata": {"name": "not-mine", "uid": "u9"}}
    fake.event_list = [
        job_event(job, "CommandIssued", "Start job", 1),
        job_event(job, "PodGroupPending", "PodGroup ns:j unschedulable, reason: ...", 2),
        job_event(job, "FailedCreate", go_printed("0xc000a1b2c0"), 3),
        # the controller retries, another pointer in the same words: said once
        job_event(job, "FailedCreate", go_printed("0x1b9f23aca180"), 4),
        # seen often, client-go marks it as combined: the same words
        job_event(job, "FailedCreate", COMBINED + go_printed("0xc0001"), 5),
        job_event(stranger, "FailedCreate", "another job's", 3),
    ]
    for _ in range(2):
        volcano.describe(app_id)
    assert [n.text for n in volcano.core.take_notices()] == [
        f"Job {job['metadata']['name']} waits: FailedCreate: {QUOTA_REFUSED}"
    ]
    set_phase(fake, app_id, "Running")
    volcano.describe(app_id)
    assert volcano.core.take_notices() == []
