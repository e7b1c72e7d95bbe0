"""One kubeconfig search and one parser, for the hook and the client configuration alike."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from torchx_provider.errors import InvalidOptionError
from torchx_provider.schedulers.kube.client_config import KubeClientConfig
from torchx_provider.schedulers.kube.kubeconfig import (
    find_kubeconfig,
    kubeconfig_candidates,
    parse_kubeconfig,
)


def test_candidates_are_kubeconfig_entries_else_home() -> None:
    env = {"KUBECONFIG": os.pathsep.join(["/a", "", "~/b"])}
    assert kubeconfig_candidates(env) == [Path("/a"), Path("~/b").expanduser()]
    home = [Path("~/.kube/config").expanduser()]
    assert kubeconfig_candidates({}) == kubeconfig_candidates({"KUBECONFIG": ""}) == home


def test_a_kubeconfig_of_missing_files_never_falls_back_to_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As for kubectl: ~/.kube/config may be another cluster."""
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("clusters: []")
    monkeypatch.setenv("HOME", str(home))
    assert find_kubeconfig({}) == home / ".kube" / "config"
    assert find_kubeconfig({"KUBECONFIG": str(tmp_path / "missing")}) is None


def test_find_takes_the_first_existing_file(tmp_path: Path) -> None:
    second = tmp_path / "second"
    second.write_text("clusters: []")
    env = {"KUBECONFIG": os.pathsep.join([str(tmp_path / "missing"), str(second)])}
    assert find_kubeconfig(env) == second


def test_the_client_configuration_parses_content_as_the_hook_does() -> None:
    with pytest.raises(InvalidOptionError, match="not a kubeconfig") as hook:
        parse_kubeconfig("just: text\n", "kube_config")
    assert hook.value.option == "kube_config"
    with pytest.raises(InvalidOptionError, match="not a kubeconfig") as client:
        KubeClientConfig.from_kwargs(kubeconfig="kind: Config\nusers: []\n").source()
    assert client.value.option == "kubeconfig"
    with pytest.raises(InvalidOptionError, match="not valid YAML/JSON"):
        KubeClientConfig.from_kwargs(kubeconfig="clusters: [\nb: 1").source()
