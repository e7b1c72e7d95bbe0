"""Client configuration (one for both clients) and the one error-translation choke point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from torchx_provider.errors import (
    AppConfigurationError,
    BackendConfigurationError,
    BackendUnavailableError,
    InvalidOptionError,
    SubmissionError,
    UnknownAppError,
)
from torchx_provider.schedulers.kube.client_config import KubeClientConfig
from torchx_provider.schedulers.kube.errors import Permission, api_errors, translate

KUBECONFIG: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [
        {"name": "c1", "cluster": {"server": "https://127.0.0.1:6443"}},
        {"name": "c2", "cluster": {"server": "https://10.0.0.2:6443"}},
    ],
    "users": [{"name": "u", "user": {"token": "t0k3n"}}],
    "contexts": [
        {"name": "one", "context": {"cluster": "c1", "user": "u", "namespace": "team-a"}},
        {"name": "two", "context": {"cluster": "c2", "user": "u"}},
    ],
    "current-context": "one",
}


def test_content_path_and_in_cluster_sources(tmp_path: Path) -> None:
    assert KubeClientConfig.from_kwargs(kubeconfig=KUBECONFIG).source().kind == "dict"
    text = yaml.safe_dump(KUBECONFIG)
    src = KubeClientConfig.from_kwargs(kubeconfig=text).source()
    assert (src.kind, src.data) == ("dict", KUBECONFIG)
    assert KubeClientConfig.from_kwargs(kubeconfig=json.dumps(KUBECONFIG)).source().kind == "dict"
    path = tmp_path / "config"
    path.write_text(text)
    assert KubeClientConfig.from_kwargs(kubeconfig=str(path)).source().path == str(path)
    assert KubeClientConfig.from_kwargs(in_cluster=True).source().kind == "incluster"
    assert KubeClientConfig.from_kwargs().source().kind == "default"


def test_bad_kwargs() -> None:
    with pytest.raises(InvalidOptionError, match="kubeconfigg"):
        KubeClientConfig.from_kwargs(kubeconfigg="x")
    with pytest.raises(InvalidOptionError, match="mutually exclusive"):
        KubeClientConfig.from_kwargs(in_cluster=True, kubeconfig=KUBECONFIG)


def test_default_namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert KubeClientConfig.from_kwargs(kubeconfig=KUBECONFIG).default_namespace() == "team-a"
    cfg = KubeClientConfig.from_kwargs(kubeconfig=KUBECONFIG, context="two")
    assert cfg.default_namespace() == "default"
    cfg = KubeClientConfig.from_kwargs(kubeconfig=KUBECONFIG, namespace="explicit")
    assert cfg.default_namespace() == "explicit"
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(KUBECONFIG))
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert KubeClientConfig.from_kwargs().default_namespace() == "team-a"


def test_sync_client_uses_context_and_ssl_flag() -> None:
    cfg = KubeClientConfig.from_kwargs(
        kubeconfig=KUBECONFIG, context="two", disable_verify_ssl=True
    )
    api = cfg.sync_api_client()
    try:
        assert api.configuration.host == "https://10.0.0.2:6443"
        assert api.configuration.verify_ssl is False
    finally:
        api.close()


async def test_async_client_gets_the_same_configuration() -> None:
    cfg = KubeClientConfig.from_kwargs(kubeconfig=yaml.safe_dump(KUBECONFIG), context="two")
    api = await cfg.async_api_client()
    try:
        assert api.configuration.host == "https://10.0.0.2:6443"
        assert api.configuration.verify_ssl is True
        # every log stream of the process fits beside the watches (not the default 100)
        assert api.rest_client.pool_manager.connector.limit >= 512 + 100
    finally:
        await api.close()


def test_making_the_async_client_imports_its_library_off_the_event_loop() -> None:
    """The triggerer makes the client in a thread: the library (about a second to import)
    is imported there, not by the first API call on the event loop."""
    code = (
        "import sys; from torchx_provider.schedulers.kube.volcano import create_async_client; "
        "assert 'kubernetes_asyncio' not in sys.modules; "
        "create_async_client(namespace='ns'); "
        "print(' '.join(sorted(m for m in sys.modules if m in "
        "('kubernetes_asyncio.client', 'kubernetes_asyncio.config'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["kubernetes_asyncio.client", "kubernetes_asyncio.config"]


def test_an_unknown_context_is_bad_input_naming_the_known_ones() -> None:
    cfg = KubeClientConfig.from_kwargs(kubeconfig=KUBECONFIG, context="nope")
    with pytest.raises(InvalidOptionError, match="context 'nope' is not in the kubeconfig") as e:
        cfg.sync_api_client()
    assert "'one', 'two'" in str(e.value) and e.value.option == "context"


def _broken(**context: str) -> dict[str, Any]:
    config = json.loads(json.dumps(KUBECONFIG))
    config["contexts"][0]["context"] = context
    return config


@pytest.mark.parametrize(
    ("kubeconfig", "says"),
    [
        (_broken(cluster="gone", user="u"), "names cluster 'gone'"),
        (_broken(cluster="c1", user="nobody"), "names user 'nobody'"),
        (_broken(user="u"), "names cluster None"),
        ({**KUBECONFIG, "current-context": ""}, "has no current-context"),
        (
            {**KUBECONFIG, "clusters": [{"name": "c1", "cluster": {}}]},
            "cluster 'c1' has no server address",
        ),
    ],
)
async def test_a_context_no_client_can_be_made_from_is_bad_input_for_both_clients(
    kubeconfig: dict[str, Any], says: str, tmp_path: Path
) -> None:
    """Not an outage to ride out: refused at once, by the worker's and the triggerer's
    client alike, whether the kubeconfig is content or a file."""
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(kubeconfig))
    for source in (kubeconfig, str(path)):
        cfg = KubeClientConfig.from_kwargs(kubeconfig=source)
        with pytest.raises(InvalidOptionError, match=says):
            cfg.sync_api_client()
        with pytest.raises(InvalidOptionError, match=says):
            await cfg.async_api_client()


def test_a_kubeconfig_that_is_not_yaml_is_not_quoted_back() -> None:
    text = "apiVersion: v1\nclusters: []\nusers:\n- name: u\n  user: {token: s3cr3t-t0ken\n"
    with pytest.raises(InvalidOptionError) as e:
        KubeClientConfig.from_kwargs(kubeconfig=text).source()
    assert "s3cr3t" not in str(e.value) and "line" in str(e.value)


# ---------------------------------------------------------------------------------------------
# Errors


def api_exception(status: int, body: dict[str, Any], asyncio: bool = False) -> Exception:
    if asyncio:
        from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

        e: Any = AsyncApiException(status=status, reason="r")  # body set as text below
    else:
        from kubernetes.client.exceptions import ApiException

        e = ApiException(status=status, reason="r")
    e.body = json.dumps(body)
    return e


@pytest.mark.parametrize("asyncio", [False, True])
@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (404, {"message": 'jobs "x" not found', "details": {"name": "x"}}, UnknownAppError),
        (
            404,
            {"message": "the server could not find the requested resource"},
            BackendUnavailableError,
        ),
        (403, {"message": "forbidden: cannot get jobs"}, BackendConfigurationError),
        (401, {"message": "Unauthorized"}, BackendConfigurationError),
        (409, {"message": "already exists", "details": {"name": "x"}}, SubmissionError),
        (422, {"message": "spec.tasks: Invalid value"}, SubmissionError),
        (500, {"message": "etcd down"}, BackendUnavailableError),
        # too large: the same request never fits, so it is not an outage to retry
        (413, {"message": "Request entity too large: limit is 3145728"}, SubmissionError),
        (500, {"message": "etcdserver: request is too large"}, SubmissionError),
    ],
)
def test_api_exceptions_map(
    status: int, body: dict[str, Any], expected: type, asyncio: bool
) -> None:
    e = api_exception(status, body, asyncio)
    with pytest.raises(expected) as raised, api_errors("read", "Job 'x'", app_id="ns:x"):
        raise e
    assert raised.value.__cause__ is e
    assert body["message"] in str(raised.value)
    if expected is not UnknownAppError:
        assert isinstance(raised.value, BackendUnavailableError | SubmissionError)
        assert raised.value.status == status


def test_client_subclasses_of_api_exception_map() -> None:
    from kubernetes.client.exceptions import ForbiddenException, NotFoundException

    for cls, expected in (
        (NotFoundException, UnknownAppError),
        (ForbiddenException, BackendConfigurationError),
    ):
        e = cls(status=404 if cls is NotFoundException else 403, reason="r")
        e.body = json.dumps({"message": "m", "details": {"name": "x"}})
        assert isinstance(translate(e, "read", "Job 'x'", app_id="ns:x"), expected)


def test_connection_errors_and_others() -> None:
    import urllib3.exceptions

    no_connection: Any = None  # the error's connection, which nothing reads
    err = translate(urllib3.exceptions.NewConnectionError(no_connection, "refused"), "list", "jobs")
    assert isinstance(err, BackendUnavailableError)
    assert "cannot be reached" in str(err)
    assert translate(ConnectionRefusedError(), "list", "jobs") is not None
    assert translate(KeyError("x"), "list", "jobs") is None
    with pytest.raises(KeyError), api_errors("list", "jobs"):
        raise KeyError("x")


def test_a_403_names_the_verb_resource_namespace_and_the_rule_to_add() -> None:
    message = (
        'pods is forbidden: User "system:serviceaccount:ml:airflow" cannot list resource '
        '"pods" in API group "" in the namespace "ml"'
    )
    e = api_exception(403, {"message": message, "details": {"kind": "pods"}}, False)
    err = translate(e, "list", "the pods of app 'ml:x'", app_id="ml:x")
    assert isinstance(err, BackendConfigurationError) and isinstance(err, AppConfigurationError)
    assert err.permission == Permission(
        "system:serviceaccount:ml:airflow", "list", "pods", "", "ml"
    )
    assert (
        'may not list pods in namespace ml; add the rule {apiGroups: [""], resources: ["pods"], '
        'verbs: ["list"]} to its Role' in str(err)
    )


@pytest.mark.parametrize("status", [400, 403, 422])
def test_a_webhook_refusal_is_the_apps_configuration_not_a_permission(status: int) -> None:
    """A webhook denies with the status it chooses (controller-runtime: 403): the same object
    is refused again, whatever the account may do."""
    from torchx_provider.errors import RejectedConfigurationError

    message = (
        'admission webhook "vjobset.jobset.x-k8s.io" denied the request: DependsOn can\'t be '
        "set for the first ReplicatedJob"
    )
    err = translate(api_exception(status, {"message": message}, False), "create", "JobSet 'a'")
    assert isinstance(err, RejectedConfigurationError) and isinstance(err, SubmissionError)
    assert not isinstance(err, BackendConfigurationError)
    assert message in str(err) and "change what the webhook names" in str(err)


def test_a_namespace_quota_is_no_permission_either() -> None:
    message = (
        'jobsets.jobset.x-k8s.io "a" is forbidden: exceeded quota: compute, requested: '
        "count/jobsets.jobset.x-k8s.io=1, used: count/jobsets.jobset.x-k8s.io=5, limited: 5"
    )
    err = translate(api_exception(403, {"message": message}, False), "create", "JobSet 'a'")
    assert type(err) is SubmissionError, err
    assert "ResourceQuota" in str(err)


def test_a_cluster_scoped_403_asks_for_a_cluster_role() -> None:
    message = (
        'queues.scheduling.volcano.sh "q" is forbidden: User "u" cannot get resource "queues" '
        'in API group "scheduling.volcano.sh" at the cluster scope'
    )
    err = translate(api_exception(403, {"message": message}, True), "read", "Queue 'q'")
    assert isinstance(err, BackendConfigurationError) and err.permission is not None
    assert err.permission.namespace is None
    assert "in the cluster scope; add the rule" in str(err) and "ClusterRole" in str(err)


def test_an_untrusted_certificate_says_the_fix_with_either_client() -> None:
    """A kubeconfig without the cluster's CA: a real TLS handshake against a server whose
    certificate nothing trusts, through the sync client's urllib3 and the async aiohttp."""
    import ssl

    import aiohttp
    import urllib3

    cause = ssl.SSLCertVerificationError(
        1,
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed "
        "certificate in certificate chain (_ssl.c:1000)",
    )
    no_pool: Any = None  # the error's connection pool, which nothing reads
    sync_error = urllib3.exceptions.MaxRetryError(
        no_pool,
        "/api/v1/namespaces/ml/pods",
        urllib3.exceptions.SSLError(cause),
    )
    conn_key = aiohttp.client_reqrep.ConnectionKey("kube", 6443, True, True, None, None, None)
    async_error = aiohttp.ClientConnectorCertificateError(conn_key, cause)
    for e in (sync_error, async_error):
        err = translate(e, "list", "pods")
        assert isinstance(err, BackendConfigurationError), e
        assert "not trusted (self-signed certificate in certificate chain)" in str(err)
        assert "certificate-authority-data" in str(err) and "disable_verify_ssl" in str(err)
