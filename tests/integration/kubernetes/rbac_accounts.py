"""ServiceAccounts for one test on the local cluster: the documented Role with rules taken
out, a token the server rejects, a kubeconfig changed by the test; all deleted after it."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from cluster_sharing import tagged

#: the documented Role (tests/cluster/rbac.yaml) and its ServiceAccount
ROLE = "torchx-provider"


class Accounts:
    """ServiceAccounts made for one test (deleted after it), each bound to the documented
    Role with some rules changed."""

    def __init__(self, kube_cluster: Any, folder: Path) -> None:
        from kubernetes import client

        self.cluster = kube_cluster
        self.folder = folder
        self.api = kube_cluster.api_client()
        self.core = client.CoreV1Api(self.api)
        self.rbac = client.RbacAuthorizationV1Api(self.api)
        self.made: list[tuple[str, str]] = []
        self.restricted = yaml.safe_load(Path(kube_cluster.restricted_kubeconfig).read_text())

    def documented_rules(self) -> list[dict[str, Any]]:
        role = self.rbac.read_namespaced_role(ROLE, self.cluster.namespace)
        return [self.api.sanitize_for_serialization(r) for r in role.rules]

    def without(self, group: str, resource: str, verb: str) -> str:
        """A kubeconfig of an account whose Role lacks ``verb`` on ``resource``."""
        rules = copy.deepcopy(self.documented_rules())
        found = False
        for rule in rules:
            mine = group in rule["apiGroups"] and resource in rule["resources"]
            if mine and verb in rule["verbs"]:
                found = True
                rule["verbs"] = [v for v in rule["verbs"] if v != verb]
        assert found, f"the documented Role has no {verb} on {resource} ({group!r})"
        rules = [r for r in rules if r["verbs"]]
        return self.account(f"no-{verb}-{resource.replace('/', '-')}", rules)

    def _name(self, name: str) -> str:
        """The cluster's name of account ``name``: with the session's tag, as another
        session's run of the same test has its own."""
        return tagged(f"torchx-{name}", 60)

    def account(self, name: str, rules: list[dict[str, Any]]) -> str:
        from kubernetes import client

        ns = self.cluster.namespace
        name = self._name(name)
        self._remove_leftovers(
            name,
            self.rbac.delete_namespaced_role_binding,
            self.rbac.delete_namespaced_role,
            self.core.delete_namespaced_service_account,
            namespace=ns,
        )
        meta = client.V1ObjectMeta(name=name)
        self.core.create_namespaced_service_account(ns, client.V1ServiceAccount(metadata=meta))
        self.made.append(("sa", name))
        self.rbac.create_namespaced_role(ns, {"metadata": {"name": name}, "rules": rules})
        self.made.append(("role", name))
        self.rbac.create_namespaced_role_binding(
            ns,
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
            },
        )
        self.made.append(("binding", name))
        return self.kubeconfig(name, self.token(name))

    @staticmethod
    def _remove_leftovers(name: str, *deletes: Callable[..., Any], namespace: str = "") -> None:
        """Delete the objects ``name`` (each ``delete`` one kind) that a run stopped before its
        cleanup left on the cluster (the cluster's state outlives its processes); one not
        there is fine."""
        from kubernetes.client.exceptions import ApiException

        for delete in deletes:
            try:
                delete(name, namespace) if namespace else delete(name)
            except ApiException as e:
                if e.status != 404:
                    raise

    def token(self, name: str) -> str:
        from kubernetes import client

        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
        )
        created = self.core.create_namespaced_service_account_token(
            name, self.cluster.namespace, request
        )
        return str(created.status.token)

    def kubeconfig(
        self, name: str, token: str, edit: Callable[[dict[str, Any]], None] | None = None
    ) -> str:
        config = copy.deepcopy(self.restricted)
        config["users"][0]["user"] = {"token": token}
        if edit is not None:
            edit(config)
        path = self.folder / f"{name}.kubeconfig"
        path.write_text(json.dumps(config))
        return str(path)

    def with_cluster_role(self, name: str, rules: list[dict[str, Any]]) -> str:
        """A kubeconfig of an account bound to the documented Role that may also do
        ``rules`` at the cluster scope (a ClusterRole and its binding of the same name)."""
        kubeconfig = self.account(name, self.documented_rules())
        name = self._name(name)
        self._remove_leftovers(
            name, self.rbac.delete_cluster_role_binding, self.rbac.delete_cluster_role
        )
        self.rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})
        self.made.append(("clusterrole", name))
        self.rbac.create_cluster_role_binding(
            {
                "metadata": {"name": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": name,
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": name, "namespace": self.cluster.namespace}
                ],
            }
        )
        self.made.append(("clusterbinding", name))
        return kubeconfig

    def delete(self) -> None:
        ns = self.cluster.namespace
        deleters = {
            "sa": lambda n: self.core.delete_namespaced_service_account(n, ns),
            "role": lambda n: self.rbac.delete_namespaced_role(n, ns),
            "binding": lambda n: self.rbac.delete_namespaced_role_binding(n, ns),
            "clusterrole": self.rbac.delete_cluster_role,
            "clusterbinding": self.rbac.delete_cluster_role_binding,
        }
        for kind, name in reversed(self.made):
            with contextlib.suppress(Exception):
                deleters[kind](name)
        self.api.close()
