"""Why an app's pods wait: the reasons read from pod status, said once per reason, by both
faces of a Kubernetes backend."""

from __future__ import annotations

from typing import Any

import pytest
from kube_fakes import FakeAsyncKube, FakeKube, add_pod, app, set_phase

from torchx_provider.schedulers.kube import core as core_module
from torchx_provider.schedulers.kube.pending import MESSAGE_CHARS, pod_waits
from torchx_provider.schedulers.kube.volcano import create_async_client, create_scheduler


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


def test_the_worker_says_each_reason_once() -> None:
    fake = FakeKube()
    volcano = create_scheduler("s", namespace="ns", kube=fake)
    app_id, name = waiting_app(fake)
    for _ in range(3):
        volcano.describe(app_id)
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
