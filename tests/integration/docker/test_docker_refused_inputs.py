"""Bad values are refused before the Docker engine is asked for anything.

Without the check, an env value holding a NUL character was created and failed at start with
the OCI runtime's raw error (a retryable ``SubmissionError``), and ``cpu=-1`` ran without a
CPU limit; now both are one ``InvalidAppError`` naming the field, and the engine sees no
container, no network and no event of the app.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest

from torchx_provider.errors import InvalidAppError
from torchx_provider.schedulers.labels import LABEL_APP_NAME
from torchx_provider.specs.api import AppDef, Resource, Role

pytestmark = pytest.mark.docker

IMAGE = "torchx-provider/busybox:latest"


def app(name: str, **role: Any) -> AppDef:
    ok = Role("ok", image=IMAGE, entrypoint="true")
    return AppDef(name, [ok, Role("bad", image=IMAGE, entrypoint="true", **role)])


def engine_saw(docker_engine: Any, name: str, network: str, since: float) -> dict[str, Any]:
    """What the engine holds or reported of app ``name`` and network ``network`` since
    ``since``: containers (any state), networks and events."""
    label = f"{LABEL_APP_NAME}={name}"
    events = docker_engine.events(
        since=since, until=time.time() + 1, filters={"label": label}, decode=True
    )
    return {
        "containers": docker_engine.containers.list(all=True, filters={"label": label}),
        "networks": [n for n in docker_engine.networks.list(names=[network]) if n.name == network],
        "events": list(events),
    }


@pytest.mark.parametrize(
    ("role", "field"),
    [
        ({"env": {"TOKEN": "s3cr\x00t"}}, "roles[1].env.TOKEN"),
        ({"resource": Resource(cpu=-1, gpu=0, memMB=64)}, "roles[1].resource.cpu"),
    ],
    ids=["nul-in-env-value", "cpu-minus-one"],
)
def test_refused_with_nothing_created(
    scheduler: Any, docker_engine: Any, role: dict[str, Any], field: str
) -> None:
    name = f"refused-{secrets.token_hex(4)}"
    network = f"torchx-refused-{secrets.token_hex(3)}"  # a network of its own: not created
    since = time.time() - 1
    with pytest.raises(InvalidAppError) as err:
        scheduler.submit(app(name, **role), {"network": network})
    assert err.value.field == field and str(err.value).startswith(f"{field}: ")
    assert "s3cr" not in str(err.value)  # an env value is never shown
    assert engine_saw(docker_engine, name, network, since) == {
        "containers": [],
        "networks": [],
        "events": [],
    }


def test_the_same_app_with_good_values_is_created(
    scheduler: Any, cfg: dict[str, Any], docker_engine: Any, wait_for: Any
) -> None:
    """The control: what the refused rows would have shown had they been sent."""
    name = f"accepted-{secrets.token_hex(4)}"
    since = time.time() - 1
    good = app(name, env={"TOKEN": "s3cret"}, resource=Resource(cpu=1, gpu=0, memMB=64))
    app_id = scheduler.submit(good, {**cfg, "remove": False})  # kept until the test's end
    wait_for(scheduler, app_id)
    seen = engine_saw(docker_engine, name, cfg["network"], since)
    assert len(seen["containers"]) == 2 and seen["networks"]
    assert {e.get("Action") for e in seen["events"]} >= {"create", "start"}
