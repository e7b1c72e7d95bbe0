"""``torchx.specs`` names compared with TorchX 0.7.0 itself: what its users import and call.

``dump_specs.py`` runs in TorchX's own environment (``scripts/torchx_venv.py``) and prints
what TorchX's ``specs`` does with the cases below: its exported names, Role's defaults, app
handles, ``get_type_name``, ``runopts.resolve``, ``AppStatus`` (text, repr, raise_for_status),
its exceptions and ``named_resources_aws``. This package must do the same, or the case is
listed here with the reason.

Without that environment the tests skip with the reason -- and fail in CI.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

import pytest
from app_status import app_status
from torchx070_env import dumped_by_torchx

from torchx_provider import specs
from torchx_provider.specs import named_resources_aws

DUMP = Path(__file__).with_name("dump_specs.py")

#: Names in ``torchx.specs.__all__`` this package does not export, and why.
NOT_PROVIDED = {
    "ALL": "the scheduler name 'all' of TorchX's runner; each operator runs on one backend",
    "UnknownAppException": "the schedulers raise UnknownAppError (a LookupError)",
    "UnknownSchedulerException": "an unknown scheduler is an InvalidOptionError",
    "materialize_appdef": "TorchX's CLI builder; components are called as functions",
}

#: Role fields whose default differs, and why.
ROLE_DIFFER = {
    "image": "'' instead of required: validation refuses it, and describe rebuilds roles "
    "without one",
    "base_image": "no such field: deprecated in TorchX 0.7.0 and never read",
}

#: Handles parsed TorchX's way, a few on purpose not (handle -> why).
HANDLES = [
    "kubernetes://torchx/default:echo-x1",
    "local_docker://airflow/echo-k3x9q2ab",
    "kubernetes_mcad://s/ns:a-1",
    "://s/a",
    "k8s:///",
    "k8s://s/",
    "k8s://s",
    "k8s:/s/a",
    "echo",
    "",
    "local_docker:///echo-x",
    "k8s://s/a/b",
    "k8s://s/a/",
    "k8s://s//a",
    "k8s://a:b/c/d:e",
    "vol cano://s/a",
    "a://b://c/d",
    "k8s://s/a\nb",
    " mcad://s/ns:a ",
]
HANDLES_DIFFER = {
    "vol cano://s/a": "refused: a scheduler name is letters, digits, '_' and '-'",
    "a://b://c/d": "refused: a scheduler name is letters, digits, '_' and '-'",
    "k8s://s/a\nb": "refused: TorchX drops what follows the line break",
    " mcad://s/ns:a ": "spaces around the handle are dropped",
}


TYPES = [
    "int",
    "str",
    "float",
    "bool",
    "list[str]",
    "dict[str, str]",
    "typing.List[str]",
    "typing.Dict[str, str]",
    "typing.Optional[str]",
    "str | None",
]

#: cfgs resolved against ``queue`` (str, required) and ``n`` (int, default 1) as TorchX does
#: (the same values, or the same error for the same option)...
RESOLVE_SAME: list[dict[str, Any]] = [
    {},
    {"queue": "q"},
    {"queue": "q", "n": None},
    {"queue": 3},
    {"queue": "q", "n": [1]},
    {"queue": "q", "n": 2.5},
]
#: ... and not, on purpose.
RESOLVE_DIFFER: list[tuple[dict[str, Any], str]] = [
    ({"queue": "q", "extra": 1}, "an unknown option is an error naming the valid ones"),
    ({"queue": "q", "n": "3"}, "a string is converted (Airflow templates render strings)"),
]
RESOLVE = RESOLVE_SAME + [cfg for cfg, _ in RESOLVE_DIFFER]


def _error(message: str, when: int = 1700000000, code: Any = 3) -> str:
    """TorchX's JSON error file of a replica."""
    return json.dumps(
        {"message": {"message": message, "extraInfo": {"timestamp": when}, "errorCode": code}}
    )


_RPC = (
    "torch failed: RuntimeError('On WorkerInfo(id=1, name=trainer:0:0):\n"
    'Traceback (most recent call last):\n  File "x.py", line 3\nValueError: bad\n\') and more'
)
_NESTED = (
    "c10::Error: CUDA error: an illegal memory access was encountered\n"
    "Exception raised from create_event_internal at alloc.cpp:733 (most recent call first):"
)

STATUSES: list[dict[str, Any]] = [
    {"state": "SUCCEEDED"},
    {
        "state": "FAILED",
        "num_restarts": 2,
        "msg": "replica trainer/1 exited with 1",
        "structured_error_msg": _error("out of memory"),
        "ui_url": "https://dash/job/1",
    },
    {"state": "CANCELLED", "msg": "cancelled by the user"},
    {"state": "RUNNING", "ui_url": "https://dash/job/2"},
    {
        "state": "FAILED",
        "filter": ["ps"],
        "roles": [
            {
                "role": "trainer",
                "replicas": [
                    {"id": 2, "state": "CANCELLED", "role": "trainer", "hostname": "h2"},
                    {
                        "id": 0,
                        "state": "FAILED",
                        "role": "trainer",
                        "hostname": "h0",
                        "structured_error_msg": _error("boom " * 50 + "end"),
                    },
                    {
                        "id": 1,
                        "state": "FAILED",
                        "role": "trainer",
                        "hostname": "h1",
                        "structured_error_msg": _error(_RPC, code=0),
                    },
                    {"id": 3, "state": "FAILED", "role": "trainer", "hostname": "h3"},
                ],
            },
            {
                "role": "ps",
                "replicas": [
                    {"id": 0, "state": "SUCCEEDED", "role": "ps", "hostname": "p0"},
                    {
                        "id": 1,
                        "state": "RUNNING",
                        "role": "ps",
                        "hostname": "p1",
                        "structured_error_msg": _error(_NESTED, code=None),
                    },
                    {
                        "id": 2,
                        "state": "FAILED",
                        "role": "ps",
                        "hostname": "p2",
                        "structured_error_msg": _error(""),
                    },
                ],
            },
        ],
    },
]


@pytest.fixture(scope="module")
def torchx() -> dict[str, Any]:
    cases = {"handles": HANDLES, "types": TYPES, "resolve": RESOLVE, "statuses": STATUSES}
    return dumped_by_torchx(DUMP, cases)


def _outcome(call: Any) -> dict[str, Any]:
    try:
        value = call()
    except Exception as e:
        return {"error": type(e).__name__, "cfg_key": getattr(e, "cfg_key", None)}
    return {"value": json.loads(json.dumps(value))}


def test_every_torchx_specs_name_is_exported_or_listed(torchx: dict[str, Any]) -> None:
    ours = set(specs.__all__)
    assert set(torchx["all"]) - ours == set(NOT_PROVIDED)


def test_role_defaults_are_torchx_s(torchx: dict[str, Any]) -> None:
    assert torchx["missing"] == specs.MISSING
    ours = {f.name: f for f in dataclasses.fields(specs.Role)}
    for name, theirs in torchx["role"].items():
        if name in ROLE_DIFFER:
            assert name not in ours or theirs["required"], f"{name} is TorchX's: unlist it"
            continue
        mine = ours[name]
        if theirs["required"]:
            assert mine.default is dataclasses.MISSING, name
            assert mine.default_factory is dataclasses.MISSING, name
            continue
        factory = mine.default_factory
        default = factory() if factory is not dataclasses.MISSING else mine.default
        if dataclasses.is_dataclass(default) and not isinstance(default, type):
            default = dataclasses.asdict(default)
        assert default == theirs["default"], name


@pytest.mark.parametrize("index", range(len(HANDLES)), ids=lambda i: repr(HANDLES[i]))
def test_app_handles_parse_as_torchx_parses_them(torchx: dict[str, Any], index: int) -> None:
    handle = HANDLES[index]
    theirs = torchx["handles"][index]
    mine = _outcome(lambda: list(specs.parse_app_handle(handle)))
    if handle in HANDLES_DIFFER:
        assert mine != theirs, f"{handle!r} is parsed as TorchX does: drop it from the list"
        if "error" in mine:  # refused here only: TorchX's text, then why
            message = _error_text(lambda: specs.parse_app_handle(handle))
            assert message.startswith(f"{handle} is not of the form: "), message
    elif "error" in theirs:
        assert theirs["error"] == "MalformedAppHandleException"
        assert mine["error"] == "MalformedAppHandleException", handle
        mine_text = _error_text(lambda: specs.parse_app_handle(handle))
        assert mine_text == torchx["handle_errors"][index], handle
    else:
        assert mine == theirs, handle


def _error_text(call: Any) -> str:
    try:
        call()
    except Exception as e:
        return str(e)
    raise AssertionError("no error")


def test_get_type_name_names_types_as_torchx_does(torchx: dict[str, Any]) -> None:
    """A class by its name; a ``typing`` form by ``str(tp)``, which is the interpreter's
    (Python 3.14 prints ``typing.Optional[str]`` as ``str | None``). TorchX's environment runs
    the machine's Python and the tests may run on another: where TorchX gave its interpreter's
    ``str(tp)``, ours must give this interpreter's."""
    for t, theirs, printed in zip(TYPES, torchx["types"], torchx["type_strs"], strict=True):
        tp = eval(t, {"typing": typing})
        want = str(tp) if theirs == printed else theirs
        assert specs.get_type_name(tp) == want, t


@pytest.mark.parametrize("index", range(len(RESOLVE)), ids=lambda i: repr(RESOLVE[i]))
def test_run_options_resolve_and_fail_as_torchx_s(torchx: dict[str, Any], index: int) -> None:
    opts = specs.runopts()
    opts.add("queue", str, "queue", required=True)
    opts.add("n", int, "n", default=1)
    mine = _outcome(lambda: opts.resolve(RESOLVE[index]))
    theirs = torchx["resolve"][index]
    if index >= len(RESOLVE_SAME):
        assert mine != theirs
        assert "error" in mine or "error" in theirs
    else:
        assert mine == theirs


@pytest.mark.parametrize("index", range(len(STATUSES)))
def test_app_status_reads_as_torchx_s(torchx: dict[str, Any], index: int) -> None:
    case, theirs = STATUSES[index], torchx["statuses"][index]
    status: specs.AppStatus = app_status(specs, case)
    assert status.format() == theirs["format"]
    assert status.format(filter_roles=case.get("filter")) == theirs["filtered"]
    assert status.is_terminal() == theirs["terminal"]
    if theirs["repr"] is not None:
        assert repr(status) == theirs["repr"]
    if theirs["raised"] is None:
        status.raise_for_status()
        return
    with pytest.raises(specs.AppStatusError) as info:
        status.raise_for_status()
    assert info.value.status is status
    if theirs["repr"] is not None:
        assert str(info.value) == theirs["raised"]["message"]


def test_exceptions_are_caught_by_what_catches_torchx_s(torchx: dict[str, Any]) -> None:
    dumped = torchx["exceptions"]
    for name in ("InvalidRunConfigException", "MalformedAppHandleException", "AppStatusError"):
        ours = getattr(specs, name)
        for base in dumped[name]:
            assert issubclass(ours, getattr(builtins, base)), (name, base)
    given = specs.InvalidRunConfigException("Run option: n, bad", "n", {"n": "x"})
    empty = specs.InvalidRunConfigException("Required run option: queue", "queue", {})
    assert [[str(given), given.cfg_key], [str(empty), empty.cfg_key]] == dumped[
        "run_config_messages"
    ]


def test_named_resources_aws_is_torchx_s(torchx: dict[str, Any]) -> None:
    theirs = torchx["aws"]
    table = named_resources_aws.NAMED_RESOURCES
    assert list(table) == theirs["names"]
    assert {n: dataclasses.asdict(f()) for n, f in table.items()} == theirs["resources"]
    for name, resource in theirs["functions"].items():
        assert dataclasses.asdict(getattr(named_resources_aws, name)()) == resource, name
    for name, value in theirs["constants"].items():
        assert getattr(named_resources_aws, name) == value, name
    g5 = named_resources_aws.aws_g5_12xlarge()
    assert named_resources_aws.instance_type_from_resource(g5) == theirs["instance_type"]
    for name, resource in theirs["resources"].items():
        assert dataclasses.asdict(specs.named_resources[name]) == resource, name
