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
left) is the gap UNKNOWN, for the moment the removal takes. An app whose containers are
all gone before it was seen finished ended the same way (:func:`removed_from_outside`):
whether one container or all of them went, something other than the task removed them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from torchx_provider.failures import (
    SIGKILL_EXIT,
    SIGNAL_EXITS,
    SIGTERM_EXIT,
    FailureKind,
    exit_failure,
    oom_words,
)
from torchx_provider.schedulers.api import DescribeAppResponse, ListAppResponse
from torchx_provider.schedulers.docker.translation import (
    LABEL_REMOVE,
    LABEL_ROLE,
    LABEL_STOP_ON_FAILURE,
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
from torchx_provider.timestamps import read_timestamp

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

#: How a failed replica's container ended when its process ended (:func:`container_reason`):
#: its kind is the exit's (:func:`failure_kind`), by the rule every backend shares
#: (:func:`~torchx_provider.failures.exit_failure`), from its exit code and ``State.OOMKilled``.
EXIT_REASONS = frozenset(
    {
        # exited non-zero on its own (a raised exception, ``sys.exit(3)``, torchrun
        # reporting a failed worker): the user's
        "Error",
        # ``State.OOMKilled``: the kernel killed it for exceeding its own memory limit (the
        # role's ``resource.memMB``): the user's, the code needs more memory than it asked
        "OOMKilled",
        # died of a signal other than SIGKILL/SIGTERM (128 + n: SIGSEGV 139, SIGABRT 134):
        # nothing outside sends those; its own process raised it: the user's
        "Signal",
        # SIGKILL (137) without ``OOMKilled``, or SIGTERM (143), and not stopped by this
        # task (its stop marks the container): ``docker kill``/``docker stop`` from outside,
        # or the process itself -- the engine does not say which: no kind
        "Killed",
        "Terminated",
    }
)

#: How a failed replica's container ended otherwise (:func:`container_reason`) -> what ended
#: it. The exception a failed app raises is its first failed replica's kind
#: (:func:`torchx_provider.failures.error_class`); ``None``: the engine does not say who, and
#: the app fails with the base class rather than a guess.
CONTAINER_FAILURE: dict[str, FailureKind | None] = {
    # SIGKILL or SIGTERM (137/143), finished within an outage of the engine the provider saw
    # (:func:`stopped_by_engine`): the engine was stopped or restarted (its shutdown stops
    # every container), and the replica ended with it, not by its own doing.
    "EngineStopped": FailureKind.INFRASTRUCTURE,
    # ``State.Error`` set: the engine could not start it (its entrypoint is not in the image,
    # a mount source is missing): it cannot run as configured.
    "ContainerCannotRun": FailureKind.CONFIGURATION,
    # Exited 127 (or 126) with the init's own words in its log (:func:`exec_failure`): the
    # init the container runs as PID 1 could not start the role's entrypoint, which is not
    # in the image (126: it is there but cannot be run). Without those words a 127 is a
    # command its own script did not find: "Error".
    "EntrypointNotFound": FailureKind.CONFIGURATION,
    "EntrypointNotExecutable": FailureKind.CONFIGURATION,
    # Its container is gone before the app ended (:func:`missing_replica`): removed by
    # something other than this task.
    "RemovedFromOutside": FailureKind.INFRASTRUCTURE,
}

#: Appended to the names of the containers ``cancel`` stops: the engine keeps no other record
#: of a stop request, and a stopped replica would otherwise look like a failure (exit 143).
CANCELLED_SUFFIX = ".cancelled"
#: Appended to the names of the containers the provider stops because another replica of
#: their app failed for good (:func:`survivors_to_stop`): they report CANCELLED, saying why
#: (:data:`STOPPED_AFTER_FAILURE`), not FAILED with the exit code of the stop.
STOPPED_SUFFIX = ".stopped"
#: Why a replica stopped so ended.
STOPPED_AFTER_FAILURE = (
    "stopped by the provider after another replica failed with no restarts left (run "
    "option stop_on_failure)"
)
#: Appended to the name of the container the provider removes last when it removes an app:
#: while any container is left, the ones already gone are the provider's doing, not a
#: replica removed from outside (:func:`missing_replica`).
REMOVING_SUFFIX = ".removing"
#: Why a replica whose container is gone failed.
REMOVED_FROM_OUTSIDE = (
    "its container was removed by something other than this task before the app ended; "
    "its exit code and unread log lines are lost"
)

#: What a replica whose container is gone says while the provider removes its app.
PROVIDER_REMOVING = "the provider is removing the app"

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

#: Exit codes of the container's init (``docker run --init``: tini, which every replica runs
#: as PID 1) when it could not start the entrypoint: 127 not found, 126 found but not
#: executable (tini's ``spawn``, https://github.com/krallin/tini/blob/master/src/tini.c).
INIT_EXEC_EXITS = {127: "EntrypointNotFound", 126: "EntrypointNotExecutable"}
#: What the init writes to stderr then:
#: ``[FATAL tini (7)] exec /no/such/binary failed: No such file or directory``.
_INIT_EXEC_FAILED = re.compile(r"\[FATAL tini \(\d+\)\] (exec .* failed: .*?)\s*$")

T = TypeVar("T")

_EXITED = re.compile(r"^Exited \((-?\d+)\)")
_ZERO_TIME = "0001-01-01T00:00:00Z"


def _time(value: Any) -> datetime | None:
    """A time as the engine tells it: seconds since the epoch (a list entry) or RFC 3339
    (inspect, read by :func:`~torchx_provider.timestamps.read_timestamp`); its zero time,
    and anything else, is ``None``."""
    if isinstance(value, (int, float)) and value > 0:
        return datetime.fromtimestamp(value, tz=timezone.utc)
    if isinstance(value, str) and value != _ZERO_TIME:
        return read_timestamp(value)
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
    #: when it last started (inspect only)
    started: datetime | None = None
    #: the image it runs (inspect only)
    image: str = ""
    #: the init's words when it could not start the entrypoint, read from the log of a
    #: container that exited as it does then (:func:`may_have_failed_exec`)
    exec_error: str = ""

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
            started=_time(state.get("StartedAt")),
            image=str(config.get("Image") or ""),
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
    def stopped_after_failure(self) -> bool:
        """Whether the provider stopped it because another replica failed
        (:data:`STOPPED_SUFFIX`; a cancel may have marked it after)."""
        name = self.name.removesuffix(REMOVING_SUFFIX).removesuffix(CANCELLED_SUFFIX)
        return name.endswith(STOPPED_SUFFIX)

    @property
    def stop_on_failure(self) -> bool:
        return self.labels.get(LABEL_STOP_ON_FAILURE) == "true"

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
        and not c.stopped_after_failure
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
    if c.stopped_after_failure and (c.status == "created" or _ended_by_the_stop(c, state)):
        return ReplicaState.CANCELLED
    return state


def _ended_by_the_stop(c: ContainerInfo, state: ReplicaState) -> bool:
    """Whether a container stopped because another replica failed ended by that stop
    (SIGTERM, or SIGKILL after the grace): one that exited with a code of its own between the
    describe that chose to stop it and the stop (a replica failing within the root-cause
    window on a busy engine) failed or succeeded by itself, and is said as such."""
    return is_terminal(state) and (exit_code(c) in SIGNAL_EXITS or state == ReplicaState.CANCELLED)


def exit_code(c: ContainerInfo) -> int | None:
    """The exit code of a finished replica (``None`` while it may still run)."""
    if c.status in ("exited", "dead") or (c.status == "created" and c.error):
        return c.exit_code
    return None


def exec_failure(lines: Iterable[str]) -> str:
    """The init's words in ``lines`` (the end of a container's log) saying that it could
    not start the entrypoint, ``""`` when it said none.

    >>> exec_failure(["[FATAL tini (7)] exec python failed: No such file or directory\\n"])
    'exec python failed: No such file or directory'
    >>> exec_failure(["sh: python: not found"])
    ''
    """
    found = ""
    for line in lines:
        m = _INIT_EXEC_FAILED.search(line)
        if m:
            found = m.group(1)
    return found


def may_have_failed_exec(c: ContainerInfo) -> bool:
    """Whether ``c`` ended as a container whose init could not start the entrypoint does
    (exited for good with :data:`INIT_EXEC_EXITS`), so that its log is worth reading for
    the init's words (:func:`exec_failure`)."""
    return c.status in ("exited", "dead") and c.exit_code in INIT_EXEC_EXITS and not c.error


def container_reason(c: ContainerInfo, outages: Iterable[EngineOutage] = ()) -> str:
    """How a finished container ended, one of :data:`EXIT_REASONS` or a key of
    :data:`CONTAINER_FAILURE` (``""``: it exited 0, or has not ended). ``outages``: the
    engine's outages the provider saw (:func:`stopped_by_engine`)."""
    if c.error:
        return "ContainerCannotRun"
    if c.oom_killed:
        return "OOMKilled"
    code = exit_code(c)
    if code is None or code == 0:
        return ""
    if code in INIT_EXEC_EXITS and c.exec_error:
        return INIT_EXEC_EXITS[code]
    if stopped_by_engine(c, outages):
        return "EngineStopped"
    if code == SIGKILL_EXIT:
        return "Killed"
    if code == SIGTERM_EXIT:
        return "Terminated"
    return "Signal" if code > 128 else "Error"


def failure_kind(c: ContainerInfo, reason: str) -> FailureKind | None:
    """The kind of a failed container that ended for ``reason`` (:func:`container_reason`):
    for one of :data:`EXIT_REASONS`, its exit's (:func:`~torchx_provider.failures.
    exit_failure`); else :data:`CONTAINER_FAILURE`'s."""
    if reason in EXIT_REASONS:
        return exit_failure(exit_code(c), c.oom_killed)
    return CONTAINER_FAILURE.get(reason)


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
        structured_error_msg=PROVIDER_REMOVING if removing else REMOVED_FROM_OUTSIDE,
        reason="" if removing else "RemovedFromOutside",
        failure=None if removing else CONTAINER_FAILURE["RemovedFromOutside"],
    )


def entrypoint_problem(c: ContainerInfo) -> str:
    """What keeps ``c``'s entrypoint from running, naming it and the image, for a container
    whose init could not start it (``""`` for any other)."""
    reason = INIT_EXEC_EXITS.get(c.exit_code or 0) if c.exec_error else None
    if reason is None:
        return ""
    role = c.role
    entrypoint = role.entrypoint if role is not None else ""
    image = c.image or (role.image if role is not None else "")
    where = "is not in" if reason == "EntrypointNotFound" else "cannot be run from"
    return (
        f"its entrypoint {entrypoint!r} {where} image {image!r} ({c.exec_error}); fix the "
        "role's entrypoint, or use an image that has it"
    )


def _failure_msg(role: str, c: ContainerInfo, reason: str) -> str:
    if c.error:
        return f"{role}/{c.replica_id} failed to start: {c.error}"
    if reason in INIT_EXEC_EXITS.values():
        return f"{role}/{c.replica_id} could not start: {entrypoint_problem(c)}"
    msg = f"{role}/{c.replica_id} exited with code {c.exit_code}"
    if c.oom_killed:
        mem = c.role.resource.memMB if c.role is not None and c.role.resource else 0
        msg += f" ({oom_words(f'{int(mem)} MiB' if mem > 0 else '')})"
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
            kind = failure_kind(c, reason)
            if state == ReplicaState.CANCELLED and c.stopped_after_failure:
                message = STOPPED_AFTER_FAILURE
            else:
                message = c.error or entrypoint_problem(c)
                message = message or (ENGINE_STOPPED if reason == "EngineStopped" else NONE)
            replicas.append(
                ReplicaStatus(
                    id=c.replica_id,
                    state=state,
                    role=name,
                    hostname=c.hostname or replica_name(app_id, name, c.replica_id),
                    structured_error_msg=message,
                    exit_code=exit_code(c),
                    num_restarts=c.restart_count,
                    reason=reason,
                    failure=None if kind is None else kind.value,
                    finished_at=c.finished if is_terminal(state) else None,
                    started_at=c.started,
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


def removed_from_outside(last: DescribeAppResponse | None) -> DescribeAppResponse | None:
    """What an app whose containers are now all gone ended as, from ``last``, its description
    before they went (``None``: never described; nothing to tell).

    Seen finished: as it was seen (removed after its end). Else every replica not seen
    finished is :func:`missing_replica` (FAILED, ``RemovedFromOutside``) and the app FAILED,
    as when one replica's container of several goes: the task never removes an app that
    has not finished, so something else did, whether it took one container or all of them.
    (The provider's own removal once the app has finished and its logs were read is known to
    the engine that made it, and told before this is asked.)
    """
    if last is None or is_terminal(last.state):
        return last
    statuses: list[RoleStatus] = []
    failures = [] if last.msg in (NONE, "") else [last.msg]
    states: list[ReplicaState] = []
    for role_status in last.roles_statuses:
        replicas: list[ReplicaStatus] = []
        for r in role_status.replicas:
            if not is_terminal(r.state):
                r = missing_replica(last.app_id, role_status.role, r.id)
                failures.append(f"{role_status.role}/{r.id}: {REMOVED_FROM_OUTSIDE}")
            replicas.append(r)
            states.append(r.state)
        statuses.append(RoleStatus(role_status.role, replicas))
    return DescribeAppResponse(
        app_id=last.app_id,
        state=app_state(states),
        num_restarts=last.num_restarts,
        msg="; ".join(failures) if failures else NONE,
        roles_statuses=statuses,
        roles=list(last.roles),
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
# A failed replica ends the app


@dataclass(frozen=True)
class SurvivorStop:
    """What :func:`survivors_to_stop` decided: the replica that failed first (``""``: none
    failed for good), the containers to stop now, and in how many seconds to look again
    when their stop waits for the root-cause window (``None``: no need)."""

    failed: str = ""
    survivors: tuple[ContainerInfo, ...] = ()
    again_in: float | None = None


def survivors_to_stop(containers: Sequence[ContainerInfo], now: datetime) -> SurvivorStop:
    """Whether a replica of the app made of ``containers`` failed for good, and which of
    its containers to stop because of it at ``now``.

    A replica has failed for good when its container exited non-zero with no restart left
    (one with restarts left is ``restarting``, not FAILED), could not start, or is gone
    (:func:`missing_replica`). Its app's other replicas most likely wait for it -- a
    collective blocks until its timeout -- so, as the failure policies of the Kubernetes
    backends do, the unfinished ones are stopped and the app ends FAILED. Not before
    :data:`~torchx_provider.failures.ROOT_CAUSE_WINDOW` has passed since the first failure
    ended, though: a replica that fails within it on its own counts as failing at the same
    moment, and its own exit (not the stop's) may show where the failure began. Only for
    an app created with ``stop_on_failure`` (its label), not while the provider removes
    it, and never a container already stopped or cancelled.
    """
    from torchx_provider.failures import ROOT_CAUSE_WINDOW

    if not containers or not all(c.stop_on_failure for c in containers):
        return SurvivorStop()
    if any(c.removing for c in containers):
        return SurvivorStop()
    present = {(c.role_name, c.replica_id) for c in containers}
    ended = [c for c in containers if replica_state(c) == ReplicaState.FAILED]
    failed = sorted((c.role_index, c.role_name, c.replica_id) for c in ended)
    index = {c.role_name: c.role_index for c in containers}
    failed += sorted((index[r], r, k) for r, k in replica_keys(containers) - present)
    if not failed:
        return SurvivorStop()
    _, role, replica = failed[0]
    key = f"{role}/{replica}"
    live = sorted(
        (
            c
            for c in containers
            if not is_terminal(replica_state(c)) and not (c.cancelled or c.stopped_after_failure)
        ),
        key=lambda c: (c.role_index, c.replica_id),
    )
    if not live:
        return SurvivorStop(key)
    finished = [c.finished for c in ended if c.finished is not None]
    if finished:
        wait = (min(finished) + ROOT_CAUSE_WINDOW - now).total_seconds()
        if wait > 0:
            return SurvivorStop(key, (), min(wait, ROOT_CAUSE_WINDOW.total_seconds()))
    return SurvivorStop(key, tuple(live))


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
