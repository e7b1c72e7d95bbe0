"""What every TorchX hook shares: connection extras in, a :class:`BackendTarget` out.

A hook reads the Airflow connection, reads any file the connection points to (a kubeconfig,
the token file it names, TLS certificates) and returns a :class:`BackendTarget`: plain values
that create a backend client. It runs in two places:

* on the worker (:meth:`TorchXHookBase.get_target`), which submits and, with
  ``deferrable=False``, follows;
* in the triggerer (:meth:`TorchXHookBase.aget_target`, through
  :mod:`~torchx_provider.triggers.connections`), which follows a deferred task. The trigger's
  kwargs carry only the connection id, never what it resolves to, because Airflow stores
  trigger kwargs as plain JSON in its metadata database. The triggerer therefore needs the
  same connection (the same secrets backend) as the workers, and, for ``conn_id=None``, its
  own environment (``KUBECONFIG``, in-cluster service account, ``DOCKER_HOST``).

The secret values of a target are registered with the log masker (:func:`mask_secret`) where
it is resolved, and :meth:`BackendTarget.redacted` is the form that may be logged or shown.

Connection extras are split in two:

* connection settings (how to reach the backend), declared by each hook;
* run-option defaults (``queue``, ``image_repo``, ...): any other key, checked against the
  chosen backend's run options when the scheduler is created, so a typo fails at once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseHook

from torchx_provider.errors import InvalidOptionError
from torchx_provider.specs.runopts import bool_value

if TYPE_CHECKING:
    from torchx_provider.schedulers.api import AsyncSchedulerClient, Scheduler
    from torchx_provider.specs.runopts import CfgVal, runopts

REDACTED = "***"


def fold_secret_names(settings: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """``settings`` with each secret extra given under its hidden name folded into its short
    name (``names``: hidden name -> short name).

    Airflow's connections API and UI hide an extra's value only when its name contains a
    sensitive word (``secret``, ``private_key``, ``password``, ...): the forms write
    ``kube_config_secret`` and ``tls_client_private_key``, while ``kube_config`` (the
    cncf.kubernetes provider's name) and ``tls_client_key`` keep working. Both names with
    different values is an :class:`InvalidOptionError`.
    """
    out = dict(settings)
    for hidden, short in names.items():
        if hidden not in out:
            continue
        value = out.pop(hidden)
        if out.get(short) and value and out[short] != value:
            raise InvalidOptionError(
                f"{hidden} and {short} are the same setting with different values; keep "
                f"{hidden} (Airflow's connections API hides its value)",
                short,
            )
        if value or short not in out:
            out[short] = value
    return out


def parse_bool(value: Any, name: str) -> bool:
    """A connection flag as a bool: bools, 0/1 and the usual strings (form fields are strings)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return False
    flag = bool_value(value)
    if flag is not None:
        return flag
    raise InvalidOptionError(
        f"connection extra {name!r} must be true or false, got {value!r}", name
    )


def normalize_extras(
    extras: Mapping[str, Any], prefixes: Iterable[str], conn_id: str | None
) -> dict[str, Any]:
    """Extras without their legacy ``extra__<conn_type>__`` prefix and without empty values.

    A key given both with and without a prefix must carry the same value; otherwise it is
    ambiguous and one :class:`InvalidOptionError` names it.
    """
    out: dict[str, Any] = {}
    for raw_key, value in extras.items():
        key = raw_key
        for prefix in prefixes:
            if raw_key.startswith(prefix):
                key = raw_key[len(prefix) :]
                break
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if key in out and out[key] != value:
            raise InvalidOptionError(
                f"connection {conn_id!r} sets {key!r} twice with different values (once with "
                f"a legacy 'extra__...__' prefix): keep only one of them",
                key,
            )
        out[key] = value
    return out


@dataclass(frozen=True)
class BackendTarget:
    """A backend and how to reach it, resolved from a connection.

    Args:
        backend: the backend's name in :mod:`torchx_provider.backends` (``kubernetes``,
            ``kubernetes_mcad``, ``local_docker``, ...).
        client_kwargs: keyword arguments of the backend's ``create_scheduler`` and
            ``create_async_client`` (plain values: strings, bools, numbers).
        cfg_defaults: run-option defaults from the connection; the task's ``cfg`` wins.
        optional_cfg_defaults: defaults applied only if the backend has such a run option
            (the connection's ``namespace`` is both a client setting and a run option).
        job_url_template: a ``str.format`` template of the job's URL in some UI, with the
            fields ``app_id``, ``app_name``, ``backend``, ``namespace`` and ``session``.
        secret_keys: which ``client_kwargs`` hold secrets (masked and redacted).
        mask_values: further secret values found inside them (a kubeconfig's token, a key's
            PEM) that the log masker must hide wherever they appear.
        conn_id: the connection it came from (``None``: environment defaults).
    """

    backend: str
    client_kwargs: dict[str, Any] = field(default_factory=dict)
    cfg_defaults: dict[str, Any] = field(default_factory=dict)
    optional_cfg_defaults: dict[str, Any] = field(default_factory=dict)
    job_url_template: str | None = None
    secret_keys: tuple[str, ...] = ()
    mask_values: tuple[str, ...] = ()
    conn_id: str | None = None

    def __post_init__(self) -> None:
        from torchx_provider.links import check_job_url_template

        check_job_url_template(self.job_url_template)

    def with_backend(self, backend: str) -> BackendTarget:
        return replace(self, backend=backend)

    def __repr__(self) -> str:
        # the dataclass repr would print client_kwargs: a kubeconfig's token, a TLS key
        return (
            f"BackendTarget(backend={self.backend!r}, client_kwargs={self.redacted()!r}, "
            f"cfg_defaults={self.cfg_defaults!r}, conn_id={self.conn_id!r})"
        )

    def secrets(self) -> list[str]:
        """Every secret value (for the log masker)."""
        out: list[str] = [v for v in self.mask_values if v]
        for key in self.secret_keys:
            value = self.client_kwargs.get(key)
            if isinstance(value, str) and value:
                out.append(value)
            elif isinstance(value, Mapping):
                out.extend(str(v) for v in value.values() if v)
        return out

    def redacted(self) -> dict[str, Any]:
        """The client kwargs with secrets replaced by ``***`` (safe to log or show)."""
        return {
            k: (REDACTED if k in self.secret_keys and v else v)
            for k, v in self.client_kwargs.items()
        }

    def create_scheduler(self, session_name: str = "") -> Scheduler[Any]:
        """The sync scheduler (worker side); imports the backend's client library."""
        from torchx_provider.backends import get_backend

        scheduler: Scheduler[Any] = get_backend(self.backend).create_scheduler(
            session_name, **self.client_kwargs
        )
        return scheduler

    def create_async_client(self) -> AsyncSchedulerClient:
        """The async client (where the job is followed: the triggerer, or the worker)."""
        from torchx_provider.backends import get_backend

        client: AsyncSchedulerClient = get_backend(self.backend).create_async_client(
            **self.client_kwargs
        )
        return client

    def checked_cfg_defaults(self, opts: runopts) -> dict[str, CfgVal]:
        """``cfg_defaults`` restricted to the backend's run options ``opts``.

        A default that is no run option of this backend is an error naming the connection,
        because a typo in a connection extra must not be ignored silently.
        """
        unknown = sorted(k for k in self.cfg_defaults if k not in opts)
        if unknown:
            valid = ", ".join(name for name, _ in opts)
            raise InvalidOptionError(
                f"connection {self.conn_id!r} has extra(s) {unknown} that are neither "
                f"connection settings nor run options of the {self.backend!r} scheduler "
                f"(its run options: {valid}); remove or rename them",
                unknown[0],
            )
        out = {k: _cfg_value(v) for k, v in self.optional_cfg_defaults.items() if k in opts}
        out.update({k: _cfg_value(v) for k, v in self.cfg_defaults.items()})
        return out


def _cfg_value(value: Any) -> CfgVal:
    # Extras may hold numbers/bools (JSON) or strings (form fields); lists and dicts pass as is.
    if isinstance(value, (str, int, float, bool, list, dict)):
        return value
    return json.dumps(value)


class TorchXHookBase(BaseHook):
    """Base of the TorchX hooks: reads the connection (once) and builds a :class:`BackendTarget`.

    Subclasses set ``conn_type``, ``default_backend`` and ``connection_keys`` and implement
    :meth:`target_from`. ``conn_id=None`` means no connection: environment defaults are used.
    """

    conn_name_attr = "conn_id"
    default_conn_name: ClassVar[str | None] = None
    conn_type: ClassVar[str] = ""
    hook_name: ClassVar[str] = ""
    #: connection types whose connections this hook also accepts (besides ``conn_type``)
    accepted_conn_types: ClassVar[tuple[str, ...]] = ()
    #: the backend used when the operator does not name one
    default_backend: ClassVar[str] = ""
    #: extras that are connection settings (everything else is a run-option default)
    connection_keys: ClassVar[frozenset[str]] = frozenset({"job_url_template"})
    #: extras of accepted foreign connection types that mean nothing here (ignored)
    ignored_keys: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, conn_id: str | None = None, backend: str | None = None) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.backend = backend or self.default_backend
        self._target: BackendTarget | None = None

    # -- connection -------------------------------------------------------------------------------
    def _load_connection(self) -> tuple[str, dict[str, Any], Any] | None:
        """``(conn_type, extras, connection)`` or ``None`` without a connection id."""
        if not self.conn_id:
            return None
        try:
            conn = self.get_connection(self.conn_id)
        except Exception as e:  # AirflowNotFoundException, or a secrets backend error
            raise self._missing(e) from None
        return self._loaded(conn)

    async def _aload_connection(self) -> Any:
        """The connection through Airflow's async API (triggerer side), or ``None``."""
        if not self.conn_id:
            return None
        try:
            return await self.aget_connection(self.conn_id)
        except Exception as e:
            raise self._missing(e) from None

    def _missing(self, e: Exception) -> Exception:
        """A failed lookup: "does not exist" for a missing connection, else ``e`` itself."""
        if type(e).__name__ not in {"AirflowNotFoundException", "AirflowRuntimeError"}:
            return e
        return InvalidOptionError(
            f"connection {self.conn_id!r} does not exist: create it (type "
            f"{self.conn_type!r}) or leave conn_id unset to use the environment's defaults",
            "conn_id",
        )

    def _loaded(self, conn: Any) -> tuple[str, dict[str, Any], Any]:
        """A looked-up connection checked (its type) and its extras normalized."""
        conn_type = conn.conn_type or self.conn_type
        valid = (self.conn_type, *self.accepted_conn_types)
        if conn_type not in valid:
            raise InvalidOptionError(
                f"connection {self.conn_id!r} is of type {conn_type!r}; "
                f"{type(self).__name__} needs one of {list(valid)}",
                "conn_id",
            )
        raw = conn.extra_dejson if conn.extra else {}
        prefixes = [f"extra__{t}__" for t in valid]
        extras = normalize_extras(raw, prefixes, self.conn_id)
        return conn_type, extras, conn

    def split_extras(self, extras: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(connection settings, run-option defaults)``; ignored keys are dropped."""
        settings = {k: v for k, v in extras.items() if k in self.connection_keys}
        defaults = {
            k: v
            for k, v in extras.items()
            if k not in self.connection_keys and k not in self.ignored_keys
        }
        return settings, defaults

    def get_target(self) -> BackendTarget:
        """The connection resolved into a :class:`BackendTarget` (cached); secrets are masked."""
        if self._target is None:
            target = self.target_from(self._load_connection())
            _mask(target.secrets())
            self._target = target
        return self._target

    async def aget_target(self) -> BackendTarget:
        """:meth:`get_target` for an event loop (the triggerer): the connection is looked up
        with Airflow's async API, and the rest -- extras, files such as a kubeconfig and its
        token file, masking -- runs in a worker thread. Not cached here: the caller decides
        how long a target lives (:mod:`~torchx_provider.triggers.connections`)."""
        conn = await self._aload_connection()

        def build() -> BackendTarget:
            target = self.target_from(None if conn is None else self._loaded(conn))
            _mask(target.secrets())
            return target

        return await asyncio.to_thread(build)

    def target_from(self, loaded: tuple[str, dict[str, Any], Any] | None) -> BackendTarget:
        """What a backend's hook implements: its :class:`BackendTarget` from the loaded
        connection (its type, its extras normalized, the ``Connection``), or from ``None``
        when the hook has no connection. Runs off the event loop; may read files."""
        raise NotImplementedError

    # -- clients ---------------------------------------------------------------------------------
    def get_conn(self) -> Scheduler[Any]:
        """The sync scheduler for this hook's backend (Airflow's usual hook entry point)."""
        return self.get_target().create_scheduler()

    def test_connection(self) -> tuple[bool, str]:
        """Airflow's "Test" button: reach the backend and list its apps."""
        try:
            with self.get_conn() as scheduler:
                n = len(scheduler.list())
        except Exception as e:
            return False, str(e)
        return True, f"connected to {self.backend}: {n} app(s) visible"


def _mask(secrets: Iterable[str]) -> None:
    """Register secret values with Airflow's log masker."""
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - very old task SDK
        return
    for secret in secrets:
        mask_secret(secret)
