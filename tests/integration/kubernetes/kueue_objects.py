"""Kueue's objects on the local cluster, as the Kueue tests read them (admin account)."""

from __future__ import annotations

from typing import Any

#: Kueue's API group and the version the cluster serves
KUEUE = ("kueue.x-k8s.io", "v1beta2")


def queue_options(kueue: Any, priority_class: str | None = None) -> dict[str, str]:
    """The run options that submit to the LocalQueue of the cluster's Kueue queues
    (``KueueQueues``), at ``priority_class`` if given."""
    cfg = {"local_queue": kueue.local_queue}
    if priority_class is not None:
        cfg["priority_class"] = priority_class
    return cfg


def workload(kube_cluster: Any, app_id: str, owner_kind: str) -> dict[str, Any] | None:
    """The Kueue Workload of app ``app_id`` (owned by its object, of ``owner_kind``), if
    Kueue made one."""
    from kubernetes import client

    namespace, name = app_id.split(":")
    api = client.CustomObjectsApi(kube_cluster.api_client())
    group, version = KUEUE
    for wl in api.list_namespaced_custom_object(group, version, namespace, "workloads")["items"]:
        owners = wl["metadata"].get("ownerReferences") or []
        if any(o["kind"] == owner_kind and o["name"] == name for o in owners):
            return dict(wl)
    return None


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    """The status condition ``kind`` of ``obj`` (``{}``: none)."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return {}


def cpu_quota(kube_cluster: Any, cluster_queue: str) -> float:
    """The ClusterQueue's nominal CPU quota."""
    from kubernetes import client

    group, version = KUEUE
    api = client.CustomObjectsApi(kube_cluster.api_client())
    cq = api.get_cluster_custom_object(group, version, "clusterqueues", cluster_queue)
    for rg in cq["spec"]["resourceGroups"]:
        for flavor in rg["flavors"]:
            for r in flavor["resources"]:
                if r["name"] == "cpu":
                    return float(r["nominalQuota"])
    raise AssertionError(f"{cluster_queue} has no cpu quota")
