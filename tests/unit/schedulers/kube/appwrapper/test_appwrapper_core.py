"""The AppWrapper backend through the shared Kubernetes core: cancel by suspension (a JSON
patch of the app's own object), by deletion, and the replica pod a log comes from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kube_fakes import FakeAsyncKube, FakeKube
from torchx_provider import specs
from torchx_provider.schedulers.kube.appwrapper import create_async_client, create_scheduler
from torchx_provider.schedulers.kube.resources import CustomResource
from torchx_provider.schedulers.kube.status import JOB_INDEX_LABEL
from torchx_provider.specs.api import AppState


class PatchingKube(FakeKube):
    """:class:`FakeKube` that also applies JSON patches (``add`` only, as cancel sends)."""

    def patch(
        self, res: CustomResource, namespace: str, name: str, ops: list[dict[str, Any]]
    ) -> None:
        self.calls.append(("patch", res.plural, name))
        obj = self.objects[(res.plural, namespace, name)]
        for op in ops:
            assert op["op"] == "add"
            *parents, last = [
                p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")
            ]
            target = obj
            for part in parents:
                target = target[part]
            target[last] = op["value"]


def app() -> specs.AppDef:
    return specs.AppDef("a", [specs.Role("trainer", image="img", entrypoint="x", num_replicas=2)])


def scheduler(fake: FakeKube) -> Any:
    s = create_scheduler("s", namespace="ns", kube=fake)
    return s


def set_phase(fake: FakeKube, app_id: str, phase: str) -> None:
    fake.objects[("appwrappers", "ns", app_id.split(":")[1])]["status"] = {"phase": phase}


def test_cancel_suspends_and_keeps_the_appwrapper() -> None:
    fake = PatchingKube()
    s = scheduler(fake)
    app_id = s.schedule(s.submit_dryrun(app(), {}))
    set_phase(fake, app_id, "Running")
    s.cancel(app_id)
    stored: Mapping[str, Any] = fake.objects[("appwrappers", "ns", app_id.split(":")[1])]
    assert stored["spec"]["suspend"] is True
    assert s.describe(app_id).state is AppState.CANCELLED
    s.cancel(app_id)  # ended: left alone
    assert [c[0] for c in fake.calls].count("patch") == 1


def test_cancel_by_delete_deletes() -> None:
    fake = PatchingKube()
    s = scheduler(fake)
    app_id = s.schedule(s.submit_dryrun(app(), {"cancel_by": "delete"}))
    set_phase(fake, app_id, "Running")
    s.cancel(app_id)
    assert s.describe(app_id) is None
    assert "patch" not in [c[0] for c in fake.calls]


async def test_async_cancel_patches_the_same_way() -> None:
    fake = PatchingKube()
    s = scheduler(fake)
    app_id = s.schedule(s.submit_dryrun(app(), {}))
    set_phase(fake, app_id, "Suspended")
    client = create_async_client(namespace="ns", kube=FakeAsyncKube(fake))
    await client.cancel(app_id)
    resp = await client.describe(app_id)
    assert resp is not None and resp.state is AppState.CANCELLED
    assert resp == s.describe(app_id)


def test_logs_come_from_the_pod_of_that_index() -> None:
    fake = PatchingKube()
    s = scheduler(fake)
    app_id = s.schedule(s.submit_dryrun(app(), {}))
    name = app_id.split(":")[1]
    for index in (0, 1):
        fake.pod_list.append(
            {
                "metadata": {
                    "name": f"{name}-trainer-{index}-abcde",
                    "namespace": "ns",
                    "creationTimestamp": "2024-05-01T10:00:00Z",
                    "labels": {
                        "torchx.pytorch.org/app-id": name,
                        "torchx.pytorch.org/role-name": "trainer",
                        JOB_INDEX_LABEL: str(index),
                    },
                    "annotations": {"torchx.pytorch.org/role-name": "trainer"},
                },
                "status": {"phase": "Succeeded"},
            }
        )
        fake.logs[f"{name}-trainer-{index}-abcde"] = (
            f"2024-05-01T10:00:0{index}Z replica {index}\n".encode()
        )
    assert list(s.log_iter(app_id, "trainer", 1)) == ["replica 1\n"]
    assert list(s.log_iter(app_id, "trainer", 0)) == ["replica 0\n"]
