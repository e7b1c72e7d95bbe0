"""The Kubernetes hook: connection types ``torchx_kubernetes`` and ``kubernetes``.

Extras (all optional; a legacy ``extra__kubernetes__`` / ``extra__torchx_kubernetes__`` prefix
is accepted, so an existing connection of the cncf.kubernetes provider works unchanged, and
that provider need not be installed)::

    in_cluster          use the pod's service account (the worker and triggerer run in-cluster)
    kube_config_path    path of a kubeconfig file (on the workers and the triggerers)
    kube_config_secret  kubeconfig content: YAML or JSON (a string or a JSON object), or
                        base64 of either (what survives a one-line form field); also read
                        as kube_config (the cncf.kubernetes name), which Airflow's API
                        does not hide
    cluster_context     the kubeconfig context to use (default: its current-context)
    namespace           namespace for jobs (default: the context's, else "default")
    disable_verify_ssl  do not verify the API server's certificate (test clusters only)
    job_url_template    URL of a job in some UI, e.g.
                        "https://dash.example.com/#/job/{namespace}/{app_id}"

``in_cluster``, ``kube_config_path`` and ``kube_config`` are mutually exclusive. Any other
extra (``queue``, ``image_repo``, ``service_account``, ``priority_class``, ...) is a default
for the backend's run option of that name; the task's ``cfg`` overrides it.

Without a connection (``conn_id=None``) the process's own ``KUBECONFIG`` (or
``~/.kube/config``) is used, else the in-cluster service account: the worker's when it
submits, the triggerer's when it follows a deferred task.

The kubeconfig is read and flattened where the connection is resolved -- every file it refers
to (certificate authority, client certificate and key, token file) inlined -- on the worker
and, for a deferred task, again in the triggerer, which resolves the connection itself (see
:mod:`~torchx_provider.hooks.base`). A token file is read at that moment; the triggerer reads
it again when the API server answers 401, so a rotated token (a bound service-account token,
a refreshed kubeconfig) is picked up mid-job. Kubeconfigs whose users authenticate through an
``exec`` or ``auth-provider`` plugin need that plugin on the triggerer too.
"""

from __future__ import annotations

import base64
import json
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
from torchx_provider.schedulers.kube.kubeconfig import find_kubeconfig, parse_kubeconfig

#: (path key, inlined data key) pairs of kubeconfig clusters and users
_FILE_REFS = {
    "cluster": (("certificate-authority", "certificate-authority-data"),),
    "user": (
        ("client-certificate", "client-certificate-data"),
        ("client-key", "client-key-data"),
    ),
}
_SECRET_USER_KEYS = ("token", "client-key-data", "password")

KUBE_CONNECTION_KEYS = frozenset(
    {
        "in_cluster",
        "kube_config_path",
        "kube_config",
        "kube_config_secret",
        "cluster_context",
        "namespace",
        "disable_verify_ssl",
        "job_url_template",
    }
)
#: extras of the cncf.kubernetes provider's connections that have no meaning here
CNCF_ONLY_KEYS = frozenset(
    {"disable_tcp_keepalive", "xcom_sidecar_container_image", "xcom_sidecar_container_resources"}
)


def _read(path: Path, what: str, option: str) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise InvalidOptionError(
            f"cannot read {what} {str(path)!r}: {e.strerror or e}; fix the path or make the "
            "file readable by the Airflow worker",
            option,
        ) from None


#: auth-provider (OIDC, GCP, Azure) config keys whose values are credentials
_SECRET_PROVIDER_KEYS = ("id-token", "refresh-token", "client-secret", "access-token")


def _plugin_secrets(user: Mapping[str, Any]) -> list[str]:
    """Credentials an ``auth-provider`` or ``exec`` plugin entry of a kubeconfig user holds:
    OIDC tokens and client secret, and every value of the exec plugin's environment (where
    plugins take their API keys)."""
    out: list[str] = []
    provider = (user.get("auth-provider") or {}).get("config") or {}
    out.extend(str(provider[k]) for k in _SECRET_PROVIDER_KEYS if provider.get(k))
    for var in (user.get("exec") or {}).get("env") or []:
        if isinstance(var, Mapping) and var.get("value"):
            out.append(str(var["value"]))
    return out


_BASE64 = re.compile(r"[A-Za-z0-9+/=_-]+")


def kubeconfig_text(content: Any) -> str:
    """The ``kube_config`` extra as kubeconfig text: a JSON object is dumped, base64 decoded.

    The UI's one-line field drops a pasted YAML's line breaks, so a one-line value must be
    JSON (``kubectl config view --raw --flatten -o json``) or base64 (``base64 -w0``); a
    one-line value that is neither gets an error saying so rather than a YAML parse error.
    """
    if not isinstance(content, str):
        return json.dumps(content)
    text = content.strip()
    if "\n" in text or text.startswith("{"):
        return content
    if _BASE64.fullmatch(text):
        padded = text + "=" * (-len(text) % 4)
        decode = base64.urlsafe_b64decode if "-" in text or "_" in text else base64.b64decode
        try:
            return decode(padded).decode()
        except (ValueError, UnicodeDecodeError):
            pass
    raise InvalidOptionError(
        "kube_config is one line that is neither JSON nor base64: a YAML kubeconfig pasted "
        "into the connection form's one-line field loses its line breaks; paste it as JSON "
        "(kubectl config view --raw --flatten -o json) or base64 (base64 -w0 KUBECONFIG), "
        "or use kube_config_path",
        "kube_config",
    )


def flatten_kubeconfig(text: str, base_dir: Path, option: str) -> tuple[str, list[str]]:
    """Inline the files a kubeconfig refers to, as ``kubectl config view --flatten`` does.

    Returns the flattened kubeconfig (YAML) and the secret values in it (tokens, private
    keys) for the log masker. Relative paths are relative to ``base_dir`` (the kubeconfig's
    directory). A file that cannot be read is an :class:`InvalidOptionError`.
    """
    import yaml

    data = parse_kubeconfig(text, option)
    secrets: list[str] = []
    for kind, refs in _FILE_REFS.items():
        for entry in data.get(f"{kind}s") or []:
            body = (entry or {}).get(kind) or {}
            for path_key, data_key in refs:
                ref = body.pop(path_key, None)
                if ref and not body.get(data_key):
                    path = Path(ref).expanduser()
                    path = path if path.is_absolute() else base_dir / path
                    content = _read(path, f"{kind} file ({path_key})", option)
                    body[data_key] = base64.b64encode(content.encode()).decode()
            if kind == "user":
                token_file = body.pop("tokenFile", None)
                if token_file and not body.get("token"):
                    path = Path(token_file).expanduser()
                    path = path if path.is_absolute() else base_dir / path
                    body["token"] = _read(path, "token file", option).strip()
                secrets.extend(str(body[k]) for k in _SECRET_USER_KEYS if body.get(k))
                secrets.extend(_plugin_secrets(body))
    return yaml.safe_dump(data, sort_keys=False), secrets


def _check_context(data: Mapping[str, Any], context: str | None, option: str) -> None:
    names = [c.get("name") for c in data.get("contexts") or [] if isinstance(c, Mapping)]
    if context and names and context not in names:
        raise InvalidOptionError(
            f"cluster_context {context!r} is not in the kubeconfig; its contexts are {names}",
            "cluster_context",
        )
    if not context and not data.get("current-context") and len(names) > 1:
        raise InvalidOptionError(
            f"the kubeconfig ({option}) has several contexts {names} and no current-context; "
            "set cluster_context",
            "cluster_context",
        )


def resolve_kube_client(
    settings: Mapping[str, Any],
    conn_id: str | None,
    env: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Connection settings -> (client kwargs, secret values). Reads files; no network.

    The client kwargs are ``kubeconfig`` (flattened content) or ``in_cluster``, plus
    ``context``, ``namespace`` and ``disable_verify_ssl`` when set.
    """
    settings = fold_secret_names(settings, {"kube_config_secret": "kube_config"})
    env = os.environ if env is None else env
    where = f"connection {conn_id!r}" if conn_id else "the environment"
    in_cluster = parse_bool(settings.get("in_cluster"), "in_cluster")
    path = settings.get("kube_config_path")
    content = settings.get("kube_config")
    chosen = [
        name
        for name, value in (
            ("in_cluster", in_cluster),
            ("kube_config_path", path),
            ("kube_config", content),
        )
        if value
    ]
    if len(chosen) > 1:
        raise InvalidOptionError(
            f"{where} sets {' and '.join(chosen)}, which are mutually exclusive: in_cluster, "
            "kube_config_path and kube_config each say where the cluster configuration comes "
            "from; keep exactly one",
            chosen[1],
        )
    context = settings.get("cluster_context") or None
    kwargs: dict[str, Any] = {}
    secrets: list[str] = []
    if in_cluster:
        kwargs["in_cluster"] = True
    else:
        if content:
            option = "kube_config"
            text = kubeconfig_text(content)
            base_dir = Path.cwd()
        elif path:
            option = "kube_config_path"
            file = Path(str(path)).expanduser()
            text = _read(file, "kubeconfig file (kube_config_path)", option)
            base_dir = file.parent
        else:
            option = "KUBECONFIG"
            default = find_kubeconfig(env)
            if default is None:
                if env.get("KUBERNETES_SERVICE_HOST"):
                    kwargs["in_cluster"] = True
                    text = ""
                else:
                    searched = (
                        f"no file of KUBECONFIG={env['KUBECONFIG']!r} exists"
                        if env.get("KUBECONFIG", "").strip(os.pathsep)
                        else "no KUBECONFIG, no ~/.kube/config"
                    )
                    raise InvalidOptionError(
                        f"{where} gives no Kubernetes configuration and none was found "
                        f"({searched}, not running in a cluster); set kube_config_path, "
                        "kube_config or in_cluster in the connection",
                        "conn_id",
                    )
            else:
                text = _read(default, "kubeconfig file", option)
                base_dir = default.parent
        if not kwargs.get("in_cluster"):
            flat, secrets = flatten_kubeconfig(text, base_dir, option)
            _check_context(parse_kubeconfig(flat, option), context, option)
            kwargs["kubeconfig"] = flat
            secrets.append(flat)
    if context:
        kwargs["context"] = str(context)
    if settings.get("namespace"):
        kwargs["namespace"] = str(settings["namespace"])
    if parse_bool(settings.get("disable_verify_ssl"), "disable_verify_ssl"):
        kwargs["disable_verify_ssl"] = True
    return kwargs, secrets


class TorchXKubernetesHook(TorchXHookBase):
    """Connects the Kubernetes backends: Volcano (``kubernetes``), MCAD
    (``kubernetes_mcad``), AppWrapper ``v1beta2`` (``kubernetes_appwrapper``) and JobSet
    (``kubernetes_jobset``).

    :param conn_id: a connection of type ``torchx_kubernetes`` or ``kubernetes``; ``None``
        uses the worker's kubeconfig or in-cluster service account.
    :param backend: one of those backends' names (default ``kubernetes``).
    """

    conn_type: ClassVar[str] = "torchx_kubernetes"
    hook_name: ClassVar[str] = "TorchX Kubernetes"
    default_conn_name: ClassVar[str | None] = "torchx_kubernetes_default"
    accepted_conn_types: ClassVar[tuple[str, ...]] = ("kubernetes",)
    default_backend: ClassVar[str] = "kubernetes"
    connection_keys: ClassVar[frozenset[str]] = KUBE_CONNECTION_KEYS
    ignored_keys: ClassVar[frozenset[str]] = CNCF_ONLY_KEYS

    # Airflow 3.1 builds the connection form from these (defined on each hook class: it only
    # calls methods a class defines itself); 3.2 and later read the provider info instead.
    get_connection_form_widgets = classmethod(connection_form_widgets)
    get_ui_field_behaviour = classmethod(ui_field_behaviour)

    def target_from(self, loaded: tuple[str, dict[str, Any], Any] | None) -> BackendTarget:
        extras = loaded[1] if loaded else {}
        settings, defaults = self.split_extras(extras)
        kwargs, secrets = resolve_kube_client(settings, self.conn_id)
        return BackendTarget(
            backend=self.backend,
            client_kwargs=kwargs,
            cfg_defaults=defaults,
            optional_cfg_defaults=(
                {"namespace": kwargs["namespace"]} if kwargs.get("namespace") else {}
            ),
            job_url_template=settings.get("job_url_template"),
            secret_keys=("kubeconfig",),
            mask_values=tuple(secrets),
            conn_id=self.conn_id,
        )
