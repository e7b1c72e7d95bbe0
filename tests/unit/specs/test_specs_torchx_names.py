"""The ``torchx.specs`` names a DAG or component imports: there, and doing what TorchX's do.

Compared with TorchX 0.7.0 itself in ``tests/unit/torchx070/test_torchx070_specs.py``; here
on their own, without TorchX.
"""

from __future__ import annotations

import json
import pickle
import sys
import typing
import warnings
from datetime import datetime
from typing import Any

import pytest
import yaml

from torchx_provider import specs
from torchx_provider.errors import InvalidAppError, InvalidOptionError, TorchXProviderError
from torchx_provider.operators.submission import STATE_STORE_KEY, SubmissionPlan, live_apps
from torchx_provider.schedulers.api import DescribeAppResponse
from torchx_provider.specs import AppState, ReplicaStatus, RoleStatus
from torchx_provider.specs.names import read_app_handle

NAMES = [
    "AppHandle",
    "AppStatus",
    "AppStatusError",
    "InvalidRunConfigException",
    "MISSING",
    "MalformedAppHandleException",
    "get_type_name",
    "named_resources_aws",
]


@pytest.mark.parametrize("name", NAMES)
def test_the_name_imports_from_specs(name: str) -> None:
    assert name in specs.__all__
    namespace: dict[str, Any] = {}
    exec(f"from torchx_provider.specs import {name}", namespace)
    assert namespace[name] is getattr(specs, name)


def test_named_resources_aws_imports_as_a_module() -> None:
    from torchx_provider.specs.named_resources_aws import (
        EFA_DEVICE,
        K8S_ITYPE,
        NAMED_RESOURCES,
        aws_p3_2xlarge,
    )

    assert specs.named_resources_aws.NAMED_RESOURCES is NAMED_RESOURCES
    assert aws_p3_2xlarge().capabilities == {K8S_ITYPE: "p3.2xlarge"}
    assert EFA_DEVICE == "vpc.amazonaws.com/efa"
    assert specs.MISSING == "<MISSING>"


# -- MISSING and Role's defaults --------------------------------------------------------------


def test_a_role_s_entrypoint_defaults_to_missing() -> None:
    role = specs.Role("trainer", image="busybox")
    assert role.entrypoint is specs.MISSING
    assert specs.MISSING == "<MISSING>"


def test_a_missing_entrypoint_is_refused_before_submission() -> None:
    app = specs.AppDef("a", roles=[specs.Role("trainer", image="busybox", args=["x"])])
    with pytest.raises(InvalidAppError) as info:
        app.validate()
    assert info.value.field == "roles[0].entrypoint"
    assert "has no entrypoint" in str(info.value)
    with pytest.raises(InvalidAppError, match="has no entrypoint"):
        specs.validate_role(specs.Role("r", image="busybox", entrypoint=specs.MISSING))
    specs.validate_role(specs.Role("r", image="busybox", entrypoint="echo"))


def test_a_role_with_the_default_entrypoint_round_trips_as_a_dict() -> None:
    role = specs.Role("trainer", image="busybox")
    assert specs.role_to_dict(role)["entrypoint"] == specs.MISSING
    assert specs.role_from_dict(specs.role_to_dict(role)) == role


# -- app handles ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "handle",
    ["", "echo-x", "volcano:/s/a", "volcano://s", "volcano://s/", "://s/a", "k8s:///", 3, None],
)
def test_a_malformed_handle_raises_torchx_s_exception(handle: Any) -> None:
    with pytest.raises(specs.MalformedAppHandleException) as info:
        specs.parse_app_handle(handle)
    e = info.value
    # what callers of this package and of TorchX catch alike
    assert isinstance(e, InvalidAppError | ValueError | TorchXProviderError | Exception)
    assert e.app_handle == handle and e.field == "app_handle"
    assert str(e) == f"{handle} is not of the form: <scheduler_backend>://<session_name>/<app_id>"


def test_malformed_handle_exception_is_made_as_torchx_makes_it() -> None:
    e = specs.MalformedAppHandleException("echo-x")
    assert str(e) == "echo-x is not of the form: <scheduler_backend>://<session_name>/<app_id>"
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is type(e) and str(again) == str(e) and again.app_handle == "echo-x"
    with pytest.raises(InvalidAppError):
        raise e


@pytest.mark.parametrize("backend", ["kubernetes", "kubernetes_mcad", "local_docker", "fake"])
def test_handles_with_an_empty_session_are_torchx_s_malformed_but_the_operators_read_them(
    backend: str,
) -> None:
    # What the operators push to XCom and keep in task_state_store with session_name="".
    handle = specs.make_app_handle(backend, "", "default:echo-k3x9q2ab")
    with pytest.raises(specs.MalformedAppHandleException):
        specs.parse_app_handle(handle)
    assert read_app_handle(handle) == (backend, "", "default:echo-k3x9q2ab")


def test_a_retry_reattaches_through_a_stored_handle_with_an_empty_session() -> None:
    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.schedulers.labels import TaskInstanceKey

    class Store:
        def get(self, key: str) -> str | None:
            return "local_docker:///echo-abc123" if key == STATE_STORE_KEY else None

    class Scheduler:
        def describe(self, app_id: str) -> DescribeAppResponse:
            assert app_id == "echo-abc123"
            return DescribeAppResponse(app_id=app_id, state=AppState.RUNNING)

        def find_apps(self, *args: Any) -> list[Any]:
            return []

    scheduler: Any = Scheduler()  # only what finding a stored handle's app asks
    unread: Any = None  # the parts of the plan finding it must not read
    plan = SubmissionPlan(
        target=BackendTarget(backend="local_docker"),
        scheduler=scheduler,
        app=unread,
        cfg={},
        dryrun=unread,
        ti_key=TaskInstanceKey("d", "t", "r", -1, 2),
    )
    assert live_apps(plan, Store(), None).resumable == ["echo-abc123"]


def test_app_handle_is_a_string_type() -> None:
    handle: specs.AppHandle = specs.make_app_handle("local_docker", "s", "echo-x")
    assert specs.AppHandle is str and isinstance(handle, specs.AppHandle)


# -- run options --------------------------------------------------------------------------------


def _opts() -> specs.runopts:
    opts = specs.runopts()
    opts.add("queue", str, "the queue", required=True)
    opts.add("n", int, "a number", default=1)
    return opts


@pytest.mark.parametrize(
    ("cfg", "key"),
    [({}, "queue"), ({"queue": "q", "n": [1]}, "n"), ({"queue": "q", "nn": 2}, "nn")],
)
def test_run_option_errors_are_invalid_run_config_exceptions(cfg: dict[str, Any], key: str) -> None:
    with pytest.raises(specs.InvalidRunConfigException) as info:
        _opts().resolve(cfg)
    assert info.value.cfg_key == info.value.option == key
    assert isinstance(info.value, InvalidOptionError)


def test_an_unknown_run_option_stays_an_error() -> None:
    with pytest.raises(specs.InvalidRunConfigException, match=r"did you mean 'queue'"):
        _opts().resolve({"queue": "q", "queu": "r"})
    with pytest.raises(specs.InvalidRunConfigException, match="unknown run option"):
        _opts().cfg_from_str("queue=q,nope=1")
    with pytest.raises(specs.InvalidRunConfigException, match="is not key=value"):
        _opts().cfg_from_str("just-a-value")


def test_invalid_run_config_exception_is_made_as_torchx_makes_it() -> None:
    e = specs.InvalidRunConfigException("Run option: n, must be int", "n", {"n": "x"})
    assert str(e) == "Run option: n, must be int. Given: {'n': 'x'}"
    assert e.cfg_key == "n"
    assert str(specs.InvalidRunConfigException("r", "k", None)) == "r. Given: <EMPTY>"
    assert str(specs.InvalidRunConfigException("r", "k")) == "r"
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is type(e) and str(again) == str(e) and again.cfg_key == "n"


def test_get_type_name() -> None:
    assert specs.get_type_name(int) == "int"
    assert specs.get_type_name(list[str]) == "list"
    assert specs.get_type_name(typing.List[str]) == "typing.List[str]"  # noqa: UP006
    # str(tp), as TorchX: the interpreter's text, which Python 3.14 writes as the | form
    optional = "str | None" if sys.version_info >= (3, 14) else "typing.Optional[str]"
    assert specs.get_type_name(typing.Optional[str]) == optional  # noqa: UP045
    assert specs.get_type_name(str | None) == "str | None"


# -- AppStatus ------------------------------------------------------------------------------


def _error_file(message: str, when: int = 1700000000, code: Any = 3) -> str:
    return json.dumps(
        {"message": {"message": message, "extraInfo": {"timestamp": when}, "errorCode": code}}
    )


def test_app_status_defaults_and_terminal_states() -> None:
    status = specs.AppStatus(AppState.RUNNING)
    assert (status.num_restarts, status.msg, status.structured_error_msg) == (0, "", "<NONE>")
    assert status.ui_url is None and status.roles == []
    assert not status.is_terminal()
    assert specs.AppStatus(AppState.CANCELLED).is_terminal()


@pytest.mark.parametrize("state", list(AppState))
def test_raise_for_status_raises_unless_succeeded(state: AppState) -> None:
    status = specs.AppStatus(state, msg="m")
    if state == AppState.SUCCEEDED:
        status.raise_for_status()
        return
    with pytest.raises(specs.AppStatusError) as info:
        status.raise_for_status()
    assert info.value.status is status
    assert str(info.value) == f"job did not succeed: {status!r}"
    assert isinstance(info.value, TorchXProviderError)
    again = pickle.loads(pickle.dumps(info.value))
    assert again.status == status and str(again) == str(info.value)


def test_format_shows_each_replica_and_its_error() -> None:
    long = "boom " * 40 + "end"
    status = specs.AppStatus(
        AppState.FAILED,
        num_restarts=1,
        msg="m",
        ui_url="http://x",
        roles=[
            RoleStatus(
                "t",
                [
                    ReplicaStatus(1, AppState.FAILED, "t", "h1"),
                    ReplicaStatus(0, AppState.RUNNING, "t", "h0", _error_file(long)),
                ],
            )
        ],
    )
    when = datetime.fromtimestamp(1700000000)
    pad = " " * 16
    assert status.format() == (
        "AppStatus:\n"
        "    State: FAILED\n"
        "    Num Restarts: 1\n"
        "    Roles: \n"
        " *t[0]:RUNNING (exitcode: 3)\n"
        f"        timestamp: {when}\n"
        "        hostname: h0\n"
        f"        error_msg: {'boom ' * 16}boom\n"
        f"{pad}{'boom ' * 15}boom\n"
        f"{pad}{'boom ' * 7}end\n"
        "  t[1]:FAILED (no reply file)\n"
        "    Msg: m\n"
        "    Structured Error Msg: <NONE>\n"
        "    UI URL: http://x\n"
        "    "
    )
    assert "Roles: \n    Msg" in status.format(filter_roles=["other"])


def test_format_shows_a_backend_s_plain_error_after_its_replica() -> None:
    # The backends here write text, not TorchX's JSON error file (TorchX prints such text
    # in place of the replica's line); an error file of another shape is text too.
    replica = ReplicaStatus(2, AppState.FAILED, "t", "h2", "OOMKilled: exit code 137")
    replica.exit_code = 137
    odd = ReplicaStatus(3, AppState.FAILED, "t", "h3", json.dumps({"message": "x"}))
    text = specs.AppStatus(AppState.FAILED, roles=[RoleStatus("t", [replica, odd])]).format()
    assert (
        "\n  t[2]:FAILED (exitcode: 137)\n"
        "        hostname: h2\n"
        "        error_msg: OOMKilled: exit code 137\n"
    ) in text
    assert '  t[3]:FAILED (exitcode: <N/A>)\n        hostname: h3\n        error_msg: {"' in text


def test_format_keeps_the_useful_part_of_nested_and_remote_errors() -> None:
    nested = "c10::Error: CUDA error\nException raised from alloc at a.cpp:7 (most recent call):"
    remote = "x RuntimeError('On WorkerInfo(id=1, name=w):\nTraceback\nValueError: bad\n') y"
    roles = [
        RoleStatus(
            "t",
            [
                ReplicaStatus(0, AppState.FAILED, "t", "h", _error_file(nested, code=0)),
                ReplicaStatus(1, AppState.FAILED, "t", "h", _error_file(remote)),
            ],
        )
    ]
    text = specs.AppStatus(AppState.FAILED, roles=roles).format()
    assert " *t[0]:FAILED (exitcode: <N/A>)\n" in text
    assert "        error_msg: c10::Error: CUDA error\n" in text
    assert "error_msg: RuntimeError('On WorkerInfo(id=1, name=w):\nTraceback\n" in text
    assert "') y" not in text


def test_repr_is_yaml_with_the_error_read_as_json() -> None:
    status = specs.AppStatus(
        AppState.FAILED,
        structured_error_msg=json.dumps({"code": 1}),
        roles=[RoleStatus("t", [ReplicaStatus(0, AppState.FAILED, "t", "h")])],
    )
    data = yaml.safe_load(repr(status))["AppStatus"]
    assert data["state"] == "FAILED (5)"
    assert data["structured_error_msg"] == {"code": 1}
    assert data["roles"][0]["replicas"][0]["state"] == "FAILED (5)"
    # a plain message is shown as it is (TorchX's repr raises on it)
    plain = specs.AppStatus(AppState.FAILED, structured_error_msg="disk full")
    assert yaml.safe_load(repr(plain))["AppStatus"]["structured_error_msg"] == "disk full"


# -- named_resources_aws -------------------------------------------------------------------------


def test_every_aws_resource_is_served_by_the_registry_fresh_each_time() -> None:
    aws = specs.named_resources_aws
    assert len(aws.NAMED_RESOURCES) == 26
    for name, factory in aws.NAMED_RESOURCES.items():
        first = factory()
        assert name == f"aws_{first.capabilities[aws.K8S_ITYPE]}"
        assert specs.named_resources[name] == first == specs.resource(h=name)
        first.capabilities["x"] = 1
        first.devices["y"] = 1
        assert factory() != first
        assert getattr(aws, factory.__name__) is factory


def test_aws_sizes_keep_torchx_s_memory_tax() -> None:
    aws = specs.named_resources_aws
    p4d = aws.aws_p4d_24xlarge()
    assert (p4d.cpu, p4d.gpu, p4d.memMB) == (96, 8, 1152 * int(1024 * 0.96))
    assert p4d.devices == {aws.EFA_DEVICE: 4}
    assert aws.aws_trn1_32xlarge().devices == {aws.EFA_DEVICE: 8, aws.NEURON_DEVICE: 16}


def test_instance_type_from_resource_warns_when_there_is_none() -> None:
    aws = specs.named_resources_aws
    assert aws.instance_type_from_resource(aws.aws_g5_xlarge()) == "g5.xlarge"
    with pytest.warns(UserWarning, match="names no instance type"):
        assert aws.instance_type_from_resource(specs.resource(cpu=1)) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        aws.instance_type_from_resource(aws.aws_t3_medium())
