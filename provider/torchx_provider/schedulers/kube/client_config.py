"""How to reach a cluster: plain values in, a configured sync or async API client out.

The same :class:`KubeClientConfig` feeds the sync ``kubernetes`` client (the worker's
scheduler) and ``kubernetes_asyncio`` (the triggerer's async client), so the two can never
disagree about which cluster, user or namespace they use. Its fields are the plain, JSON-safe
kwargs the Airflow hook passes to ``create_scheduler`` / ``create_async_client``:

* ``kubeconfig``: a kubeconfig file path, or its content (a dict, or YAML/JSON text);
* ``context``: the kubeconfig context (default: its ``current-context``);
* ``in_cluster``: use the pod's service account;
* ``disable_verify_ssl``: do not verify the API server's certificate (test clusters only);
* ``namespace``: the default namespace (else the context's, else ``default``).

Nothing given: ``KUBECONFIG`` / ``~/.kube/config``, else the in-cluster service account --
what ``kubectl`` would use (the search and the parsing are :mod:`.kubeconfig`'s).

>>> cfg = KubeClientConfig.from_kwargs(kubeconfig={"current-context": "c", "contexts": [
...     {"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "team"}}]})
>>> cfg.default_namespace()
'team'
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchx_provider.errors import InvalidOptionError
from torchx_provider.schedulers.kube.apitypes import SyncApiClient
from torchx_provider.schedulers.kube.kubeconfig import (
    check_context,
    context_namespace,
    find_kubeconfig,
    parse_kubeconfig,
    read_kubeconfig,
)
from torchx_provider.schedulers.streams import stream_cap

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

#: Where a pod finds its own namespace (in-cluster configuration).
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE = "default"

_KWARGS = ("kubeconfig", "context", "in_cluster", "disable_verify_ssl", "namespace")


@dataclass(frozen=True)
class ConfigSource:
    """Where the client configuration comes from, decided once for both clients.

    ``kind`` is ``"dict"`` (``data`` holds the kubeconfig), ``"file"`` (``path``),
    ``"incluster"`` or ``"default"`` (the clients' own search: KUBECONFIG, ~/.kube/config).
    """

    kind: str
    data: dict[str, Any] | None = field(default=None, repr=False)  # tokens, keys
    path: str | None = None

    def kubeconfig(self) -> Mapping[str, Any] | None:
        """The kubeconfig this source reads (``None``: in-cluster, or none found)."""
        if self.kind == "file" and self.path:
            return read_kubeconfig(Path(self.path))
        if self.kind == "default":
            found = find_kubeconfig(os.environ)
            return read_kubeconfig(found) if found else None
        return self.data


#: Connections the shared async client may open to one API server beyond the log streams
#: the process may hold (:func:`~torchx_provider.schedulers.streams.stream_cap`): room for
#: watches, reads and cancels.
SPARE_CONNECTIONS = 128


@dataclass(frozen=True)
class KubeClientConfig:
    """Client parameters (see the module docstring). Build with :meth:`from_kwargs`."""

    #: a path (shown by ``repr``) or the content itself (tokens, keys: never shown)
    kubeconfig: str | dict[str, Any] | None = field(default=None, repr=False)
    context: str | None = None
    in_cluster: bool = False
    disable_verify_ssl: bool = False
    namespace: str | None = None

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> KubeClientConfig:
        """Check and keep the client kwargs; an unknown one is an :class:`InvalidOptionError`."""
        unknown = sorted(set(kwargs) - set(_KWARGS))
        if unknown:
            raise InvalidOptionError(
                f"unknown Kubernetes client parameter(s) {unknown}; valid ones are {list(_KWARGS)}",
                option=unknown[0],
            )
        kubeconfig = kwargs.get("kubeconfig")
        if kubeconfig is not None and not isinstance(kubeconfig, (str, dict, os.PathLike)):
            raise InvalidOptionError(
                "kubeconfig must be a path, a dict or YAML/JSON text, got "
                f"{type(kubeconfig).__name__}",
                option="kubeconfig",
            )
        if isinstance(kubeconfig, os.PathLike):
            kubeconfig = os.fspath(kubeconfig)
        if kwargs.get("in_cluster") and kubeconfig:
            raise InvalidOptionError(
                "in_cluster and kubeconfig are mutually exclusive; give one of them",
                option="in_cluster",
            )
        return cls(
            kubeconfig=kubeconfig,
            context=kwargs.get("context") or None,
            in_cluster=bool(kwargs.get("in_cluster")),
            disable_verify_ssl=bool(kwargs.get("disable_verify_ssl")),
            namespace=kwargs.get("namespace") or None,
        )

    # -- pure decisions --------------------------------------------------------------------------
    def source(self) -> ConfigSource:
        """Where the configuration comes from (no I/O for content; a path is not read)."""
        if self.in_cluster:
            return ConfigSource("incluster")
        kc = self.kubeconfig
        if isinstance(kc, dict):
            return ConfigSource("dict", data=kc)
        if isinstance(kc, str) and kc.strip():
            text = kc.strip()
            if "\n" in text or text.startswith(("{", "apiVersion", "clusters", "kind")):
                return ConfigSource("dict", data=parse_kubeconfig(text))
            return ConfigSource("file", path=os.path.expanduser(text))
        return ConfigSource("default")

    def default_namespace(self) -> str:
        """The namespace used when a call names none: the ``namespace`` given, else the
        context's namespace in the kubeconfig, else the pod's own (in-cluster), else
        ``default``. Reads the kubeconfig file when there is one."""
        if self.namespace:
            return self.namespace
        src = self.source()
        data = src.kubeconfig()
        if data is not None:
            ns = context_namespace(data, self.context)
            if ns:
                return ns
        if src.kind in ("incluster", "default") and SERVICE_ACCOUNT_NAMESPACE.is_file():
            ns = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
            if ns:
                return ns
        return DEFAULT_NAMESPACE

    def check(self, src: ConfigSource | None = None) -> None:
        """Refuse a kubeconfig no client can be made from (see :func:`check_context`):
        bad input, reported once and never retried as if the cluster were down. A file
        that cannot be read is left to the client library to report."""
        src = src or self.source()
        data = src.kubeconfig()
        if data is not None:
            check_context(data, self.context)

    def describe_target(self) -> str:
        """A short, secret-free description for error messages."""
        src = self.source()
        where = {"dict": "kubeconfig content", "file": f"kubeconfig {src.path}"}.get(
            src.kind, "in-cluster service account" if src.kind == "incluster" else "KUBECONFIG"
        )
        return f"{where}{f' (context {self.context})' if self.context else ''}"

    # -- the two clients --------------------------------------------------------------------------
    def sync_api_client(self) -> SyncApiClient:
        """A configured ``kubernetes.client.ApiClient``."""
        from torchx_provider.optional import require
        from torchx_provider.schedulers.kube.io import run_sync

        client = require("kubernetes.client")
        config = require("kubernetes.config")

        configuration = client.Configuration()
        run_sync(self._load(config, configuration, persist_config=False))
        self._tune(configuration)
        return client.ApiClient(configuration)

    async def async_api_client(self) -> ApiClient:
        """A configured ``kubernetes_asyncio.client.ApiClient`` (the same choices). The
        library is imported in a worker thread the first time: its import takes about a
        third of a second, which the event loop (every other follow of a triggerer) would
        otherwise wait through."""
        client, config = await asyncio.to_thread(_async_library)
        configuration = client.Configuration()
        await self._load(config, configuration)
        self._tune(configuration)
        # One client serves every follow of the cluster in the process: each followed
        # container holds a log stream (a connection) for as long as it runs, beside the
        # watches. The library's default of 100 connections would leave the 101st stream,
        # and then every watch and read, waiting for a free one.
        configuration.connection_pool_maxsize = stream_cap() + SPARE_CONNECTIONS
        return client.ApiClient(configuration)

    async def _load(self, config: Any, configuration: Any, **extra: Any) -> None:
        """Load what :meth:`source` chose into ``configuration`` with either library's
        ``config`` module: the sync loaders return at once, the async ones are awaited
        (``extra``: the sync library's ``persist_config=False``)."""
        from torchx_provider.schedulers.kube.errors import api_errors

        async def load(loader: Any, *args: Any, **kwargs: Any) -> None:
            done = loader(*args, client_configuration=configuration, **kwargs, **extra)
            if inspect.isawaitable(done):
                await done

        src = self.source()
        self.check(src)
        with api_errors("configure", f"the Kubernetes client ({self.describe_target()})"):
            if src.kind == "incluster":
                config.load_incluster_config(client_configuration=configuration)
            elif src.kind == "dict":
                await load(config.load_kube_config_from_dict, src.data, context=self.context)
            elif src.kind == "file":
                await load(config.load_kube_config, config_file=src.path, context=self.context)
            elif (found := find_kubeconfig(os.environ)) is not None:
                # the kubeconfig found (and checked) is the one used: what fails in it is
                # said, not hidden behind the in-cluster configuration's absence
                await load(config.load_kube_config, config_file=str(found), context=self.context)
            else:
                config.load_incluster_config(client_configuration=configuration)

    def _tune(self, configuration: Any) -> None:
        if self.disable_verify_ssl:
            configuration.verify_ssl = False


def _async_library() -> tuple[Any, Any]:
    """``kubernetes_asyncio``'s ``client`` and ``config`` modules, imported."""
    from torchx_provider.optional import require

    return require("kubernetes_asyncio.client"), require("kubernetes_asyncio.config")
