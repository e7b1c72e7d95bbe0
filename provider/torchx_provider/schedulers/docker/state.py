"""Docker containers -> replica and app states. Pure: data in, data out.

A container is read either from ``GET /containers/{id}/json`` (inspect: exact exit code,
restart count, hostname) or from one entry of ``GET /containers/json`` (list: one call for
many containers; the exit code is read from its ``Status`` text). Both become a
:class:`ContainerInfo`, and :func:`replica_state` classifies it with :data:`CONTAINER_STATE`.

The app's state follows from its replicas (:func:`app_state`): SUCCEEDED only when every
replica exited 0; FAILED when any failed and the rest are finished; CANCELLED when the app
was cancelled and nothing failed; otherwise the earliest state among the unfinished replicas.

A container ended by SIGKILL/SIGTERM (137/143) is blamed on the engine only with evidence:
its ``State.FinishedAt`` falls within an outage of the engine the provider saw itself
(:class:`EngineOutage`, :func:`stopped_by_engine`). A ``dockerd`` that is stopped closes its
API to new connections first and then stops every container, exiting once they are gone;
so a container it stopped finished while it refused new connections, before it answered
again. The outages are recorded by the engine's I/O (:class:`~.engine.DockerEngine`) and
passed in; the decision is made here only.

A replica the app declares but whose container is gone counts as FAILED
(:func:`missing_replica`): the engine never creates a container again, so the replica has
ended, and how is lost. The app is then FAILED once its other replicas are finished, like
after any failure; only while the provider itself removes the app (its mark on a container
left) is the gap UNKNOWN, for the moment the removal takes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from torchx_provider.failures import SIGNAL_EXITS, FailureKind
from torchx_provider.schedulers.api import DescribeAppResponse, ListAppResponse
from torchx_provider.schedulers.docker.translation import (
    LABEL_REMOVE,
    LABEL_ROLE,
    LABEL_TASK_INSTANCE,
    replica_name,
)
from torchx_provider.schedulers.labels import (
    LABEL_APP_ID,
    LABEL_APP_NAME,
    LABEL_REPLICA_ID,
    LABEL_ROLE_INDEX,
    LABEL_ROLE_NAME,
    TaskInstanceKey,
    stored_json,
)
from torchx_provider.schedulers.logs import parse_timestamp
from torchx_provider.specs.api import (
    NONE,
    AppState,
    ReplicaState,
    ReplicaStatus,
    Role,
    RoleStatus,
    is_terminal,
)
from torchx_provider.specs.serialization import role_from_dict

#: Docker's ``State.Status`` -> ReplicaState. ``None``: decided by the exit code.
CONTAINER_STATE: dict[str, ReplicaState | None] = {
    # Created but not started. ``schedule`` starts every container right after creating it;
    # one that stays here with ``State.Error`` set failed to start and is FAILED.
    "created": ReplicaState.SUBMITTED,
    # Exited and waiting out the back-off of its ``on-failure`` restart policy: it will run
    # again (a retry, counted in ``RestartCount``).
    "restarting": ReplicaState.PENDING,
    "running": ReplicaState.RUNNING,
    # Frozen by ``docker pause``: not making progress, not finished either.
    "paused": ReplicaState.PENDING,
    # Being deleted (``docker rm -f`` or the provider's own clean-up); its outcome is no longer
    # reported.
    "removing": ReplicaState.UNKNOWN,
    # Finished: ``State.ExitCode`` 0 is SUCCEEDED, anything else FAILED (137 is a SIGKILL,
    # often the OOM killer: see ``State.OOMKilled``).
    "exited": None,
    # The engine failed to stop or remove it (e.g. a busy mount): it will not run again.
    "dead": ReplicaState.FAILED,
}

#: How a failed replica's container ended (:func:`container_reason`) -> what ended it. The
#: exception a failed app raises is its first failed replica's kind
#: (:func:`torchx_provider.failures.error_class`); ``None``: the engine does not say who, and
#: the app fails with the base class rather than a guess.
CONTAINER_FAILURE: dict[str, FailureKind | None] = {
    # Exited non-zero on its own (a raised exception, ``sys.exit(3)``, torchrun reporting a
    # failed worker).
    "Error": FailureKind.USER,
    # ``State.OOMKilled``: the kernel killed it for exceeding its own memory limit (the
    # role's ``resource.memMB``): the code needs more memory than it asked for.
    "OOMKilled": FailureKind.USER,
    # Died of a signal other than SIGKILL/SIGTERM (128 + n: SIGSEGV 139, SIGABRT 134, ...):
    # nothing outside sends those; its own process raised it.
    "Signal": FailureKind.USER,
    # SIGKILL (137) without ``OOMKilled``, or SIGTERM (143), and not stopped by this task
    # (its stop marks the container): ``docker kill``/``docker stop`` from outside, or the
    # process itself -- the engine does not say which.
    "Killed": None,
    "Terminated": None,
    # The same exits, finished within an outage of the engine the provider saw
    # (:func:`stopped_by_engine`): the engine was stopped or restarted (its shutdown stops
    # every container), and the replica ended with it, not by its own doing.
    "EngineStopped": FailureKind.INFRASTRUCTURE,
    # ``State.Error`` set: the engine could not start it (its entrypoint is not in the image,
    # a mount source is missing): it cannot run as configured.
    "ContainerCannotRun": FailureKind.CONFIGURATION,
    # Its container is gone before the app ended (:func:`missing_replica`): removed by
    # something other than this task.
    "RemovedFromOutside": FailureKind.INFRASTRUCTURE,
}

#: Appended to the names of the containers ``cancel`` stops: the engine keeps no other record
#: of a stop request, and a stopped replica would otherwise look like a failure (exit 143).
CANCELLED_SUFFIX = ".cancelled"
#: Appended to the name of the container the provider removes last when it removes an app:
#: while any container is left, the ones already gone are the provider's doing, not a
#: replica removed from outside (:func:`missing_replica`).
REMOVING_SUFFIX = ".removing"
#: Why a replica whose container is gone failed.
REMOVED_FROM_OUTSIDE = (
    "its container was removed by something other than this task before the app ended; "
    "its exit code and unread log lines are lost"
)

#: Why a replica the engine stopped on its way down failed.
ENGINE_STOPPED = (
    "the Docker engine stopped (shut down or restarted) while it ran, and stopped its "
    "container on the way down"
)
#: How far outside an outage of the engine a SIGKILL/SIGTERM exit may lie and still count
#: as the engine's doing (:func:`stopped_by_engine`). The outage is timed on the provider's
#: clock by the first request the engine failed, and a request already connected may still
#: be answered while the engine stops its containers: the first failure comes a little
#: after them -- the engine's event of the container's end wakes the follow, whose describe
#: then finds the engine refusing new connections (0.3 s measured with ``dockerd`` 20.10
#: stopping two containers). 2 s covers that several times over, and a clock of a remote
#: engine kept in sync; a ``docker stop`` from outside less than 2 s before the engine went
#: down is the one case taken for the engine's. An end seen later than that stays unknown.
ENGINE_STOP_MARGIN = timedelta(seconds=2)

T = TypeVar("T")

_EXITED = re.compile(r"^Exited \((-?\d+)\)")
_ZERO_TIME = "0001-01-01T00:00:00Z"


def _time(value: Any) -> datetime | None:
    if isinstance(value, (int, float)) and value > 0:
        return datetime.fromtimestamp(value, tz=timezone.utc)
    if isinstance(value, str) and value and value != _ZERO_TIME:
        try:
            return parse_timestamp(value)
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class ContainerInfo:
    """What the provider needs to know about one container."""

    id: str
    name: str
    status: str
    labels: Mapping[str, str] = field(default_factory=dict)
    exit_code: int | None = None
    error: str = ""
    oom_killed: bool = False
    restart_count: int | None = None
    hostname: str = ""
    created: datetime | None = None
    finished: datetime | None = None

    @classmethod
    def from_inspect(cls, attrs: Mapping[str, Any]) -> ContainerInfo:
        """From ``docker inspect`` (``Container.attrs``)."""
        state = attrs.get("State") or {}
        config = attrs.get("Config") or {}
        return cls(
            id=attrs.get("Id", ""),
            name=str(attrs.get("Name", "")).lstrip("/"),
            status=state.get("Status", ""),
            labels=dict(config.get("Labels") or {}),
            exit_code=state.get("ExitCode"),
            error=state.get("Error") or "",
            oom_killed=bool(state.get("OOMKilled")),
            restart_count=attrs.get("RestartCount"),
            hostname=config.get("Hostname", ""),
            created=_time(attrs.get("Created")),
            finished=_time(state.get("FinishedAt")),
        )

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> ContainerInfo:
        """From one entry of ``docker ps -a`` (``APIClient.containers()``)."""
        names = summary.get("Names") or [""]
        m = _EXITED.match(summary.get("Status") or "")
        return cls(
            id=summary.get("Id", ""),
            name=str(names[0]).lstrip("/"),
            status=summary.get("State", ""),
            labels=dict(summary.get("Labels") or {}),
            exit_code=int(m.group(1)) if m else None,
            created=_time(summary.get("Created")),
        )

    # -- what the labels say ---------------------------------------------------------------------
    @property
    def app_id(self) -> str:
        return self.labels.get(LABEL_APP_ID, "")

    @property
    def role(self) -> Role | None:
        """The role the container was created from (``None`` if the label is missing/bad)."""
        return stored_json(self.labels.get(LABEL_ROLE), role_from_dict)

    @property
    def role_name(self) -> str:
        role = self.role
        return role.name if role is not None else self.labels.get(LABEL_ROLE_NAME, "")

    @property
    def role_index(self) -> int:
        return int(self.labels.get(LABEL_ROLE_INDEX, "0") or 0)

    @property
    def replica_id(self) -> int:
        return int(self.labels.get(LABEL_REPLICA_ID, "0") or 0)

    @property
    def remove_when_done(self) -> bool:
        return self.labels.get(LABEL_REMOVE) == "true"

    @property
    def cancelled(self) -> bool:
        return self.name.removesuffix(REMOVING_SUFFIX).endswith(CANCELLED_SUFFIX)

    @property
    def removing(self) -> bool:
        """Whether the provider is removing this container's app (:data:`REMOVING_SUFFIX`)."""
        return self.name.endswith(REMOVING_SUFFIX)

    @property
    def task_instance(self) -> TaskInstanceKey | None:
        """The Airflow task instance that submitted the app, if one did."""
        return stored_json(self.labels.get(LABEL_TASK_INSTANCE), TaskInstanceKey.from_annotations)


@dataclass(frozen=True)
class EngineOutage:
    """A time the engine did not answer, as the provider saw it: from the first request it
    failed after answering (``began``) to the first it answered after (``ended``; ``None``
    while it still does not answer)."""

    began: datetime
    ended: datetime | None = None

    def covers(self, at: datetime, margin: timedelta = ENGINE_STOP_MARGIN) -> bool:
        """Whether ``at`` lies within the outage, give or take ``margin``."""
        return self.began - margin <= at and (self.ended is None or at <= self.ended + margin)


#: How many outages of one engine are remembered (the oldest are forgotten first).
OUTAGES_KEPT = 32


def record_answer(
    outages: tuple[EngineOutage, ...], answered: bool, at: datetime
) -> tuple[EngineOutage, ...]:
    """``outages`` after a request to the engine that it ``answered`` (or failed) at ``at``:
    a failure while none is open begins one, an answer ends the open one; anything else
    changes nothing.

    >>> t = datetime(2024, 1, 1, tzinfo=timezone.utc)
    >>> o = record_answer((), False, t)
    >>> o = record_answer(o, False, t + timedelta(seconds=1))
    >>> record_answer(o, True, t + timedelta(seconds=5)) == (
    ...     EngineOutage(t, t + timedelta(seconds=5)),)
    True
    """
    open_ = bool(outages) and outages[-1].ended is None
    if answered and open_:
        return (*outages[:-1], EngineOutage(outages[-1].began, at))
    if not answered and not open_:
        return (*outages, EngineOutage(at))[-OUTAGES_KEPT:]
    return outages


def may_be_stopped_by_engine(c: ContainerInfo) -> bool:
    """Whether ``c`` ended the way a container the engine stops on its way down does:
    finished by SIGKILL/SIGTERM (137/143), not by the OOM killer, not cancelled by this task,
    its finish time known."""
    return (
        exit_code(c) in SIGNAL_EXITS
        and not c.oom_killed
        and not c.error
        and not c.cancelled
        and c.finished is not None
    )


def stopped_by_engine(c: ContainerInfo, outages: Iterable[EngineOutage]) -> bool:
    """Whether ``c`` was stopped by the engine going down: it ended as such a container does
    (:func:`may_be_stopped_by_engine`) and finished within one of ``outages`` (give or take
    :data:`ENGINE_STOP_MARGIN`). Without an outage seen, a 137/143 stays unexplained."""
    if not may_be_stopped_by_engine(c) or c.finished is None:
        return False
    return any(o.covers(c.finished) for o in outages)


def replica_state(c: ContainerInfo) -> ReplicaState:
    """The replica's state, from :data:`CONTAINER_STATE` plus the exit code and cancel mark."""
    state = CONTAINER_STATE.get(c.status, ReplicaState.UNKNOWN)
    if state is None:
        state = ReplicaState.SUCCEEDED if c.exit_code == 0 else ReplicaState.FAILED
    elif c.status == "created" and c.error:
        state = ReplicaState.FAILED
    if c.cancelled and (is_terminal(state) or c.status == "created"):
        return ReplicaState.CANCELLED
    return state


def exit_code(c: ContainerInfo) -> int | None:
    """The exit code of a finished replica (``None`` while it may still run)."""
    if c.status in ("exited", "dead") or (c.status == "created" and c.error):
        return c.exit_code
    return None


def container_reason(c: ContainerInfo, outages: Iterable[EngineOutage] = ()) -> str:
    """How a finished container ended, as a key of :data:`CONTAINER_FAILURE` (``""``: it
    exited 0, or has not ended). ``outages``: the engine's outages the provider saw
    (:func:`stopped_by_engine`)."""
    if c.error:
        return "ContainerCannotRun"
    if c.oom_killed:
        return "OOMKilled"
    code = exit_code(c)
    if code is None or code == 0:
        return ""
    if stopped_by_engine(c, outages):
        return "EngineStopped"
    if code == 137:
        return "Killed"
    if code == 143:
        return "Terminated"
    return "Signal" if code > 128 else "Error"


def image_failure(text: str) -> FailureKind | None:
    """What the engine's answer ``text`` to a failed image look-up or pull means: the kind of
    a pull that can never succeed (the registry has no such image, the name is not valid) by
    the table every backend shares (:data:`~torchx_provider.schedulers.images.PULL_ANSWER`);
    ``None`` for any other answer (a registry that cannot be reached, a rate limit, refused
    credentials): not known to be the app's fault, and a retry may pull it."""
    from torchx_provider.schedulers.images import pull_answer

    verdict = pull_answer(text)
    return verdict.kind if verdict is not None and verdict.final else None


def app_state(states: Iterable[ReplicaState]) -> AppState:
    """The app's state from its replicas' (see the module docstring); UNKNOWN for none."""
    states = list(states)
    if not states:
        return AppState.UNKNOWN
    running = [s for s in states if not is_terminal(s)]
    if running:
        return min(running, key=lambda s: s.value)
    if all(s == AppState.SUCCEEDED for s in states):
        return AppState.SUCCEEDED
    if any(s == AppState.FAILED for s in states):
        return AppState.FAILED
    return AppState.CANCELLED


def missing_replica(
    app_id: str, role: str, replica_id: int, *, removing: bool = False
) -> ReplicaStatus:
    """A replica the app declares but whose container is gone.

    FAILED, saying it was removed from outside: the engine never creates it again, so it
    has ended, and its exit code and unread lines went with it. While the provider removes
    the app (``removing``: its mark on a container left) it is UNKNOWN instead, for the
    moment before the rest are gone too.
    """
    return ReplicaStatus(
        id=replica_id,
        state=ReplicaState.UNKNOWN if removing else ReplicaState.FAILED,
        role=role,
        hostname=replica_name(app_id, role, replica_id),
        structured_error_msg=(
            "the provider is removing the app" if removing else REMOVED_FROM_OUTSIDE
        ),
        reason="" if removing else "RemovedFromOutside",
        failure=None if removing else CONTAINER_FAILURE["RemovedFromOutside"],
    )


def _failure_msg(role: str, c: ContainerInfo, reason: str) -> str:
    if c.error:
        return f"{role}/{c.replica_id} failed to start: {c.error}"
    msg = f"{role}/{c.replica_id} exited with code {c.exit_code}"
    if c.oom_killed:
        msg += " (killed for exceeding its memory limit: raise resource.memMB)"
    elif reason == "EngineStopped":
        msg += f" ({ENGINE_STOPPED})"
    return msg


def describe_app(
    app_id: str, containers: Iterable[ContainerInfo], outages: Iterable[EngineOutage] = ()
) -> DescribeAppResponse | None:
    """The app made of ``containers`` (all of one app id), or ``None`` when there are none.

    Roles come from the role JSON each container carries. A replica the role declares but
    whose container is gone is :func:`missing_replica`: FAILED, named in the message (an
    app is never called SUCCEEDED on partial evidence, and never waits for it). ``outages``:
    the engine's outages the provider saw, which tell a replica the engine stopped on its
    way down (:func:`container_reason`).
    """
    outages = tuple(outages)
    containers = list(containers)
    removing = any(c.removing for c in containers)
    by_role: dict[str, list[ContainerInfo]] = {}
    roles: dict[str, tuple[int, Role]] = {}
    for c in containers:
        name = c.role_name
        by_role.setdefault(name, []).append(c)
        if name not in roles:
            role = c.role or Role(name=name, image="", num_replicas=0)
            roles[name] = (c.role_index, role)
    if not by_role:
        return None

    statuses: list[RoleStatus] = []
    failures: list[str] = []
    states: list[ReplicaState] = []
    restarts = 0
    for name, (_, role) in sorted(roles.items(), key=lambda kv: (kv[1][0], kv[0])):
        replicas: list[ReplicaStatus] = []
        seen: set[int] = set()
        for c in sorted(by_role[name], key=lambda c: c.replica_id):
            state = replica_state(c)
            seen.add(c.replica_id)
            restarts = max(restarts, c.restart_count or 0)
            reason = container_reason(c, outages) if state == ReplicaState.FAILED else ""
            kind = CONTAINER_FAILURE.get(reason)
            replicas.append(
                ReplicaStatus(
                    id=c.replica_id,
                    state=state,
                    role=name,
                    hostname=c.hostname or replica_name(app_id, name, c.replica_id),
                    structured_error_msg=c.error
                    or (ENGINE_STOPPED if reason == "EngineStopped" else NONE),
                    exit_code=exit_code(c),
                    num_restarts=c.restart_count,
                    reason=reason,
                    failure=None if kind is None else kind.value,
                    finished_at=c.finished if is_terminal(state) else None,
                )
            )
            if state == ReplicaState.FAILED:
                failures.append(_failure_msg(name, c, reason))
        for missing in sorted(set(range(role.num_replicas)) - seen):
            gone = missing_replica(app_id, name, missing, removing=removing)
            replicas.append(gone)
            if gone.state == ReplicaState.FAILED:
                failures.append(f"{name}/{missing}: {gone.structured_error_msg}")
        replicas.sort(key=lambda r: r.id)
        states.extend(r.state for r in replicas)
        statuses.append(RoleStatus(name, replicas))

    state = app_state(states)
    msg = "; ".join(failures) if failures else NONE
    return DescribeAppResponse(
        app_id=app_id,
        state=state,
        num_restarts=restarts,
        msg=msg,
        roles_statuses=statuses,
        roles=[role for _, (_, role) in sorted(roles.items(), key=lambda kv: (kv[1][0], kv[0]))],
    )


def _try_number(c: ContainerInfo) -> int | None:
    key = c.task_instance
    return None if key is None else key.try_number


def list_apps(
    containers: Iterable[ContainerInfo], app_handle: Callable[[str], str]
) -> list[ListAppResponse]:
    """One entry per app id among ``containers``, oldest first; each in the state
    :func:`describe_app` gives it (a replica whose container is gone counts)."""
    by_app: dict[str, list[ContainerInfo]] = {}
    for c in containers:
        if c.app_id:
            by_app.setdefault(c.app_id, []).append(c)
    out = []
    for app_id, cs in by_app.items():
        created = [c.created for c in cs if c.created is not None]
        described = describe_app(app_id, cs)
        out.append(
            ListAppResponse(
                app_id=app_id,
                state=described.state if described is not None else AppState.UNKNOWN,
                app_handle=app_handle(app_id),
                name=cs[0].labels.get(LABEL_APP_NAME, ""),
                created=min(created) if created else None,
                try_number=_try_number(cs[0]),
            )
        )
    epoch = datetime.min.replace(tzinfo=timezone.utc)
    out.sort(key=lambda a: (a.created or epoch, a.app_id))
    return out


# ---------------------------------------------------------------------------------------------
# Removal once finished and read


def replica_keys(containers: Iterable[ContainerInfo]) -> set[tuple[str, int]]:
    """Every (role, replica id) the app declares (from the roles its containers carry)."""
    keys: set[tuple[str, int]] = set()
    for c in containers:
        role = c.role
        count = role.num_replicas if role is not None else 0
        keys.update((c.role_name, i) for i in range(count))
        keys.add((c.role_name, c.replica_id))
    return keys


def ready_to_remove(containers: list[ContainerInfo], drained: set[tuple[str, int]]) -> bool:
    """Whether an app's containers may go: it asked for removal, every replica is finished
    (none restarting) and every replica's log has been read to its end (``drained``)."""
    if not containers or not all(c.remove_when_done for c in containers):
        return False
    if not all(is_terminal(replica_state(c)) for c in containers):
        return False
    return replica_keys(containers) <= drained


# ---------------------------------------------------------------------------------------------
# Networks


def oldest_network(networks: Iterable[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    """The network called exactly ``name`` that every submitter agrees on: the oldest.

    Two submits racing to create the network may both succeed (the engine's duplicate check
    is not atomic). On one host they are serialised (:mod:`.netlock`); from several hosts,
    each picks the oldest (ties broken by id) and removes its own if it lost.
    """
    epoch = datetime.min.replace(tzinfo=timezone.utc)
    matching = [n for n in networks if n.get("Name") == name]
    if not matching:
        return None
    return min(matching, key=lambda n: (_time(n.get("Created")) or epoch, n.get("Id", "")))
