"""Apps and schedulers the Kubernetes tests share: roles whose pods kwok drives, a scheduler
of the documented account that deletes, after the test, what it was told it submitted, and
the few calls every backend's tests make on it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from torchx_provider import specs
from torchx_provider.specs.api import AppState

#: an image no node pulls: kwok "runs" the pods
IMAGE = "registry.invalid/train:1"
#: the arguments of a distributed trainer, with the macros the backends fill in
TRAIN_ARGS = ("-m", "train", "--rank", "${replica_id}", "--master", "$${${rank0_env}}")


def kube_role(
    name: str,
    behaviour: dict[str, str] | None = None,
    *,
    replicas: int = 1,
    cpu: float = 0.5,
    mem_mb: int = 256,
    **kw: Any,
) -> specs.Role:
    """A role of :data:`IMAGE` whose pod template carries ``behaviour`` (the annotations of
    :meth:`KubeCluster.pod_behaviour`); other fields of :class:`specs.Role` in ``kw``."""
    return specs.Role(
        name,
        image=IMAGE,
        entrypoint="python",
        num_replicas=replicas,
        resource=specs.Resource(cpu=cpu, gpu=0, memMB=mem_mb),
        metadata={"kubernetes": {"metadata": {"annotations": behaviour or {}}}},
        **kw,
    )


def one_replica_app(kube_cluster: Any, name: str, **behaviour: Any) -> specs.AppDef:
    """One role ``worker`` of one replica; ``behaviour`` as :meth:`KubeCluster.pod_behaviour`
    (default: it succeeds)."""
    return specs.AppDef(name, [kube_role("worker", kube_cluster.pod_behaviour(**behaviour))])


def trainer_and_ps(
    name: str,
    behaviour: dict[str, str] | None,
    *,
    ps: dict[str, str] | None = None,
    args: tuple[str, ...] = TRAIN_ARGS,
    **kw: Any,
) -> specs.AppDef:
    """Role ``trainer`` of 2 replicas and role ``ps`` of one, both with ``behaviour`` (``ps``
    with its own if given) and the other fields of :func:`kube_role` in ``kw``."""
    return specs.AppDef(
        name,
        [
            kube_role("trainer", behaviour, replicas=2, args=list(args), **kw),
            kube_role("ps", behaviour if ps is None else ps, args=list(args), **kw),
        ],
    )


@contextlib.contextmanager
def tracked(scheduler: Any) -> Iterator[Any]:
    """``scheduler`` with a ``created`` list: every app id in it is deleted on exit, then
    the scheduler is closed."""
    scheduler.created = []
    try:
        yield scheduler
    finally:
        for app_id in scheduler.created:
            with contextlib.suppress(Exception):
                scheduler.delete(app_id)
        scheduler.close()


@contextlib.contextmanager
def kube_scheduler(
    create_scheduler: Callable[..., Any],
    kube_cluster: Any,
    *,
    session: str = "it",
    mcad: bool = False,
) -> Iterator[Any]:
    """A :func:`tracked` scheduler of the restricted account (of the MCAD API server with
    ``mcad``) in the cluster's namespace, made by a backend's ``create_scheduler``."""
    kubeconfig = (
        kube_cluster.mcad_restricted_kubeconfig if mcad else kube_cluster.restricted_kubeconfig
    )
    with tracked(
        create_scheduler(session, kubeconfig=kubeconfig, namespace=kube_cluster.namespace)
    ) as s:
        yield s


def restricted_async_client(
    create_async_client: Callable[..., Any], kube_cluster: Any, *, mcad: bool = False
) -> Any:
    """An async client of the restricted account (of the MCAD API server with ``mcad``) in
    the cluster's namespace, made by a backend's ``create_async_client``; the caller
    closes it."""
    kubeconfig = (
        kube_cluster.mcad_restricted_kubeconfig if mcad else kube_cluster.restricted_kubeconfig
    )
    return create_async_client(kubeconfig=kubeconfig, namespace=kube_cluster.namespace)


def submit(scheduler: Any, app: specs.AppDef, ti_key: Any = None, **cfg: Any) -> tuple[str, Any]:
    """Submit ``app`` with the run options ``cfg`` to a :func:`tracked` scheduler: its app id
    and dry-run info."""
    info = scheduler.submit_dryrun(app, cfg, ti_key=ti_key)
    app_id = scheduler.schedule(info)
    scheduler.created.append(app_id)
    return app_id, info


def wait_state(
    scheduler: Any,
    app_id: str,
    done: Callable[[Any], bool],
    timeout: float = 120,
    interval: float = 0.3,
) -> Any:
    """Describe the app until ``done`` holds for its description (returned), or fail."""
    deadline = time.monotonic() + timeout
    while True:
        resp = scheduler.describe(app_id)
        assert resp is not None
        if done(resp):
            return resp
        if time.monotonic() > deadline:
            pytest.fail(f"{app_id}: timed out; last {resp}")
        time.sleep(interval)


def wait_gone(scheduler: Any, app_id: str, timeout: float = 30, message: str = "") -> None:
    """Wait until the scheduler no longer describes the app, or fail."""
    deadline = time.monotonic() + timeout
    while scheduler.describe(app_id) is not None:
        assert time.monotonic() < deadline, message
        time.sleep(0.3)


def replicas(resp: Any) -> list[Any]:
    """Every replica status of a description, role by role."""
    return [r for rs in resp.roles_statuses for r in rs.replicas]


def all_running(resp: Any) -> bool:
    """Whether every replica of a description is running."""
    return {x.state for x in replicas(resp)} == {AppState.RUNNING}


def app_pods(kube_cluster: Any, app_id: str) -> list[Any]:
    """The app's pods, found by the provider's app id label (admin client)."""
    from kubernetes import client

    from torchx_provider.schedulers.labels import LABEL_APP_ID

    namespace, name = app_id.split(":")
    core = client.CoreV1Api(kube_cluster.api_client())
    return list(core.list_namespaced_pod(namespace, label_selector=f"{LABEL_APP_ID}={name}").items)


def stored_object(kube_cluster: Any, app_id: str, resource: Any) -> dict[str, Any]:
    """The app's object of the custom ``resource`` as the API server has it (admin client)."""
    from kubernetes import client

    namespace, name = app_id.split(":")
    api = client.CustomObjectsApi(kube_cluster.api_client())
    return dict(
        api.get_namespaced_custom_object(
            resource.group, resource.version, namespace, resource.plural, name
        )
    )


def volcano_pod_names(request: Any) -> dict[tuple[str, int], str]:
    """``(role, replica)`` -> the pod Volcano names for it (``{job}-{task}-0``), from the
    request of a Volcano Job (a dry run's ``request``)."""
    job = request.body
    return {
        (
            meta["annotations"]["torchx.pytorch.org/role-name"],
            int(meta["labels"]["torchx.pytorch.org/replica-id"]),
        ): f"{job['metadata']['name']}-{task['name']}-0"
        for task in job["spec"]["tasks"]
        for meta in [task["template"]["metadata"]]
    }


def is_subset(sent: Any, stored: Any) -> bool:
    """Whether everything in ``sent`` is in ``stored`` as it was (lists item by item)."""
    if isinstance(sent, dict):
        return isinstance(stored, dict) and all(
            k in stored and is_subset(v, stored[k]) for k, v in sent.items()
        )
    if isinstance(sent, list):
        return (
            isinstance(stored, list)
            and len(sent) == len(stored)
            and all(map(is_subset, sent, stored))
        )
    return sent == stored
