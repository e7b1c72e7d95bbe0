"""The upstream CRD schemas, made strict, and validators of the manifests each backend builds.

The CRDs are the unmodified upstream files in ``../shared/crds`` (next to the repository;
``TORCHX_CRDS_DIR`` overrides), or, for a controller the test cluster builds, the copy its
build took from the Go module. Their ``openAPIV3Schema`` is checked with jsonschema, made
strict: an object schema that lists its properties rejects any other property, which is
what the API server does silently (it prunes unknown fields), so a misspelt field fails here
instead of vanishing on the cluster. The pod template schema embedded in Volcano's Job CRD
also checks the pods MCAD wraps, which its own CRD leaves unchecked.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]

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
def crd_schema(key: str) -> dict[str, Any]:
    path = crd_path(key)
    if not path.is_file():
        reason = (
            f"upstream CRD {path} not found (set TORCHX_CRDS_DIR, or run "
            "'bash tests/cluster/cluster.sh crds')"
        )
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    crd = yaml.safe_load(path.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("served")]
    return _strict(version["schema"]["openAPIV3Schema"])


@functools.cache
def _validator(key: str, *path: str) -> Any:
    import jsonschema

    schema = crd_schema(key)
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
