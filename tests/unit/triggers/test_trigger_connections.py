"""The trigger names its connection and the triggerer resolves it: no secret in trigger
kwargs, one lookup per connection per minute, a rotated token picked up after a 401; and a
trigger's kill cancels only for a real user action."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import torchx_fakes
from torchx_fakes import submit, trigger_args
from torchx_provider.errors import BackendUnavailableError
from torchx_provider.hooks.base import BackendTarget
from torchx_provider.hooks.docker import TorchXDockerHook
from torchx_provider.hooks.kubernetes import TorchXKubernetesHook
from torchx_provider.operators.following import job_trigger
from torchx_provider.operators.options import Following, Lifecycle
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.triggers import connections
from torchx_provider.triggers.events import JobEvent
from torchx_provider.triggers.job import TorchXJobTrigger
from torchx_provider.triggers.policy import kill_cancels

TOKEN = "kube-token-5f1d2e3c4b5a69788796"
PASSWORD = "registry-password-8c7b6a5d4e3f"
CLIENT_KEY = (
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
)
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
TI_KEY = TaskInstanceKey("d", "t", "r", -1, 1)


def kubeconfig(user: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://1.2.3.4:6443"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "dev",
    }


def set_conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, **conn: Any) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


@pytest.fixture(autouse=True)
def fresh_cache() -> Any:
    connections.forget_targets()
    yield
    connections.forget_targets()


# -- no secret in the trigger --------------------------------------------------------------------
def test_triggers_built_from_connections_with_secrets_carry_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    set_conn(
        monkeypatch,
        "kube_secret",
        conn_type="torchx_kubernetes",
        extra={"kube_config": kubeconfig({"token": TOKEN}), "namespace": "ml"},
    )
    key = tmp_path / "client.key"
    key.write_text(CLIENT_KEY)
    set_conn(
        monkeypatch,
        "docker_secret",
        conn_type="torchx_docker",
        host="tcp://10.0.0.5:2376",
        login="robot",
        password=PASSWORD,
        extra={"tls_ca_cert": PEM, "tls_client_cert": PEM, "tls_client_key": str(key)},
    )
    for hook in (TorchXKubernetesHook("kube_secret"), TorchXDockerHook("docker_secret")):
        target = hook.get_target()
        assert target.secrets(), "the connection does hold secrets"
        trigger = job_trigger(target, "app-1", TI_KEY, Following(), Lifecycle())
        _, kwargs = trigger.serialize()
        stored = json.dumps(kwargs)
        for secret in (TOKEN, PASSWORD, CLIENT_KEY, "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"):
            assert secret not in stored and secret not in repr(trigger)
        assert kwargs["conn_id"] == hook.conn_id and kwargs["scheduler"] == hook.backend
        assert "client_kwargs" not in kwargs


# -- resolution in the triggerer -----------------------------------------------------------------
def count_resolutions(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    seen: list[str | None] = []
    real = torchx_fakes.FakeHook.target_from

    def spy(self: Any, loaded: Any) -> BackendTarget:
        seen.append(self.conn_id)
        return real(self, loaded)

    monkeypatch.setattr(torchx_fakes.FakeHook, "target_from", spy)
    return seen


async def test_one_lookup_per_connection_per_minute_however_many_triggers(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = count_resolutions(monkeypatch)
    now = [1000.0]
    monkeypatch.setattr(connections, "clock", lambda: now[0])
    targets = await asyncio.gather(*(connections.resolve_target("fake", None) for _ in range(50)))
    assert seen == [None] and all(t is targets[0] for t in targets)
    now[0] += connections.TARGET_TTL - 1
    assert await connections.resolve_target("fake", None) is targets[0]
    assert seen == [None]
    now[0] += 2  # expired: read again
    assert await connections.resolve_target("fake", None) is not targets[0]
    assert seen == [None, None]


async def test_a_refused_target_is_resolved_again_once_for_all_triggers(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = count_resolutions(monkeypatch)
    first = await connections.resolve_target("fake", None)
    again = await asyncio.gather(
        *(connections.resolve_target("fake", None, stale=first) for _ in range(20))
    )
    assert len(seen) == 2 and all(t is again[0] and t is not first for t in again)
    # a trigger still holding the first target gets the newer one without a lookup
    assert await connections.resolve_target("fake", None, stale=first) is again[0]
    assert len(seen) == 2


async def test_a_missing_connection_in_the_triggerer_ends_the_follow_with_an_error(
    fake_cluster: Any,
) -> None:
    app_id = submit()
    trigger = TorchXJobTrigger.from_args(trigger_args(app_id, conn_id="not_there"))
    [event] = [e async for e in trigger.run()]
    payload = JobEvent.from_payload(event.payload)
    assert payload.kind.value == "error" and "'not_there' does not exist" in payload.message


async def test_a_rotated_token_file_is_picked_up_after_a_401(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The kubeconfig's user reads its token from a file that is replaced mid-follow; the
    backend refuses the old token with 401; the follow re-resolves and goes on."""
    token_file = tmp_path / "token"
    token_file.write_text("token-A-0123456789")
    config = tmp_path / "config"
    config.write_text(yaml.safe_dump(kubeconfig({"tokenFile": str(token_file)})))
    set_conn(
        monkeypatch,
        "rotating",
        conn_type="torchx_fake",
        extra={"kube_config_path": str(config)},
    )

    class FileTokenHook(torchx_fakes.FakeHook):
        """The fake backend, with the Kubernetes hook's kubeconfig reading."""

        def target_from(self, loaded: Any) -> BackendTarget:
            from torchx_provider.hooks.kubernetes import resolve_kube_client

            kwargs, _ = resolve_kube_client(loaded[1], self.conn_id)
            user = yaml.safe_load(kwargs["kubeconfig"])["users"][0]["user"]
            return BackendTarget(self.backend, {"token": user["token"]}, conn_id=self.conn_id)

    monkeypatch.setattr(torchx_fakes.FakeHook, "target_from", FileTokenHook.target_from)
    valid = {"token-A-0123456789"}

    class TokenChecking(torchx_fakes.FakeAsyncClient):
        async def describe(self, app_id: str) -> Any:
            if self.client_kwargs.get("token") not in valid:
                raise BackendUnavailableError("Unauthorized", status=401)
            return await super().describe(app_id)

    made: list[TokenChecking] = []

    def create_async_client(**kw: Any) -> TokenChecking:
        made.append(TokenChecking(**kw))
        return made[-1]

    monkeypatch.setattr(torchx_fakes, "create_async_client", create_async_client)
    app_id = submit(ticks=1_000_000)
    app = fake_cluster.apps[app_id]
    trigger = TorchXJobTrigger.from_args(trigger_args(app_id, conn_id="rotating"))
    events: list[Any] = []

    async def run() -> None:
        events.extend([e async for e in trigger.run()])

    async def until(condition: Any) -> None:
        for _ in range(10_000):
            if condition():
                return
            await asyncio.sleep(0.001)
        raise AssertionError("timed out")

    task = asyncio.create_task(run())
    await until(lambda: app.ticks >= 5)  # the follow is under way with token A
    # the token rotates: B is written, A is revoked
    token_file.write_text("token-B-9876543210")
    valid.clear()
    valid.add("token-B-9876543210")
    rotated_at = app.ticks
    await until(lambda: app.ticks >= rotated_at + 5)  # and goes on with token B
    app.cancelled = True  # let it end
    await asyncio.wait_for(task, 10)
    event = JobEvent.from_payload(events[0].payload)
    assert event.kind.value == "finished" and event.state.name == "CANCELLED"
    assert made[-1].client_kwargs["token"] == "token-B-9876543210"  # the last resolved


# -- on_kill -------------------------------------------------------------------------------------
def test_only_a_task_that_left_the_deferred_state_cancels_its_app() -> None:
    assert not kill_cancels(True, "deferred")
    for state in ("failed", "success", "scheduled", "up_for_retry", None):
        assert kill_cancels(True, state)
    assert not kill_cancels(False, "failed")
    assert kill_cancels(True, "deferred", known=False)

    class State(str):
        value = "deferred"

    assert not kill_cancels(True, State("TaskInstanceState.DEFERRED"))


@pytest.mark.parametrize(("state", "cancels"), [("deferred", False), ("failed", True)])
async def test_on_kill_asks_airflow_for_the_task_state(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch, state: str, cancels: bool
) -> None:
    from airflow.sdk.execution_time import task_runner

    asked: list[Any] = []

    class Comms:
        async def asend(self, msg: Any) -> Any:
            asked.append(msg)

            class Reply:
                task_states = {"r": {"t": state}}

            return Reply()

    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", Comms(), raising=False)
    app_id = submit(ticks=1000)
    ti = {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1}
    await TorchXJobTrigger.from_args(trigger_args(app_id, task_instance=ti)).on_kill()
    assert [(m.dag_id, m.task_ids, m.run_ids) for m in asked] == [("d", ["t"], ["r"])]
    assert (app_id in fake_cluster.cancelled) is cancels


@pytest.mark.parametrize(("state", "cancels"), [("deferred", False), ("failed", True)])
async def test_on_kill_connects_while_it_asks_airflow_and_closes_the_client(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch, state: str, cancels: bool
) -> None:
    """The user waits on the answer and on the connection: they are made at once, and the
    client is closed whatever the answer."""
    from airflow.sdk.execution_time import task_runner

    seen: list[str] = []

    class Comms:
        async def asend(self, msg: Any) -> Any:
            seen.append("asked")
            # answered once the client is being made, or after 5 s: a kill that connected
            # only after the answer is seen so, however loaded the machine
            for _ in range(500):
                if "connected" in seen:
                    break
                await asyncio.sleep(0.01)
            seen.append("answered")

            class Reply:
                task_states = {"r": {"t": state}}

            return Reply()

    def connect(**client_kwargs: Any) -> torchx_fakes.FakeAsyncClient:
        seen.append("connected")
        return torchx_fakes.FakeAsyncClient(**client_kwargs)

    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", Comms(), raising=False)
    monkeypatch.setattr(torchx_fakes, "create_async_client", connect)
    closed = torchx_fakes.FakeAsyncClient.closed
    app_id = submit(ticks=1000)
    ti = {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1}
    await TorchXJobTrigger.from_args(trigger_args(app_id, task_instance=ti)).on_kill()
    assert seen == ["asked", "connected", "answered"]
    assert torchx_fakes.FakeAsyncClient.closed == closed + 1
    assert (app_id in fake_cluster.cancelled) is cancels
    # a trigger told to keep the app does not connect at all
    seen.clear()
    keep = trigger_args(app_id, task_instance=ti, cancel_on_kill=False)
    await TorchXJobTrigger.from_args(keep).on_kill()
    assert seen == ["asked", "answered"]
