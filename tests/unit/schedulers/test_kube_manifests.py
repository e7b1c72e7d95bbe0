"""Golden manifests of representative apps, and their validity for the upstream CRDs.

Each representative app's Volcano Job and AppWrapper is compared with the YAML file of the
same name in ``golden/`` (set ``TORCHX_REGEN_GOLDEN=1`` to rewrite them after an intended
change, then review the diff) and validated against the upstream CRD schema.

The CRDs are the unmodified upstream files in ``../shared/crds`` (next to the repository;
``TORCHX_CRDS_DIR`` overrides). Their ``openAPIV3Schema`` is checked with jsonschema, made
strict: an object schema that lists its properties rejects any other property, which is
what the API server does silently (it prunes unknown fields), so a misspelt field fails here
instead of vanishing on the cluster. The pod template schema embedded in Volcano's Job CRD
also checks the pods MCAD wraps, which its own CRD leaves unchecked.

Other test modules import the ``validate_*`` helpers and :func:`representative_apps` from
here.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_fakes import found_under

REPO_ROOT = Path(__file__).resolve().parents[3]

CRD_FILES = {
    "volcano_job": "volcano-v1.15.1_batch.volcano.sh_jobs.yaml",
    "volcano_command": "volcano-v1.15.1_bus.volcano.sh_commands.yaml",
    "workload.codeflare.dev": "mcad-v1.40.0_workload.codeflare.dev_appwrappers.yaml",
    "mcad.ibm.com": "mcad-v1.34.0_mcad.ibm.com_appwrappers.yaml",
    "appwrapper_v1beta2": "appwrapper-v1.2.1_workload.codeflare.dev_appwrappers.yaml",
    "scheduling.x-k8s.io": "scheduler-plugins-v0.34.7_scheduling.x-k8s.io_podgroups.yaml",
    "scheduling.sigs.k8s.io": "scheduler-plugins-v0.24.9_scheduling.sigs.k8s.io_podgroups.yaml",
    "jobset": "jobset.x-k8s.io_jobsets.yaml",
}
#: CRDs that come with a controller the test cluster builds (tests/cluster/cluster.sh copies
#: each from the Go module it builds): key -> the folder under the cluster's binaries.
BUILT_CRDS = {"jobset": "jobset-v0.11.1/crds"}


def crds_dir() -> Path:
    """Where the upstream CRDs are: ``TORCHX_CRDS_DIR``, else ``<repo>/../shared/crds``."""
    return Path(os.environ.get("TORCHX_CRDS_DIR") or REPO_ROOT.parent / "shared" / "crds")


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def cluster_bin_dir() -> Path:
    """Where tests/cluster/cluster.sh keeps what it builds (its ``$CACHE/bin``)."""
    cache = os.environ.get("TORCHX_CLUSTER_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        / "airflow-provider-torchx"
        / "cluster"
    )
    return Path(cache) / "bin"


def crd_path(key: str) -> Path:
    """The upstream CRD of ``key``: in :func:`crds_dir`, else (for a CRD of a controller the
    test cluster builds) where the cluster's build copied it from its module."""
    path = crds_dir() / CRD_FILES[key]
    if not path.is_file() and key in BUILT_CRDS:
        return cluster_bin_dir() / BUILT_CRDS[key] / CRD_FILES[key]
    return path


@functools.cache
def _schema(key: str) -> dict[str, Any]:
    path = crd_path(key)
    if not path.is_file():
        reason = f"upstream CRD {path} not found (set TORCHX_CRDS_DIR, or build the test cluster)"
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    crd = yaml.safe_load(path.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("served")]
    return _strict(version["schema"]["openAPIV3Schema"])


@functools.cache
def _validator(key: str, *path: str) -> Any:
    import jsonschema

    schema = _schema(key)
    for part in path:
        schema = schema["items"] if part == "[]" else schema["properties"][part]
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _check(key: str, obj: Any, *path: str) -> None:
    errors = sorted(_validator(key, *path).iter_errors(obj), key=lambda e: list(e.path))
    if errors:
        lines = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:10]]
        raise AssertionError(f"{key} schema rejects the manifest:\n" + "\n".join(lines))


def validate_pod(pod: Mapping[str, Any]) -> None:
    """A pod (template) against the PodTemplateSpec schema in Volcano's Job CRD."""
    template = {k: v for k, v in pod.items() if k in ("metadata", "spec")}
    extra = set(pod) - {"metadata", "spec", "apiVersion", "kind"}
    assert not extra, f"pod has unexpected top-level keys {extra}"
    _check("volcano_job", template, "spec", "tasks", "[]", "template")


def validate_volcano_job(job: Mapping[str, Any]) -> None:
    _check("volcano_job", job)


def validate_volcano_command(command: Mapping[str, Any]) -> None:
    _check("volcano_command", command)


def validate_appwrapper(aw: Mapping[str, Any]) -> None:
    """The AppWrapper against its CRD (by API group), and every item it wraps."""
    group = aw["apiVersion"].split("/")[0]
    _check(group, aw)
    for item in aw["spec"]["resources"]["GenericItems"]:
        template = item["generictemplate"]
        kind = template["kind"]
        if kind == "Pod":
            assert template["apiVersion"] == "v1"
            validate_pod(template)
        elif kind == "PodGroup":
            _check(template["apiVersion"].split("/")[0], template)
        elif kind == "Service":
            assert template["apiVersion"] == "v1"
            assert set(template) == {"apiVersion", "kind", "metadata", "spec"}
            assert template["spec"]["clusterIP"] == "None"
            for port in template["spec"]["ports"]:
                assert set(port) <= {"name", "port", "targetPort", "protocol"}
        else:
            raise AssertionError(f"unexpected generic item kind {kind}")


def validate_jobset(js: Mapping[str, Any]) -> None:
    """A JobSet against its CRD (which holds each Job's and pod's schema); each role is one
    replicatedJob of one Indexed Job whose failed pod reaches the JobSet's failure policy."""
    assert js["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    _check("jobset", js)
    for rjob in js["spec"]["replicatedJobs"]:
        assert rjob["replicas"] == 1
        spec = rjob["template"]["spec"]
        assert spec["completionMode"] == "Indexed"
        assert spec["completions"] == spec["parallelism"] >= 1
        assert spec["backoffLimit"] == 0
        assert spec["template"]["spec"]["restartPolicy"] == "Never"
        validate_pod(spec["template"])


def validate_appwrapper_v1beta2(aw: Mapping[str, Any]) -> None:
    """A ``v1beta2`` AppWrapper against its CRD, each role's Job (its pod template against
    the PodTemplateSpec schema) and the Service; every podSet path names a pod template whose
    replicas are the Job's."""
    assert aw["apiVersion"] == "workload.codeflare.dev/v1beta2"
    _check("appwrapper_v1beta2", aw)
    components = aw["spec"]["components"]
    assert 1 <= sum(len(c.get("podSets") or []) for c in components) <= 8
    for component in components:
        template = component["template"]
        kind = template["kind"]
        if kind == "Job":
            assert template["apiVersion"] == "batch/v1"
            spec = template["spec"]
            assert set(spec) == {
                "completionMode",
                "completions",
                "parallelism",
                "backoffLimit",
                "template",
            }
            assert spec["completionMode"] == "Indexed"
            assert spec["completions"] == spec["parallelism"] >= 1
            (podset,) = component["podSets"]
            assert podset["path"] == "template.spec.template"
            assert podset["replicas"] == spec["completions"]
            validate_pod(spec["template"])
        elif kind == "Service":
            assert "podSets" not in component
            assert template["apiVersion"] == "v1"
            assert template["spec"]["clusterIP"] == "None"
        else:
            raise AssertionError(f"unexpected component kind {kind}")


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
