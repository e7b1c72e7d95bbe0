"""A client configuration that cannot be loaded: the kubeconfig's own fault is a
configuration error (not retried), a credential plugin that ran and failed is retryable and
said to be so."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from torchx_provider.errors import BackendConfigurationError, BackendUnavailableError
from torchx_provider.schedulers.kube.client_config import KubeClientConfig
from torchx_provider.schedulers.kube.errors import translate


def kubeconfig(cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": "https://127.0.0.1:1", **(cluster or {})}}
        ],
        "users": [{"name": "u", "user": user or {"token": "t0k3n"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }


def plugin(*args: str) -> dict[str, Any]:
    """A user whose token comes from running ``args`` (a credential plugin)."""
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": args[0],
            "args": list(args[1:]),
        }
    }


FAILING_PLUGIN = plugin(
    sys.executable, "-c", "import sys; sys.stderr.write('token service down'); sys.exit(1)"
)


@pytest.fixture
async def plugin_failures_raise() -> None:
    """Skip unless this kubernetes_asyncio raises when a kubeconfig's credential plugin fails
    as the client is made. Its older releases (32, the lowest the package allows) only log
    the plugin's failure and make a client without a token: the failure then shows as the
    API server's 401 on the first call, which the refusal rules class."""
    from kubernetes_asyncio import client, config

    try:
        await config.load_kube_config_from_dict(
            kubeconfig(user=FAILING_PLUGIN), client_configuration=client.Configuration()
        )
    except Exception:
        return
    import kubernetes_asyncio

    pytest.skip(
        f"kubernetes_asyncio {kubernetes_asyncio.__version__} logs a failing credential "
        "plugin instead of raising"
    )


async def clients(cfg: KubeClientConfig) -> list[Exception]:
    """What making the worker's and the triggerer's client raised."""
    raised: list[Exception] = []
    try:
        cfg.sync_api_client()
    except Exception as e:
        raised.append(e)
    try:
        await cfg.async_api_client()
    except Exception as e:
        raised.append(e)
    return raised


@pytest.mark.parametrize("case", ["missing file", "not yaml", "ca missing"])
async def test_a_kubeconfig_that_cannot_be_loaded_is_a_configuration_error(
    case: str, tmp_path: Path
) -> None:
    path = tmp_path / "config"
    if case == "not yaml":
        path.write_text("clusters: [\n  - token: s3cr3t {\n")
    elif case == "ca missing":
        path.write_text(yaml.safe_dump(kubeconfig({"certificate-authority": "/nowhere/ca.crt"})))
    raised = await clients(KubeClientConfig.from_kwargs(kubeconfig=str(path)))
    assert len(raised) == 2
    for e in raised:
        assert isinstance(e, BackendConfigurationError), repr(e)
        assert "no usable Kubernetes configuration" in str(e)
        assert "s3cr3t" not in str(e)


@pytest.mark.usefixtures("plugin_failures_raise")
async def test_a_failing_credential_plugin_is_retried_and_said_to_be() -> None:
    """The triggerer's client runs the plugin as it is made (the worker's when it calls)."""
    cfg = KubeClientConfig.from_kwargs(kubeconfig=kubeconfig(user=FAILING_PLUGIN))
    with pytest.raises(BackendUnavailableError) as info:
        await cfg.async_api_client()
    assert not isinstance(info.value, BackendConfigurationError)
    assert "credential plugin failed" in str(info.value) and "token service down" in str(info.value)
    assert "retried" in str(info.value)


@pytest.mark.usefixtures("plugin_failures_raise")
async def test_the_kubeconfig_found_is_the_one_whose_failure_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No kubeconfig given: the one KUBECONFIG names fails, not the in-cluster configuration
    the pod does not have."""
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(kubeconfig(user=FAILING_PLUGIN)))
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(BackendUnavailableError, match="credential plugin failed"):
        await KubeClientConfig.from_kwargs().async_api_client()


@pytest.mark.parametrize(
    "user",
    [
        {"exec": {"command": "x"}},  # no apiVersion: malformed
        plugin("/nowhere/credential-plugin"),  # its command is not there
    ],
    ids=["malformed", "command-missing"],
)
@pytest.mark.usefixtures("plugin_failures_raise")
async def test_a_plugin_entry_no_run_can_heal_is_a_configuration_error(user: Any) -> None:
    cfg = KubeClientConfig.from_kwargs(kubeconfig=kubeconfig(user=user))
    with pytest.raises(BackendConfigurationError, match="no usable Kubernetes configuration"):
        await cfg.async_api_client()


@pytest.mark.parametrize("library", ["kubernetes", "kubernetes_asyncio"])
def test_either_clients_config_exception_is_classed_by_what_it_says(library: str) -> None:
    config_exception = pytest.importorskip(f"{library}.config.config_exception").ConfigException
    for text, retryable in [
        ("Service host/port is not set.", False),
        ("Invalid kube-config file. Expected object with name x in contexts list", False),
        ("exec: malformed request. missing key 'apiVersion'", False),
        ("exec: process returned 1. token service down", True),
        ("exec: failed to decode process output: Expecting value", True),
        ("oidc: failed to refresh access token", True),
    ]:
        err = translate(config_exception(text), "configure", "the Kubernetes client")
        assert isinstance(err, BackendUnavailableError), text
        assert isinstance(err, BackendConfigurationError) is not retryable, text
