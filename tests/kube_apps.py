"""Apps and schedulers the Kubernetes tests share: a one-replica app whose pod kwok drives,
and a scheduler of the documented account that deletes, after the test, what it was told
it submitted."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torchx_provider import specs


def one_replica_app(kube_cluster: Any, name: str, **behaviour: Any) -> specs.AppDef:
    """One role ``worker`` of one replica; ``behaviour`` as :meth:`KubeCluster.pod_behaviour`
    (default: it succeeds)."""
    annotations = kube_cluster.pod_behaviour(**behaviour)
    return specs.AppDef(
        name,
        [
            specs.Role(
                "worker",
                image="registry.invalid/train:1",
                entrypoint="python",
                resource=specs.Resource(cpu=0.5, gpu=0, memMB=256),
                metadata={"kubernetes": {"metadata": {"annotations": annotations}}},
            )
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
