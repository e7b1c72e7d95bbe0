"""An in-memory backend (``fake``) for testing the Airflow face without a cluster.

Apps advance one step each time they are described: PENDING, then RUNNING for
``fake.ticks`` describes while each replica writes ``fake.lines`` log lines spread over those
ticks, then the outcome in ``fake.outcome`` (SUCCEEDED by default; a replica listed in
``fake.fail_replicas`` as ``role/id`` exits 1; one in ``fake.traceback_replicas`` ends its
log with a Python traceback, one in ``fake.peer_lost_replicas`` with gloo's lost peer; one in
``fake.unended_replicas`` is still RUNNING when the app FAILED; one in
``fake.waiting_replicas`` waits on an image it cannot pull while the app runs; one in
``fake.missing_image_replicas`` waits on an image its registry does not have, which can never
be pulled). Apps are set through ``AppDef.metadata``.

The backend is one row of the backend table (:data:`FAKE_BACKEND`), added with
:func:`register` and removed with :func:`unregister`, as a third-party backend would be.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, ClassVar, cast

from torchx_provider.backends import Backend, register_backend, unregister_backend
from torchx_provider.hooks.base import BackendTarget, TorchXHookBase
from torchx_provider.schedulers.api import (
    AsyncSchedulerClient,
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
)
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.schedulers.logs import LogCursor, TimestampedLine, advance
from torchx_provider.specs.api import (
    AppDef,
    AppDryRunInfo,
    AppState,
    ReplicaStatus,
    RoleStatus,
    is_terminal,
)
from torchx_provider.specs.names import make_unique
from torchx_provider.specs.runopts import CfgVal, runopts
from torchx_provider.specs.serialization import to_dict

if TYPE_CHECKING:
    from airflow.sdk import Context

    from torchx_provider.operators.submission import SubmissionPlan
    from torchx_provider.triggers.job import JobTriggerArgs

BASE = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)


@dataclass
class FakeApp:
    app_id: str
    app: AppDef
    cfg: dict[str, Any]
    ti_key: TaskInstanceKey | None
    created: datetime
    ticks: int = 0
    cancelled: bool = False
    deleted: bool = False

    def meta(self, key: str, default: str) -> str:
        return str(self.app.metadata.get(f"fake.{key}", default))

    @property
    def run_ticks(self) -> int:
        return int(self.meta("ticks", "3"))

    @property
    def pending_ticks(self) -> int:
        """Describes the app waits for before it runs (``fake.pending``, default 1)."""
        return int(self.meta("pending", "1"))

    @property
    def lines_per_replica(self) -> int:
        return int(self.meta("lines", "4"))

    def state(self) -> AppState:
        if self.cancelled:
            return AppState.CANCELLED
        if self.ticks < self.pending_ticks:
            return AppState.PENDING
        if self.ticks < self.pending_ticks + self.run_ticks:
            return AppState.RUNNING
        return AppState[self.meta("outcome", "SUCCEEDED")]

    def failing(self, role: str, rid: int) -> bool:
        return f"{role}/{rid}" in self.meta("fail_replicas", "").split(",")

    def replica_state(self, role: str, rid: int) -> AppState:
        state = self.state()
        if state == AppState.FAILED and f"{role}/{rid}" in self.meta("unended_replicas", "").split(
            ","
        ):
            return AppState.RUNNING  # still being stopped when the app failed
        if (
            state == AppState.FAILED
            and not self.failing(role, rid)
            and self.meta("fail_replicas", "")
        ):
            return AppState.SUCCEEDED
        return state

    def lines(self, role: str, rid: int) -> list[TimestampedLine]:
        """What the replica has written so far (two lines share each timestamp)."""
        if self.ticks < self.pending_ticks:
            return []
        written = min(
            self.lines_per_replica, self.lines_per_replica * self.ticks // max(self.run_ticks, 1)
        )
        lines = [
            TimestampedLine(BASE + timedelta(seconds=i // 2), f"{role} {rid} line {i}\n")
            for i in range(written)
        ]
        words = self.meta("last_words", "")
        if self.cancelled and words and lines:  # what it says as it is stopped (SIGTERM)
            lines.append(TimestampedLine(lines[-1].timestamp, f"{role} {rid} {words}\n"))
        if written >= 2 and f"{role}/{rid}" in self.meta("traceback_replicas", "").split(","):
            # its last two lines: a Python traceback (the evidence of a root cause)
            at = lines[-1].timestamp
            lines[-2:] = [
                TimestampedLine(at, "Traceback (most recent call last):\n"),
                TimestampedLine(at, f"ValueError: {role} {rid} got a bad batch\n"),
            ]
        if written >= 2 and f"{role}/{rid}" in self.meta("peer_lost_replicas", "").split(","):
            at = lines[-1].timestamp
            lines[-2:] = [
                TimestampedLine(at, "Traceback (most recent call last):\n"),
                TimestampedLine(at, f"RuntimeError: {PEER_LOST}\n"),
            ]
        return lines

    def describe(self) -> DescribeAppResponse:
        statuses = []
        for role in self.app.roles:
            replicas = []
            for rid in range(role.num_replicas):
                state = self.replica_state(role.name, rid)
                exit_code = None
                if is_terminal(state):
                    exit_code = (
                        1
                        if self.failing(role.name, rid)
                        else (0 if state == AppState.SUCCEEDED else None)
                    )
                key = f"{role.name}/{rid}"
                if key in self.meta("missing_image_replicas", "").split(","):
                    replicas.append(
                        ReplicaStatus(
                            id=rid,
                            state=AppState.PENDING,
                            role=role.name,
                            hostname="",
                            structured_error_msg=f"ErrImagePull: {role.image}: not found",
                            reason="ErrImagePull",
                            failure="configuration",
                            cannot_start=True,
                        )
                    )
                    continue
                waiting = key in self.meta("waiting_replicas", "").split(",")
                if waiting and not is_terminal(state):
                    # its image cannot be pulled: it waits, as Kubernetes retries
                    replicas.append(
                        ReplicaStatus(
                            id=rid,
                            state=AppState.PENDING,
                            role=role.name,
                            hostname=f"{role.name}-{rid}",
                            reason="ImagePullBackOff",
                            failure="configuration",
                        )
                    )
                    continue
                replicas.append(
                    ReplicaStatus(
                        id=rid,
                        state=state,
                        role=role.name,
                        hostname=f"{role.name}-{rid}",
                        exit_code=exit_code,
                    )
                )
            statuses.append(RoleStatus(role.name, replicas))
        state = self.state()
        return DescribeAppResponse(
            app_id=self.app_id,
            state=state,
            msg="replica failed" if state == AppState.FAILED else "",
            ui_url=f"https://fake.example/apps/{self.app_id}",
            roles_statuses=statuses,
            roles=list(self.app.roles),
        )


@dataclass
class FakeCluster:
    apps: dict[str, FakeApp] = field(default_factory=dict)
    submitted: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    #: the namespaces each find_apps call was given
    searched: list[list[str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: describe calls that raise BackendUnavailableError before succeeding again
    outages: int = 0

    def live(self) -> list[FakeApp]:
        return [a for a in self.apps.values() if not is_terminal(a.state()) and not a.deleted]


CLUSTER = FakeCluster()


def reset() -> FakeCluster:
    global CLUSTER
    CLUSTER = FakeCluster()
    return CLUSTER


def _tick(app_id: str) -> FakeApp | None:
    from torchx_provider.errors import BackendUnavailableError

    with CLUSTER.lock:
        if CLUSTER.outages > 0:
            CLUSTER.outages -= 1
            raise BackendUnavailableError("fake backend down")
        app = CLUSTER.apps.get(app_id)
        if app is None or app.deleted:
            return None
        if not is_terminal(app.state()):
            app.ticks += 1
        return app


@dataclass
class FakeOpts:
    """The fake backend's run options."""

    queue: str = "default"
    namespace: str = "default"
    priority: int = 0


class FakeScheduler(Scheduler[dict]):
    def __init__(self, session_name: str = "", **client_kwargs: Any) -> None:
        super().__init__("fake", session_name)
        self.client_kwargs = client_kwargs

    def _run_opts(self) -> runopts:
        opts = runopts()
        for f in fields(FakeOpts):
            opts.add(f.name, type(f.default), f.name, default=f.default)
        return opts

    def _submit_dryrun(
        self, app: AppDef, cfg: Mapping[str, CfgVal], ti_key: TaskInstanceKey | None
    ) -> AppDryRunInfo[dict]:
        request = {
            "app": to_dict(app),
            "cfg": dict(cfg),
            "ti_key": None if ti_key is None else ti_key.to_dict(),
        }
        return AppDryRunInfo(request, lambda r: json.dumps(r, default=str))

    def schedule(self, dryrun_info: AppDryRunInfo[dict]) -> str:
        app = dryrun_info.app
        assert app is not None
        app_id = make_unique(app.name)
        with CLUSTER.lock:
            CLUSTER.apps[app_id] = FakeApp(
                app_id,
                app,
                dict(dryrun_info.cfg or {}),
                None
                if dryrun_info.request["ti_key"] is None
                else TaskInstanceKey.from_dict(dryrun_info.request["ti_key"]),
                created=datetime.now(timezone.utc),
            )
            CLUSTER.submitted.append(app_id)
        return app_id

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        app = CLUSTER.apps.get(app_id)
        return None if app is None or app.deleted else app.describe()

    def list(self) -> list[ListAppResponse]:
        return [
            ListAppResponse(a.app_id, a.state(), created=a.created) for a in CLUSTER.apps.values()
        ]

    def find_apps(
        self, ti_key: TaskInstanceKey, namespaces: Sequence[str] = ()
    ) -> list[ListAppResponse]:
        CLUSTER.searched.append(list(namespaces))
        mine = [
            a
            for a in CLUSTER.apps.values()
            if a.ti_key is not None
            and not a.deleted
            and (a.ti_key.dag_id, a.ti_key.task_id, a.ti_key.run_id, a.ti_key.map_index)
            == (ti_key.dag_id, ti_key.task_id, ti_key.run_id, ti_key.map_index)
        ]
        mine.sort(key=lambda a: a.created, reverse=True)
        return [
            ListAppResponse(a.app_id, a.state(), created=a.created, try_number=a.ti_key.try_number)
            for a in mine
            if a.ti_key is not None
        ]

    def _cancel_existing(self, app_id: str) -> None:
        app = CLUSTER.apps[app_id]
        if not is_terminal(app.state()):
            app.cancelled = True
        CLUSTER.cancelled.append(app_id)

    def _delete_existing(self, app_id: str) -> None:
        app = CLUSTER.apps[app_id]
        app.cancelled = app.cancelled or not is_terminal(app.state())
        app.deleted = True
        CLUSTER.deleted.append(app_id)


class FakeAsyncClient(AsyncSchedulerClient):
    closed: ClassVar[int] = 0
    log_poll_interval = 0.001

    def __init__(self, **client_kwargs: Any) -> None:
        self.client_kwargs = client_kwargs

    async def describe(self, app_id: str) -> DescribeAppResponse | None:
        app = _tick(app_id)
        return None if app is None else app.describe()

    async def read_logs(
        self, app_id: str, role_name: str, replica_id: int, cursor: LogCursor
    ) -> tuple[list[TimestampedLine], LogCursor]:
        app = CLUSTER.apps.get(app_id)
        if app is None:
            return [], cursor
        lines = app.lines(role_name, replica_id)
        if cursor.since is not None:  # the backend answers "since" with whole seconds
            floor = cursor.since.replace(microsecond=0)
            lines = [ln for ln in lines if ln.timestamp is None or ln.timestamp >= floor]
        return advance(cursor, lines)

    async def cancel(self, app_id: str) -> None:
        if app_id in CLUSTER.apps:
            FakeScheduler()._cancel_existing(app_id)

    async def close(self) -> None:
        FakeAsyncClient.closed += 1


def create_scheduler(session_name: str = "", **kwargs: Any) -> FakeScheduler:
    return FakeScheduler(session_name, **kwargs)


def create_async_client(**kwargs: Any) -> FakeAsyncClient:
    return FakeAsyncClient(**kwargs)


class FakeHook(TorchXHookBase):
    conn_type: ClassVar[str] = "torchx_fake"
    default_backend: ClassVar[str] = "fake"

    def target_from(self, loaded: tuple[str, dict[str, Any], Any] | None) -> BackendTarget:
        extras = loaded[1] if loaded else {}
        settings, defaults = self.split_extras(extras)
        return BackendTarget(
            backend=self.backend,
            client_kwargs={"token": "s3cr3t-token"} if loaded else {},
            cfg_defaults=defaults,
            job_url_template=settings.get("job_url_template"),
            secret_keys=("token",),
            conn_id=self.conn_id,
        )


def fake_backend(name: str = "fake") -> Backend:
    """A row of the backend table whose parts all live in this module."""
    return Backend(
        name=name,
        title="In-memory fake",
        scheduler_factory=f"{__name__}:create_scheduler",
        async_client_factory=f"{__name__}:create_async_client",
        options=f"{__name__}:FakeOpts",
        hook=f"{__name__}:FakeHook",
        connection_type=FakeHook.conn_type,
        operator="torchx_provider.operators:TorchXOperator",
    )


FAKE_BACKEND = fake_backend()


def register() -> None:
    register_backend(FAKE_BACKEND)


def unregister() -> None:
    unregister_backend(FAKE_BACKEND.name)


#: gloo's words for a peer rank that is gone
PEER_LOST = "[./gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.9]:9124"


def make_app(name: str = "echo", replicas: int = 2, **meta: Any) -> AppDef:
    from torchx_provider.specs.api import Role

    return AppDef(
        name=name,
        roles=[
            Role("worker", image="busybox", entrypoint="echo", args=["hi"], num_replicas=replicas)
        ],
        metadata={f"fake.{k}": str(v) for k, v in meta.items()},
    )


def submit(**meta: Any) -> str:
    """Submit :func:`make_app` (its ``fake.*`` metadata from ``meta``) to the fake cluster."""
    return FakeScheduler().submit(make_app(**meta))


def trigger_args(app_id: str, **kw: Any) -> JobTriggerArgs:
    """The arguments of a trigger that follows ``app_id`` on the fake backend, polling at once."""
    from torchx_provider.triggers.job import JobTriggerArgs

    return JobTriggerArgs(scheduler="fake", app_id=app_id, poll_interval=0.001, **kw)


def plan_for(scheduler: FakeScheduler, try_number: int = 1, run_id: str = "r") -> SubmissionPlan:
    """What ``TorchXOperator.prepare`` gives for :func:`make_app` on ``scheduler``: the plan
    of try ``try_number`` of the task ``d.t`` in the run ``run_id``."""
    from torchx_provider.operators.submission import SubmissionPlan

    app = make_app(ticks=100)
    key = TaskInstanceKey("d", "t", run_id, try_number=try_number)
    dryrun = scheduler.submit_dryrun(app, ti_key=key)
    return SubmissionPlan(BackendTarget("fake"), scheduler, app, {}, dryrun, key)


def modules_loaded_by(code: str) -> set[str]:
    """The names of the modules a fresh interpreter holds once it has run ``code``."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def task_context(ti: object, **more: Any) -> Context:
    """An Airflow task context around ``ti``, a stand-in task instance with only what the
    code under test reads of one (Airflow's own has far more)."""
    return cast("Context", {"ti": ti, **more})
