"""The shared pod template, overlay and names of the Kubernetes backends."""

from __future__ import annotations

from typing import Any

import pytest

from torchx_provider import specs
from torchx_provider.errors import InvalidAppError
from torchx_provider.schedulers.kube import naming
from torchx_provider.schedulers.kube.overlay import apply_overlay, role_overlay
from torchx_provider.schedulers.kube.pod import (
    MIN_REQUEST_MEMMB,
    MIN_REQUEST_MILLICPU,
    PodSettings,
    ReplicaIdentity,
    RolePodBuilder,
    container_ports,
    env_list,
    macro_values,
    resource_requirements,
    volumes_and_mounts,
)
from torchx_provider.schedulers.labels import LABEL_REPLICA_ID, LABEL_ROLE_NAME
from torchx_provider.specs.api import Resource


def build(role: specs.Role, replica_id: int = 0, **settings: Any) -> dict[str, Any]:
    ident = ReplicaIdentity("app", "app-x", role.name, 0)
    labels, annotations = ident.of(replica_id)
    builder = RolePodBuilder(role, "main", PodSettings(**settings))
    return builder.pod(
        macro_values("app-x", replica_id, "R0"), labels=labels, annotations=annotations
    )


# ---------------------------------------------------------------------------------------------
# Resources


def test_requests_lowered_by_reserve() -> None:
    res = resource_requirements(Resource(cpu=4, gpu=2, memMB=16384), 100, 1024)
    assert res["limits"] == {"cpu": "4000m", "memory": "16384Mi", "nvidia.com/gpu": "2"}
    assert res["requests"] == {"cpu": "3900m", "memory": "15360Mi", "nvidia.com/gpu": "2"}


def test_requests_never_below_floor_nor_above_limit() -> None:
    res = resource_requirements(Resource(cpu=0.05, gpu=0, memMB=100), 100, 1024)
    assert res["requests"] == {
        "cpu": f"{MIN_REQUEST_MILLICPU}m",
        "memory": f"{MIN_REQUEST_MEMMB}Mi",
    }
    tiny = resource_requirements(Resource(cpu=0.001, gpu=0, memMB=8), 100, 1024)
    assert tiny["requests"] == {"cpu": "1m", "memory": "8Mi"}
    assert tiny["limits"] == {"cpu": "1m", "memory": "8Mi"}


def test_reserve_is_configurable() -> None:
    res = resource_requirements(Resource(cpu=1, gpu=0, memMB=2048), 0, 0)
    assert res["requests"] == res["limits"]


def test_devices_and_unset_resources() -> None:
    res = resource_requirements(
        Resource(cpu=-1, gpu=-1, memMB=-1, devices={"vpc.amazonaws.com/efa": 2, "x/y": 0})
    )
    assert res == {
        "limits": {"vpc.amazonaws.com/efa": "2"},
        "requests": {"vpc.amazonaws.com/efa": "2"},
    }
    assert resource_requirements(specs.NULL_RESOURCE) == {}


def test_instance_type_becomes_node_selector() -> None:
    res = Resource(
        cpu=1, gpu=0, memMB=1024, capabilities={"node.kubernetes.io/instance-type": "m5"}
    )
    pod = build(specs.Role("r", image="i", entrypoint="e", resource=res))
    assert pod["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "m5"}


# ---------------------------------------------------------------------------------------------
# Container


def test_env_field_path_and_ports() -> None:
    assert env_list({"IP": "[FIELD_PATH]status.podIP"}) == [
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    ]
    ports = container_ports({"c10d": 29500, "Tensor_Board": 6006, "1234": 1234, "c10d!": 1})
    assert ports == [
        {"containerPort": 29500, "name": "c10d"},
        {"containerPort": 6006, "name": "tensor-board"},
        {"containerPort": 1234},
        {"containerPort": 1},  # same name as the first: left unnamed
    ]


def test_mounts() -> None:
    mounts = specs.parse_mounts(
        [
            "type=bind,src=/host,dst=/data,readonly",
            "type=volume,src=claim,dst=/ckpt",
            "type=device,src=/dev/fuse,perm=r",
        ]
    )
    volumes, vmounts, privileged = volumes_and_mounts(mounts)
    assert volumes == [
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        {"name": "mount-0", "hostPath": {"path": "/host"}},
        {"name": "mount-1", "persistentVolumeClaim": {"claimName": "claim"}},
        {"name": "mount-2", "hostPath": {"path": "/dev/fuse"}},
    ]
    assert vmounts == [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "mount-0", "mountPath": "/data", "readOnly": True},
        {"name": "mount-1", "mountPath": "/ckpt"},
        {"name": "mount-2", "mountPath": "/dev/fuse", "readOnly": True},
    ]
    assert privileged
    role = specs.Role("r", image="i", entrypoint="e", mounts=mounts)
    assert build(role)["spec"]["containers"][0]["securityContext"] == {"privileged": True}


def test_pod_basics() -> None:
    role = specs.Role("r", image="i", entrypoint="e", args=["${replica_id}", "$$HOME", "${app_id}"])
    pod = build(role, 3, service_account="sa", image_secret="s")
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["serviceAccountName"] == "sa"
    assert spec["imagePullSecrets"] == [{"name": "s"}]
    assert spec["containers"][0]["command"] == ["e", "3", "$HOME", "app-x"]
    assert pod["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    assert pod["metadata"]["labels"][LABEL_REPLICA_ID] == "3"


def test_macros_are_substituted_in_args_and_env_never_in_the_entrypoint() -> None:
    # The rule of macros.Values.apply, which Docker uses: the entrypoint stays as written.
    role = specs.Role(
        "r", image="i", entrypoint="run$$x", args=["$${HOME}"], env={"ID": "${replica_id}"}
    )
    container = build(role, 2)["spec"]["containers"][0]
    substituted = specs.macros.Values(
        img_root="", app_id="app-x", replica_id="2", rank0_env="R0"
    ).apply(role)
    assert container["command"] == [substituted.entrypoint, *substituted.args]
    assert container["command"] == ["run$$x", "${HOME}"]
    assert container["env"] == [{"name": "ID", "value": "2"}]


def test_replicas_share_no_mutable_value() -> None:
    role = specs.Role(
        "r",
        image="i",
        entrypoint="e",
        resource=Resource(cpu=1, gpu=0, memMB=1024),
        port_map={"p": 1},
        mounts=specs.parse_mounts(["type=bind,src=/a,dst=/b"]),
        metadata={"kubernetes": {"spec": {"tolerations": [{"key": "k"}]}}},
    )
    builder = RolePodBuilder(role, "main", PodSettings())
    ident = ReplicaIdentity("app", "app-x", "r", 0)
    pods = [
        builder.pod(macro_values("a", i, "R"), labels=ident.of(i)[0], annotations=ident.of(i)[1])
        for i in range(2)
    ]
    first, second = pods
    first["spec"]["volumes"][1]["hostPath"]["path"] = "/changed"
    first["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "9"
    first["spec"]["containers"][0]["ports"][0]["name"] = "x"
    first["spec"]["tolerations"][0]["key"] = "changed"
    assert second["spec"]["volumes"][1]["hostPath"]["path"] == "/a"
    assert second["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "1000m"
    assert second["spec"]["containers"][0]["ports"][0]["name"] == "p"
    assert second["spec"]["tolerations"][0]["key"] == "k"
    assert role.metadata["kubernetes"]["spec"]["tolerations"][0]["key"] == "k"


# ---------------------------------------------------------------------------------------------
# Overlay


def test_overlay_merges_named_lists_and_removes_with_none() -> None:
    pod = {
        "metadata": {"annotations": {"a": "1"}},
        "spec": {
            "containers": [{"name": "main", "env": [{"name": "A", "value": "1"}]}],
            "nodeSelector": {"x": "1", "y": "2"},
        },
    }
    overlay = {
        "metadata": {"annotations": {"b": "2"}},
        "spec": {
            "containers": [
                {"env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}]},
                {"name": "sidecar", "image": "proxy"},
            ],
            "nodeSelector": {"y": None, "z": "3"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
        },
    }
    merged = apply_overlay(pod, overlay)
    assert merged["metadata"]["annotations"] == {"a": "1", "b": "2"}
    main, sidecar = merged["spec"]["containers"]
    assert main["env"] == [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}]
    assert sidecar == {"name": "sidecar", "image": "proxy"}
    assert merged["spec"]["nodeSelector"] == {"x": "1", "z": "3"}
    assert merged["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert pod["spec"]["nodeSelector"] == {"x": "1", "y": "2"}  # input untouched


def test_overlay_cannot_hide_a_replica() -> None:
    role = specs.Role(
        "r",
        image="i",
        entrypoint="e",
        metadata={
            "kubernetes": {
                "metadata": {"labels": {LABEL_ROLE_NAME: "other", "extra": "yes"}},
                "spec": {
                    "affinity": {"podAntiAffinity": {}},
                    "nodeSelector": {"pool": "${replica_id}"},
                },
            }
        },
    )
    pod = build(role, 1)
    assert pod["metadata"]["labels"][LABEL_ROLE_NAME] == "r"
    assert pod["metadata"]["labels"]["extra"] == "yes"
    assert pod["spec"]["affinity"] == {"podAntiAffinity": {}}
    assert pod["spec"]["nodeSelector"] == {"pool": "1"}


@pytest.mark.parametrize(
    "overlay",
    [["not", "a", "mapping"], {"spec": [], "metadata": {}}, {"status": {}}, {"kind": "Pod"}],
)
def test_bad_overlays_are_app_errors(overlay: Any) -> None:
    with pytest.raises(InvalidAppError, match=r"metadata\.kubernetes"):
        role_overlay({"kubernetes": overlay}, "roles[0].metadata")


# ---------------------------------------------------------------------------------------------
# Names


def test_long_names_fit_in_63_characters() -> None:
    job = naming.job_name("A" * 200, "k3x9q2ab")
    assert len(job) <= 29
    budget = naming.role_budget(job, 1024, overhead=2)
    (slug,) = naming.role_slugs(["R" * 300], [budget])
    task = naming.volcano_task_name(slug, 1023)
    assert len(naming.volcano_pod_name(job, task)) <= 63


def test_colliding_role_names_get_distinct_slugs() -> None:
    slugs = naming.role_slugs(["a_b", "a.b", "a-b", "c"], [20] * 4)
    assert len(set(slugs)) == 4
    assert slugs[3] == "c"
    assert all(s.startswith("a-b") for s in slugs[:3])


def test_too_many_replicas_is_an_app_error() -> None:
    job = naming.job_name("a" * 20, "k3x9q2ab")
    with pytest.raises(InvalidAppError, match="replicas"):
        naming.role_slugs(["r"], [naming.role_budget(job, 10**25, overhead=2)])
