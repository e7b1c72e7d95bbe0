"""Looking up and running built-in components by name."""

from __future__ import annotations

from typing import Any

import pytest

from torchx_provider import specs
from torchx_provider.components import dist, get_component, list_components, run_component, utils
from torchx_provider.errors import InvalidAppError
from torchx_provider.specs import AppDef


def test_list_components() -> None:
    assert list_components() == [
        "dist.ddp",
        "dist.spmd",
        "utils.booth",
        "utils.copy",
        "utils.echo",
        "utils.python",
        "utils.sh",
        "utils.touch",
    ]


def test_get_component() -> None:
    assert get_component("utils.echo") is utils.echo
    assert get_component("dist.ddp") is dist.ddp


@pytest.mark.parametrize("name", ["echo", "utils.nope", "dist.parse_j", "", "torchx.echo"])
def test_get_component_unknown(name: str) -> None:
    with pytest.raises(InvalidAppError) as info:
        get_component(name)
    assert info.value.field == "app"
    assert "utils.echo" in str(info.value)  # lists what exists


def test_run_component_with_keywords() -> None:
    app = run_component("utils.echo", {"msg": "hi", "num_replicas": 2})
    assert app.roles[0].args == ["hi"] and app.roles[0].num_replicas == 2


def test_run_component_with_positional_list() -> None:
    assert run_component("utils.sh", ["echo", "a b"]).roles[0].args == ["-c", "echo 'a b'"]
    assert run_component("utils.echo").roles[0].args == ["hello world"]
    assert run_component("utils.echo", []).name == "echo"


def test_run_component_varargs_from_the_dict_key_named_like_the_parameter() -> None:
    app = run_component(
        "dist.ddp", {"script": "train.py", "j": "2x2", "script_args": ["--lr", "0.1"]}
    )
    assert app.roles[0].args[1].endswith("train.py --lr 0.1")
    assert run_component("utils.sh", {"args": "exit 3"}).roles[0].args == ["-c", "exit 3"]
    assert run_component("utils.python", {"m": "x", "args": ("-v",)}).roles[0].args == [
        "-m",
        "x",
        "-v",
    ]


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("utils.echo", {"mesage": "typo"}),
        ("utils.echo", ["a", "b", "c", "d"]),
        ("dist.ddp", {"script": "t.py", "nodes": 2}),
    ],
)
def test_run_component_bad_arguments_show_the_signature(name: str, args: Any) -> None:
    with pytest.raises(InvalidAppError) as info:
        run_component(name, args)
    assert info.value.field == "app_args"
    assert f"its signature is {name}(" in str(info.value)


def test_run_component_validates_the_app() -> None:
    with pytest.raises(InvalidAppError) as info:
        run_component("utils.echo", {"num_replicas": 0})
    assert info.value.field == "roles[0].num_replicas"


def test_run_component_lets_component_errors_through(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(**_: Any) -> AppDef:
        raise TypeError("a bug inside the component")

    monkeypatch.setattr(utils, "echo", broken)
    # A TypeError raised by the component is a bug, not "bad arguments": it is not rewritten.
    with pytest.raises(TypeError, match="a bug inside"):
        run_component("utils.echo", {})


def test_every_component_returns_a_valid_app_with_defaults() -> None:
    required: dict[str, Any] = {
        "utils.sh": ["true"],
        "utils.python": {"c": "pass"},
        "dist.ddp": {"script": "t.py"},
        "dist.spmd": {"script": "t.py"},
        "utils.touch": {"file": "/tmp/x"},
        "utils.copy": {"src": "s3://b/a", "dst": "/tmp/a"},
        "utils.booth": {"x1": 1.0, "x2": 3.0},
    }
    for name in list_components():
        app = run_component(name, required.get(name))
        assert isinstance(app, specs.AppDef) and app.roles
