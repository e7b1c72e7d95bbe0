"""What Airflow learns about this provider through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from torchx_provider.version import __version__


def get_provider_info() -> dict[str, Any]:
    """The provider's metadata: package name, hooks, operators, triggers, connection types."""
    return {
        "package-name": "airflow-provider-torchx",
        "name": "TorchX",
        "description": "Run TorchX-style distributed apps (roles x replicas) on Volcano, "
        "MCAD/AppWrapper or Docker from Airflow.",
        "versions": [__version__],
    }
