"""Docker client parameters, the error choke point, the async client's threading, lazy imports."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from typing import Any

import docker.errors
import pytest
import requests

from torchx_provider.errors import (
    BackendConfigurationError,
    BackendUnavailableError,
    InvalidOptionError,
    SubmissionError,
    UnknownAppError,
)
from torchx_provider.schedulers.docker import create_async_client, create_scheduler
from torchx_provider.schedulers.docker.client import (
    DockerClientConfig,
    docker_call,
    make_client,
    translate_error,
)
from torchx_provider.schedulers.docker.scheduler import DockerAsyncClient, DockerScheduler
from torchx_provider.schedulers.logs import LogCursor


def api_error(status: int, explanation: str, cls: type = docker.errors.APIError) -> Exception:
    response = requests.Response()
    response.status_code = status
    response.url = "http+docker://localhost/v1.41/containers/create"
    response.reason = "reason"
    return cls("message", response=response, explanation=explanation)


# ---------------------------------------------------------------------------- parameters
def test_config_from_plain_kwargs() -> None:
    config = DockerClientConfig.from_kwargs(
        base_url="tcp://host:2376", timeout="30", tls_verify="true", max_pool_size="4", version=None
    )
    assert config == DockerClientConfig(
        base_url="tcp://host:2376", timeout=30.0, tls_verify=True, max_pool_size=4
    )
    assert DockerClientConfig.from_kwargs(**config.to_kwargs()) == config
    assert DockerClientConfig().to_kwargs() == {}


def test_unknown_or_bad_parameters_are_refused() -> None:
    with pytest.raises(InvalidOptionError, match=r"base_urll.*valid ones are"):
        DockerClientConfig.from_kwargs(base_urll="x")
    with pytest.raises(InvalidOptionError, match="timeout"):
        DockerClientConfig.from_kwargs(timeout="soon")
    with pytest.raises(InvalidOptionError, match="tls_verify"):
        DockerClientConfig.from_kwargs(tls_verify="maybe")


def test_sync_and_async_factories_take_the_same_kwargs() -> None:
    kwargs = {"base_url": "tcp://127.0.0.1:9", "timeout": 5}
    scheduler = create_scheduler("s", **kwargs)
    client = create_async_client(**kwargs)
    assert isinstance(scheduler, DockerScheduler) and isinstance(client, DockerAsyncClient)
    assert scheduler.engine.config == client.engine.config
    with pytest.raises(InvalidOptionError):
        create_async_client(nope=1)


def test_an_engine_that_does_not_answer_is_backend_unavailable(tmp_path: Any) -> None:
    config = DockerClientConfig(base_url=f"unix://{tmp_path}/no.sock", timeout=2)
    with pytest.raises(BackendUnavailableError, match="dockerd") as err:
        make_client(config)
    assert err.value.__cause__ is not None


def test_pem_text_is_written_to_private_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """TLS settings given as PEM text reach the docker SDK as paths of private files; paths
    are passed on as they are."""
    import os
    import stat

    import docker

    made: list[dict[str, Any]] = []

    def tls_config(**kwargs: Any) -> dict[str, Any]:
        made.append(kwargs)
        return kwargs

    monkeypatch.setattr(docker.tls, "TLSConfig", tls_config)
    monkeypatch.setattr(docker, "DockerClient", lambda **kwargs: kwargs)
    pem = "-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----\n"
    config = DockerClientConfig(
        base_url="tcp://engine:2376",
        tls_ca_cert=pem,
        tls_client_cert="/etc/cert.pem",
        tls_client_key="/etc/key.pem",
    )
    client = make_client(config)
    [tls] = made
    assert client["tls"] is tls
    path = tls["ca_cert"]
    with open(path) as f:
        assert f.read() == pem
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert tls["client_cert"] == ("/etc/cert.pem", "/etc/key.pem")


# ---------------------------------------------------------------------------- the choke point
def test_api_errors_become_submission_errors_with_status_and_hint() -> None:
    err = translate_error(
        api_error(400, "Range of CPUs is from 0.01 to 2.00, as there are only 2 CPUs available"),
        "creating replica a/0",
    )
    assert isinstance(err, SubmissionError)
    assert err.status == 400
    assert "creating replica a/0" in str(err) and "lower the role's resource.cpu" in str(err)


def test_gpu_runtime_missing_has_a_hint() -> None:
    err = translate_error(
        api_error(500, 'could not select device driver "" with capabilities: [[gpu]]'), "starting"
    )
    assert isinstance(err, SubmissionError) and "NVIDIA container toolkit" in str(err)


def test_no_free_address_pool_for_a_network_has_a_hint() -> None:
    message = (
        "could not find an available, non-overlapping IPv4 address pool among the defaults "
        "to assign to the network"
    )
    err = translate_error(
        api_error(404, message, docker.errors.NotFound), "creating Docker network 'torchx'"
    )
    assert isinstance(err, SubmissionError) and err.status == 404
    assert "docker network prune" in str(err) and "run option network" in str(err)


def test_not_found_with_an_app_id_is_unknown_app() -> None:
    err = translate_error(
        api_error(404, "No such container: x", docker.errors.NotFound), "x", "a-1"
    )
    assert isinstance(err, UnknownAppError) and err.app_id == "a-1"
    plain = translate_error(api_error(404, "No such image: i", docker.errors.ImageNotFound), "x")
    assert isinstance(plain, SubmissionError) and plain.status == 404


def test_access_refused_is_a_configuration_error_not_an_outage() -> None:
    err = translate_error(api_error(403, "forbidden"), "listing containers")
    assert isinstance(err, BackendConfigurationError) and err.status == 403


def test_an_engine_certificate_nothing_trusts_names_the_fix() -> None:
    """A real TLS handshake with an engine whose certificate the client cannot verify."""
    from tls_server import untrusted_tls_server
    from torchx_provider.schedulers.docker.client import DockerClientConfig, make_client

    with untrusted_tls_server() as url:
        config = DockerClientConfig(base_url=url.replace("https", "tcp"), tls_verify=True)
        with pytest.raises(BackendConfigurationError) as raised:
            make_client(config)
    message = str(raised.value)
    assert "certificate is not trusted (self-signed certificate)" in message, message
    assert "tls_ca_cert" in message and "tls_skip_verify" in message


def test_a_busy_or_unreachable_gateway_is_backend_unavailable_not_a_request_error() -> None:
    for status in (429, 502, 503, 504):
        err = translate_error(api_error(status, "upstream unavailable"), "inspecting a-1")
        assert isinstance(err, BackendUnavailableError) and err.status == status, err
    err = translate_error(api_error(500, "driver failed"), "starting")
    assert isinstance(err, SubmissionError) and err.status == 500


def test_a_response_cut_off_mid_stream_is_backend_unavailable() -> None:
    import http.client

    import urllib3.exceptions

    for e in (
        urllib3.exceptions.ProtocolError("Connection broken", http.client.IncompleteRead(b"")),
        http.client.IncompleteRead(b""),
        requests.exceptions.ChunkedEncodingError("broken"),
    ):
        err = translate_error(e, "reading the log of replica w/0")
        assert isinstance(err, BackendUnavailableError) and err.status is None, (e, err)


def test_connection_errors_are_backend_unavailable() -> None:
    err = translate_error(requests.exceptions.ConnectionError("refused"), "listing containers")
    assert isinstance(err, BackendUnavailableError) and "base_url" in str(err)
    err = translate_error(
        docker.errors.DockerException("Error while fetching server API version"), "x"
    )
    assert isinstance(err, BackendUnavailableError)


def test_other_exceptions_pass_through_and_ours_are_kept() -> None:
    assert translate_error(ValueError("bug"), "x") is None
    with pytest.raises(ValueError, match="bug"), docker_call("x"):
        raise ValueError("bug")
    with pytest.raises(SubmissionError, match="ours"), docker_call("x"):
        raise SubmissionError("ours")


def test_docker_call_chains_the_original() -> None:
    original = api_error(409, "Conflict. The container name is already in use")
    with pytest.raises(SubmissionError) as err, docker_call("creating replica a/0"):
        raise original
    assert err.value.__cause__ is original and err.value.status == 409


# ---------------------------------------------------------------------------- async client
class BlockingEngine:
    """Engine calls that block their thread until the event loop releases them."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.threads: list[str] = []

    def _block(self) -> bool:
        self.threads.append(threading.current_thread().name)
        return self.release.wait(timeout=5)

    def follow_describe(self, app_id: str) -> Any:
        return ("released" if self._block() else "loop was blocked"), None

    def read_logs(self, app_id: str, role: str, k: int, cursor: LogCursor) -> Any:
        return ([], cursor) if self._block() else "loop was blocked"

    def cancel(self, app_id: str) -> None:
        self._block()

    def close(self) -> None:
        self._block()


async def _released_from_the_loop(engine: BlockingEngine, call: Any) -> Any:
    task = asyncio.ensure_future(call)
    await asyncio.sleep(0)  # the call is now waiting in its thread
    engine.release.set()  # only possible if the loop is free
    return await task


async def test_async_client_runs_engine_calls_off_the_event_loop() -> None:
    engine = BlockingEngine()
    client = DockerAsyncClient(engine=engine)  # type: ignore[arg-type]
    assert await _released_from_the_loop(engine, client.describe("a")) == "released"
    engine.release.clear()
    assert await _released_from_the_loop(engine, client.read_logs("a", "r", 0, LogCursor())) == (
        [],
        LogCursor(),
    )
    engine.release.clear()
    await _released_from_the_loop(engine, client.close())
    assert threading.main_thread().name not in engine.threads


# ---------------------------------------------------------------------------- imports
def test_importing_the_backend_does_not_import_docker() -> None:
    code = (
        "import sys, torchx_provider.schedulers.docker.scheduler, "
        "torchx_provider.schedulers.workspace; "
        "sys.exit(1 if 'docker' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_the_package_exports_its_factories_and_options_without_loading_the_backend() -> None:
    # What a backend table reads: cheap to import (no docker, no requests, no scheduler).
    code = (
        "import sys; from torchx_provider.schedulers.docker import "
        "DockerOpts, create_async_client, create_scheduler; "
        "assert DockerOpts.run_opts() and callable(create_scheduler) "
        "and callable(create_async_client); "
        "loaded = {m.split('.')[0] for m in sys.modules}; "
        "sys.exit(1 if {'docker', 'requests'} & loaded "
        "or 'torchx_provider.schedulers.docker.scheduler' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_missing_tls_files_are_an_option_error(tmp_path: Any) -> None:
    config = DockerClientConfig(
        base_url="tcp://127.0.0.1:9",
        tls_client_cert=str(tmp_path / "cert.pem"),
        tls_client_key=str(tmp_path / "key.pem"),
    )
    with pytest.raises(InvalidOptionError, match="TLS"):
        make_client(config)


# ---------------------------------------------------------------------------- registries
def test_registry_credentials_go_to_their_registry_only() -> None:
    config = DockerClientConfig.from_kwargs(
        registry_url="https://reg.example.com/v2/",
        registry_username="me",
        registry_password="secret",
    )
    assert config.auth_config("reg.example.com/team/app:1") == {
        "username": "me",
        "password": "secret",
        "serveraddress": "https://reg.example.com/v2/",
    }
    assert config.auth_config("busybox") is None
    assert config.auth_config("other.io/app") is None
    anywhere = DockerClientConfig(registry_username="me", registry_password="secret")
    assert anywhere.auth_config("busybox") == {"username": "me", "password": "secret"}
    assert DockerClientConfig().auth_config("busybox") is None
    assert "secret" not in repr(config)


@pytest.mark.parametrize(
    ("image", "registry"),
    [
        ("busybox", "docker.io"),
        ("library/busybox:1", "docker.io"),
        ("docker.io/library/busybox", "docker.io"),
        ("index.docker.io/library/busybox", "docker.io"),
        ("localhost/app", "localhost"),
        ("localhost:5000/app:1", "localhost:5000"),
        ("ghcr.io/pytorch/torchx:0.7.0", "ghcr.io"),
    ],
)
def test_image_registry(image: str, registry: str) -> None:
    from torchx_provider.schedulers.docker.client import image_registry

    assert image_registry(image) == registry
