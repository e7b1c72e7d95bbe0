"""Every bad value of an app is refused the same way on every backend: at the dry run, before
any client call, as one :class:`InvalidAppError` whose message starts with the field.

One table: a change that breaks one field of a valid app, and the field the error must name.
Each row goes through ``submit_dryrun`` of every backend, whose clients point at a port where
nothing listens (a call would surface as another error), so a refusal is also proof that
nothing was sent.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dead_backends import Schedulers, unreachable_backends
from torchx_provider import specs
from torchx_provider.errors import InvalidAppError, InvalidOptionError
from torchx_provider.specs.validation import MAX_ARG_BYTES

BACKENDS = ["kubernetes", "kubernetes_mcad", "kubernetes_appwrapper", "local_docker"]
CFG: dict[str, dict[str, Any]] = {"kubernetes": {"queue": "default"}}
NUL = "\x00"
HUGE = "x" * MAX_ARG_BYTES


def good_app() -> specs.AppDef:
    """A valid app that uses every field a row breaks."""
    return specs.AppDef(
        "ok",
        [
            specs.Role(
                "trainer",
                image="registry.example.com/train:1",
                entrypoint="python",
                args=["-m", "train"],
                env={"A": "1"},
                num_replicas=2,
                min_replicas=1,
                max_retries=1,
                resource=specs.Resource(
                    cpu=1, gpu=0, memMB=64, capabilities={"k": "v"}, devices={"d/x": 1}
                ),
                port_map={"c10d": 29500},
                metadata={"k": "v"},
                mounts=[specs.BindMount("/data", "/data"), specs.VolumeMount("ckpt", "/ckpt")],
                workspace=None,
            )
        ],
        metadata={"team": "ml"},
    )


def role(**changes: Any) -> Callable[[specs.AppDef], None]:
    """A row's change: set fields of role 0."""

    def change(app: specs.AppDef) -> None:
        for key, value in changes.items():
            setattr(app.roles[0], key, value)

    return change


def resource(**changes: Any) -> Callable[[specs.AppDef], None]:
    """A row's change: set numbers of role 0's resource."""

    def change(app: specs.AppDef) -> None:
        for key, value in changes.items():
            setattr(app.roles[0].resource, key, value)

    return change


def app(**changes: Any) -> Callable[[specs.AppDef], None]:
    def change(a: specs.AppDef) -> None:
        for key, value in changes.items():
            setattr(a, key, value)

    return change


R = "roles[0]"
RES = f"{R}.resource"
#: (row id, change, the field the error names)
ROWS: list[tuple[str, Callable[[specs.AppDef], None], str]] = [
    # the app
    ("app name object", app(name=object()), "name"),
    ("app name NUL", app(name=f"a{NUL}b"), "name"),
    ("app metadata NUL", app(metadata={"team": f"m{NUL}l"}), "metadata.team"),
    ("app metadata key not a string", app(metadata={1: "x"}), "metadata"),
    # names, image, command
    ("role name NUL", role(name=f"t{NUL}"), f"{R}.name"),
    ("role name not a string", role(name=5), f"{R}.name"),
    ("image NUL", role(image=f"busy{NUL}box"), f"{R}.image"),
    ("image with a space", role(image="busy box"), f"{R}.image"),
    ("image in uppercase", role(image="Registry.example.com/Train:1"), f"{R}.image"),
    ("image not a string", role(image=5), f"{R}.image"),
    ("entrypoint NUL", role(entrypoint=f"py{NUL}"), f"{R}.entrypoint"),
    ("entrypoint huge", role(entrypoint=HUGE), f"{R}.entrypoint"),
    ("args not a list", role(args="-m train"), f"{R}.args"),
    ("args item not a string", role(args=["--epochs", 3]), f"{R}.args"),
    ("args item NUL", role(args=["-m", f"tr{NUL}ain"]), f"{R}.args[1]"),
    ("args item huge", role(args=[HUGE]), f"{R}.args[0]"),
    # env
    ("env not a mapping", role(env=["A=1"]), f"{R}.env"),
    ("env name empty", role(env={"": "1"}), f"{R}.env"),
    ("env name with =", role(env={"A=B": "1"}), f"{R}.env"),
    ("env name not a string", role(env={1: "1"}), f"{R}.env"),
    ("env value NUL", role(env={"A": f"s3cr{NUL}t"}), f"{R}.env.A"),
    ("env value not a string", role(env={"A": 1}), f"{R}.env.A"),
    ("env value huge", role(env={"A": HUGE}), f"{R}.env.A"),
    # counts
    ("num_replicas 0", role(num_replicas=0), f"{R}.num_replicas"),
    ("num_replicas negative", role(num_replicas=-1), f"{R}.num_replicas"),
    ("num_replicas float", role(num_replicas=1.5), f"{R}.num_replicas"),
    ("num_replicas string", role(num_replicas="2"), f"{R}.num_replicas"),
    ("num_replicas bool", role(num_replicas=True), f"{R}.num_replicas"),
    ("num_replicas huge", role(num_replicas=10**6), f"{R}.num_replicas"),
    ("min_replicas 0", role(min_replicas=0), f"{R}.min_replicas"),
    ("min_replicas over num_replicas", role(min_replicas=3), f"{R}.min_replicas"),
    ("max_retries negative", role(max_retries=-1), f"{R}.max_retries"),
    ("max_retries float", role(max_retries=1.0), f"{R}.max_retries"),
    ("max_retries huge", role(max_retries=2**31), f"{R}.max_retries"),
    ("retry_policy string", role(retry_policy="REPLICA"), f"{R}.retry_policy"),
    # resources
    ("resource None", role(resource=None), RES),
    ("cpu -1 alone", resource(cpu=-1), f"{RES}.cpu"),
    ("cpu negative", resource(cpu=-0.5), f"{RES}.cpu"),
    ("cpu NaN", resource(cpu=float("nan")), f"{RES}.cpu"),
    ("cpu infinite", resource(cpu=float("inf")), f"{RES}.cpu"),
    ("cpu string", resource(cpu="1"), f"{RES}.cpu"),
    ("cpu bool", resource(cpu=True), f"{RES}.cpu"),
    ("cpu huge", resource(cpu=2e6), f"{RES}.cpu"),
    ("gpu -1 alone", resource(gpu=-1), f"{RES}.gpu"),
    ("gpu fraction", resource(gpu=0.5), f"{RES}.gpu"),
    ("gpu huge", resource(gpu=10**6), f"{RES}.gpu"),
    ("memMB negative", resource(memMB=-5), f"{RES}.memMB"),
    ("memMB -1 alone", resource(memMB=-1), f"{RES}.memMB"),
    ("memMB NaN", resource(memMB=float("nan")), f"{RES}.memMB"),
    ("memMB huge (bytes?)", resource(memMB=2**40), f"{RES}.memMB"),
    ("device count negative", resource(devices={"d/x": -1}), f"{RES}.devices.d/x"),
    ("device count fraction", resource(devices={"d/x": 0.5}), f"{RES}.devices.d/x"),
    ("device count huge", resource(devices={"d/x": 10**7}), f"{RES}.devices.d/x"),
    ("device name empty", resource(devices={"": 1}), f"{RES}.devices"),
    ("device name NUL", resource(devices={f"d{NUL}": 1}), f"{RES}.devices"),
    ("capability NUL", resource(capabilities={"k": f"v{NUL}"}), f"{RES}.capabilities.k"),
    # ports
    ("port 0", role(port_map={"c10d": 0}), f"{R}.port_map.c10d"),
    ("port over 65535", role(port_map={"c10d": 65536}), f"{R}.port_map.c10d"),
    ("port string", role(port_map={"c10d": "29500"}), f"{R}.port_map.c10d"),
    ("port bool", role(port_map={"c10d": True}), f"{R}.port_map.c10d"),
    ("port name NUL", role(port_map={f"c{NUL}": 1}), f"{R}.port_map"),
    # metadata
    ("metadata key not a string", role(metadata={("a",): 1}), f"{R}.metadata"),
    ("metadata NUL", role(metadata={"k": [f"v{NUL}"]}), f"{R}.metadata.k[0]"),
    ("metadata NaN", role(metadata={"k": float("nan")}), f"{R}.metadata.k"),
    # mounts and workspace
    ("bind src NUL", role(mounts=[specs.BindMount(f"/d{NUL}", "/d")]), f"{R}.mounts[0]"),
    ("bind dst NUL", role(mounts=[specs.BindMount("/d", f"/d{NUL}")]), f"{R}.mounts[0]"),
    ("volume name NUL", role(mounts=[specs.VolumeMount(f"v{NUL}", "/v")]), f"{R}.mounts[0]"),
    ("device path NUL", role(mounts=[specs.DeviceMount(f"/dev/f{NUL}", "/f")]), f"{R}.mounts[0]"),
    (
        "two mounts at one path",
        role(mounts=[specs.BindMount("/a", "/data"), specs.VolumeMount("v", "/data/")]),
        f"{R}.mounts[1]",
    ),
    ("workspace NUL", role(workspace=f"./ws{NUL}"), f"{R}.workspace"),
]


@pytest.fixture(scope="module", autouse=True)
def dead_backends() -> Iterator[None]:
    with unreachable_backends():
        yield


scheduler = Schedulers("checks")


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_good_app_passes(backend: str) -> None:
    scheduler(backend).submit_dryrun(good_app(), CFG.get(backend))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("change", "field"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_each_bad_value_is_refused_naming_its_field(
    backend: str, change: Callable[[specs.AppDef], None], field: str
) -> None:
    bad = copy.deepcopy(good_app())
    change(bad)
    with pytest.raises(InvalidAppError) as info:
        scheduler(backend).submit_dryrun(bad, CFG.get(backend))
    assert info.value.field == field, str(info.value)
    assert str(info.value).startswith(f"{field}: ")
    assert NUL not in str(info.value), "the message shows no raw NUL"
    assert len(str(info.value)) < 1000, "the message does not repeat a huge value"


def test_a_nul_env_value_is_not_shown_in_the_message() -> None:
    """An env value may be a secret; the message names where the NUL is, not the value."""
    bad = good_app()
    bad.roles[0].env = {"TOKEN": f"hf_s3cret{NUL}"}
    with pytest.raises(InvalidAppError) as info:
        specs.validate_app(bad)
    assert "hf_s3cret" not in str(info.value) and "position 9" in str(info.value)


@pytest.mark.parametrize("env", [{"A": f"v{NUL}"}, {"A=B": "1"}, {"": "1"}, {"A": HUGE}])
def test_the_docker_env_option_takes_the_rule_of_a_roles_env(env: dict[Any, Any]) -> None:
    with pytest.raises(InvalidOptionError, match="run option env: ") as info:
        scheduler("local_docker").submit_dryrun(good_app(), {"env": env})
    assert info.value.option == "env"


def test_a_partial_resource_dict_asks_for_none_of_what_it_leaves_out() -> None:
    """``resource: {cpu: 2}`` is cpu 2 and nothing else (0, not the -1 of "not set")."""
    data = specs.to_dict(good_app())
    data["roles"][0]["resource"] = {"cpu": 2}
    assert specs.from_dict(data).roles[0].resource == specs.Resource(cpu=2, gpu=0, memMB=0)
    data["roles"][0]["resource"] = {}
    assert specs.from_dict(data).roles[0].resource == specs.NULL_RESOURCE
