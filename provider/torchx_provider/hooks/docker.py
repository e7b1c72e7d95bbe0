"""The Docker hook: connection type ``torchx_docker``, for the ``local_docker`` backend.

Fields::

    host        the engine URL: unix:///var/run/docker.sock, tcp://host:2376, or host + port
    login       registry user (for pushing workspace images)   } optional
    password    registry password or token                     }

Extras (optional)::

    registry          registry the credentials are for (default: Docker Hub)
    tls_ca_cert       CA certificate (PEM content, or a path on workers and triggerers)
    tls_client_cert   client certificate (PEM content or path)
    tls_client_private_key  client private key (PEM content or path); also read as
                      tls_client_key, which Airflow's API does not hide
    tls_verify        verify the engine's certificate (default true when a CA is given)
    tls_skip_verify   do not verify it (the form's switch: untouched, verification stays on)
    job_url_template  URL of a job in some UI, e.g. "https://portainer/#/containers?app={app_id}"

Any other extra is a default for the backend's run option of that name. Without a connection
the process's ``DOCKER_HOST`` is used (else the local socket): the worker's when it submits,
the triggerer's when it follows a deferred task. Certificate files are read where the
connection is resolved, so a path must exist on the triggerers too (or give PEM content).
PEM content that lost its line breaks (pasted into a one-line field) is rewrapped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from torchx_provider.compat import connection_form_widgets, ui_field_behaviour
from torchx_provider.errors import InvalidOptionError
from torchx_provider.hooks.base import (
    BackendTarget,
    TorchXHookBase,
    fold_secret_names,
    parse_bool,
)

DOCKER_CONNECTION_KEYS = frozenset(
    {
        "registry",
        "tls_ca_cert",
        "tls_client_cert",
        "tls_client_key",
        "tls_client_private_key",
        "tls_verify",
        "tls_skip_verify",
        "job_url_template",
    }
)
_PEM_KEYS = ("tls_ca_cert", "tls_client_cert", "tls_client_key")


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)
_SECRET_PEM_KEYS = frozenset({"tls_client_key"})


def pem_text(text: str) -> str:
    """PEM content with its line breaks: blocks whose lines were joined (a one-line form
    field drops line breaks, some turn them into spaces) are rewrapped at 64 characters, as
    PEM writes them; blocks with headers (``Proc-Type: ...``) are kept as given.

    >>> print(pem_text("-----BEGIN CERTIFICATE----- QUJD REVG -----END CERTIFICATE-----"))
    -----BEGIN CERTIFICATE-----
    QUJDREVG
    -----END CERTIFICATE-----
    <BLANKLINE>
    """
    blocks = []
    for m in _PEM_BLOCK.finditer(text):
        label, body = m.group(1), m.group(2)
        if ":" in body:
            blocks.append(m.group(0))
            continue
        flat = "".join(body.split())
        lines = [flat[i : i + 64] for i in range(0, len(flat), 64)]
        blocks.append("\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"]))
    return "\n".join(blocks) + "\n" if blocks else text


def _pem(value: Any, key: str) -> str:
    text = str(value)
    if "-----BEGIN" in text:
        return pem_text(text)
    path = Path(text).expanduser()
    try:
        return path.read_text()
    except OSError as e:
        # a secret pasted without its BEGIN line must not be echoed into the task log
        shown = "(the value is not shown: it is secret)" if key in _SECRET_PEM_KEYS else repr(text)
        raise InvalidOptionError(
            f"{key} is neither PEM content (-----BEGIN ...) nor a readable file: cannot read "
            f"{shown} ({e.strerror or type(e).__name__})",
            key,
        ) from None


def engine_url(host: str | None, port: int | None) -> str | None:
    """The engine URL from a connection's host and port.

    >>> engine_url("unix:///var/run/docker.sock", None)
    'unix:///var/run/docker.sock'
    >>> engine_url("10.0.0.5", 2376)
    'tcp://10.0.0.5:2376'
    """
    if not host:
        return None
    if "://" in host:
        return host if not port or host.count(":") > 1 else f"{host}:{port}"
    return f"tcp://{host}:{port or 2375}"


def resolve_docker_client(
    settings: Mapping[str, Any],
    host: str | None,
    port: int | None,
    login: str | None,
    password: str | None,
    env: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Connection fields -> (client kwargs, secret values). Reads certificate files only."""
    settings = fold_secret_names(settings, {"tls_client_private_key": "tls_client_key"})
    env = os.environ if env is None else env
    kwargs: dict[str, Any] = {}
    secrets: list[str] = []
    url = engine_url(host, port) or env.get("DOCKER_HOST") or None
    if url:
        kwargs["base_url"] = url
    for key in _PEM_KEYS:
        if settings.get(key):
            kwargs[key] = _pem(settings[key], key)
    if bool(kwargs.get("tls_client_cert")) != bool(kwargs.get("tls_client_key")):
        raise InvalidOptionError(
            "tls_client_cert and tls_client_key go together: set both or neither",
            "tls_client_key",
        )
    skip = parse_bool(settings.get("tls_skip_verify"), "tls_skip_verify")
    if "tls_verify" in settings:
        kwargs["tls_verify"] = parse_bool(settings["tls_verify"], "tls_verify")
        if kwargs["tls_verify"] and skip:
            raise InvalidOptionError(
                "tls_verify and tls_skip_verify are both on; keep one", "tls_skip_verify"
            )
    elif skip:
        kwargs["tls_verify"] = False
    elif kwargs.get("tls_ca_cert"):
        kwargs["tls_verify"] = True
    if kwargs.get("tls_verify") and not kwargs.get("tls_ca_cert"):
        raise InvalidOptionError(
            "tls_verify is on but no tls_ca_cert is given to verify the engine with",
            "tls_ca_cert",
        )
    if any(kwargs.get(k) for k in _PEM_KEYS) and url and url.startswith("unix:"):
        raise InvalidOptionError(
            f"TLS material is set but the engine URL {url!r} is a unix socket; use tcp://",
            "host",
        )
    if kwargs.get("tls_client_key"):
        secrets.append(kwargs["tls_client_key"])
    if login or password:
        if not (login and password):
            raise InvalidOptionError(
                "registry credentials need both login and password", "password"
            )
        kwargs.update(registry_kwargs(login, password, settings.get("registry")))
        secrets.append(password)
    return kwargs, secrets


def registry_kwargs(login: str, password: str, registry: str | None) -> dict[str, Any]:
    """Registry credentials as the backend's client parameters (``registry_username``,
    ``registry_password``, ``registry_url``), if this version of the backend takes them;
    otherwise none (the engine's own ``docker login`` is then what pushes use)."""
    import dataclasses

    from torchx_provider.schedulers.docker.client import DockerClientConfig

    fields = {f.name for f in dataclasses.fields(DockerClientConfig)}
    wanted = {"registry_username": login, "registry_password": password, "registry_url": registry}
    return {k: v for k, v in wanted.items() if k in fields and v}


class TorchXDockerHook(TorchXHookBase):
    """Connects the ``local_docker`` backend to a Docker engine.

    :param conn_id: a connection of type ``torchx_docker``; ``None`` uses ``DOCKER_HOST`` or
        the local socket.
    """

    conn_type: ClassVar[str] = "torchx_docker"
    hook_name: ClassVar[str] = "TorchX Docker"
    default_conn_name: ClassVar[str | None] = "torchx_docker_default"
    default_backend: ClassVar[str] = "local_docker"
    connection_keys: ClassVar[frozenset[str]] = DOCKER_CONNECTION_KEYS

    # Airflow 3.1 builds the connection form from these (defined on each hook class: it only
    # calls methods a class defines itself); 3.2 and later read the provider info instead.
    get_connection_form_widgets = classmethod(connection_form_widgets)
    get_ui_field_behaviour = classmethod(ui_field_behaviour)

    def target_from(self, loaded: tuple[str, dict[str, Any], Any] | None) -> BackendTarget:
        if loaded is None:
            extras: dict[str, Any] = {}
            host = port = login = password = None
        else:
            _, extras, conn = loaded
            host, port, login, password = conn.host, conn.port, conn.login, conn.password
        settings, defaults = self.split_extras(extras)
        kwargs, secrets = resolve_docker_client(settings, host, port, login, password)
        return BackendTarget(
            backend=self.backend,
            client_kwargs=kwargs,
            cfg_defaults=defaults,
            job_url_template=settings.get("job_url_template"),
            secret_keys=("tls_client_key", "registry_password"),
            mask_values=tuple(secrets),
            conn_id=self.conn_id,
        )
