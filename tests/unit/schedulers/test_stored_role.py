"""No env value reaches a label or an annotation, on any backend.

Labels and annotations are copied into listings, events and monitoring systems; the role
each replica carries (``torchx.pytorch.org/role``) is stored without its env and metadata.
The replica still gets its environment, and describe still reads the role back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from torchx_provider import specs
from torchx_provider.backends import create_scheduler
from torchx_provider.schedulers.kube.status import stored_role
from torchx_provider.schedulers.labels import (
    ANNOTATION_ROLE,
    STORED_ROLE_OMITS,
    TaskInstanceKey,
    stored_role_json,
)

SECRET = "hf_Zq8sEcReTvAlUe0123456789"
OVERLAY_SECRET = "ovErLaYsEcReT42"
BACKENDS = ["kubernetes", "kubernetes_mcad", "kubernetes_appwrapper", "local_docker"]
CFG: dict[str, dict[str, Any]] = {
    "kubernetes": {"queue": "default"},
    "local_docker": {"env": {"OPTION_TOKEN": SECRET}},
}


def secret_app() -> specs.AppDef:
    """An app whose env, and whose pod overlay's env, hold secrets."""
    overlay = {"spec": {"containers": [{"env": [{"name": "O", "value": OVERLAY_SECRET}]}]}}
    role = specs.Role(
        "trainer",
        image="registry.example.com/train:1",
        entrypoint="python",
        args=["-m", "train", "--rank", specs.macros.replica_id],
        env={"HF_TOKEN": SECRET, "PLAIN": "1"},
        num_replicas=2,
        metadata={"kubernetes": overlay},
    )
    return specs.AppDef("secret", [role, specs.Role("ps", image="busybox", entrypoint="sh")])


def labels_and_annotations(obj: Any) -> Iterator[Mapping[str, Any]]:
    """Every ``labels`` and ``annotations`` mapping anywhere in a manifest or container spec."""
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            if key in ("labels", "annotations") and isinstance(value, Mapping):
                yield value
            yield from labels_and_annotations(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from labels_and_annotations(value)


def request_of(backend: str) -> Any:
    kwargs = {} if backend == "local_docker" else {"namespace": "ml"}
    scheduler = create_scheduler(backend, "s", **kwargs)
    ti_key = TaskInstanceKey("dag", "task", "manual__2024-05-01T10:00:00+00:00")
    info = scheduler.submit_dryrun(secret_app(), CFG.get(backend), ti_key=ti_key)
    return info.request.to_dict() if backend == "local_docker" else info.request.body


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_secret_in_any_label_or_annotation(backend: str) -> None:
    request = request_of(backend)
    found = list(labels_and_annotations(request))
    assert any(ANNOTATION_ROLE in m for m in found), "the role is still stored"
    for mapping in found:
        text = json.dumps(mapping)
        assert SECRET not in text and OVERLAY_SECRET not in text, mapping
    # ... while the replicas still get their environment
    assert SECRET in json.dumps(request)


@pytest.mark.parametrize("backend", BACKENDS)
def test_describe_reads_the_stored_role_back(backend: str) -> None:
    request = request_of(backend)
    stored = [m[ANNOTATION_ROLE] for m in labels_and_annotations(request) if ANNOTATION_ROLE in m]
    role = specs.role_from_dict(json.loads(stored[0]))
    assert role.env == {} and role.metadata == {}
    assert (role.name, role.num_replicas) == ("trainer", 2)
    assert role.args[-1] == specs.macros.replica_id  # as written, macros intact
    if backend != "local_docker":
        assert stored_role({"annotations": {ANNOTATION_ROLE: stored[0]}}) == role


def test_the_stored_role_is_the_role_without_what_it_omits() -> None:
    role = secret_app().roles[0]
    data = json.loads(stored_role_json(role))
    assert set(specs.role_to_dict(role)) - set(data) == STORED_ROLE_OMITS == {"env", "metadata"}
