"""``parse_mounts``: Docker's --mount syntax, as TorchX components accept it."""

from __future__ import annotations

from typing import Any

import pytest

from torchx_provider.errors import InvalidAppError
from torchx_provider.specs import BindMount, DeviceMount, VolumeMount, parse_mounts


@pytest.mark.parametrize(
    ("opts", "expected"),
    [
        ("type=bind,src=/data,dst=/mnt", [BindMount("/data", "/mnt")]),
        ("type=bind,src=/data,dst=/mnt,readonly", [BindMount("/data", "/mnt", True)]),
        ("type=bind,src=/data,dst=/mnt,ro", [BindMount("/data", "/mnt", True)]),
        ("type=bind,src=/data,dst=/mnt,read_only=true", [BindMount("/data", "/mnt", True)]),
        ("type=bind,src=/data,dst=/mnt,readonly=false", [BindMount("/data", "/mnt", False)]),
        ("type=bind,source=/a,target=/b", [BindMount("/a", "/b")]),
        ("type=bind,source=/a,destination=/b", [BindMount("/a", "/b")]),
        ("TYPE=BIND,SRC=/a,DST=/b", [BindMount("/a", "/b")]),
        (" type = bind , src=/a , dst=/b ", [BindMount("/a", "/b")]),
        ("type=volume,src=ckpt,dst=/ckpt", [VolumeMount("ckpt", "/ckpt")]),
        ("type=volume,src=ckpt,dst=/ckpt,readonly", [VolumeMount("ckpt", "/ckpt", True)]),
        ("type=device,src=/dev/fuse", [DeviceMount("/dev/fuse", "/dev/fuse", "rwm")]),
        ("type=device,src=/dev/fuse,dst=/dev/f,perm=r", [DeviceMount("/dev/fuse", "/dev/f", "r")]),
        ("type=device,src=/dev/x,permissions=rw", [DeviceMount("/dev/x", "/dev/x", "rw")]),
        ("", []),
    ],
)
def test_parse_one_string(opts: str, expected: list[object]) -> None:
    assert parse_mounts(opts) == expected
    assert parse_mounts([opts]) == expected


def test_several_mounts_and_torchx_split_form_agree() -> None:
    joined = "type=bind,src=/a,dst=/b,readonly,type=volume,src=v,dst=/v"
    expected = [BindMount("/a", "/b", True), VolumeMount("v", "/v")]
    assert parse_mounts(joined) == expected
    assert parse_mounts(joined.split(",")) == expected  # TorchX's CLI hands over pieces
    assert parse_mounts(["type=bind,src=/a,dst=/b,readonly", "type=volume,src=v,dst=/v"]) == (
        expected
    )
    assert parse_mounts(iter(joined.split(","))) == expected


@pytest.mark.parametrize(
    ("opts", "field", "fragment"),
    [
        ("src=/a,dst=/b", "mounts", "before any type"),
        ("type=bind,color=red", "mounts", "unknown mount option 'color=red'"),
        ("type=bind,src,dst=/b", "mounts", "needs a value"),
        ("type=bind,src=,dst=/b", "mounts", "needs a value"),
        ("type=bind,src=/a,dst=/b,readonly=maybe", "mounts", "readonly takes no value"),
        ("type=tmpfs,src=/a,dst=/b", "mounts[0]", "unknown mount type 'tmpfs'"),
        ("type=bind,src=/a,dst=/b,type=nfs,src=x,dst=/y", "mounts[1]", "unknown mount type"),
        ("type=bind,dst=/b", "mounts[0]", "needs src"),
        ("type=bind,src=/a", "mounts[0]", "needs dst"),
        ("type=volume,src=v", "mounts[0]", "needs dst"),
        ("type=device,dst=/dev/x", "mounts[0]", "needs src"),
        ("type=bind,src=/a,dst=/b,perm=r", "mounts[0]", "do not apply to type=bind"),
        ("type=device,src=/dev/x,readonly", "mounts[0]", "do not apply to type=device"),
        ("type=device,src=/dev/x,perm=rwx", "mounts[0]", "only the letters r, w and m"),
    ],
)
def test_invalid_mount_strings_name_the_problem(opts: str, field: str, fragment: str) -> None:
    with pytest.raises(InvalidAppError) as info:
        parse_mounts(opts)
    assert info.value.field == field
    assert fragment in str(info.value)


def test_every_syntax_error_shows_the_syntax() -> None:
    with pytest.raises(InvalidAppError, match=r"type=bind,src=<host path>,dst=<path>"):
        parse_mounts("type=bind,src=/a")


def test_non_string_items_are_rejected() -> None:
    with pytest.raises(InvalidAppError) as info:
        not_a_string: Any = 3
        parse_mounts(["type=bind,src=/a,dst=/b", not_a_string])
    assert info.value.field == "mounts[1]"
    assert "must be strings" in str(info.value)


def test_value_may_contain_equals_sign() -> None:
    assert parse_mounts("type=volume,src=a=b,dst=/c") == [VolumeMount("a=b", "/c")]
