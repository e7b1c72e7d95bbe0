"""``validate_app`` / ``validate_role``: every rule, the field it names and the fix it gives."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from torchx_provider import specs
from torchx_provider.errors import InvalidAppError, TorchXProviderError
from torchx_provider.specs import (
    AppDef,
    BindMount,
    DeviceMount,
    Resource,
    Role,
    VolumeMount,
    validate_app,
    validate_role,
)


def wrong(value: object) -> Any:
    """``value``, given on purpose where its type is not the one declared."""
    return value


def _role(**kw: Any) -> Role:
    base: dict[str, Any] = {"name": "trainer", "image": "busybox", "entrypoint": "echo"}
    base.update(kw)
    return Role(**base)


def _app(*roles: Role, **kw: Any) -> AppDef:
    return AppDef(kw.pop("name", "app"), roles=list(roles) or [_role()], **kw)


def _error(app: AppDef) -> InvalidAppError:
    with pytest.raises(InvalidAppError) as info:
        validate_app(app)
    return info.value


def test_a_full_valid_app_passes() -> None:
    role = _role(
        args=["--id", specs.macros.app_id, "$${HOME}", "$$", "cost: 5$"],
        env={"RANK": specs.macros.replica_id, "MASTER": "$${${rank0_env}}", "a.b-c": "x"},
        num_replicas=4,
        min_replicas=2,
        max_retries=3,
        retry_policy=specs.RetryPolicy.REPLICA,
        resource=Resource(cpu=0.5, gpu=1, memMB=wrong(1024.5), devices={"efa": 2}),
        port_map={"c10d": 29500, "tb": 1},
        metadata={"kubernetes": {"annotations": {"x": "${app_id}"}}, "n": [1, "${img_root}"]},
        mounts=[
            BindMount("/rel/ok", "/b", True),
            VolumeMount("v", "/v"),
            DeviceMount("/dev/f", "/f"),
        ],
        workspace=".",
    )
    validate_app(_app(role, _role(name="ps"), metadata={"team": "ml"}))
    validate_role(role)


@pytest.mark.parametrize(
    ("app", "field", "fix"),
    [
        (AppDef("", roles=[_role()]), "name", "give the AppDef a name"),
        (AppDef("  ", roles=[_role()]), "name", "give the AppDef a name"),
        (AppDef(wrong(None), roles=[_role()]), "name", "give the AppDef a name"),
        (AppDef("app"), "roles", "add at least one Role"),
        (AppDef("app", roles=wrong((_role(),))), "roles", "add at least one Role"),
        (AppDef("app", roles=[_role()], metadata=wrong([])), "metadata", "mapping"),
        (AppDef("app", roles=[wrong("trainer")]), "roles[0]", "is not a Role"),
    ],
)
def test_app_level_errors(app: AppDef, field: str, fix: str) -> None:
    err = _error(app)
    assert err.field == field
    assert fix in str(err)


def test_non_appdef() -> None:
    with pytest.raises(InvalidAppError) as info:
        validate_app(wrong("app"))
    assert info.value.field == "app"


def test_duplicate_role_names() -> None:
    err = _error(_app(_role(name="a"), _role(name="b"), _role(name="a")))
    assert err.field == "roles[2].name"
    assert "roles[0]" in str(err) and "unique" in str(err)


def test_role_names_that_collide_as_kubernetes_names() -> None:
    err = _error(_app(_role(name="my_role"), _role(name="My-Role")))
    assert err.field == "roles[1].name"
    assert "'my-role'" in str(err) and "'my_role'" in str(err)


R = "roles[0]"


@pytest.mark.parametrize(
    ("changes", "field", "fix"),
    [
        ({"name": ""}, f"{R}.name", "give every role a name"),
        ({"name": " "}, f"{R}.name", "give every role a name"),
        ({"image": ""}, f"{R}.image", "set image="),
        ({"image": None}, f"{R}.image", "set image="),
        ({"entrypoint": ""}, f"{R}.entrypoint", "entrypoint='python'"),
        ({"entrypoint": 5}, f"{R}.entrypoint", "entrypoint='python'"),
        ({"entrypoint": "${app_id}/run"}, f"{R}.entrypoint", "move it into args"),
        ({"args": "hello"}, f"{R}.args", "list of strings"),
        ({"args": ["--epochs", 3]}, f"{R}.args", "quote numbers"),
        ({"num_replicas": 0}, f"{R}.num_replicas", ">= 1"),
        ({"num_replicas": -2}, f"{R}.num_replicas", ">= 1"),
        ({"num_replicas": 1.0}, f"{R}.num_replicas", "integer"),
        ({"num_replicas": True}, f"{R}.num_replicas", "integer"),
        ({"num_replicas": "2"}, f"{R}.num_replicas", "integer"),
        ({"num_replicas": 2, "min_replicas": 3}, f"{R}.min_replicas", "lower min_replicas"),
        ({"min_replicas": 0}, f"{R}.min_replicas", ">= 1"),
        ({"min_replicas": "1"}, f"{R}.min_replicas", "integer"),
        ({"max_retries": -1}, f"{R}.max_retries", ">= 0"),
        ({"max_retries": None}, f"{R}.max_retries", ">= 0"),
        ({"retry_policy": "REPLICA"}, f"{R}.retry_policy", "one of ['REPLICA'"),
        ({"resource": None}, f"{R}.resource", "resource(h='cpu.small')"),
        ({"resource": Resource(cpu=-2, gpu=0, memMB=1)}, f"{R}.resource.cpu", ">= 0"),
        ({"resource": Resource(cpu=1, gpu=-3, memMB=1)}, f"{R}.resource.gpu", ">= 0"),
        ({"resource": Resource(cpu=1, gpu=0, memMB=-5)}, f"{R}.resource.memMB", ">= 0"),
        ({"resource": Resource(cpu=wrong("1"), gpu=0, memMB=1)}, f"{R}.resource.cpu", "number"),
        ({"resource": Resource(cpu=True, gpu=0, memMB=1)}, f"{R}.resource.cpu", "number"),
        (
            {"resource": Resource(cpu=float("nan"), gpu=0, memMB=1)},
            f"{R}.resource.cpu",
            ">= 0",
        ),
        (
            {"resource": Resource(cpu=float("inf"), gpu=0, memMB=1)},
            f"{R}.resource.cpu",
            ">= 0",
        ),
        (
            {"resource": Resource(cpu=1, gpu=wrong(0.5), memMB=1)},
            f"{R}.resource.gpu",
            "whole number",
        ),
        (
            {"resource": Resource(cpu=1, gpu=0, memMB=1, devices={"efa": -1})},
            f"{R}.resource.devices.efa",
            ">= 0",
        ),
        (
            {"resource": Resource(cpu=1, gpu=0, memMB=1, devices=wrong([]))},
            f"{R}.resource.devices",
            "mapping",
        ),
        (
            {"resource": Resource(cpu=1, gpu=0, memMB=1, capabilities=wrong(None))},
            f"{R}.resource.capabilities",
            "mapping",
        ),
        ({"env": ["A=1"]}, f"{R}.env", "mapping"),
        ({"env": {"1A": "x"}}, f"{R}.env", "not a valid environment variable name"),
        ({"env": {"A B": "x"}}, f"{R}.env", "not a valid environment variable name"),
        ({"env": {"A\n": "x"}}, f"{R}.env", "not a valid environment variable name"),
        ({"env": {"N": 3}}, f"{R}.env.N", "quote it, e.g. N='3'"),
        ({"env": {"N": "${nope}"}}, f"{R}.env.N", "unknown macro ${nope}"),
        ({"port_map": {"c10d": 0}}, f"{R}.port_map.c10d", "1..65535"),
        ({"port_map": {"c10d": 70000}}, f"{R}.port_map.c10d", "1..65535"),
        ({"port_map": {"c10d": "80"}}, f"{R}.port_map.c10d", "1..65535"),
        ({"port_map": {"": 80}}, f"{R}.port_map", "non-empty"),
        ({"port_map": [80]}, f"{R}.port_map", "mapping"),
        ({"metadata": "x"}, f"{R}.metadata", "mapping"),
        ({"metadata": {"a": {"b": ["${oops}"]}}}, f"{R}.metadata.a.b[0]", "unknown macro"),
        ({"mounts": "type=bind,src=/a,dst=/b"}, f"{R}.mounts", "parse_mounts"),
        ({"mounts": ["type=bind,src=/a,dst=/b"]}, f"{R}.mounts[0]", "is not a mount"),
        ({"mounts": [BindMount("", "/b")]}, f"{R}.mounts[0]", "src_path"),
        ({"mounts": [BindMount("/a", "b")]}, f"{R}.mounts[0]", "absolute"),
        ({"mounts": [BindMount("/a", "/b", wrong("yes"))]}, f"{R}.mounts[0]", "true or false"),
        ({"mounts": [VolumeMount("", "/b")]}, f"{R}.mounts[0]", "volume or claim name"),
        ({"mounts": [VolumeMount("v", "")]}, f"{R}.mounts[0]", "absolute"),
        ({"mounts": [DeviceMount("fuse", "/dev/fuse")]}, f"{R}.mounts[0]", "/dev/fuse"),
        ({"mounts": [DeviceMount("/dev/fuse", "x")]}, f"{R}.mounts[0]", "absolute"),
        ({"mounts": [DeviceMount("/dev/f", "/f", "rx")]}, f"{R}.mounts[0]", "r, w, m"),
        ({"mounts": [DeviceMount("/dev/f", "/f", "")]}, f"{R}.mounts[0]", "r, w, m"),
        ({"workspace": 3}, f"{R}.workspace", "directory path"),
    ],
)
def test_role_errors_name_the_field_and_the_fix(
    changes: dict[str, Any], field: str, fix: str
) -> None:
    err = _error(_app(_role(**changes)))
    assert err.field == field
    assert fix in str(err), str(err)
    assert str(err).startswith(f"{field}: ")
    assert isinstance(err, ValueError) and isinstance(err, TorchXProviderError)


@pytest.mark.parametrize(
    "arg",
    ["${app}", "${APP_ID}", "${ replica_id }", "${}", "${HOME}", "$$${x}", "${a ${app_id}"],
)
def test_unknown_macros(arg: str) -> None:
    err = _error(_app(_role(args=["ok", arg])))
    assert err.field == "roles[0].args[1]"
    assert "unknown macro" in err.message
    assert "${app_id}" in err.message  # lists the known ones
    assert "write $${" in err.message  # and how to pass a literal through


@pytest.mark.parametrize(
    "arg",
    ["$${HOME}", "$HOME", "${app_id}${replica_id}", "$$${app_id}", "$$$${x}", "${rank0_env", "a$"],
)
def test_what_is_not_an_unknown_macro(arg: str) -> None:
    validate_app(_app(_role(args=[arg])))


def test_escaped_dollars_in_entrypoint_are_fine() -> None:
    validate_app(_app(_role(entrypoint="$$HOME/bin/run")))


def test_errors_point_at_the_right_role() -> None:
    err = _error(_app(_role(name="a"), _role(name="b", num_replicas=0)))
    assert err.field == "roles[1].num_replicas"


def test_validate_role_uses_the_given_prefix() -> None:
    with pytest.raises(InvalidAppError) as info:
        validate_role(_role(image=""), where="x")
    assert info.value.field == "x.image"
    with pytest.raises(InvalidAppError) as info:
        validate_role(wrong("trainer"))
    assert info.value.field == "role"


def test_minus_one_is_not_set_only_for_the_whole_resource() -> None:
    validate_role(_role(resource=specs.NULL_RESOURCE))
    validate_role(_role(resource=Resource(cpu=0, gpu=0, memMB=0)))
    for partial in (Resource(cpu=2, gpu=-1, memMB=-1), Resource(cpu=-1, gpu=0, memMB=64)):
        with pytest.raises(InvalidAppError, match="give 0 to ask for none") as info:
            validate_role(_role(resource=partial))
        assert info.value.field in ("role.resource.gpu", "role.resource.cpu")


def test_validation_does_not_modify_the_app() -> None:
    app = _app(_role(args=["${app_id}"], env={"A": "${replica_id}"}))
    before = dataclasses.replace(app, roles=[dataclasses.replace(r) for r in app.roles])
    validate_app(app)
    assert app == before
