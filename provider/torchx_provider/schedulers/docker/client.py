"""Talking to a Docker engine: client parameters, the clients, and the one place errors turn
into the provider's.

Client parameters are plain values (strings, numbers, booleans) so that an Airflow hook can
pass them from a connection, and the triggerer can rebuild the same client from a trigger's
serialized kwargs. ``create_scheduler(session_name, **kwargs)`` and
``create_async_client(**kwargs)`` of :mod:`torchx_provider.schedulers.docker` take exactly the
fields of :class:`DockerClientConfig`. :func:`make_client` makes one ``docker.DockerClient``;
an :class:`EngineConnection` keeps the ones an engine needs (and a worker pool) and closes
them together.

Every call into the docker SDK runs inside :func:`docker_call`, which turns docker and
connection exceptions into the tree of :mod:`torchx_provider.errors` (``raise ... from e``,
so the original stays attached). An :class:`EngineConnection`'s calls go through its
:meth:`~EngineConnection.call`, which also records when the engine stopped and started
answering again (:attr:`~EngineConnection.outages`).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from torchx_provider.errors import (
    BackendConfigurationError,
    BackendUnavailableError,
    InvalidOptionError,
    SubmissionError,
    TorchXProviderError,
    UnknownAppError,
)
from torchx_provider.schedulers.certificates import untrusted_certificate
from torchx_provider.specs.runopts import bool_value

if TYPE_CHECKING:
    from torchx_provider.schedulers.docker.apitypes import DockerClient
    from torchx_provider.schedulers.docker.state import EngineOutage


@dataclass(frozen=True)
class DockerClientConfig:
    """How to reach the engine. Every field is optional; unset means "as the docker CLI does"
    (``DOCKER_HOST``, ``DOCKER_TLS_VERIFY``, ``DOCKER_CERT_PATH``, then the local socket).

    Attributes:
        base_url: ``unix:///var/run/docker.sock``, ``tcp://host:2376`` or ``ssh://user@host``.
        version: Engine API version, e.g. ``"1.41"``; unset asks the engine.
        timeout: seconds an API call may take (log streams are not bounded by it).
        tls_verify: verify the engine's certificate against ``tls_ca_cert``.
        tls_ca_cert, tls_client_cert, tls_client_key: file paths, or the PEM text itself
            (written to private temporary files), as an Airflow connection may hold it.
        use_ssh_client: use the ``ssh`` command for ``ssh://`` URLs instead of paramiko.
        max_pool_size: connections kept open (concurrent submits and log reads share them).
        registry_username, registry_password: credentials sent with image pulls and pushes
            (no ``docker login`` is made; unset: the engine's own credentials are used).
        registry_url: the registry they are for, e.g. ``registry.example.com``; unset: every
            registry.
    """

    base_url: str | None = None
    version: str | None = None
    timeout: float = 60.0
    tls_verify: bool | None = None
    tls_ca_cert: str | None = None
    tls_client_cert: str | None = None
    tls_client_key: str | None = field(default=None, repr=False)
    use_ssh_client: bool = False
    max_pool_size: int = 16
    registry_url: str | None = None
    registry_username: str | None = None
    registry_password: str | None = field(default=None, repr=False)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> DockerClientConfig:
        """Check and convert plain kwargs (strings from a connection are fine)."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - set(fields))
        if unknown:
            raise InvalidOptionError(
                f"unknown Docker client parameter(s) {unknown}; valid ones are {sorted(fields)}",
                option=unknown[0],
            )
        values: dict[str, Any] = {}
        for name, value in kwargs.items():
            if value is None:
                continue
            if name in ("tls_verify", "use_ssh_client"):
                values[name] = _bool(name, value)
            elif name in ("timeout",):
                values[name] = _number(name, value, float)
            elif name in ("max_pool_size",):
                values[name] = int(_number(name, value, int))
            else:
                values[name] = str(value)
        return cls(**values)

    def to_kwargs(self) -> dict[str, Any]:
        """The non-default fields, as plain kwargs (what :meth:`from_kwargs` reads back)."""
        default = DockerClientConfig()
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(default, f.name)
        }

    def auth_config(self, image: str) -> dict[str, str] | None:
        """The credentials to send when pulling or pushing ``image`` (``None``: none).

        >>> c = DockerClientConfig(registry_url="reg.io", registry_username="u",
        ...                        registry_password="p")
        >>> c.auth_config("reg.io/team/app:1")["username"], c.auth_config("busybox")
        ('u', None)
        """
        if not (self.registry_username and self.registry_password):
            return None
        if self.registry_url and image_registry(image) != _registry_host(self.registry_url):
            return None
        auth = {"username": self.registry_username, "password": self.registry_password}
        if self.registry_url:
            auth["serveraddress"] = self.registry_url
        return auth

    @property
    def uses_tls(self) -> bool:
        return bool(
            self.tls_verify or self.tls_ca_cert or self.tls_client_cert or self.tls_client_key
        )


_DOCKER_HUB = {"docker.io", "index.docker.io", "registry-1.docker.io"}


def _registry_host(url: str) -> str:
    host = url.split("://", 1)[-1].split("/", 1)[0].lower()
    return "docker.io" if host in _DOCKER_HUB else host


def image_registry(image: str) -> str:
    """The registry an image name points at (``docker.io`` when it names none).

    >>> image_registry("busybox"), image_registry("localhost:5000/app"), image_registry("a.io/b")
    ('docker.io', 'localhost:5000', 'a.io')
    """
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return _registry_host(first)
    return "docker.io"


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, str) and not value.strip():
        return False
    flag = bool_value(value)
    if flag is not None:
        return flag
    raise InvalidOptionError(f"Docker client parameter {name!r} must be true/false, got {value!r}")


def _number(name: str, value: Any, tp: type) -> float:
    try:
        number = tp(value)
    except (TypeError, ValueError):
        raise InvalidOptionError(
            f"Docker client parameter {name!r} must be a number, got {value!r}", option=name
        ) from None
    if number <= 0:
        raise InvalidOptionError(f"Docker client parameter {name!r} must be > 0", option=name)
    return float(number)


# ---------------------------------------------------------------------------------------------
# TLS material given as PEM text

_pem_dir: str | None = None
_pem_paths: dict[str, str] = {}


def _pem_file(value: str | None, kind: str) -> str | None:
    """A path for ``value``: itself if it is one, else a private file holding the PEM text."""
    global _pem_dir
    if value is None or "-----BEGIN" not in value:
        return value
    if value in _pem_paths:
        return _pem_paths[value]
    if _pem_dir is None:
        _pem_dir = tempfile.mkdtemp(prefix="torchx-docker-tls-")
        atexit.register(shutil.rmtree, _pem_dir, True)
    fd, path = tempfile.mkstemp(prefix=kind, suffix=".pem", dir=_pem_dir)
    with os.fdopen(fd, "w") as f:
        f.write(value)
    os.chmod(path, 0o600)
    _pem_paths[value] = path
    return path


def make_client(
    config: DockerClientConfig, *, streaming: bool = False, version: str | None = None
) -> Any:
    """A ``docker.DockerClient`` for ``config`` (contacts the engine when it must ask for the
    API version). Raises :class:`BackendUnavailableError` when the engine does not answer.

    ``streaming=True`` makes a client without a read timeout, for log streams that follow a
    replica which may say nothing for longer than ``config.timeout``; ``version`` skips the
    version query (pass the one the first client found).
    """
    from torchx_provider.optional import require

    docker = require("docker")

    common: dict[str, Any] = {
        "timeout": None if streaming else config.timeout,
        "max_pool_size": config.max_pool_size,
        "use_ssh_client": config.use_ssh_client,
    }
    if version or config.version:
        common["version"] = version or config.version
    where = config.base_url or os.environ.get("DOCKER_HOST") or "the local Docker socket"
    with docker_call(f"connecting to the Docker engine at {where}"):
        if config.base_url is None and not config.uses_tls:
            return docker.from_env(**common)
        tls: Any = False
        if config.uses_tls:
            cert = _pem_file(config.tls_client_cert, "cert")
            key = _pem_file(config.tls_client_key, "key")
            ca = _pem_file(config.tls_ca_cert, "ca")
            tls = docker.tls.TLSConfig(
                client_cert=(cert, key) if cert or key else None,
                ca_cert=ca,
                verify=bool(config.tls_verify),
            )
        return docker.DockerClient(base_url=config.base_url, tls=tls, **common)


# ---------------------------------------------------------------------------------------------
# The clients and the worker pool of one engine

T = TypeVar("T")
R = TypeVar("R")


class EngineConnection:
    """The clients and the worker pool of one engine, made on first use and closed together.
    Thread-safe.

    Args:
        config: how to reach the engine (default: as the docker CLI does).
        client: a ``docker.DockerClient`` to use for everything; the caller's, never closed
            here.
    """

    def __init__(
        self, config: DockerClientConfig | None = None, client: DockerClient | None = None
    ) -> None:
        self.config = config or DockerClientConfig()
        self._client = client
        self._own_client = client is None
        self._stream_client: DockerClient | None = None
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._answers = threading.Lock()
        self._outages: tuple[EngineOutage, ...] = ()

    # -- whether the engine answers --------------------------------------------------------------
    @property
    def outages(self) -> tuple[EngineOutage, ...]:
        """The times the engine did not answer, as this connection's calls saw them, oldest
        first; the last one still open while it does not answer yet."""
        with self._answers:
            return self._outages

    def answered(self, answered: bool, at: datetime | None = None) -> None:
        """Record that the engine answered a call (or failed to) at ``at`` (default: now)."""
        from torchx_provider.schedulers.docker.state import record_answer

        at = at or datetime.now(timezone.utc)
        with self._answers:
            self._outages = record_answer(self._outages, answered, at)

    @contextlib.contextmanager
    def call(self, what: str, app_id: str | None = None) -> Iterator[None]:
        """:func:`docker_call`, recording whether the engine answered (:attr:`outages`): a
        :class:`BackendUnavailableError` is a call it did not answer; an answer, even a
        refusal of the request, is one it did."""
        try:
            with docker_call(what, app_id):
                yield
        except BackendUnavailableError:
            self.answered(False)
            raise
        except (SubmissionError, UnknownAppError):
            self.answered(True)
            raise
        self.answered(True)

    @property
    def client(self) -> DockerClient:
        """The ``docker.DockerClient`` (made on first use)."""
        with self._lock:
            if self._client is None:
                self._client = make_client(self.config)
            return self._client

    @property
    def stream_client(self) -> DockerClient:
        """A client without a read timeout, for log streams that follow a quiet replica."""
        if not self._own_client:
            return self.client
        version = self.client.api.api_version
        with self._lock:
            if self._stream_client is None:
                self._stream_client = make_client(self.config, streaming=True, version=version)
            return self._stream_client

    def _map(
        self, fn: Callable[[T], R], items: Sequence[T], window: int | None = None
    ) -> list[Future[R]]:
        """Run ``fn`` on every item concurrently, at most ``window`` at a time if given (then
        the call returns once every item is done); the futures, in order (one item:
        inline)."""
        if len(items) <= 1:
            futures: list[Future[R]] = []
            for item in items:
                f: Future[R] = Future()
                try:
                    f.set_result(fn(item))
                except BaseException as e:  # delivered through the future
                    f.set_exception(e)
                futures.append(f)
            return futures
        pool = self._executor()
        if window is None or len(items) <= window:
            return [pool.submit(fn, item) for item in items]
        return self._map_window(fn, items, window)

    def _map_window(self, fn: Callable[[T], R], items: Sequence[T], window: int) -> list[Future[R]]:
        """:meth:`_map` ``window`` at a time: returns once every call has ended, having
        waited for them through :class:`~.inflight.InFlight` (no lock of theirs is taken
        here: the caller may be a task's main thread, where a timeout can interrupt it)."""
        from torchx_provider.schedulers.docker.inflight import InFlight

        def run(index: int, item: T) -> tuple[int, R | None, BaseException | None]:
            try:
                return index, fn(item), None
            except BaseException as e:  # delivered through the item's future
                return index, None, e

        futures: list[Future[R]] = [Future() for _ in items]
        running: InFlight[tuple[int, R | None, BaseException | None]] = InFlight(
            self._executor(), lambda e: (-1, None, e)
        )
        pending = iter(enumerate(items))
        while True:
            while len(running) < window:
                found = next(pending, None)
                if found is None:
                    break
                running.submit(partial(run, *found))
            if not running:
                return futures
            outcome = running.next(timeout=None)
            if outcome is None or outcome[0] < 0:
                continue
            index, value, error = outcome
            if error is not None:
                futures[index].set_exception(error)
            else:
                futures[index].set_result(value)  # type: ignore[arg-type]

    def _executor(self) -> ThreadPoolExecutor:
        """The worker pool (``max_pool_size`` threads, as many as connections), made on first
        use."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self.config.max_pool_size, thread_name_prefix="torchx-docker"
                )
            return self._pool

    def close(self) -> None:
        """Close the client's connections and the thread pool. Safe to call twice."""
        with self._lock:
            pool, self._pool = self._pool, None
            clients = [self._client if self._own_client else None, self._stream_client]
            self._stream_client = None
            if self._own_client:
                self._client = None
        if pool is not None:
            pool.shutdown(wait=False)
        for client in clients:
            if client is not None:
                client.close()


# ---------------------------------------------------------------------------------------------
# The choke point

#: Fragments of engine messages -> what to tell the user.
_HINTS: Mapping[str, str] = {
    "could not select device driver": "the engine has no GPU runtime: install the NVIDIA "
    "container toolkit on the Docker host, or set resource.gpu=0",
    "range of cpus": "lower the role's resource.cpu",
    "minimum memory limit": "raise the role's resource.memMB",
    "no such image": "build or load the image on the engine, or fix its name",
    "pull access denied": "log in to the registry (docker login) or fix the image name",
    "executable file not found": "fix the role's entrypoint: it is not in the image",
    "error gathering device information": "the device in resource.devices or a device mount "
    "does not exist on the Docker host",
    "not found in the image": "fix the role's entrypoint: it is not in the image",
    "non-overlapping ipv4 address pool": "every subnet the engine may give a new network is "
    "taken: remove unused networks (docker network prune), or set the run option network to "
    "an existing one",
}


def _hint(text: str) -> str:
    low = text.lower()
    for fragment, hint in _HINTS.items():
        if fragment in low:
            return f"; {hint}"
    return ""


#: HTTP statuses of the engine's endpoint that mean "not now": rate limited, or a gateway
#: that cannot reach the engine. The engine's own 500s are errors of the request (a driver
#: that failed, a container that cannot start) and are not retried.
BUSY_STATUSES = frozenset({429, 502, 503, 504})


def translate_error(e: BaseException, what: str, app_id: str | None = None) -> Exception | None:
    """The provider exception for a docker/connection exception raised while doing ``what``
    (``None``: not an engine error, let it propagate unchanged)."""
    import docker.errors
    import requests.exceptions

    if isinstance(e, docker.errors.TLSParameterError):
        return InvalidOptionError(f"{what}: bad TLS settings: {e}", option="tls_client_cert")
    if isinstance(e, docker.errors.BuildError):
        tail = "".join(
            str(chunk.get("stream", "")) for chunk in list(e.build_log or [])[-10:]
        ).strip()
        return SubmissionError(f"{what}: the image build failed: {e.msg}\n{tail}".rstrip())
    if isinstance(e, docker.errors.APIError):
        status = e.status_code
        explanation = e.explanation if isinstance(e.explanation, str) else str(e)
        if isinstance(e, docker.errors.NotFound) and app_id is not None:
            return UnknownAppError(app_id)
        if status in (401, 403):
            return BackendConfigurationError(
                f"{what}: the Docker engine refused access ({status}): {explanation}; check "
                "the TLS client certificate or the permissions on the Docker socket",
                status=status,
                body=explanation,
            )
        if status in BUSY_STATUSES:
            # a proxy in front of the engine (a socket proxy, a TLS gateway) that cannot
            # reach it, or one that limits the rate: try again later, as with an outage
            return BackendUnavailableError(
                f"{what}: the Docker engine's endpoint answered {status}: {explanation}",
                status=status,
                body=explanation,
            )
        return SubmissionError(
            f"{what}: {explanation}{_hint(explanation)}", status=status, body=explanation
        )
    import http.client

    import urllib3.exceptions

    untrusted = untrusted_certificate(e)
    if untrusted is not None:
        return BackendConfigurationError(
            f"{what}: the Docker engine's certificate is not trusted ({untrusted}); give the "
            "connection the CA that signed it (tls_ca_cert), or, for a test engine only, set "
            "tls_skip_verify"
        )

    if isinstance(
        e,
        (
            requests.exceptions.ConnectionError,
            requests.exceptions.Timeout,
            requests.exceptions.ChunkedEncodingError,
            # a response cut off mid-stream (the connection broke while a log or the
            # events were read)
            urllib3.exceptions.ProtocolError,
            http.client.IncompleteRead,
            ConnectionError,
        ),
    ):
        return BackendUnavailableError(
            f"{what}: cannot reach the Docker engine ({e}); check that dockerd is running and "
            "that base_url (or DOCKER_HOST) points at it"
        )
    if isinstance(e, docker.errors.DockerException):
        return BackendUnavailableError(
            f"{what}: {e}; check that dockerd is running and that base_url (or DOCKER_HOST) "
            "points at it"
        )
    return None


@contextlib.contextmanager
def docker_call(what: str, app_id: str | None = None) -> Iterator[None]:
    """Run docker SDK calls, translating their exceptions (see :func:`translate_error`).

    ``what`` says what was being done ("starting replica trainer/0 of app x"); with
    ``app_id``, a 404 means the app does not exist (:class:`UnknownAppError`).
    """
    try:
        yield
    except TorchXProviderError:
        raise
    except Exception as e:
        translated = translate_error(e, what, app_id)
        if translated is None:
            raise
        raise translated from e
