"""The headless Service that makes an app's replicas resolvable by name (pure).

MCAD and AppWrapper ``v1beta2`` apps wrap one Service named after the app object; each pod
has a ``hostname`` and that Service as ``subdomain``, so ``{hostname}.{app}`` resolves from
every replica. The Service is headless (no cluster IP: names resolve to the pods themselves)
and publishes not-ready addresses, so peers find each other before readiness probes pass.
"""

from __future__ import annotations

from typing import Any

from torchx_provider.schedulers.kube.overlay import clone
from torchx_provider.schedulers.kube.pod import port_name
from torchx_provider.schedulers.labels import LABEL_APP_ID, label_value
from torchx_provider.specs.api import AppDef

#: The rendezvous port the Service exposes when no role has a ``port_map``.
DEFAULT_PORT = 29500


def service_ports(app: AppDef) -> list[dict[str, Any]]:
    """The Service's ports: every distinct ``port_map`` port, else :data:`DEFAULT_PORT`."""
    ports: dict[int, str] = {}
    for role in app.roles:
        for key, port in role.port_map.items():
            ports.setdefault(int(port), port_name(key) or f"port-{port}")
    if not ports:
        ports[DEFAULT_PORT] = "c10d"
    used: set[str] = set()
    out = []
    for port, name in ports.items():
        if name in used:
            name = f"port-{port}"
        used.add(name)
        out.append({"name": name, "port": port, "targetPort": port, "protocol": "TCP"})
    return out


def headless_service(app: AppDef, metadata: dict[str, Any]) -> dict[str, Any]:
    """The Service of ``app`` with ``metadata`` (the app object's, copied): it selects every
    pod labelled with the app object's name."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": clone(metadata),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_APP_ID: label_value(str(metadata["name"]))},
            "ports": service_ports(app),
        },
    }
