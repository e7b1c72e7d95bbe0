"""AppDef + options -> the containers ``local_docker`` runs. Pure: no docker import, no I/O.

Also pure and here: what the engine can hold (:func:`check_replica_count`,
:func:`check_engine_resources`, :func:`check_network_room`) and the parameters of a log read
(:func:`log_params`). A role's resources, devices and mounts become
container arguments in :mod:`~torchx_provider.schedulers.docker.resources`.

One container per replica. Each container spec is a plain dict of the keyword arguments of
``DockerClient.containers.create`` (``image``, ``entrypoint``, ``command``, ``name``, ...), so
the dry run shows exactly what will be sent and a test can compare it with a literal dict.

Names. The app id is ``{app name}-{8 random characters}`` (:func:`new_app_id`), already a valid
container-name prefix. Replica ``k`` of role ``r`` is named :func:`replica_name`
(``{app_id}-{r}-{k}``, made RFC 1123 and at most 63 characters, a hash kept when cut); the
container's hostname is the same string. Containers on a user-defined network resolve each
other by container name, so ``TORCHX_RANK0_HOST`` -- the name of role 0 / replica 0 -- is both
resolvable from every replica and equal to ``hostname`` inside that replica, even when the
name had to be shortened or cleaned.

Environment of every replica, later entries winning:

1. host variables matching the ``copy_env`` globs;
2. the ``env`` run option;
3. the role's ``env`` (macros substituted per replica);
4. the provider's own: ``TORCHX_APP_ID``, ``TORCHX_ROLE_IDX``, ``TORCHX_ROLE_NAME``,
   ``TORCHX_REPLICA_IDX`` (TorchX's names) and ``TORCHX_RANK0_HOST``; the ``${rank0_env}``
   macro is ``TORCHX_RANK0_HOST``.

Retries. ``max_retries > 0`` becomes Docker's ``on-failure`` restart policy with that many
retries: the engine restarts the failed container only. So on this backend every retry
policy acts as ``REPLICA``: ``APPLICATION`` and ``ROLE`` (restart the whole app or role) are
not supported -- the other replicas keep running, and a restarted replica must be able to
re-join them (``torchrun``'s elastic rendezvous does). Use a Kubernetes backend for
whole-app restarts.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import ipaddress
import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from torchx_provider.errors import InvalidAppError, InvalidOptionError, SubmissionError
from torchx_provider.schedulers.docker.options import BRIDGE_PORTS, DockerOpts
from torchx_provider.schedulers.docker.resources import (
    MiB,
    mount_kwargs,
    resource_kwargs,
)
from torchx_provider.schedulers.labels import (
    ANNOTATION_ROLE,
    LABEL_REPLICA_ID,
    RANK0_HOST_ENV,
    TaskInstanceKey,
    replica_labels,
    stored_json,
    stored_role_json,
)
from torchx_provider.schedulers.logs import require_aware
from torchx_provider.specs.api import (
    AppDef,
    BindMount,
    macros,
)
from torchx_provider.specs.names import make_unique, normalize_rfc1123_name
from torchx_provider.specs.serialization import role_from_dict
from torchx_provider.specs.yaml_text import yaml_text

ENV_APP_ID = "TORCHX_APP_ID"
ENV_ROLE_IDX = "TORCHX_ROLE_IDX"
ENV_ROLE_NAME = "TORCHX_ROLE_NAME"
ENV_REPLICA_IDX = "TORCHX_REPLICA_IDX"

#: Label holding the role the container was created from, without its env and metadata
#: (``labels.stored_role_json``: a label is copied into listings, events and monitoring).
LABEL_ROLE = ANNOTATION_ROLE
#: Label saying whether the container is removed once finished and its log read.
LABEL_REMOVE = "torchx.pytorch.org/remove"
#: Label saying whether the app's other replicas are stopped once one has failed for good
#: (the run option ``stop_on_failure``).
LABEL_STOP_ON_FAILURE = "torchx.pytorch.org/stop-on-failure"
#: Label holding the full task-instance values (JSON of ``TaskInstanceKey.annotations()``):
#: containers have no annotations, and the ``airflow.apache.org/*`` labels may be hashed.
LABEL_TASK_INSTANCE = "airflow.apache.org/task-instance"
#: Label holding how many containers the whole app has: what a next try compares with the
#: containers it finds, to tell a whole app from one whose creation was cut short.
LABEL_CONTAINERS = "torchx.pytorch.org/containers"

#: Stands for the replica id while a role's macros are substituted once for all its replicas;
#: no argument or variable can hold it (a NUL character cannot be passed to a process).
_REPLICA_ID = "\x00replica_id\x00"

#: App names are cut to this length in app ids, leaving room for role names and indices.
APP_NAME_MAX_LEN = 40


# ---------------------------------------------------------------------------------------------
# The request


@dataclass
class WorkspaceBuild:
    """A role whose image is patched with a local directory before its containers start."""

    role: str
    workspace: str
    base_image: str
    image_repo: str | None = None


@dataclass
class DockerJob:
    """What ``schedule`` sends: the containers to create, in role and replica order.

    ``containers[i]`` holds the keyword arguments of ``DockerClient.containers.create``.
    The images of roles listed in ``workspaces`` are replaced by the built image at schedule
    time.
    """

    app_id: str
    network: str
    containers: list[dict[str, Any]]
    workspaces: list[WorkspaceBuild] = field(default_factory=list)
    quiet: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The job as plain data; the containers are the job's own dicts, not copies."""
        return {
            "app_id": self.app_id,
            "network": self.network,
            "containers": self.containers,
            "workspaces": [dataclasses.asdict(w) for w in self.workspaces],
            "quiet": self.quiet,
        }

    def __str__(self) -> str:
        return yaml_text(self.to_dict())


def new_app_id(app_name: str) -> str:
    """A fresh app id: the app name made container-name safe plus a random suffix.

    >>> new_app_id("My_Trainer").startswith("my-trainer-")
    True
    """
    return make_unique(normalize_rfc1123_name(app_name, max_len=APP_NAME_MAX_LEN))


def replica_name(app_id: str, role_name: str, replica_id: int) -> str:
    """Container name and hostname of one replica (RFC 1123, at most 63 characters).

    >>> replica_name("echo-k3x9q2ab", "Trainer_v2", 1)
    'echo-k3x9q2ab-trainer-v2-1'
    """
    return normalize_rfc1123_name(f"{app_id}-{role_name}-{replica_id}")


def replica_names(app_id: str, role_name: str, num_replicas: int) -> list[str]:
    """:func:`replica_name` of every replica of a role (computed once when it is already a
    valid name with room for the replica ids, as it nearly always is).

    >>> replica_names("echo-k3x9q2ab", "trainer", 2)
    ['echo-k3x9q2ab-trainer-0', 'echo-k3x9q2ab-trainer-1']
    """
    prefix = f"{app_id}-{role_name}"
    if normalize_rfc1123_name(prefix) == prefix and len(f"{prefix}-{num_replicas}") <= 63:
        return [f"{prefix}-{i}" for i in range(num_replicas)]
    return [replica_name(app_id, role_name, i) for i in range(num_replicas)]


def select_env(patterns: list[str] | None, host_env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``host_env`` whose names match one of the glob ``patterns``."""
    if not patterns:
        return {}
    return {k: v for k, v in host_env.items() if any(fnmatch.fnmatchcase(k, p) for p in patterns)}


# ---------------------------------------------------------------------------------------------
# AppDef -> DockerJob (the containers)


def check_names(app: AppDef, app_id: str) -> None:
    """Two roles whose names clean up to the same container name cannot run together."""
    seen: dict[str, str] = {}
    for i, role in enumerate(app.roles):
        name = replica_name(app_id, role.name, 0)
        if name in seen:
            raise InvalidAppError(
                f"role names {seen[name]!r} and {role.name!r} give the same container name "
                f"{name!r}; rename one of them (use letters, digits and '-')",
                f"roles[{i}].name",
            )
        seen[name] = role.name


def app_to_containers(
    app: AppDef,
    opts: DockerOpts,
    app_id: str,
    host_env: Mapping[str, str],
    ti_key: TaskInstanceKey | None = None,
) -> DockerJob:
    """Translate a valid app into the containers to create (one per replica).

    ``host_env`` is the environment ``copy_env`` selects from (the scheduler passes
    ``os.environ``). ``ti_key``, the Airflow task instance submitting the app, is put on every
    container (its labels, and the full values in :data:`LABEL_TASK_INSTANCE`) so that a retry
    finds the app again.
    """
    check_names(app, app_id)
    total = check_replica_count(app, opts.max_replicas)
    base_env = {**select_env(opts.copy_env, host_env), **(opts.env or {})}
    ti_labels: dict[str, str] = {}
    if ti_key is not None:
        ti_labels = {
            **ti_key.labels(),
            LABEL_TASK_INSTANCE: json.dumps(ti_key.annotations(), sort_keys=True),
        }
    rank0_host = replica_name(app_id, app.roles[0].name, 0)
    containers: list[dict[str, Any]] = []
    workspaces: list[WorkspaceBuild] = []
    for role_idx, role in enumerate(app.roles):
        where = f"roles[{role_idx}]"
        if role.workspace:
            workspaces.append(
                WorkspaceBuild(role.name, role.workspace, role.image, opts.image_repo)
            )
        # What all replicas of the role share is made once; per replica only the macros,
        # the name and the replica id change.
        role_json = stored_role_json(role)
        labels = {
            **replica_labels(app.name, app_id, role.name, role_idx, 0),
            **ti_labels,
            LABEL_ROLE: role_json,
            LABEL_REMOVE: "true" if opts.remove else "false",
            LABEL_STOP_ON_FAILURE: "true" if opts.stop_on_failure else "false",
            LABEL_CONTAINERS: str(total),
        }
        # Replica 0's spec with a placeholder for the replica id; each replica is a copy of
        # it with the placeholder replaced (macros are substituted in args and env, what
        # ``Values.apply`` substitutes; the entrypoint never).
        values = macros.Values(
            img_root="", app_id=app_id, replica_id=_REPLICA_ID, rank0_env=RANK0_HOST_ENV
        )
        args = [values.substitute(a) for a in role.args]
        role_env = {k: values.substitute(v) for k, v in role.env.items()}
        # The keys in their order; per replica the placeholders are filled in.
        template: dict[str, Any] = {
            "image": role.image,
            "entrypoint": None,
            "command": None,
            "name": "",
            "hostname": "",
            "environment": None,
            "labels": None,
            "network": opts.network,
            # A small init as PID 1 forwards SIGTERM (cancel stops promptly) and reaps.
            "init": True,
        }
        if opts.privileged:
            template["privileged"] = True
        mounts = mount_kwargs(role, where)  # once: it warns about unknown devices
        # Each container gets its own copy of the mounts (json.loads: a fast deep copy).
        mounts_json = json.dumps(mounts) if mounts else ""
        # The environment up to the replica's own variables (the role's own values per
        # replica only when a macro there names the replica id).
        fixed = {ENV_APP_ID: app_id, ENV_ROLE_IDX: str(role_idx), ENV_ROLE_NAME: role.name}
        env_head = {**base_env, **role_env, **fixed}
        env_per_replica = any(_REPLICA_ID in v for v in role_env.values())
        for replica_id, name in enumerate(replica_names(app_id, role.name, role.num_replicas)):
            rid = str(replica_id)
            env = env_head
            if env_per_replica:
                mine = {k: v.replace(_REPLICA_ID, rid) for k, v in role_env.items()}
                env = {**base_env, **mine, **fixed}
            spec = {
                **template,
                # As on Kubernetes, the role's entrypoint replaces the image's ENTRYPOINT.
                "entrypoint": [role.entrypoint],
                "command": [a.replace(_REPLICA_ID, rid) for a in args],
                "name": name,
                "hostname": name,
                "environment": {**env, ENV_REPLICA_IDX: rid, RANK0_HOST_ENV: rank0_host},
                "labels": {**labels, LABEL_REPLICA_ID: rid},
            }
            if role.max_retries > 0:
                spec["restart_policy"] = {
                    "Name": "on-failure",
                    "MaximumRetryCount": role.max_retries,
                }
            spec.update(resource_kwargs(role))
            if mounts_json:
                spec.update(json.loads(mounts_json))
            containers.append(spec)
    return DockerJob(app_id, opts.network, containers, workspaces, opts.quiet)


def spec_replica(spec: Mapping[str, Any]) -> tuple[str, int]:
    """(role name, replica id) of a container spec made by :func:`app_to_containers`."""
    env = spec["environment"]
    return env[ENV_ROLE_NAME], int(env[ENV_REPLICA_IDX])


def with_image(job: DockerJob, role: str, image: str) -> DockerJob:
    """A copy of ``job`` whose containers of ``role`` run ``image`` (a built workspace)."""
    containers = [
        {**spec, "image": image} if spec_replica(spec)[0] == role else spec
        for spec in job.containers
    ]
    return dataclasses.replace(job, containers=containers)


# ---------------------------------------------------------------------------------------------
# What the engine can hold


def check_replica_count(app: AppDef, limit: int) -> int:
    """The app's number of containers (its replicas over all roles); refused above ``limit``
    (the ``max_replicas`` run option) in the dry run, before anything is created.

    Every replica is a container on one engine and one network: an app too large for either
    would start part of its replicas (a gang that can never run) before failing.

    >>> from torchx_provider.specs.api import Role
    >>> check_replica_count(AppDef("a", [Role("r", image="i", num_replicas=3)]), 4)
    3
    """
    total = sum(role.num_replicas for role in app.roles)
    if total <= limit:
        return total
    i, largest = max(enumerate(app.roles), key=lambda ir: ir[1].num_replicas)
    roles = "" if len(app.roles) == 1 else f" (role {largest.name!r}: {largest.num_replicas:,})"
    raise InvalidAppError(
        f"app {app.name!r} has {total:,} replicas{roles}, more than the {limit:,} local_docker "
        f"runs (run option max_replicas; one Docker bridge network holds {BRIDGE_PORTS:,} "
        "containers): lower num_replicas, raise max_replicas for a network that holds more, "
        "or use a Kubernetes backend",
        f"roles[{i}].num_replicas",
    )


def network_capacity(network: Mapping[str, Any]) -> int | None:
    """How many containers ``network`` (``docker network inspect``) can hold: a bridge's
    ports and each IPv4 pool's addresses (less network, broadcast and the gateway, which the
    engine takes from the pool also when the network does not name it); ``None`` when
    neither bounds it.

    >>> network_capacity({"Driver": "bridge", "IPAM": {"Config": [{"Subnet": "10.1.0.0/24",
    ...     "Gateway": "10.1.0.1"}]}})
    253
    """
    limits = [BRIDGE_PORTS] if network.get("Driver") == "bridge" else []
    for config in (network.get("IPAM") or {}).get("Config") or []:
        pool = config.get("IPRange") or config.get("Subnet")
        try:
            net = ipaddress.ip_network(pool or "", strict=False)
        except ValueError:
            continue
        if net.version != 4:
            continue
        reserved = 2 if net.num_addresses > 2 else 0
        gateway = config.get("Gateway")
        if not gateway or ipaddress.ip_address(gateway) in net:
            reserved += 1
        limits.append(max(net.num_addresses - reserved, 0))
    return min(limits) if limits else None


def check_network_room(job: DockerJob, network: Mapping[str, Any]) -> None:
    """Refuse an app whose containers do not fit on its network next to those attached now.

    Past a bridge's ports the engine fails a container's start with "exchange full", past
    the addresses with "no available IPv4 addresses": only after the replicas before it were
    created. An app larger than the network even when empty is an :class:`InvalidAppError`
    (no retry helps); one that does not fit beside the other apps' running containers, a
    :class:`SubmissionError` (a retry may find room).
    """
    capacity = network_capacity(network)
    wanted = len(job.containers)
    attached = len(network.get("Containers") or {})
    if capacity is None or wanted + attached <= capacity:
        return
    where = f"network {job.network!r} holds at most {capacity:,} containers"
    if wanted > capacity:
        largest = Counter(int(spec["environment"][ENV_ROLE_IDX]) for spec in job.containers)
        raise InvalidAppError(
            f"app {job.app_id!r} has {wanted:,} replicas but Docker {where}: lower "
            "num_replicas, or use a network that holds more (run option network)",
            f"roles[{largest.most_common(1)[0][0]}].num_replicas",
        )
    raise SubmissionError(
        f"app {job.app_id!r} has {wanted:,} replicas but Docker {where} and {attached:,} are "
        "attached to it now: wait for other apps to end, or use another network (run option "
        "network)",
        status=400,
    )


#: The engine's answer to a container whose bind mount has no source on the engine's host
#: (``invalid mount config for type "bind": bind source path does not exist: /data``).
_MISSING_BIND_SOURCE = re.compile(r"bind source path does not exist: (.+?)\s*$")


def missing_mount(spec: Mapping[str, Any], answer: str) -> str:
    """What the engine's ``answer`` to creating ``spec``'s container says of a bind mount
    whose source does not exist on its host, naming the mount (``""``: it says nothing of
    the kind). Such a container can never be created as asked.

    >>> from torchx_provider.specs.api import Role
    >>> role = Role("trainer", image="i", mounts=[BindMount("/no/data", "/data")])
    >>> spec = app_to_containers(AppDef("a", [role]), DockerOpts(), "a-1", {}).containers[0]
    >>> missing_mount(spec, 'invalid mount config for type "bind": bind source path does '
    ...               'not exist: /no/data')  # doctest: +NORMALIZE_WHITESPACE
    "roles[0].mounts[0] (bind /no/data -> /data) of role 'trainer': its source /no/data does
    not exist on the Docker host; create it there, or fix the mount"
    """
    m = _MISSING_BIND_SOURCE.search(answer)
    if m is None:
        return ""
    source = m.group(1)
    env = spec.get("environment") or {}
    role_name, role_idx = env.get(ENV_ROLE_NAME, ""), env.get(ENV_ROLE_IDX, "0")
    role = stored_json((spec.get("labels") or {}).get(LABEL_ROLE), role_from_dict)
    mounts = role.mounts if role is not None else []
    found = [
        (j, mount)
        for j, mount in enumerate(mounts)
        if isinstance(mount, BindMount) and mount.src_path.rstrip("/") == source.rstrip("/")
    ]
    if found:
        j, mount = found[0]
        what = f"roles[{role_idx}].mounts[{j}] (bind {mount.src_path} -> {mount.dst_path})"
    else:
        what = f"a bind mount of roles[{role_idx}]"
    return (
        f"{what} of role {role_name!r}: its source {source} does not exist on the Docker "
        "host; create it there, or fix the mount"
    )


def check_engine_resources(job: DockerJob, ncpu: int, mem_bytes: int) -> None:
    """Refuse a replica that asks for more CPUs or memory than the whole engine has.

    Docker itself rejects too many CPUs with a bare HTTP 400 and silently accepts a memory
    limit above the host's memory; one :class:`SubmissionError` naming the role is clearer.
    The sums over replicas are not refused: CPU and memory are limits, not reservations, so
    the engine runs more of them than it has (slower; a replica that does use its whole
    memory may be killed), as a small test of a large app does on a laptop.
    """
    for spec in job.containers:
        role, _ = spec_replica(spec)
        cpus = spec.get("nano_cpus", 0) / 1e9
        if ncpu > 0 and cpus > ncpu:
            raise SubmissionError(
                f"role {role!r} asks for {cpus:g} CPUs per replica but the Docker engine has "
                f"only {ncpu}; lower resource.cpu of role {role!r} to at most {ncpu}",
                status=400,
            )
        mem = spec.get("mem_limit", 0)
        if mem_bytes > 0 and mem > mem_bytes:
            raise SubmissionError(
                f"role {role!r} asks for {mem // MiB} MiB of memory per replica but the "
                f"Docker engine has only {mem_bytes // MiB} MiB; lower resource.memMB of "
                f"role {role!r}",
                status=400,
            )


# ---------------------------------------------------------------------------------------------
# Log requests

#: ``streams`` of ``log_iter`` -> (stdout, stderr) of the Docker logs call.
STREAMS: dict[str | None, tuple[bool, bool]] = {
    None: (True, True),
    "combined": (True, True),
    "stdout": (True, False),
    "stderr": (False, True),
}


#: How far Docker's ``since``/``until`` are widened. Docker compares nanosecond timestamps with
#: a float of seconds (about a microsecond of precision), while our timestamps carry
#: microseconds; the engine is asked for a little more and ``logs.within`` (or
#: ``logs.advance``) trims it exactly.
LOG_BOUND_MARGIN = timedelta(milliseconds=1)


def log_params(
    streams: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    timestamps: bool = True,
) -> dict[str, Any]:
    """Keyword arguments of ``APIClient.logs`` for one read, bounds widened by
    :data:`LOG_BOUND_MARGIN`.

    Checks the request before anything is read: an unknown ``streams`` and a naive ``since``
    or ``until`` (``logs.require_aware``, the same refusal as on every backend) raise
    :class:`InvalidOptionError`.
    """
    if streams not in STREAMS:
        raise InvalidOptionError(
            f"unknown log stream {streams!r}; use 'stdout', 'stderr' or 'combined'",
            option="streams",
        )
    require_aware(since, "since")
    require_aware(until, "until")
    stdout, stderr = STREAMS[streams]
    params: dict[str, Any] = {"stdout": stdout, "stderr": stderr, "timestamps": timestamps}
    # Docker's own bounds are seconds since the epoch; zero or less means "unbounded".
    if since is not None and (since - LOG_BOUND_MARGIN).timestamp() > 0:
        params["since"] = (since - LOG_BOUND_MARGIN).timestamp()
    if until is not None and until.timestamp() > 0:
        params["until"] = (until + LOG_BOUND_MARGIN).timestamp()
    return params
