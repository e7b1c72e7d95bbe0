"""The data classes of ``specs.api``: resources, macros, states, statuses, dry runs."""

from __future__ import annotations

from typing import Any

import pytest

from torchx_provider import specs
from torchx_provider.errors import InvalidAppError
from torchx_provider.specs.api import DEFAULT_CPU, DEFAULT_GPU, DEFAULT_MEM_MB


def _role(**kw: Any) -> specs.Role:
    base: dict[str, Any] = {"name": "trainer", "image": "busybox", "entrypoint": "echo"}
    base.update(kw)
    return specs.Role(**base)


# -- resources ---------------------------------------------------------------------------------


def test_resource_copy_merges_capabilities_and_does_not_share_dicts() -> None:
    original = specs.Resource(cpu=1, gpu=0, memMB=512, capabilities={"a": 1}, devices={"d": 1})
    copy = specs.Resource.copy(original, b=2, a=3)
    assert copy.capabilities == {"a": 3, "b": 2}
    assert original.capabilities == {"a": 1}
    copy.devices["d"] = 5
    assert original.devices == {"d": 1}
    assert (copy.cpu, copy.gpu, copy.memMB) == (1, 0, 512)


def test_resource_defaults_are_torchx_defaults() -> None:
    assert specs.resource() == specs.Resource(
        cpu=DEFAULT_CPU, gpu=DEFAULT_GPU, memMB=DEFAULT_MEM_MB
    )
    assert (DEFAULT_CPU, DEFAULT_GPU, DEFAULT_MEM_MB) == (2, 0, 1024)
    assert specs.resource(cpu=0.5, gpu=1, memMB=256) == specs.Resource(cpu=0.5, gpu=1, memMB=256)
    # Zero is a value, not "use the default".
    assert specs.resource(cpu=0, memMB=0) == specs.Resource(cpu=0, gpu=0, memMB=0)


def test_resource_named_wins_over_numbers() -> None:
    assert specs.resource(cpu=99, h="gpu.small") == specs.Resource(cpu=8, gpu=1, memMB=32 * 1024)


@pytest.mark.parametrize(
    ("name", "cpu", "gpu", "mem_gib"),
    [
        ("gpu.small", 8, 1, 32),
        ("gpu.medium", 16, 2, 64),
        ("gpu.large", 32, 4, 128),
        ("gpu.xlarge", 64, 8, 256),
        ("cpu.nano", 1, 0, 0.5),
        ("cpu.micro", 1, 0, 1),
        ("cpu.small", 1, 0, 2),
        ("cpu.medium", 2, 0, 4),
        ("cpu.large", 2, 0, 8),
        ("cpu.xlarge", 8, 0, 32),
    ],
)
def test_named_resources_match_torchx_generic_sizes(
    name: str, cpu: int, gpu: int, mem_gib: float
) -> None:
    expected = specs.Resource(cpu=cpu, gpu=gpu, memMB=int(mem_gib * 1024))
    assert specs.get_named_resource(name) == expected
    assert specs.get_named_resources(name) == expected
    assert specs.named_resources[name] == expected
    assert specs.NAMED_RESOURCES[name]() == expected


def test_named_resource_lookup_is_case_insensitive() -> None:
    assert specs.get_named_resource("CPU.Small") == specs.get_named_resource("cpu.small")


def test_named_resources_returns_a_fresh_resource_each_time() -> None:
    first = specs.named_resources["cpu.small"]
    first.capabilities["mutated"] = True
    assert specs.named_resources["cpu.small"].capabilities == {}


def test_named_resources_is_a_mapping_with_keyerror() -> None:
    assert "gpu.small" in specs.named_resources
    assert "gpu.tiny" not in specs.named_resources
    assert specs.named_resources.get("gpu.tiny") is None
    assert set(specs.named_resources) == set(specs.NAMED_RESOURCES)
    assert len(specs.named_resources) == len(specs.NAMED_RESOURCES)
    with pytest.raises(KeyError, match="registered"):
        specs.named_resources["gpu.tiny"]


def test_registering_a_named_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        specs.NAMED_RESOURCES, "a100.x8", lambda: specs.Resource(cpu=96, gpu=8, memMB=1 << 20)
    )
    assert specs.resource(h="a100.x8").gpu == 8
    assert "a100.x8" in specs.named_resources


def test_unknown_named_resource_lists_valid_names() -> None:
    with pytest.raises(InvalidAppError) as info:
        specs.get_named_resource("gpu.tiny")
    assert info.value.field == "resource"
    assert "gpu.small" in str(info.value)
    assert "cpu/gpu/memMB" in str(info.value)


def test_null_resource_is_all_unset_and_roles_do_not_share_it() -> None:
    assert specs.Resource(cpu=-1, gpu=-1, memMB=-1) == specs.NULL_RESOURCE
    a, b = _role(), _role()
    assert a.resource == specs.NULL_RESOURCE
    a.resource.capabilities["x"] = 1
    assert b.resource.capabilities == {}
    assert specs.NULL_RESOURCE.capabilities == {}


# -- roles and apps ----------------------------------------------------------------------------


def test_role_defaults_follow_torchx() -> None:
    role = specs.Role("trainer", "busybox")
    assert role.image == "busybox"
    assert role.entrypoint == specs.MISSING == "<MISSING>"
    assert role.args == [] and role.env == {} and role.port_map == {} and role.mounts == []
    assert role.num_replicas == 1
    assert role.min_replicas is None
    assert role.max_retries == 0
    assert role.retry_policy is specs.RetryPolicy.APPLICATION
    assert role.metadata == {}
    assert role.workspace is None


def test_role_pre_proc_returns_the_dryrun_info_unchanged() -> None:
    info: specs.AppDryRunInfo[dict[str, int]] = specs.AppDryRunInfo({"a": 1}, str)
    assert _role().pre_proc("volcano", info) is info


def test_appdef_validate_returns_self() -> None:
    app = specs.AppDef("hello", roles=[_role()])
    assert app.validate() is app


def test_appdef_validate_raises_invalid_app_error() -> None:
    with pytest.raises(InvalidAppError) as info:
        specs.AppDef("hello").validate()
    assert info.value.field == "roles"


def test_retry_policy_values_and_str() -> None:
    assert [p.value for p in specs.RetryPolicy] == ["REPLICA", "APPLICATION", "ROLE"]
    assert str(specs.RetryPolicy.REPLICA) == "REPLICA"
    assert specs.RetryPolicy("ROLE") is specs.RetryPolicy.ROLE
    assert specs.RetryPolicy.APPLICATION == "APPLICATION"  # a str enum, as in TorchX


# -- macros --------------------------------------------------------------------------------------


def test_macro_constants() -> None:
    m = specs.macros
    assert (m.img_root, m.app_id, m.replica_id, m.rank0_env) == (
        "${img_root}",
        "${app_id}",
        "${replica_id}",
        "${rank0_env}",
    )
    assert {"img_root", "app_id", "replica_id", "rank0_env", "base_img_root"} == m.NAMES


def _values(replica_id: str = "3") -> specs.macros.Values:
    return specs.macros.Values(
        img_root="/img", app_id="app-x1", replica_id=replica_id, rank0_env="MASTER_HOST"
    )


def test_macro_substitute() -> None:
    v = _values()
    assert v.substitute("--id=${app_id}/${replica_id}") == "--id=app-x1/3"
    assert v.substitute("${img_root}/bin") == "/img/bin"
    assert v.substitute("$${${rank0_env}}") == "${MASTER_HOST}"
    # Unknown names and stray dollars are left alone (safe_substitute).
    assert v.substitute("$HOME ${unknown} 5$") == "$HOME ${unknown} 5$"
    assert v.substitute("$$HOME") == "$HOME"
    assert v.base_img_root == "DEPRECATED"


def test_macro_apply_substitutes_args_env_and_nested_metadata_on_a_copy() -> None:
    role = _role(
        entrypoint="python",
        args=["--rank", specs.macros.replica_id, "--dir", f"{specs.macros.img_root}/x"],
        env={"APP": specs.macros.app_id, "PLAIN": "x"},
        metadata={"k8s": {"labels": [specs.macros.replica_id, 1]}, "n": 2},
    )
    out = _values("7").apply(role)
    assert out.args == ["--rank", "7", "--dir", "/img/x"]
    assert out.env == {"APP": "app-x1", "PLAIN": "x"}
    assert out.metadata == {"k8s": {"labels": ["7", 1]}, "n": 2}
    # The original is untouched, and the copy shares no mutable state with it.
    assert role.args[1] == "${replica_id}"
    assert role.metadata["k8s"]["labels"][0] == "${replica_id}"
    out.resource.capabilities["x"] = 1
    assert role.resource.capabilities == {}


def test_macro_apply_leaves_entrypoint_and_name_alone() -> None:
    role = _role(name="r", entrypoint="echo")
    out = _values().apply(role)
    assert (out.name, out.entrypoint, out.image) == ("r", "echo", "busybox")


def test_macros_differ_per_replica() -> None:
    role = _role(args=["replica ${replica_id} of ${app_id}"], num_replicas=3)
    outs = [_values(str(i)).apply(role).args[0] for i in range(role.num_replicas)]
    assert outs == [f"replica {i} of app-x1" for i in range(3)]


# -- states and statuses -------------------------------------------------------------------------


def test_app_state_values_match_torchx() -> None:
    assert [(s.name, s.value) for s in specs.AppState] == [
        ("UNSUBMITTED", 0),
        ("SUBMITTED", 1),
        ("PENDING", 2),
        ("RUNNING", 3),
        ("SUCCEEDED", 4),
        ("FAILED", 5),
        ("CANCELLED", 6),
        ("UNKNOWN", 7),
    ]
    assert str(specs.AppState.RUNNING) == "RUNNING"
    assert specs.ReplicaState is specs.AppState


@pytest.mark.parametrize("state", list(specs.AppState))
def test_is_terminal(state: specs.AppState) -> None:
    expected = state.name in {"SUCCEEDED", "FAILED", "CANCELLED"}
    assert specs.is_terminal(state) is expected


def test_replica_and_role_status() -> None:
    replica = specs.ReplicaStatus(
        id=0, state=specs.ReplicaState.RUNNING, role="trainer", hostname="h0"
    )
    assert replica.structured_error_msg == specs.NONE == "<NONE>"
    assert replica.exit_code is None and replica.num_restarts is None and replica.log_dir == ""
    status = specs.RoleStatus("trainer", [replica])
    assert status.replicas[0].hostname == "h0"
    assert specs.RoleStatus("ps").replicas == []


def test_app_dry_run_info_formats_its_request() -> None:
    info = specs.AppDryRunInfo({"kind": "Job"}, lambda r: f"kind={r['kind']}")
    assert info.request == {"kind": "Job"}
    assert str(info) == repr(info) == "kind=Job"
    assert info.app is None and info.cfg is None and info.scheduler is None


def test_mount_is_the_union_of_the_mount_types() -> None:
    for mount in (
        specs.BindMount("/a", "/b"),
        specs.VolumeMount("v", "/b"),
        specs.DeviceMount("/d", "/d"),
    ):
        assert isinstance(mount, specs.Mount)
    assert not isinstance("type=bind,src=/a,dst=/b", specs.Mount)
