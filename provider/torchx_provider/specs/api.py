"""The app model: what a distributed app is, independent of where it runs.

An :class:`AppDef` is a named list of :class:`Role` s; each role is one program (image +
entrypoint + args) run as ``num_replicas`` identical replicas that differ only by their replica
id. A scheduler turns an AppDef into backend objects (a Volcano Job, an AppWrapper, Docker
containers) and reports back :class:`AppState` / :class:`ReplicaState`.

The classes and field names follow ``torchx.specs`` so that TorchX users can move code over
unchanged, and :func:`torchx_provider.specs.from_torchx` converts real ``torchx.specs`` objects.
Everything here is pure data: no Airflow, no clients, no environment reads.

>>> role = Role(name="trainer", image="busybox", entrypoint="echo", args=["hi"], num_replicas=2)
>>> app = AppDef(name="hello", roles=[role])
>>> app.roles[0].num_replicas
2
"""

from __future__ import annotations

import copy
import enum
import functools
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

# ---------------------------------------------------------------------------------------------
# Resources


@dataclass
class Resource:
    """What one replica asks for.

    Args:
        cpu: number of CPUs (may be fractional on backends that allow it).
        gpu: number of GPUs.
        memMB: memory in MiB (the name is TorchX's).
        capabilities: backend hints, e.g. ``{"node.kubernetes.io/instance-type": "p3.2xlarge"}``.
        devices: extended devices by name and count, e.g. ``{"vpc.amazonaws.com/efa": 1}``.

    A value of ``-1`` means "not set" (see :data:`NULL_RESOURCE`).
    """

    cpu: float
    gpu: int
    memMB: int
    capabilities: dict[str, Any] = field(default_factory=dict)
    devices: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def copy(original: Resource, **capabilities: Any) -> Resource:
        """A copy of ``original`` with ``capabilities`` merged over its capabilities."""
        res_capabilities = dict(original.capabilities)
        res_capabilities.update(capabilities)
        return Resource(
            cpu=original.cpu,
            gpu=original.gpu,
            memMB=original.memMB,
            capabilities=res_capabilities,
            devices=dict(original.devices),
        )


#: The resource of a role that did not ask for anything; backends then set no limits.
NULL_RESOURCE: Resource = Resource(cpu=-1, gpu=-1, memMB=-1)

GiB: int = 1024

#: Generic named resources (same names and sizes as TorchX's generic ones). They are sizes
#: for examples and defaults, not instance types: add your own factories here, or register
#: them as TorchX does (see :mod:`~torchx_provider.specs.resource_registry`, which also adds
#: TorchX's ``aws_*`` hosts on first lookup).
NAMED_RESOURCES: dict[str, Callable[[], Resource]] = {
    "gpu.small": lambda: Resource(cpu=8, gpu=1, memMB=32 * GiB),
    "gpu.medium": lambda: Resource(cpu=16, gpu=2, memMB=64 * GiB),
    "gpu.large": lambda: Resource(cpu=32, gpu=4, memMB=128 * GiB),
    "gpu.xlarge": lambda: Resource(cpu=64, gpu=8, memMB=256 * GiB),
    "cpu.nano": lambda: Resource(cpu=1, gpu=0, memMB=512),
    "cpu.micro": lambda: Resource(cpu=1, gpu=0, memMB=1 * GiB),
    "cpu.small": lambda: Resource(cpu=1, gpu=0, memMB=2 * GiB),
    "cpu.medium": lambda: Resource(cpu=2, gpu=0, memMB=4 * GiB),
    "cpu.large": lambda: Resource(cpu=2, gpu=0, memMB=8 * GiB),
    "cpu.xlarge": lambda: Resource(cpu=8, gpu=0, memMB=32 * GiB),
}


#: What :func:`resource` uses for a number that is not given (TorchX's defaults).
DEFAULT_CPU = 2
DEFAULT_GPU = 0
DEFAULT_MEM_MB = 1024


def resource(
    cpu: float | None = None, gpu: int | None = None, memMB: int | None = None, h: str | None = None
) -> Resource:
    """Build a Resource from numbers or from a named resource ``h`` (which wins when given).

    A number left out takes TorchX's default (2 CPUs, 0 GPUs, 1024 MiB), so components that
    call ``resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h)`` behave as they do under TorchX.

    >>> resource(h="cpu.small").memMB
    2048
    >>> resource(cpu=4)
    Resource(cpu=4, gpu=0, memMB=1024, capabilities={}, devices={})
    """
    if h:
        from torchx_provider.specs.resource_registry import get_named_resource

        return get_named_resource(h)
    return Resource(
        cpu=cpu if cpu is not None else DEFAULT_CPU,
        gpu=gpu if gpu is not None else DEFAULT_GPU,
        memMB=memMB if memMB is not None else DEFAULT_MEM_MB,
    )


# ---------------------------------------------------------------------------------------------
# Mounts


@dataclass
class BindMount:
    """A host path mounted into the replica (Docker bind mount, Kubernetes hostPath)."""

    src_path: str
    dst_path: str
    read_only: bool = False


@dataclass
class VolumeMount:
    """A named volume (Docker volume, Kubernetes PersistentVolumeClaim) mounted at ``dst_path``."""

    src: str
    dst_path: str
    read_only: bool = False


@dataclass
class DeviceMount:
    """A host device (e.g. ``/dev/fuse``) exposed inside the replica with ``permissions``."""

    src_path: str
    dst_path: str
    permissions: str = "rwm"


Mount = BindMount | VolumeMount | DeviceMount


# ---------------------------------------------------------------------------------------------
# Roles and apps


class RetryPolicy(str, enum.Enum):
    """What restarts when a replica fails (while the role's ``max_retries`` lasts).

    * ``REPLICA``: only the failed replica restarts (elastic-friendly).
    * ``APPLICATION``: the whole app restarts.
    * ``ROLE``: every replica of the failed replica's role restarts. Backends that cannot
      express it say in their docs what they do instead; none silently crashes on it.
    """

    REPLICA = "REPLICA"
    APPLICATION = "APPLICATION"
    ROLE = "ROLE"

    def __str__(self) -> str:
        return self.value


class macros:
    """Placeholders substituted per replica in a role's ``args``, ``env`` and ``metadata``.

    * ``${img_root}``: where the image's files live (the root of the workspace image).
    * ``${app_id}``: the app id the backend assigned.
    * ``${replica_id}``: this replica's index within its role (0-based).
    * ``${rank0_env}``: the NAME of the environment variable that holds the hostname of
      role 0 / replica 0 (e.g. ``TORCHX_RANK0_HOST``); use it as ``$${${rank0_env}}`` in shells.
    * ``${base_img_root}``: ``DEPRECATED``, as in TorchX 0.7.0 (which deprecated it).

    Write ``$$`` for a literal ``$`` (so ``$${HOME}`` reaches the shell as ``${HOME}``).
    """

    img_root = "${img_root}"
    base_img_root = "${base_img_root}"
    app_id = "${app_id}"
    replica_id = "${replica_id}"
    rank0_env = "${rank0_env}"

    #: Every macro name that may appear as ``${name}``.
    NAMES: frozenset[str] = frozenset(
        {"img_root", "base_img_root", "app_id", "replica_id", "rank0_env"}
    )

    @dataclass
    class Values:
        """The values for one replica; :meth:`apply` returns a substituted copy of a role."""

        img_root: str
        app_id: str
        replica_id: str
        rank0_env: str
        base_img_root: str = "DEPRECATED"

        def apply(self, role: Role) -> Role:
            """A deep copy of ``role`` with every macro in args, env and metadata replaced.

            The entrypoint is never substituted, on any backend (validation rejects a macro
            there): every backend either calls this or substitutes exactly these fields with
            :meth:`substitute` and :meth:`substitute_nested`.
            """
            role = copy.deepcopy(role)
            role.args = [self.substitute(a) for a in role.args]
            role.env = {k: self.substitute(v) for k, v in role.env.items()}
            role.metadata = self.substitute_nested(role.metadata)
            return role

        def substitute_nested(self, obj: Any) -> Any:
            """:meth:`substitute` through the strings of nested dicts and lists (new ones)."""
            if isinstance(obj, str):
                return self.substitute(obj)
            if isinstance(obj, dict):
                return {k: self.substitute_nested(v) for k, v in obj.items()}
            if isinstance(obj, list):
                return [self.substitute_nested(v) for v in obj]
            return obj

        def substitute(self, arg: str) -> str:
            """Replace the macros in one string; unknown ``$names`` are left as they are."""
            if "$" not in arg:
                return arg
            return _template(arg).safe_substitute(self.__dict__)


@functools.lru_cache(maxsize=4096)
def _template(text: str) -> string.Template:
    """The parsed template of ``text`` (one parse per distinct string: a role's args repeat
    across its replicas)."""
    return string.Template(text)


#: TorchX's "not set" for a string field (``torchx.specs.MISSING``): a Role's entrypoint until
#: one is given; validation refuses it there, as it refuses an empty one.
MISSING = "<MISSING>"


@dataclass
class Role:
    """One program of an app, run as ``num_replicas`` replicas.

    Args:
        name: role name, unique within the app; it appears in object names and log prefixes.
        image: container image (Docker/Kubernetes).
        entrypoint: the command to run (``python``, ``torchrun``, ``/bin/sh``...); required,
            though it defaults to :data:`MISSING` as in TorchX.
        args: its arguments; may contain :class:`macros`.
        env: environment variables; values may contain :class:`macros`. On Kubernetes a value
            of the form ``[FIELD_PATH]status.podIP`` becomes a ``fieldRef``.
        num_replicas: how many replicas to run.
        min_replicas: the fewest replicas the app can start with (elastic); ``None`` means all.
        max_retries: how many times a failure is retried per :attr:`retry_policy`.
        retry_policy: what a retry restarts.
        resource: what each replica needs.
        port_map: named ports the replicas listen on, e.g. ``{"c10d": 29500}``.
        metadata: backend-specific settings; ``metadata["kubernetes"]`` is deep-merged into
            each pod (tolerations, affinity, annotations...).
        mounts: bind, volume and device mounts.
        workspace: a local directory whose contents are layered onto ``image`` before the
            run (a patched image is built, and pushed when the scheduler has ``image_repo``).
    """

    name: str
    image: str = ""
    entrypoint: str = MISSING
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    num_replicas: int = 1
    min_replicas: int | None = None
    max_retries: int = 0
    retry_policy: RetryPolicy = RetryPolicy.APPLICATION
    resource: Resource = field(default_factory=lambda: copy.deepcopy(NULL_RESOURCE))
    port_map: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    mounts: list[BindMount | VolumeMount | DeviceMount] = field(default_factory=list)
    workspace: str | None = None

    def pre_proc(self, scheduler: str, dryrun_info: AppDryRunInfo[Any]) -> AppDryRunInfo[Any]:
        """A hook for roles that must adjust the request of a given scheduler (TorchX API)."""
        return dryrun_info


@dataclass
class AppDef:
    """A distributed app: a name, its roles and free-form metadata.

    Call :meth:`validate` (schedulers do it in ``submit_dryrun``) to get one clear
    :class:`~torchx_provider.errors.InvalidAppError` for the first thing that is wrong.
    """

    name: str
    roles: list[Role] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)

    def validate(self) -> AppDef:
        """Raise :class:`InvalidAppError` naming the field and the fix; return self if valid."""
        from torchx_provider.specs.validation import validate_app

        validate_app(self)
        return self


# ---------------------------------------------------------------------------------------------
# States and statuses


class AppState(int, enum.Enum):
    """The state of an app (and of a replica: :data:`ReplicaState` is the same enum).

    ``SUCCEEDED``, ``FAILED`` and ``CANCELLED`` are terminal (:func:`is_terminal`).
    ``UNKNOWN`` is what a backend reports when it cannot tell; it is not terminal, so callers
    keep looking instead of declaring an outcome.
    """

    UNSUBMITTED = 0
    SUBMITTED = 1
    PENDING = 2
    RUNNING = 3
    SUCCEEDED = 4
    FAILED = 5
    CANCELLED = 6
    UNKNOWN = 7

    def __str__(self) -> str:
        return self.name


ReplicaState = AppState

_TERMINAL_STATES = frozenset({AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED})


def is_terminal(state: AppState) -> bool:
    """Whether ``state`` is final (SUCCEEDED, FAILED or CANCELLED).

    >>> is_terminal(AppState.FAILED), is_terminal(AppState.RUNNING)
    (True, False)
    """
    return state in _TERMINAL_STATES


NONE = "<NONE>"


@dataclass
class ReplicaStatus:
    """What the backend knows about one replica.

    ``exit_code`` and ``num_restarts`` are ``None`` where the backend does not tell. The
    provider adds, for a replica that ended: ``reason``, the backend's word for how
    (``OOMKilled``, ``Evicted``, ``PreemptionByScheduler``...), ``failure``, the
    :class:`~torchx_provider.failures.FailureKind` its backend's table gives it (``None``:
    none known), and ``finished_at``, when it ended (``None``: not told); for one that
    started, ``started_at``, when it last did (``None``: not told). For a replica that
    does not start, ``reason`` and ``failure`` say why, and ``cannot_start`` that waiting
    will not heal it (an image that can never be pulled): its app cannot run as configured.
    """

    id: int
    state: AppState
    role: str
    hostname: str
    structured_error_msg: str = NONE
    log_dir: str = ""
    exit_code: int | None = None
    num_restarts: int | None = None
    reason: str = ""
    failure: str | None = None
    finished_at: datetime | None = None
    cannot_start: bool = False
    started_at: datetime | None = None


@dataclass
class RoleStatus:
    """The replicas of one role, in replica id order."""

    role: str
    replicas: list[ReplicaStatus] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Dry runs

T = TypeVar("T")


class AppDryRunInfo(Generic[T]):
    """What a scheduler would submit: the request object plus a printable form of it.

    ``request`` is backend-specific (a manifest dict for Kubernetes, a list of container specs
    for Docker). ``str(info)`` prints it with ``fmt`` (YAML for the Kubernetes backends).
    """

    def __init__(self, request: T, fmt: Callable[[T], str]) -> None:
        self.request = request
        self._fmt = fmt
        # Set by Scheduler.submit_dryrun so that schedule() can tell what it was built from.
        self._app: AppDef | None = None
        self._cfg: dict[str, Any] | None = None
        self._scheduler: str | None = None

    @property
    def app(self) -> AppDef | None:
        """The app the dry run was made from (``None`` until :meth:`Scheduler.submit_dryrun
        <torchx_provider.schedulers.api.Scheduler.submit_dryrun>` returns it): what a
        backend's ``schedule`` may read besides :attr:`request`."""
        return self._app

    @property
    def cfg(self) -> dict[str, Any] | None:
        """The resolved run options it was made with (``None`` until then, as :attr:`app`)."""
        return self._cfg

    @property
    def scheduler(self) -> str | None:
        """The backend that made it (``None`` until then, as :attr:`app`)."""
        return self._scheduler

    def __repr__(self) -> str:
        return self._fmt(self.request)

    def __str__(self) -> str:
        return self._fmt(self.request)
