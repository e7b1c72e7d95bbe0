"""Golden manifests of representative apps, and their validity for the upstream CRDs.

Each representative app's manifest on every Kubernetes backend is compared with the YAML
file of the same name in ``golden/`` (set ``TORCHX_REGEN_GOLDEN=1`` to rewrite them after an
intended change, then review the diff) and validated against the upstream CRD schema, made
strict (``crd_schemas``).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from crd_schemas import (
    REPO_ROOT,
    crds_dir,
    validate_appwrapper,
    validate_appwrapper_v1beta2,
    validate_jobset,
    validate_pod,
    validate_volcano_command,
    validate_volcano_job,
)
from kube_fakes import found_under

# ---------------------------------------------------------------------------------------------
# Representative apps

GOLDEN = Path(__file__).parent / "golden"
SUFFIX = "k3x9q2ab"
NAMESPACE = "ml"


def representative_apps() -> dict[str, Any]:
    """name -> AppDef: what the golden files hold."""
    from torchx_provider import specs
    from torchx_provider.components.dist import ddp

    echo = specs.AppDef(
        "echo",
        [specs.Role("echo", image="busybox", entrypoint="echo", args=["hello", "${replica_id}"])],
    )
    trainer = ddp(
        script="train.py",
        j="2x4",
        cpu=8,
        gpu=2,
        memMB=32768,
        max_retries=2,
        env={"NCCL_DEBUG": "INFO", "POD_IP": "[FIELD_PATH]status.podIP"},
        mounts=[
            "type=bind,src=/data,dst=/data,readonly",
            "type=volume,src=checkpoints,dst=/ckpt",
            "type=device,src=/dev/fuse,perm=rw",
        ],
    )
    role = trainer.roles[0]
    role.resource.devices["vpc.amazonaws.com/efa"] = 1
    role.resource.capabilities["node.kubernetes.io/instance-type"] = "p4d.24xlarge"
    role.metadata["kubernetes"] = {
        "metadata": {"annotations": {"example.com/team": "vision"}},
        "spec": {
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "In", "values": ["a", "b"]}
                                ]
                            }
                        ]
                    }
                }
            },
            "containers": [{"securityContext": {"runAsUser": 1000}}],
        },
    }
    multi = specs.AppDef(
        "Param_Server.v2",
        [
            specs.Role(
                "my-role",
                image="registry.example.com/train:1",
                entrypoint="python",
                args=["-m", "train", "--master", "$${${rank0_env}}", "--app", "${app_id}"],
                num_replicas=3,
                min_replicas=1,
                max_retries=1,
                retry_policy=specs.RetryPolicy.REPLICA,
                port_map={"tensorboard": 6006, "c10d": 29500},
                resource=specs.Resource(cpu=0.5, gpu=0, memMB=512),
            ),
            specs.Role(
                "ps",
                image="registry.example.com/ps:1",
                entrypoint="ps-server",
                num_replicas=2,
                max_retries=3,
                retry_policy=specs.RetryPolicy.ROLE,
                port_map={"grpc": 50051},
            ),
        ],
    )
    return {"echo": echo, "ddp": trainer, "multi": multi}


def representative_cfgs(backend: str) -> dict[str, dict[str, Any]]:
    """name -> run options used with the app of that name."""
    pod_access = {"service_account": "trainer", "image_secret": "regcred"}
    kueue = {
        **pod_access,
        "local_queue": "team-vision",
        "priority_class": "high",
        "pod_priority_class": "gpu-high",
    }
    if backend == "kubernetes":
        return {
            "echo": {"queue": "default"},
            "ddp": {"queue": "gpu", **pod_access},
            "multi": {
                "queue": "research",
                "priority_class": "high",
                "ttl_seconds_after_finished": 3600,
                "reserved_millicpu": 50,
                "reserved_memmb": 128,
                "labels": {"team": "vision"},
                "annotations": {"example.com/owner": "ada"},
            },
        }
    if backend == "kubernetes_appwrapper":
        return {
            "echo": {},
            "ddp": kueue,
            "multi": {
                "labels": {"team": "vision"},
                "failure_grace_period": "30s",
                "retry_pause_period": "10s",
                "deletion_on_failure_grace_period": "1h",
                "success_ttl": "24h",
                "terminal_exit_codes": "2,3",
                "cancel_by": "delete",
            },
        }
    if backend == "kubernetes_jobset":
        return {
            "echo": {},
            "ddp": {**kueue, "fail_on_exit_codes": "2,3"},
            "multi": {
                "labels": {"team": "vision"},
                "success_policy": "first_role",
                "start_order": "in_order",
                "ttl_seconds_after_finished": 3600,
                "cancel_by": "delete",
            },
        }
    return {
        "echo": {},
        "ddp": {
            **pod_access,
            "priority": 10,
            "priority_class_name": "high",
            "network": "roce-net",
        },
        "multi": {
            "coscheduler_name": "scheduler-plugins-scheduler",
            "labels": {"team": "vision"},
        },
    }


def _ti_key(name: str) -> Any:
    from torchx_provider.schedulers.labels import TaskInstanceKey

    if name != "multi":
        return None
    return TaskInstanceKey("nightly_train", "train", "manual__2024-05-01T10:00:00+00:00", 3, 2)


def manifest(backend: str, name: str, **cfg_overrides: Any) -> dict[str, Any]:
    """The manifest of representative app ``name`` on ``backend`` (fixed name suffix)."""
    from torchx_provider.backends import create_scheduler

    scheduler = create_scheduler(backend, "test", namespace=NAMESPACE)
    app = representative_apps()[name]
    cfg = {**representative_cfgs(backend)[name], **cfg_overrides}
    scheduler.submit_dryrun(app, cfg)  # the checks of a submission (its name suffix is random)
    resolved = scheduler.run_opts().resolve(cfg)
    request = scheduler.translation.request(
        app, resolved, namespace=NAMESPACE, suffix=SUFFIX, ti_key=_ti_key(name)
    )
    return request.body


def _without_version(obj: Any) -> Any:
    from torchx_provider.schedulers.labels import LABEL_VERSION

    if isinstance(obj, dict):
        return {
            k: ("<version>" if k == LABEL_VERSION else _without_version(v)) for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_without_version(v) for v in obj]
    return obj


def check_golden(name: str, obj: Any) -> None:
    """Compare ``obj`` (as YAML) with ``golden/<name>.yaml``; rewrite it on request."""
    from torchx_provider.specs.yaml_text import yaml_text as to_yaml

    text = to_yaml(_without_version(obj))
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("TORCHX_REGEN_GOLDEN"):
        path.write_text(text)
    assert path.is_file(), f"{path} missing: run with TORCHX_REGEN_GOLDEN=1 to create it"
    assert text == path.read_text(), f"{name} differs from {path} (TORCHX_REGEN_GOLDEN=1 updates)"


def golden_test(backend: str, golden: str, validate: Callable[[Any], None]) -> Any:
    """The test of ``backend``'s manifest of each golden app: valid (``validate``), and the
    same as ``golden/{golden}_<app>.yaml``."""

    @pytest.mark.parametrize("name", ["echo", "ddp", "multi"])
    def test(name: str) -> None:
        obj = manifest(backend, name)
        validate(obj)
        check_golden(f"{golden}_{name}", obj)

    return test


test_volcano_golden = golden_test("kubernetes", "volcano", validate_volcano_job)
test_mcad_golden = golden_test("kubernetes_mcad", "mcad", validate_appwrapper)
test_jobset_golden = golden_test("kubernetes_jobset", "jobset", validate_jobset)
test_appwrapper_v1beta2_golden = golden_test(
    "kubernetes_appwrapper", "appwrapper", validate_appwrapper_v1beta2
)


def test_mcad_legacy_groups_validate() -> None:
    aw = manifest(
        "kubernetes_mcad",
        "multi",
        api_group="mcad.ibm.com",
        coscheduler_api_group="scheduling.sigs.k8s.io",
    )
    assert aw["apiVersion"] == "mcad.ibm.com/v1beta1"
    validate_appwrapper(aw)
    check_golden("mcad_multi_legacy", aw)


def test_volcano_abort_command_validates() -> None:
    from torchx_provider.schedulers.kube.volcano.translation import abort_command

    job = manifest("kubernetes", "echo")
    job["metadata"]["uid"] = "0b5c3d2e-0000-4000-8000-000000000001"
    validate_volcano_command(abort_command(job))


# ---------------------------------------------------------------------------------------------
# The validators themselves


def test_strict_schema_rejects_a_misspelt_field() -> None:
    from torchx_provider import specs
    from torchx_provider.schedulers.kube.volcano import VolcanoOpts
    from torchx_provider.schedulers.kube.volcano.translation import (
        VolcanoTranslation,
        app_to_volcano_job,
    )

    app = specs.AppDef("a", [specs.Role("r", image="i", entrypoint="e")])
    at = VolcanoTranslation().placement(app, "ns", "s1234567")
    job = app_to_volcano_job(app, VolcanoOpts(queue="q"), at)
    validate_volcano_job(job)
    bad = copy.deepcopy(job)
    bad["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["comand"] = ["x"]
    with pytest.raises(AssertionError, match="comand"):
        validate_volcano_job(bad)
    bad = copy.deepcopy(job)
    bad["spec"]["tasks"][0]["policies"] = [{"event": "PodCrashed", "action": "RestartJob"}]
    with pytest.raises(AssertionError, match="PodCrashed"):
        validate_volcano_job(bad)


def test_pod_validator_checks_wrapped_pods() -> None:
    with pytest.raises(AssertionError, match="restartPolcy"):
        validate_pod({"metadata": {}, "spec": {"containers": [], "restartPolcy": "Never"}})


def test_crds_dir_can_be_overridden(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TORCHX_CRDS_DIR", str(tmp_path))
    assert crds_dir() == tmp_path
    monkeypatch.delenv("TORCHX_CRDS_DIR")
    assert crds_dir() == REPO_ROOT.parent / "shared" / "crds"


def _containers(obj: Any) -> list[Mapping[str, Any]]:
    """Every container of every pod template or pod anywhere in ``obj``."""
    found = found_under(
        obj, lambda key, value: key in ("containers", "initContainers") and isinstance(value, list)
    )
    return [container for containers in found for container in containers]


@pytest.mark.parametrize("backend", ["kubernetes", "kubernetes_mcad", "kubernetes_appwrapper"])
@pytest.mark.parametrize("name", ["echo", "ddp", "multi"])
def test_every_container_keeps_its_log_tail_as_termination_message(backend: str, name: str) -> None:
    """A failed container's output tail becomes its termination message, which a describe
    shows (the kubelet keeps at most 4096 bytes of it)."""
    containers = _containers(manifest(backend, name))
    assert containers
    assert all(c["terminationMessagePolicy"] == "FallbackToLogsOnError" for c in containers)
