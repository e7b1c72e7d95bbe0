"""What Airflow learns about this provider through the ``apache_airflow_provider`` entry point.

``airflow providers list|hooks|triggers|links`` read it. The hooks, connection types and
operators come from the built-in rows of the backend table (:mod:`torchx_provider.backends`);
the connection forms (fields and their labels), keyed by connection type, are declared here,
so the UI builds them without importing the hooks.
"""

from __future__ import annotations

from typing import Any

from torchx_provider.backends import BUILTIN_BACKENDS, Backend
from torchx_provider.version import __version__

INTEGRATION = "TorchX"


def _text(
    label: str, description: str | None = None, *, password: bool = False, lines: bool = False
) -> dict[str, Any]:
    """A text field; ``password`` hides what is typed (one line: the browser drops line
    breaks), ``lines`` makes it a multi-line text area (for PEM content that is not secret)."""
    schema: dict[str, Any] = {"type": ["string", "null"]}
    if password:
        schema["format"] = "password"
    elif lines:
        schema["format"] = "multiline"
    field: dict[str, Any] = {"label": label, "schema": schema}
    if description:
        field["description"] = description
    return field


def _flag(label: str, description: str) -> dict[str, Any]:
    return {
        "label": label,
        "schema": {"type": ["boolean", "null"], "default": False},
        "description": description,
    }


_JOB_URL = _text(
    "Job URL template",
    "URL of a job in some UI, with {app_id}, {app_name}, {namespace}, {backend}, {session}",
)

KUBERNETES_FIELDS: dict[str, Any] = {
    "in_cluster": _flag(
        "In cluster", "Use the pod's service account (worker and triggerer in-cluster)"
    ),
    "kube_config_path": _text("Kube config path", "Path of a kubeconfig file on the worker"),
    "kube_config_secret": _text(
        "Kube config (JSON or base64)",
        "Kubeconfig content, hidden as typed. This field is one line: paste "
        "`kubectl config view --raw --flatten -o json` or `base64 -w0` of the file",
        password=True,
    ),
    "cluster_context": _text("Cluster context", "Kubeconfig context (default: current-context)"),
    "namespace": _text("Namespace", "Namespace of the jobs"),
    "disable_verify_ssl": _flag("Disable SSL verification", "Do not verify the API server (tests)"),
    "queue": _text("Default queue", "Run option default: Volcano queue (kubernetes backend)"),
    "local_queue": _text(
        "Default Kueue local queue",
        "Run option default: Kueue LocalQueue of AppWrappers v1beta2 and JobSets",
    ),
    "image_repo": _text("Default image repo", "Run option default: where workspace images go"),
    "service_account": _text("Default service account", "Run option default"),
    "priority_class": _text("Default priority class", "Run option default"),
    "job_url_template": _JOB_URL,
}

DOCKER_FIELDS: dict[str, Any] = {
    "registry": _text("Registry", "Registry the login/password are for (default: Docker Hub)"),
    "tls_ca_cert": _text(
        "TLS CA certificate", "PEM content or a path on workers and triggerers", lines=True
    ),
    "tls_client_cert": _text(
        "TLS client certificate", "PEM content or a path on workers and triggerers", lines=True
    ),
    "tls_client_private_key": _text(
        "TLS client key",
        "PEM content (hidden as typed; its line breaks are restored) or a path",
        password=True,
    ),
    "tls_skip_verify": _flag(
        "Skip TLS verification",
        "Do not verify the engine's certificate (verified against the CA when off)",
    ),
    "job_url_template": _JOB_URL,
}


#: connection type -> its form in the UI: hook name, fields and the standard fields' behaviour
CONNECTION_FORMS: dict[str, dict[str, Any]] = {
    "torchx_kubernetes": {
        "hook-name": "TorchX Kubernetes",
        "conn-fields": KUBERNETES_FIELDS,
        "ui-field-behaviour": {
            "hidden-fields": ["host", "schema", "login", "password", "port", "extra"],
            "relabeling": {},
            "placeholders": {},
        },
    },
    "torchx_docker": {
        "hook-name": "TorchX Docker",
        "conn-fields": DOCKER_FIELDS,
        "ui-field-behaviour": {
            "hidden-fields": ["schema", "extra"],
            "relabeling": {
                "host": "Engine URL",
                "login": "Registry user",
                "password": "Registry password",
            },
            "placeholders": {
                "host": "unix:///var/run/docker.sock or tcp://host:2376",
                "port": "2376 (when host has no scheme)",
            },
        },
    },
}

#: the module of :class:`~torchx_provider.operators.TorchXOperator` (no row names it: it
#: takes any backend)
GENERIC_OPERATOR_MODULE = "torchx_provider.operators.torchx"


def _module(path: str) -> str:
    return path.partition(":")[0]


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def connection_types(rows: tuple[Backend, ...] = BUILTIN_BACKENDS) -> list[dict[str, Any]]:
    """One entry per connection type of the rows (backends may share one), with its form."""
    by_type = {row.connection_type: row for row in rows}
    return [
        {
            "connection-type": conn_type,
            "hook-class-name": row.hook.replace(":", "."),
            **CONNECTION_FORMS[conn_type],
        }
        for conn_type, row in by_type.items()
    ]


def get_provider_info() -> dict[str, Any]:
    """The provider's metadata: package name, hooks, operators, triggers, connection types."""
    return {
        "package-name": "airflow-provider-torchx",
        "name": "TorchX",
        "description": "Run TorchX-style distributed apps (roles x replicas) on Volcano, "
        "MCAD, AppWrapper v1beta2, JobSet (with Kueue) or Docker from Airflow.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://pytorch.org/torchx/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": _unique(
                    [GENERIC_OPERATOR_MODULE] + [_module(b.operator) for b in BUILTIN_BACKENDS]
                ),
            }
        ],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": _unique([_module(b.hook) for b in BUILTIN_BACKENDS]),
            }
        ],
        "triggers": [
            {"integration-name": INTEGRATION, "python-modules": ["torchx_provider.triggers.job"]}
        ],
        "connection-types": connection_types(),
        "extra-links": ["torchx_provider.links.TorchXJobLink"],
        "config": {
            "torchx": {
                "description": "Settings of the TorchX provider.",
                "options": {
                    "max_log_streams": {
                        "description": "Log streams one process (a triggerer, or a worker "
                        "following a job) holds open at once. Each running replica followed "
                        "holds one; past the cap, replicas take turns of 20 s and an ended "
                        "replica's last lines are read when its turn comes. Raise it when a "
                        "triggerer follows more running replicas than this.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "2048",
                        "default": "512",
                    }
                },
            }
        },
    }
