"""Property tests: any valid AppDef gives schema-valid manifests with names Kubernetes takes.

Random apps (names of any characters and length, replicas, elastic bounds, retries, mounts,
resources, ports, env, overlays) go through both translations; every manifest must validate
against the upstream CRD, every object name and every name a controller derives from ours
(Volcano pods ``{job}-{task}-{index}``, hostnames, Service, PodGroups) must be an RFC 1123
label of at most 63 characters, label values must be valid, names must not collide, and
describing the unstarted manifest must give back the app's roles and replica counts.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crd_schemas import (
    validate_appwrapper,
    validate_appwrapper_v1beta2,
    validate_volcano_job,
)
from kube_fakes import found_under
from torchx_provider import specs
from torchx_provider.schedulers.kube import naming
from torchx_provider.schedulers.kube.appwrapper import AppWrapperOpts, AppWrapperTranslation
from torchx_provider.schedulers.kube.appwrapper import state as aw_state
from torchx_provider.schedulers.kube.appwrapper import translation as aw_translation
from torchx_provider.schedulers.kube.mcad import McadOpts, McadTranslation
from torchx_provider.schedulers.kube.mcad.state import describe_appwrapper
from torchx_provider.schedulers.kube.mcad.translation import app_to_appwrapper
from torchx_provider.schedulers.kube.volcano import VolcanoOpts, VolcanoTranslation
from torchx_provider.schedulers.kube.volcano.state import describe_job
from torchx_provider.schedulers.kube.volcano.translation import app_to_volcano_job
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.specs.names import is_rfc1123_name, normalize_rfc1123_name

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

NAME_CHARS = string.ascii_letters + string.digits + "-_. /:" + "éßλ"
names = st.text(NAME_CHARS, min_size=1, max_size=90).filter(lambda s: s.strip() != "")
paths = st.lists(
    st.text(string.ascii_lowercase + "_-", min_size=1, max_size=8), min_size=1, max_size=3
).map(lambda parts: "/" + "/".join(parts))
mounts = st.lists(
    st.one_of(
        st.builds(specs.BindMount, src_path=paths, dst_path=paths, read_only=st.booleans()),
        st.builds(
            specs.VolumeMount,
            src=st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True),
            dst_path=paths,
            read_only=st.booleans(),
        ),
        st.builds(
            specs.DeviceMount,
            src_path=paths,
            dst_path=paths,
            permissions=st.sampled_from(["r", "rw", "rwm"]),
        ),
    ),
    max_size=3,
    unique_by=lambda m: m.dst_path,  # no two mounts at one place in the replica
)
resources = st.one_of(
    st.just(specs.NULL_RESOURCE),
    st.builds(
        specs.Resource,
        cpu=st.floats(min_value=0.001, max_value=96, allow_nan=False),
        gpu=st.integers(0, 8),
        memMB=st.integers(1, 2_000_000),
        capabilities=st.one_of(
            st.just({}),
            st.builds(
                lambda t: {"node.kubernetes.io/instance-type": t},
                st.sampled_from(["p4d.24xlarge", "m5.large"]),
            ),
        ),
        devices=st.dictionaries(
            st.sampled_from(["vpc.amazonaws.com/efa", "example.com/fpga"]),
            st.integers(0, 4),
            max_size=2,
        ),
    ),
)
env = st.dictionaries(
    st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True),
    st.one_of(
        st.text(string.printable.replace("$", ""), max_size=20),
        st.just("[FIELD_PATH]status.podIP"),
        st.just("${replica_id}"),
    ),
    max_size=3,
)
overlays = st.one_of(
    st.just({}),
    st.just({"kubernetes": {"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}}}),
    st.just(
        {
            "kubernetes": {
                "metadata": {"annotations": {"team": "${app_id}"}},
                "spec": {"nodeSelector": {"pool": "a"}},
            }
        }
    ),
)


@st.composite
def roles(draw: Any, name: str) -> specs.Role:
    replicas = draw(st.integers(1, 8))
    elastic = draw(st.booleans())
    return specs.Role(
        name,
        image="registry.example.com/app:1",
        entrypoint="python",
        args=draw(
            st.lists(
                st.sampled_from(
                    ["-m", "train", "${replica_id}", "${app_id}", "$${${rank0_env}}", "--x=1"]
                ),
                max_size=4,
            )
        ),
        env=draw(env),
        num_replicas=replicas,
        min_replicas=draw(st.integers(1, replicas)) if elastic else None,
        max_retries=draw(st.integers(0, 3)),
        retry_policy=draw(st.sampled_from(list(specs.RetryPolicy))),
        resource=draw(resources),
        port_map=draw(
            st.dictionaries(
                st.text(NAME_CHARS, min_size=1, max_size=20), st.integers(1, 65535), max_size=3
            )
        ),
        metadata=draw(overlays),
        mounts=draw(mounts),
    )


@st.composite
def apps(draw: Any) -> specs.AppDef:
    role_names = draw(st.lists(names, min_size=1, max_size=3, unique_by=normalize_rfc1123_name))
    app = specs.AppDef(draw(names), [draw(roles(n)) for n in role_names])
    app.validate()
    return app


suffixes = st.from_regex(r"[a-z][a-z0-9]{7}", fullmatch=True)
ti_keys = st.one_of(
    st.none(),
    st.builds(
        TaskInstanceKey,
        dag_id=names,
        task_id=names,
        run_id=st.sampled_from(["manual__2024-05-01T10:00:00+00:00", "scheduled__x", "r"]),
        map_index=st.integers(-1, 1000),
        try_number=st.integers(0, 30),
    ),
)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def all_label_values(obj: Any) -> list[str]:
    """The value of every label anywhere in ``obj``."""
    found = found_under(obj, lambda key, value: key == "labels" and isinstance(value, dict))
    return [label for labels in found for label in labels.values()]


def named_once(template: Mapping[str, Any], seen: set[tuple[str, str]]) -> tuple[str, str]:
    """The kind and name of an object a manifest wraps: an RFC 1123 name, not one of ``seen``
    before (it is added)."""
    kind, obj_name = template["kind"], template["metadata"]["name"]
    assert is_rfc1123_name(obj_name), obj_name
    assert (kind, obj_name) not in seen
    seen.add((kind, obj_name))
    return kind, obj_name


def check_describe_roundtrip(app: specs.AppDef, resp: Any) -> None:
    assert [r.name for r in resp.roles] == [r.name for r in app.roles]
    assert [r.num_replicas for r in resp.roles] == [r.num_replicas for r in app.roles]
    for role, status in zip(app.roles, resp.roles_statuses, strict=True):
        assert [r.id for r in status.replicas] == list(range(role.num_replicas))


@SETTINGS
@given(app=apps(), suffix=suffixes, ti_key=ti_keys)
def test_volcano_jobs_are_valid(
    app: specs.AppDef, suffix: str, ti_key: TaskInstanceKey | None
) -> None:
    at = VolcanoTranslation().placement(app, "ns", suffix, ti_key)
    job = app_to_volcano_job(app, VolcanoOpts(queue="default"), at)
    validate_volcano_job(job)
    name = job["metadata"]["name"]
    assert is_rfc1123_name(name)
    tasks = job["spec"]["tasks"]
    assert len({t["name"] for t in tasks}) == len(tasks) == sum(r.num_replicas for r in app.roles)
    env_vars = set()
    for task in tasks:
        assert is_rfc1123_name(task["name"])
        pod_name = naming.volcano_pod_name(name, task["name"], task["replicas"] - 1)
        assert is_rfc1123_name(pod_name), pod_name  # also the pod's hostname
        var = naming.volcano_hosts_env(task["name"])
        assert ENV_NAME.match(var)
        env_vars.add(var)
        for container in task["template"]["spec"]["containers"]:
            assert is_rfc1123_name(container["name"])
    assert len(env_vars) == len(tasks)
    assert all(LABEL_VALUE.match(v) and len(v) <= 63 for v in all_label_values(job))
    check_describe_roundtrip(app, describe_job(f"ns:{name}", job))


@SETTINGS
@given(app=apps(), suffix=suffixes, coscheduler=st.booleans(), ti_key=ti_keys)
def test_appwrappers_are_valid(
    app: specs.AppDef, suffix: str, coscheduler: bool, ti_key: TaskInstanceKey | None
) -> None:
    opts = McadOpts(coscheduler_name="cosched" if coscheduler else None, network="net")
    aw = app_to_appwrapper(app, opts, McadTranslation().placement(app, "ns", suffix, ti_key))
    validate_appwrapper(aw)
    name = aw["metadata"]["name"]
    assert is_rfc1123_name(name)
    seen: set[tuple[str, str]] = set()
    for item in aw["spec"]["resources"]["GenericItems"]:
        template = item["generictemplate"]
        kind, obj_name = named_once(template, seen)
        if kind == "Pod":
            assert template["spec"]["hostname"] == obj_name
            assert template["spec"]["subdomain"] == name
        if kind == "Service":
            port_names = [p["name"] for p in template["spec"]["ports"]]
            assert len(set(port_names)) == len(port_names)
            assert all(DNS1123_LABEL.match(p) for p in port_names)
    assert sum(kind == "Pod" for kind, _ in seen) == sum(r.num_replicas for r in app.roles)
    assert all(LABEL_VALUE.match(v) and len(v) <= 63 for v in all_label_values(aw))
    check_describe_roundtrip(app, describe_appwrapper(f"ns:{name}", aw))


@SETTINGS
@given(app=apps(), suffix=suffixes, ti_key=ti_keys, queue=st.booleans())
def test_appwrappers_v1beta2_are_valid(
    app: specs.AppDef, suffix: str, ti_key: TaskInstanceKey | None, queue: bool
) -> None:
    opts = AppWrapperOpts(local_queue="team-a" if queue else None, success_ttl="1h")
    at = AppWrapperTranslation().placement(app, "ns", suffix, ti_key)
    aw = aw_translation.app_to_appwrapper(app, opts, at)
    validate_appwrapper_v1beta2(aw)
    name = aw["metadata"]["name"]
    assert is_rfc1123_name(name)
    assert aw["spec"].get("suspend", False) is queue
    seen: set[tuple[str, str]] = set()
    for component in aw["spec"]["components"]:
        template = component["template"]
        kind, obj_name = named_once(template, seen)
        if kind == "Job":
            # The Job controller names each pod's host {job}-{index}: an RFC 1123 label.
            last = template["spec"]["completions"] - 1
            assert is_rfc1123_name(f"{obj_name}-{last}"), obj_name
            assert template["spec"]["template"]["spec"]["subdomain"] == name
    assert sum(kind == "Job" for kind, _ in seen) == len(app.roles)
    assert all(LABEL_VALUE.match(v) and len(v) <= 63 for v in all_label_values(aw))
    check_describe_roundtrip(app, aw_state.describe_appwrapper(f"ns:{name}", aw))


@settings(max_examples=200, deadline=None)
@given(
    app_name=names,
    role_names=st.lists(names, min_size=1, max_size=6, unique=True),
    replicas=st.integers(1, 10**7),
    suffix=suffixes,
)
def test_names_fit_for_any_replica_count(
    app_name: str, role_names: list[str], replicas: int, suffix: str
) -> None:
    job = naming.job_name(app_name, suffix)
    for overhead in (0, 2):
        budgets = [naming.role_budget(job, replicas, overhead) for _ in role_names]
        slugs = naming.role_slugs(role_names, budgets)
        assert len(set(slugs)) == len(slugs)
        for slug in slugs:
            last = replicas - 1
            volcano = naming.volcano_pod_name(job, naming.volcano_task_name(slug, last))
            mcad = naming.mcad_pod_name(job, slug, last)
            assert is_rfc1123_name(volcano if overhead else mcad)
