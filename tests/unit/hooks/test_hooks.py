"""Connections -> backend client parameters (files read on the worker, nothing contacted)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import torchx_fakes
from torchx_provider.errors import InvalidOptionError
from torchx_provider.hooks.base import BackendTarget, normalize_extras
from torchx_provider.hooks.docker import TorchXDockerHook, engine_url, resolve_docker_client
from torchx_provider.hooks.kubernetes import TorchXKubernetesHook, resolve_kube_client

KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "https://1.2.3.4:6443"}}],
    "users": [{"name": "u", "user": {"token": "tok-abcdef-123456"}}],
    "contexts": [
        {"name": "dev", "context": {"cluster": "c", "user": "u", "namespace": "ml"}},
        {"name": "prod", "context": {"cluster": "c", "user": "u"}},
    ],
    "current-context": "dev",
}
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def set_conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, **conn: Any) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


# -- kubernetes ----------------------------------------------------------------------------------
def test_mutually_exclusive_sources_give_one_error() -> None:
    with pytest.raises(InvalidOptionError, match="in_cluster and kube_config_path, which are"):
        resolve_kube_client({"in_cluster": "true", "kube_config_path": "/x"}, "k")


def test_unreadable_kubeconfig_path_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(InvalidOptionError, match=f"cannot read kubeconfig file .*{missing.name}"):
        resolve_kube_client({"kube_config_path": str(missing)}, "k")


def test_kubeconfig_files_are_inlined_and_secrets_listed(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text(PEM)
    (tmp_path / "token").write_text("file-token-0123456789\n")
    config = json.loads(json.dumps(KUBECONFIG))
    config["clusters"][0]["cluster"]["certificate-authority"] = "ca.crt"
    config["users"][0]["user"] = {"tokenFile": str(tmp_path / "token")}
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(config))
    kwargs, secrets = resolve_kube_client(
        {"kube_config_path": str(path), "cluster_context": "prod", "namespace": "team"}, "k"
    )
    flat = yaml.safe_load(kwargs["kubeconfig"])
    cluster = flat["clusters"][0]["cluster"]
    assert base64.b64decode(cluster["certificate-authority-data"]).decode() == PEM
    assert "certificate-authority" not in cluster
    assert flat["users"][0]["user"] == {"token": "file-token-0123456789"}
    assert "file-token-0123456789" in secrets
    assert kwargs["context"] == "prod" and kwargs["namespace"] == "team"


def test_unknown_context_lists_the_known_ones() -> None:
    with pytest.raises(InvalidOptionError, match=r"'staging' is not in the kubeconfig.*dev"):
        resolve_kube_client({"kube_config": KUBECONFIG, "cluster_context": "staging"}, "k")


def test_bad_kubeconfig_content_is_an_error() -> None:
    with pytest.raises(InvalidOptionError, match="not a kubeconfig"):
        resolve_kube_client({"kube_config": "just: text\nand: more\n"}, "k")


def test_a_kubeconfig_survives_a_one_line_field_as_json_or_base64() -> None:
    as_yaml = yaml.safe_dump(KUBECONFIG)
    for one_line in (
        json.dumps(KUBECONFIG),
        base64.b64encode(as_yaml.encode()).decode(),
        base64.urlsafe_b64encode(as_yaml.encode()).decode().rstrip("="),
    ):
        assert "\n" not in one_line
        kwargs, secrets = resolve_kube_client({"kube_config": one_line}, "k")
        assert yaml.safe_load(kwargs["kubeconfig"])["clusters"] == KUBECONFIG["clusters"]
        assert "tok-abcdef-123456" in secrets


def test_a_yaml_kubeconfig_that_lost_its_line_breaks_gets_an_error_saying_how_to_paste_it() -> None:
    joined = yaml.safe_dump(KUBECONFIG).replace("\n", "")  # what a one-line input keeps
    with pytest.raises(
        InvalidOptionError, match=r"neither JSON nor base64.*-o json.*base64 -w0"
    ) as e:
        resolve_kube_client({"kube_config": joined}, "k")
    assert "tok-abcdef" not in str(e.value)


def test_environment_defaults(tmp_path: Path) -> None:
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump(KUBECONFIG))
    kwargs, _ = resolve_kube_client({}, None, env={"KUBECONFIG": str(path)})
    assert "https://1.2.3.4:6443" in kwargs["kubeconfig"]
    home = {"HOME": str(tmp_path / "nohome")}
    kwargs, _ = resolve_kube_client({}, None, env={**home, "KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert kwargs == {"in_cluster": True} or "kubeconfig" in kwargs


def test_a_kubeconfig_variable_naming_missing_files_is_said_not_replaced_by_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(yaml.safe_dump(KUBECONFIG))
    monkeypatch.setenv("HOME", str(home))
    missing = str(tmp_path / "missing")
    with pytest.raises(InvalidOptionError, match=f"no file of KUBECONFIG='{missing}' exists"):
        resolve_kube_client({}, None, env={"KUBECONFIG": missing})
    kwargs, _ = resolve_kube_client({}, None, env={})  # unset: ~/.kube/config, as kubectl
    assert "https://1.2.3.4:6443" in kwargs["kubeconfig"]


def test_cncf_kubernetes_connection_works_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    set_conn(
        monkeypatch,
        "k8s",
        conn_type="kubernetes",
        extra={
            "extra__kubernetes__kube_config": json.dumps(KUBECONFIG),
            "extra__kubernetes__namespace": "ml",
            "extra__kubernetes__disable_verify_ssl": "True",
            "extra__kubernetes__disable_tcp_keepalive": "False",
            "xcom_sidecar_container_image": "alpine",
            "queue": "gpu",
        },
    )
    target = TorchXKubernetesHook("k8s", backend="kubernetes_mcad").get_target()
    assert target.backend == "kubernetes_mcad"
    assert target.client_kwargs["namespace"] == "ml"
    assert target.client_kwargs["disable_verify_ssl"] is True
    assert target.cfg_defaults == {"queue": "gpu"}
    assert target.redacted()["kubeconfig"] == "***"
    assert "tok-abcdef-123456" in target.secrets()


def test_prefixed_and_plain_keys_must_agree() -> None:
    assert normalize_extras({"extra__kubernetes__a": 1, "a": 1}, ["extra__kubernetes__"], "c") == {
        "a": 1
    }
    with pytest.raises(InvalidOptionError, match="sets 'a' twice"):
        normalize_extras({"extra__kubernetes__a": 1, "a": 2}, ["extra__kubernetes__"], "c")


def test_missing_and_wrong_type_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidOptionError, match="connection 'absent' does not exist"):
        TorchXKubernetesHook("absent").get_target()
    set_conn(monkeypatch, "pg", conn_type="postgres", host="db")
    with pytest.raises(InvalidOptionError, match="is of type 'postgres'"):
        TorchXKubernetesHook("pg").get_target()


def test_connection_run_option_defaults_are_checked(fake_cluster: Any) -> None:
    opts = torchx_fakes.FakeScheduler().run_opts()
    target = BackendTarget("fake", cfg_defaults={"queue": "q"}, optional_cfg_defaults={"nope": 1})
    assert target.checked_cfg_defaults(opts) == {"queue": "q"}
    target = BackendTarget("fake", cfg_defaults={"queu": "q"}, conn_id="c")
    with pytest.raises(InvalidOptionError, match=r"connection 'c' has extra\(s\) \['queu'\]"):
        target.checked_cfg_defaults(opts)


# -- docker --------------------------------------------------------------------------------------
def test_engine_url_forms() -> None:
    assert engine_url(None, None) is None
    assert engine_url("tcp://h", 2376) == "tcp://h:2376"
    assert engine_url("tcp://h:1", 2376) == "tcp://h:1"
    assert engine_url("h", None) == "tcp://h:2375"


def test_tls_material_from_content_or_file(tmp_path: Path) -> None:
    key = tmp_path / "key.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nsecretkey\n-----END PRIVATE KEY-----\n")
    kwargs, secrets = resolve_docker_client(
        {"tls_ca_cert": PEM, "tls_client_cert": PEM, "tls_client_key": str(key)},
        "tcp://engine",
        2376,
        None,
        None,
        env={},
    )
    assert kwargs["base_url"] == "tcp://engine:2376"
    assert kwargs["tls_verify"] is True and kwargs["tls_ca_cert"] == PEM
    assert "secretkey" in kwargs["tls_client_key"] and secrets == [kwargs["tls_client_key"]]


KEY_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7" * 3


@pytest.mark.parametrize("joiner", ["", " "])
def test_pem_that_lost_its_line_breaks_is_rewrapped(joiner: str) -> None:
    """A one-line form field drops line breaks (or a paste turns them into spaces)."""
    lines = ["-----BEGIN PRIVATE KEY-----", KEY_BODY[:64], KEY_BODY[64:128], KEY_BODY[128:]]
    pem = "\n".join([*lines, "-----END PRIVATE KEY-----"]) + "\n"
    one_line = joiner.join(pem.splitlines())
    kwargs, _ = resolve_docker_client(
        {
            "tls_ca_cert": PEM.replace("\n", joiner),
            "tls_client_cert": PEM,
            "tls_client_key": one_line,
        },
        "tcp://engine",
        2376,
        None,
        None,
        env={},
    )
    assert kwargs["tls_client_key"] == pem
    assert kwargs["tls_ca_cert"] == PEM


def test_secret_extras_under_their_hidden_names() -> None:
    """The forms write the names Airflow's API hides; the short names keep working."""
    kwargs, _ = resolve_kube_client({"kube_config_secret": json.dumps(KUBECONFIG)}, "k")
    assert yaml.safe_load(kwargs["kubeconfig"])["clusters"] == KUBECONFIG["clusters"]
    key = "-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\n"
    kwargs, secrets = resolve_docker_client(
        {"tls_client_cert": PEM, "tls_client_private_key": key}, "tcp://e", None, None, None, env={}
    )
    assert kwargs["tls_client_key"] == key and secrets == [key]
    with pytest.raises(InvalidOptionError, match="kube_config_secret and kube_config are the same"):
        resolve_kube_client({"kube_config_secret": "{}", "kube_config": "{ }"}, "k")


def test_oidc_and_exec_plugin_credentials_are_masked() -> None:
    config = json.loads(json.dumps(KUBECONFIG))
    config["users"] = [
        {
            "name": "u",
            "user": {
                "auth-provider": {
                    "name": "oidc",
                    "config": {
                        "client-id": "public-client",
                        "client-secret": "oidc-client-secret-123",
                        "id-token": "eyJ-id-token-456",
                        "refresh-token": "refresh-token-789",
                    },
                }
            },
        },
    ]
    config["users"].append(
        {
            "name": "e",
            "user": {
                "exec": {
                    "command": "get-token",
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "env": [{"name": "API_KEY", "value": "exec-api-key-abc"}],
                }
            },
        }
    )
    _, secrets = resolve_kube_client({"kube_config": config}, "k")
    for value in (
        "oidc-client-secret-123",
        "eyJ-id-token-456",
        "refresh-token-789",
        "exec-api-key-abc",
    ):
        assert value in secrets
    assert "public-client" not in secrets


def test_reprs_of_resolved_targets_show_no_secret() -> None:
    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.schedulers.kube.client_config import KubeClientConfig

    kwargs, secrets = resolve_kube_client({"kube_config": KUBECONFIG}, "k")
    target = BackendTarget(
        backend="kubernetes",
        client_kwargs=kwargs,
        secret_keys=("kubeconfig",),
        mask_values=tuple(secrets),
    )
    config = KubeClientConfig.from_kwargs(**kwargs)
    for shown in (repr(target), str(target), repr(config)):
        assert "tok-abcdef-123456" not in shown, shown


def test_a_client_key_that_is_not_pem_is_never_echoed() -> None:
    with pytest.raises(InvalidOptionError, match="tls_client_key is neither PEM") as e:
        resolve_docker_client(
            {"tls_client_cert": PEM, "tls_client_key": KEY_BODY},
            "tcp://e",
            None,
            None,
            None,
            env={},
        )
    assert KEY_BODY[:20] not in str(e.value) and "not shown" in str(e.value)


@pytest.mark.parametrize(
    ("settings", "verify"),
    [
        ({"tls_ca_cert": PEM}, True),
        # the form's untouched switch writes false: verification stays on
        ({"tls_ca_cert": PEM, "tls_skip_verify": False}, True),
        ({"tls_ca_cert": PEM, "tls_skip_verify": "true"}, False),
        ({"tls_ca_cert": PEM, "tls_verify": False}, False),
        ({"tls_client_cert": PEM, "tls_client_key": PEM, "tls_skip_verify": True}, False),
    ],
)
def test_tls_verification_is_on_unless_turned_off(settings: dict[str, Any], verify: bool) -> None:
    kwargs, _ = resolve_docker_client(settings, "tcp://e", None, None, None, env={})
    assert kwargs["tls_verify"] is verify


@pytest.mark.parametrize(
    ("settings", "host", "message"),
    [
        ({"tls_client_cert": PEM}, "tcp://e", "go together"),
        ({"tls_verify": "yes"}, "tcp://e", "no tls_ca_cert"),
        ({"tls_ca_cert": PEM}, "unix:///var/run/docker.sock", "unix socket"),
        ({"tls_ca_cert": "/no/such.pem"}, "tcp://e", "neither PEM content .* nor a readable file"),
        ({"tls_ca_cert": PEM, "tls_verify": True, "tls_skip_verify": True}, "tcp://e", "keep one"),
    ],
)
def test_bad_tls_settings(settings: dict[str, Any], host: str, message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        resolve_docker_client(settings, host, None, None, None, env={})


def test_docker_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    set_conn(
        monkeypatch,
        "dk",
        conn_type="torchx_docker",
        host="unix:///var/run/docker.sock",
        extra={"copy_env": "A;B", "job_url_template": "https://ui/{app_id}"},
    )
    target = TorchXDockerHook("dk").get_target()
    assert target.backend == "local_docker"
    assert target.client_kwargs == {"base_url": "unix:///var/run/docker.sock"}
    assert target.cfg_defaults == {"copy_env": "A;B"}
    assert target.job_url_template == "https://ui/{app_id}"
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert TorchXDockerHook(None).get_target().client_kwargs == {}


def test_registry_credentials_are_secret_and_need_both_parts() -> None:
    kwargs, secrets = resolve_docker_client(
        {"registry": "registry.example.com"}, None, None, "bot", "pa55word-xyz", env={}
    )
    assert secrets == ["pa55word-xyz"]
    assert "pa55word-xyz" not in json.dumps(
        BackendTarget("local_docker", kwargs, secret_keys=("registry_password",)).redacted()
    )
    with pytest.raises(InvalidOptionError, match="need both login and password"):
        resolve_docker_client({}, None, None, "bot", None, env={})
