"""``utils.echo``, ``utils.sh`` and ``utils.python``."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from torchx_provider import specs
from torchx_provider.components import utils
from torchx_provider.errors import InvalidAppError


def _values(replica_id: int) -> specs.macros.Values:
    return specs.macros.Values(
        img_root="/", app_id="app-1", replica_id=str(replica_id), rank0_env="RANK0_HOST"
    )


# -- echo ----------------------------------------------------------------------------------------


def test_echo_defaults() -> None:
    app = utils.echo()
    assert app.validate() is app
    assert app.name == "echo"
    (role,) = app.roles
    assert (role.name, role.image, role.entrypoint) == ("echo", utils.DEFAULT_SHELL_IMAGE, "echo")
    assert role.args == ["hello world"]
    assert role.num_replicas == 1
    assert role.resource == specs.Resource(cpu=1, gpu=0, memMB=64)


def test_echo_parameters_and_macros() -> None:
    app = utils.echo(msg="hi from ${replica_id}", image="alpine:3", num_replicas=3).validate()
    role = app.roles[0]
    assert role.image == "alpine:3" and role.num_replicas == 3
    assert [_values(i).apply(role).args for i in range(3)] == [
        ["hi from 0"],
        ["hi from 1"],
        ["hi from 2"],
    ]


def test_echo_invalid_replicas_fail_validation() -> None:
    with pytest.raises(InvalidAppError) as info:
        utils.echo(num_replicas=0).validate()
    assert info.value.field == "roles[0].num_replicas"


# -- sh ------------------------------------------------------------------------------------------


def test_sh_single_argument_is_verbatim_shell() -> None:
    app = utils.sh("echo $$HOSTNAME && exit 3").validate()
    role = app.roles[0]
    assert (app.name, role.name, role.entrypoint) == ("sh", "sh", "sh")
    assert role.args == ["-c", "echo $$HOSTNAME && exit 3"]
    assert _values(0).apply(role).args == ["-c", "echo $HOSTNAME && exit 3"]


def test_sh_several_arguments_are_quoted() -> None:
    role = utils.sh("echo", "a b", "it's").validate().roles[0]
    assert role.args[0] == "-c"
    assert shlex.split(role.args[1]) == ["echo", "a b", "it's"]


def test_sh_parameters() -> None:
    app = utils.sh(
        "true",
        image="alpine",
        num_replicas=2,
        cpu=0.5,
        gpu=1,
        memMB=256,
        env={"A": "1"},
        max_retries=2,
        mounts=["type=bind,src=/data,dst=/data,readonly"],
        name="setup",
    ).validate()
    role = app.roles[0]
    assert app.name == role.name == "setup"
    assert role.image == "alpine" and role.num_replicas == 2
    assert role.resource == specs.Resource(cpu=0.5, gpu=1, memMB=256)
    assert role.env == {"A": "1"} and role.max_retries == 2
    assert role.mounts == [specs.BindMount("/data", "/data", True)]


def test_sh_named_resource_wins() -> None:
    role = utils.sh("true", cpu=64, h="cpu.nano").roles[0]
    assert role.resource == specs.named_resources["cpu.nano"]


def test_sh_env_is_copied() -> None:
    env = {"A": "1"}
    role = utils.sh("true", env=env).roles[0]
    role.env["B"] = "2"
    assert env == {"A": "1"}


def test_sh_needs_a_command() -> None:
    with pytest.raises(InvalidAppError) as info:
        utils.sh()
    assert info.value.field == "app_args"


def test_sh_bad_mount() -> None:
    with pytest.raises(InvalidAppError, match="needs dst"):
        utils.sh("true", mounts=["type=bind,src=/a"])


# -- python --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "head"),
    [
        ({"m": "http.server"}, ["-m", "http.server"]),
        ({"c": "print(1)"}, ["-c", "print(1)"]),
        ({"script": "train.py"}, ["train.py"]),
    ],
)
def test_python_modes(kwargs: dict[str, Any], head: list[str]) -> None:
    app = utils.python("--x", "1", **kwargs).validate()
    role = app.roles[0]
    assert role.entrypoint == "python"
    assert role.args == [*head, "--x", "1"]
    assert role.image == utils.DEFAULT_PYTHON_IMAGE
    assert role.env == {"PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize(
    "kwargs", [{}, {"m": "a", "c": "b"}, {"m": "a", "script": "s"}, {"c": "", "script": "s"}]
)
def test_python_needs_exactly_one_program(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidAppError, match="exactly one of") as info:
        utils.python(**kwargs)
    assert info.value.field == "app_args"


def test_python_parameters() -> None:
    app = utils.python(
        m="train",
        image="py:3",
        name="trainer",
        cpu=4,
        gpu=2,
        memMB=4096,
        num_replicas=2,
        env={"PYTHONUNBUFFERED": "0", "X": "y"},
        mounts=["type=volume,src=ckpt,dst=/ckpt"],
    ).validate()
    role = app.roles[0]
    assert app.name == role.name == "trainer"
    assert role.resource == specs.Resource(cpu=4, gpu=2, memMB=4096)
    assert role.num_replicas == 2
    assert role.env == {"PYTHONUNBUFFERED": "0", "X": "y"}  # the caller's env wins
    assert role.mounts == [specs.VolumeMount("ckpt", "/ckpt")]
    assert (
        utils.python(m="x", h="gpu.small").roles[0].resource == specs.named_resources["gpu.small"]
    )


def test_component_docstrings_document_every_parameter() -> None:
    import inspect

    for fn in (utils.echo, utils.sh, utils.python):
        doc = inspect.getdoc(fn) or ""
        for name in inspect.signature(fn).parameters:
            assert name in doc, f"{fn.__name__} does not document {name}"


def test_sh_without_a_command_names_the_argument_and_shows_one() -> None:
    """TorchX 0.7.0 builds ``sh -c ''`` here; a task would run and do nothing."""
    with pytest.raises(InvalidAppError, match=r"sh needs a command, e\.g\. sh\(") as e:
        utils.sh()
    assert e.value.field == "app_args"
