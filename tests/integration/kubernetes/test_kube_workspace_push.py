"""A Volcano job whose role has a workspace: the image is built and pushed to a real registry
(the local one of ``local_registry``) before the job is created, and the job runs that name.

Pushing happens in ``schedule()``, so this needs the cluster as well as a Docker engine.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from docker_engine import IMAGE, open_docker_engine
from torchx_provider import specs
from torchx_provider.schedulers.kube.podlogs import app_selector
from torchx_provider.schedulers.kube.volcano import create_scheduler
from torchx_provider.schedulers.workspace import split_image

pytestmark = [pytest.mark.kubernetes, pytest.mark.docker]

OTHER_IMAGE = "registry.invalid/untouched:1"
REPO = "torchx-tests/kube"


@pytest.fixture(scope="module")
def engine(skip_or_fail: Callable[[str], NoReturn]) -> Iterator[Any]:
    """The Docker engine the workspace is built on, with the test image present."""
    client = open_docker_engine(skip_or_fail)
    yield client
    client.close()


@pytest.fixture
def scheduler(kube_cluster: Any) -> Iterator[Any]:
    s = create_scheduler(
        "it", kubeconfig=kube_cluster.restricted_kubeconfig, namespace=kube_cluster.namespace
    )
    yield s
    s.close()


def test_a_workspace_role_runs_the_pushed_image(
    scheduler: Any,
    kube_cluster: Any,
    engine: Any,
    local_registry: Any,
    wait_until: Any,
    tmp_path: Path,
) -> None:
    from kubernetes import client

    # a content of its own: another session's build of this test is another image, whose
    # removal cannot take this one's tag
    (tmp_path / "hello.txt").write_text(f"pushed for the cluster ({secrets.token_hex(4)})\n")
    image_repo = local_registry.repo(REPO)
    resource = specs.Resource(cpu=0.1, gpu=0, memMB=64)
    app = specs.AppDef(
        "kubews",
        [
            specs.Role(
                "trainer",
                image=IMAGE,
                entrypoint="cat",
                args=["/hello.txt"],
                num_replicas=2,
                resource=resource,
                workspace=str(tmp_path),
            ),
            specs.Role("other", image=OTHER_IMAGE, entrypoint="true", resource=resource),
        ],
    )
    info = scheduler.submit_dryrun(app, {"queue": "default", "image_repo": image_repo})
    assert [b.role for b in info.request.builds] == ["trainer"]
    # The dry run builds nothing: the manifest still names the role's own image.
    dry_images = {
        c["image"]
        for task in info.request.body["spec"]["tasks"]
        for c in task["template"]["spec"]["containers"]
    }
    assert dry_images == {IMAGE, OTHER_IMAGE}

    app_id = scheduler.schedule(info)
    namespace, name = app_id.split(":")
    tag = ""
    try:
        # The Job as the API server stored it: the workspace role's pods run the pushed name.
        job = client.CustomObjectsApi(kube_cluster.api_client()).get_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", namespace, "jobs", name
        )
        images: dict[str, set[str]] = {}
        for task in job["spec"]["tasks"]:
            role = task["template"]["metadata"]["annotations"]["torchx.pytorch.org/role-name"]
            for c in task["template"]["spec"]["containers"]:
                images.setdefault(role, set()).add(c["image"])
        assert images["other"] == {OTHER_IMAGE}
        (pushed,) = images["trainer"]
        repo, tag = split_image(pushed)
        assert repo == image_repo
        # ... which the registry has, and which is the image built on this engine.
        assert tag in local_registry.tags(REPO)
        assert engine.images.get(pushed).id == f"sha256:{tag}"

        # Volcano made the pods from that template.
        core = client.CoreV1Api(kube_cluster.api_client())

        def pod_images() -> dict[str, str] | None:
            pods = core.list_namespaced_pod(namespace, label_selector=app_selector(name)).items
            if len(pods) < 3:
                return None
            return {p.metadata.name: p.spec.containers[0].image for p in pods}

        by_pod = wait_until(pod_images, timeout=60, message=f"the 3 pods of {name}")
        assert sorted(by_pod.values()) == sorted([pushed, pushed, OTHER_IMAGE]), by_pod
    finally:
        with contextlib.suppress(Exception):
            scheduler.delete(app_id)
        if tag:
            engine.images.remove(f"sha256:{tag}", force=True)
            local_registry.delete(REPO, tag)
    assert tag not in local_registry.tags(REPO)
