"""The provider as Airflow sees it: ``airflow providers list|hooks|triggers|links`` and the
connection forms."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from torchx_airflow_helpers import airflow_bin

pytestmark = pytest.mark.airflow


def providers(command: str) -> list[dict[str, object]]:
    out = subprocess.run(
        [airflow_bin(), "providers", command, "--output", "json"],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ.copy(),
    )
    return list(json.loads(out.stdout))


def test_the_cli_shows_hooks_triggers_links_and_the_package(airflow_db: Path) -> None:
    packages = {p["package_name"] for p in providers("list")}
    assert "airflow-provider-torchx" in packages
    hooks = {h["connection_type"]: h["class"] for h in providers("hooks")}
    assert hooks["torchx_kubernetes"] == "torchx_provider.hooks.kubernetes.TorchXKubernetesHook"
    assert hooks["torchx_docker"] == "torchx_provider.hooks.docker.TorchXDockerHook"
    triggers = {t["class"] for t in providers("triggers")}
    assert "torchx_provider.triggers.job" in triggers
    links = {link["extra_link_class_name"] for link in providers("links")}
    assert "torchx_provider.links.TorchXJobLink" in links


def test_connection_forms_are_declared(airflow_db: Path) -> None:
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    widgets = manager.connection_form_widgets
    for field in (
        "in_cluster",
        "kube_config_path",
        "kube_config_secret",
        "cluster_context",
        "queue",
    ):
        assert f"extra__torchx_kubernetes__{field}" in widgets
    assert widgets["extra__torchx_kubernetes__kube_config_secret"].is_sensitive
    assert widgets["extra__torchx_docker__tls_client_private_key"].is_sensitive
    behaviour = manager.field_behaviours
    assert "password" in behaviour["torchx_kubernetes"]["hidden_fields"]
    assert behaviour["torchx_docker"]["relabeling"]["host"] == "Engine URL"
