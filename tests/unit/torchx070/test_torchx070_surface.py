"""TorchX 0.7.0's surface, compared with TorchX itself: what its users write works here.

TorchX runs in its own virtual environment (``scripts/torchx_venv.py``; ``.ci/run`` makes
it), never next to this package: ``dump_surface.py`` prints, from there, every built-in
component's parameters, every run option of the ``kubernetes``, ``kubernetes_mcad`` and
``local_docker`` schedulers, every named resource (entry points included) and what its
``parse_mounts`` makes of each mount below. Each is checked against this package: accepted
and the same, or listed here with the difference and refused with an error naming it.

Without that environment the tests skip with the reason -- and fail in CI.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from torchx070_env import dumped_by_torchx

from torchx_provider import specs
from torchx_provider.backends import get_backend
from torchx_provider.components import get_component, list_components, run_component
from torchx_provider.errors import InvalidAppError

DUMP = Path(__file__).with_name("dump_surface.py")

#: Mount token lists as TorchX's CLI passes them (``--mounts`` split on commas).
MOUNTS: list[list[str]] = [
    ["type=bind", "src=/data", "dst=/data", "readonly"],
    ["type=bind", "src=~/data", "dst=/data"],
    ["type=bind", "source=~", "target=/home/me", "read_only"],
    ["type=volume", "src=ckpt", "dst=/ckpt"],
    ["type=volume", "source=ckpt", "destination=/ckpt", "readonly"],
    ["type=device", "src=/dev/fuse"],
    ["type=device", "src=/dev/fuse", "dst=/dev/f", "perm=rw"],
    ["type=bind", "src=/a", "dst=/b", "type=volume", "src=v", "dst=/c", "type=device", "src=/d"],
    ["src=/a", "dst=/b"],
    ["type=nfs", "src=/a", "dst=/b"],
    ["type=device", "src=/dev/x", "perm=rwx"],
    ["type=bind", "src=/a", "dst=/b", "size=1"],
    ["type=bind", "dst=/b"],
]

#: TorchX 0.7.0 components this package does not ship, and why; asking for one is refused
#: with that reason.
NOT_SHIPPED = {
    "metrics.tensorboard": "TorchX's TensorBoard app",
    "serve.torchserve": "TorchX's TorchServe upload app",
    "utils.binary": "TorchX's test component (image '<NONE>')",
}

#: (component, parameter) -> how this package's default differs from TorchX 0.7.0's, on
#: purpose. Everything else must match: name, kind (positional, keyword-only, *args),
#: required or not, default.
DEFAULTS_DIFFER = {
    ("utils.echo", "image"): "busybox:latest: echo needs no 2 GB image",
    ("utils.sh", "image"): "busybox:latest: sh needs no 2 GB image",
    ("utils.touch", "image"): "busybox:latest: touch needs no 2 GB image",
    ("utils.python", "image"): "python:3.11-slim: a plain interpreter",
    ("utils.python", "name"): "'python' instead of 'torchx_utils_python'",
    ("dist.ddp", "name"): "'ddp' instead of '/' (TorchX derives the name from the script)",
    ("dist.spmd", "name"): "'spmd' instead of '/' (TorchX derives the name from the script)",
}

#: (backend, run option) -> how this package differs, on purpose.
OPTIONS_DIFFER = {
    ("kubernetes", "namespace"): "None: the connection's namespace, else 'default'",
    ("kubernetes_mcad", "namespace"): "None: the connection's namespace, else 'default'",
}

_TYPES = {"List[str]": "list", "Dict[str, str]": "dict"}


@pytest.fixture(scope="module")
def torchx() -> dict[str, Any]:
    return dumped_by_torchx(DUMP, MOUNTS)


def test_every_torchx_component_is_shipped_or_refused_by_name(torchx: dict[str, Any]) -> None:
    theirs = set(torchx["components"])
    assert theirs == set(list_components()) | set(NOT_SHIPPED)
    for name, reason in NOT_SHIPPED.items():
        with pytest.raises(InvalidAppError, match=re.escape(f"{name} is a TorchX 0.7.0")):
            get_component(name)
        assert reason


# every component (tests/unit/components/test_components_registry.py lists them)
@pytest.mark.parametrize("component", list_components())
def test_component_takes_every_torchx_parameter(torchx: dict[str, Any], component: str) -> None:
    ours = inspect.signature(get_component(component)).parameters
    for param in torchx["components"][component]:
        name = param["name"]
        assert name in ours, f"{component} lacks TorchX's parameter {name!r}"
        mine = ours[name]
        assert mine.kind.name == param["kind"], (component, name)
        assert (mine.default is inspect.Parameter.empty) == param["required"], (component, name)
        if not param["required"] and (component, name) not in DEFAULTS_DIFFER:
            assert mine.default == param["default"], (component, name)


@pytest.mark.parametrize("backend", ["kubernetes", "kubernetes_mcad", "local_docker"])
def test_backend_takes_every_torchx_run_option(torchx: dict[str, Any], backend: str) -> None:
    ours = dict(get_backend(backend).options_class().run_opts())
    for name, theirs in torchx["run_options"][backend].items():
        assert name in ours, f"{backend} lacks TorchX's run option {name!r}"
        mine = ours[name]
        assert mine.opt_type.__name__ == _TYPES.get(theirs["type"], theirs["type"]), name
        assert mine.is_required == theirs["required"], name
        if (backend, name) not in OPTIONS_DIFFER:
            assert mine.default == theirs["default"], name


def test_every_torchx_named_resource_is_the_same_size(torchx: dict[str, Any]) -> None:
    for name, theirs in torchx["named_resources"].items():
        assert dataclasses.asdict(specs.get_named_resource(name)) == theirs, name


@pytest.mark.parametrize("index", range(len(MOUNTS)), ids=lambda i: ",".join(MOUNTS[i]))
def test_mount_syntax_parses_as_torchx_parses_it(torchx: dict[str, Any], index: int) -> None:
    theirs = torchx["mounts"][index]
    if isinstance(theirs, dict):  # TorchX refuses it: so do we, before submission
        with pytest.raises(InvalidAppError):
            specs.parse_mounts(MOUNTS[index])
        return
    ours = [
        {"type": type(m).__name__, **dataclasses.asdict(m)}
        for m in specs.parse_mounts(MOUNTS[index])
    ]
    assert ours == theirs


def test_not_shipped_components_are_refused_through_run_component() -> None:
    with pytest.raises(InvalidAppError, match=r"metrics\.tensorboard is a TorchX"):
        run_component("metrics.tensorboard", {"logdir": "/logs"})
