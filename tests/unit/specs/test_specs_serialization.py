"""AppDefs to and from dicts, YAML/JSON files and duck-typed ``torchx.specs`` objects."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from torchx_provider import specs
from torchx_provider.errors import InvalidAppError
from torchx_provider.specs import (
    AppDef,
    BindMount,
    DeviceMount,
    Resource,
    RetryPolicy,
    Role,
    VolumeMount,
    from_dict,
    from_torchx,
    load_app,
    load_file,
    role_from_dict,
    role_to_dict,
    to_dict,
    to_yaml,
)
from torchx_provider.specs.serialization import mount_to_dict


def _app() -> AppDef:
    return AppDef(
        name="train",
        roles=[
            Role(
                name="trainer",
                image="ghcr.io/pytorch/torchx:0.7.0",
                entrypoint="python",
                args=["-m", "train", "--id", specs.macros.app_id],
                env={"LOGLEVEL": "INFO"},
                num_replicas=4,
                min_replicas=2,
                max_retries=3,
                retry_policy=RetryPolicy.REPLICA,
                resource=Resource(cpu=4, gpu=1, memMB=8192, capabilities={"zone": "a"}),
                port_map={"c10d": 29500},
                metadata={"kubernetes": {"tolerations": [{"key": "gpu"}]}},
                mounts=[BindMount("/data", "/data", True), VolumeMount("ckpt", "/ckpt")],
                workspace="src",
            ),
            Role(name="ps", image="busybox", entrypoint="sh", args=["-c", "sleep 1"]),
        ],
        metadata={"team": "ml"},
    )


# -- to plain data -------------------------------------------------------------------------------


def test_to_dict_shape() -> None:
    data = to_dict(_app())
    assert list(data) == ["name", "roles", "metadata"]
    role = data["roles"][0]
    assert role["retry_policy"] == "REPLICA"
    assert role["resource"] == {
        "cpu": 4,
        "gpu": 1,
        "memMB": 8192,
        "capabilities": {"zone": "a"},
        "devices": {},
    }
    assert role["mounts"] == [
        {"type": "bind", "src_path": "/data", "dst_path": "/data", "read_only": True},
        {"type": "volume", "src": "ckpt", "dst_path": "/ckpt", "read_only": False},
    ]
    json.dumps(data)  # JSON-compatible


def test_to_dict_does_not_share_state_with_the_app() -> None:
    app = _app()
    data = to_dict(app)
    data["roles"][0]["args"].append("x")
    data["roles"][0]["env"]["X"] = "1"
    data["roles"][0]["metadata"]["kubernetes"]["tolerations"].clear()
    assert app == _app()


def test_role_to_dict_and_back() -> None:
    role = _app().roles[0]
    assert role_from_dict(role_to_dict(role)) == role


def test_role_to_dict_metadata_is_made_json_safe() -> None:
    role = Role("r", "i", "e", metadata={"when": Path("/x"), "t": (1, 2)})
    assert role_to_dict(role)["metadata"] == {"when": "/x", "t": [1, 2]}


@pytest.mark.parametrize(
    ("mount", "expected"),
    [
        (
            BindMount("/a", "/b"),
            {"type": "bind", "src_path": "/a", "dst_path": "/b", "read_only": False},
        ),
        (
            VolumeMount("v", "/b", True),
            {"type": "volume", "src": "v", "dst_path": "/b", "read_only": True},
        ),
        (
            DeviceMount("/dev/x", "/x", "r"),
            {"type": "device", "src_path": "/dev/x", "dst_path": "/x", "permissions": "r"},
        ),
    ],
)
def test_mount_to_dict(mount: Any, expected: dict[str, Any]) -> None:
    assert mount_to_dict(mount) == expected


def test_to_yaml_reads_back() -> None:
    text = to_yaml(_app())
    assert text.startswith("name: train\n")
    assert from_dict(yaml.safe_load(text)) == _app()


def test_round_trips() -> None:
    app = _app()
    assert from_dict(to_dict(app)) == app
    assert from_dict(json.loads(json.dumps(to_dict(app)))) == app
    assert from_dict(yaml.safe_load(to_yaml(app))) == app


# -- from plain data -----------------------------------------------------------------------------


def test_from_dict_minimal_with_defaults() -> None:
    app = from_dict({"name": "hi", "roles": [{"name": "echo", "image": "b", "entrypoint": "echo"}]})
    assert app == AppDef("hi", roles=[Role("echo", "b", "echo")])
    assert app.roles[0].resource == specs.NULL_RESOURCE


def test_from_dict_friendly_forms() -> None:
    app = from_dict(
        {
            "name": "hi",
            "roles": [
                {
                    "name": "echo",
                    "image": "b",
                    "entrypoint": "echo",
                    "args": ("a", "b"),
                    "resource": "cpu.small",
                    "retry_policy": "replica",
                    "mounts": "type=bind,src=/a,dst=/b,readonly",
                    "min_replicas": None,
                    "workspace": None,
                },
                {
                    "name": "two",
                    "image": "b",
                    "entrypoint": "echo",
                    "resource": {"cpu": 1},
                    "mounts": [
                        "type=bind",
                        "src=/a",
                        "dst=/b",
                        {"type": "Device", "src_path": "/dev/f", "dst_path": "/dev/f"},
                        DeviceMount("/dev/g", "/dev/g"),
                        "type=volume,src=v,dst=/v",
                    ],
                },
            ],
        }
    )
    one, two = app.roles
    assert one.args == ["a", "b"]
    assert one.resource == specs.named_resources["cpu.small"]
    assert one.retry_policy is RetryPolicy.REPLICA
    assert one.mounts == [BindMount("/a", "/b", True)]
    assert two.resource == Resource(cpu=1, gpu=0, memMB=0)  # what is left out asks for none
    assert two.mounts == [
        BindMount("/a", "/b"),
        DeviceMount("/dev/f", "/dev/f"),
        DeviceMount("/dev/g", "/dev/g"),
        VolumeMount("v", "/v"),
    ]


def test_from_dict_accepts_objects_already_built() -> None:
    res = Resource(cpu=1, gpu=0, memMB=1)
    app = from_dict(
        {"name": "a", "roles": [{"name": "r", "image": "i", "entrypoint": "e", "resource": res}]}
    )
    assert app.roles[0].resource == res


def test_from_dict_validates() -> None:
    with pytest.raises(InvalidAppError) as info:
        from_dict(
            {
                "name": "a",
                "roles": [{"name": "r", "image": "i", "entrypoint": "e", "num_replicas": 0}],
            }
        )
    assert info.value.field == "roles[0].num_replicas"


def _role_data(**kw: Any) -> dict[str, Any]:
    return {"name": "r", "image": "i", "entrypoint": "e", **kw}


@pytest.mark.parametrize(
    ("data", "field", "fragment"),
    [
        ([], "app", "must be a mapping"),
        (None, "app", "must be a mapping"),
        ({"name": "a", "role": []}, "app", "unknown key(s) ['role']"),
        ({"name": "a", "roles": {"r": {}}}, "roles", "must be a list"),
        ({"name": "a", "roles": ["r"]}, "roles[0]", "must be a mapping"),
        ({"name": "a", "roles": [{"image": "i"}]}, "roles[0].name", "needs a name"),
        ({"name": "a", "roles": [_role_data(num_replica=2)]}, "roles[0]", "['num_replica']"),
        ({"name": "a", "roles": [_role_data(args="--x")]}, "roles[0].args", "list of strings"),
        ({"name": "a", "roles": [_role_data(env=["A=1"])]}, "roles[0].env", "mapping"),
        ({"name": "a", "roles": [_role_data(port_map=80)]}, "roles[0].port_map", "mapping"),
        ({"name": "a", "roles": [_role_data(metadata="x")]}, "roles[0].metadata", "mapping"),
        ({"name": "a", "roles": [_role_data()], "metadata": ["x"]}, "metadata", "mapping"),
        (
            {"name": "a", "roles": [_role_data(resource="cpu.huge")]},
            "roles[0].resource",
            "cpu.small",
        ),
        ({"name": "a", "roles": [_role_data(resource=4)]}, "roles[0].resource", "named resource"),
        (
            {"name": "a", "roles": [_role_data(resource={"cpus": 1})]},
            "roles[0].resource",
            "['cpus']",
        ),
        (
            {"name": "a", "roles": [_role_data(resource={"cpu": 1, "devices": [1]})]},
            "roles[0].resource.devices",
            "mapping",
        ),
        (
            {"name": "a", "roles": [_role_data(retry_policy="sometimes")]},
            "roles[0].retry_policy",
            "use one of ['REPLICA', 'APPLICATION', 'ROLE']",
        ),
        (
            {"name": "a", "roles": [_role_data(retry_policy="HOT_SPARE")]},
            "roles[0].retry_policy",
            "HOT_SPARE is not supported",
        ),
        (
            {"name": "a", "roles": [_role_data(mounts="type=bind,src=/a")]},
            "roles[0].mounts",
            "needs dst",
        ),
        (
            {"name": "a", "roles": [_role_data(mounts={"type": "bind"})]},
            "roles[0].mounts",
            "list of mounts",
        ),
        ({"name": "a", "roles": [_role_data(mounts=[3])]}, "roles[0].mounts[0]", "got int"),
        (
            {"name": "a", "roles": [_role_data(mounts=[{"src": "/a"}])]},
            "roles[0].mounts[0]",
            "'type' key",
        ),
        (
            {"name": "a", "roles": [_role_data(mounts=[{"type": "nfs"}])]},
            "roles[0].mounts[0]",
            "unknown mount type 'nfs'",
        ),
        (
            {"name": "a", "roles": [_role_data(mounts=[{"type": "bind", "src": "/a"}])]},
            "roles[0].mounts[0]",
            "unknown key(s) ['src']",
        ),
        (
            {"name": "a", "roles": [_role_data(mounts=[{"type": "bind", "src_path": "/a"}])]},
            "roles[0].mounts[0]",
            "a bind mount needs",
        ),
    ],
)
def test_from_dict_errors(data: Any, field: str, fragment: str) -> None:
    with pytest.raises(InvalidAppError) as info:
        from_dict(data)
    assert info.value.field == field
    assert fragment in str(info.value), str(info.value)


def test_role_from_dict_does_not_validate() -> None:
    role = role_from_dict({"name": "r", "num_replicas": 0})
    assert role.num_replicas == 0 and role.image == ""
    with pytest.raises(InvalidAppError) as info:
        role_from_dict({"name": "r", "oops": 1}, where="roles[3]")
    assert info.value.field == "roles[3]"


# -- files ----------------------------------------------------------------------------------------


def test_load_yaml_and_json_files(tmp_path: Path) -> None:
    (tmp_path / "app.yaml").write_text(to_yaml(_app()))
    (tmp_path / "app.yml").write_text(to_yaml(_app()))
    (tmp_path / "app.json").write_text(json.dumps(to_dict(_app())))
    for name in ("app.yaml", "app.yml", "app.json"):
        assert load_file(tmp_path / name) == _app()
        assert load_file(str(tmp_path / name)) == _app()


def test_load_handwritten_yaml(tmp_path: Path) -> None:
    path = tmp_path / "hello.yaml"
    path.write_text(
        """
name: hello
roles:
  - name: echo
    image: busybox
    entrypoint: echo
    args: ["hello from ${replica_id}"]
    num_replicas: 2
    resource: cpu.small
    mounts: ["type=bind,src=/data,dst=/data,readonly"]
"""
    )
    app = load_file(path)
    assert app.roles[0].num_replicas == 2
    assert app.roles[0].mounts == [BindMount("/data", "/data", True)]


def test_load_file_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidAppError, match="cannot read app file") as info:
        load_file(tmp_path / "missing.yaml")
    assert info.value.field == "app"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(InvalidAppError, match="not valid YAML/JSON"):
        load_file(bad)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{'single': 'quotes'}")
    with pytest.raises(InvalidAppError, match="not valid YAML/JSON"):
        load_file(bad_json)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(InvalidAppError, match="must be a mapping"):
        load_file(empty)


# -- torchx.specs objects (duck-typed look-alikes: torchx is not installed) ------------------------


@dataclass
class TxResource:
    cpu: int
    gpu: int
    memMB: int
    capabilities: dict[str, Any] = field(default_factory=dict)
    devices: dict[str, int] = field(default_factory=dict)


@dataclass
class BindMount_:  # named below so that type(m).__name__ is TorchX's
    src_path: str
    dst_path: str
    read_only: bool = False


BindMount_.__name__ = "BindMount"


@dataclass
class VolumeMount_:
    src: str
    dst_path: str
    read_only: bool = False


VolumeMount_.__name__ = "VolumeMount"


@dataclass
class DeviceMount_:
    src_path: str
    dst_path: str
    permissions: str = "rwm"


DeviceMount_.__name__ = "DeviceMount"


class TxRetryPolicy(str):
    """TorchX's RetryPolicy is a str enum; ``.value`` is what we read."""

    @property
    def value(self) -> str:
        return str(self)


@dataclass
class TxRole:
    name: str
    image: str
    min_replicas: int | None = None
    base_image: str | None = None
    entrypoint: str = "<MISSING>"
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    num_replicas: int = 1
    max_retries: int = 0
    retry_policy: Any = field(default_factory=lambda: TxRetryPolicy("APPLICATION"))
    resource: Any = field(default_factory=lambda: TxResource(-1, -1, -1))
    port_map: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    mounts: list[Any] = field(default_factory=list)


@dataclass
class TxAppDef:
    name: str
    roles: list[Any] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)


def test_from_torchx_converts_every_field() -> None:
    # the fields that TorchX's Role and this package's hold as the same plain values
    plain: dict[str, Any] = {
        "name": "trainer",
        "image": "img",
        "min_replicas": 1,
        "entrypoint": "torchrun",
        "args": ["--nnodes", "2"],
        "env": {"A": "1"},
        "num_replicas": 2,
        "max_retries": 1,
        "port_map": {"c10d": 29500},
        "metadata": {"k": "v"},
    }
    tx = TxAppDef(
        name="ddp",
        roles=[
            TxRole(
                **copy.deepcopy(plain),
                retry_policy=TxRetryPolicy("REPLICA"),
                resource=TxResource(2, 1, 1024, {"x": 1}, {"efa": 1}),
                mounts=[
                    BindMount_("/a", "/b", True),
                    VolumeMount_("v", "/v"),
                    DeviceMount_("/dev/f", "/dev/f", "r"),
                ],
            )
        ],
        metadata={"m": "1"},
    )
    role = Role(
        **plain,
        retry_policy=RetryPolicy.REPLICA,
        resource=Resource(2, 1, 1024, {"x": 1}, {"efa": 1}),
        mounts=[
            BindMount("/a", "/b", True),
            VolumeMount("v", "/v"),
            DeviceMount("/dev/f", "/dev/f", "r"),
        ],
    )
    app = from_torchx(tx)
    assert app == AppDef(name="ddp", roles=[role], metadata={"m": "1"})
    # Copies, not views, of the TorchX object's containers.
    app.roles[0].args.append("x")
    assert tx.roles[0].args == ["--nnodes", "2"]


def test_from_torchx_minimal_object() -> None:
    class Bare:
        name = "a"
        roles = [
            type(
                "R",
                (),
                {
                    "name": "r",
                    "image": "i",
                    "entrypoint": "e",
                    "args": [],
                    "env": {},
                    "num_replicas": 1,
                },
            )()
        ]

    app = from_torchx(Bare())
    assert app.roles[0].resource == specs.NULL_RESOURCE
    assert app.roles[0].retry_policy is RetryPolicy.APPLICATION
    assert app.metadata == {} and app.roles[0].mounts == []


def test_from_torchx_missing_entrypoint_is_reported_by_validation() -> None:
    app = from_torchx(TxAppDef("a", roles=[TxRole(name="r", image="i")]))
    assert app.roles[0].entrypoint == ""
    with pytest.raises(InvalidAppError) as info:
        app.validate()
    assert info.value.field == "roles[0].entrypoint"


def test_from_torchx_errors() -> None:
    with pytest.raises(InvalidAppError) as info:
        from_torchx(TxAppDef("a", roles=[object()]))
    assert info.value.field == "roles[0]"
    assert "torchx.specs.Role" in str(info.value)
    with pytest.raises(InvalidAppError) as info:
        from_torchx(TxAppDef("a", roles=[TxRole("r", "i", entrypoint="e", mounts=["/a:/b"])]))
    assert info.value.field == "roles[0].mounts[0]"
    with pytest.raises(InvalidAppError) as info:
        from_torchx(
            TxAppDef("a", roles=[TxRole("r", "i", retry_policy=TxRetryPolicy("HOT_SPARE"))])
        )
    assert info.value.field == "roles[0].retry_policy"


# -- load_app -------------------------------------------------------------------------------------


def test_load_app_accepts_every_form(tmp_path: Path) -> None:
    app = _app()
    path = tmp_path / "app.yaml"
    path.write_text(to_yaml(app))
    assert load_app(app) is app
    assert load_app(to_dict(app)) == app
    assert load_app(path) == app
    assert load_app(str(path)) == app
    tx = TxAppDef("a", roles=[TxRole("r", "i", entrypoint="e")])
    assert load_app(tx) == AppDef("a", roles=[Role("r", "i", "e")])


def test_load_app_validates_every_form() -> None:
    with pytest.raises(InvalidAppError):
        load_app(AppDef("a"))
    with pytest.raises(InvalidAppError):
        load_app(TxAppDef("a", roles=[TxRole("r", "i")]))


def test_load_app_rejects_other_things() -> None:
    with pytest.raises(InvalidAppError, match="cannot make an app out of a int") as info:
        load_app(42)
    assert info.value.field == "app"
