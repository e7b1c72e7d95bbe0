"""Creating a large app on Docker: a bounded window, progress in the log, all or nothing
(an error, a stop, an interruption), apps refused when the engine cannot hold them, and a
creation cut short told apart from a whole app. The engine runs against a fake client."""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import docker.errors
import pytest

from torchx_provider.errors import (
    AppConfigurationError,
    InvalidAppError,
    RejectedConfigurationError,
    SubmissionError,
)
from torchx_provider.schedulers.docker import creation
from torchx_provider.schedulers.docker.engine import DockerEngine
from torchx_provider.schedulers.docker.inflight import InFlight
from torchx_provider.schedulers.docker.options import DockerOpts
from torchx_provider.schedulers.docker.scheduler import DockerScheduler
from torchx_provider.schedulers.docker.state import ContainerInfo
from torchx_provider.schedulers.docker.translation import (
    LABEL_CONTAINERS,
    app_to_containers,
    check_network_room,
    network_capacity,
)
from torchx_provider.schedulers.labels import LABEL_APP_ID, TaskInstanceKey
from torchx_provider.specs.api import AppDef, BindMount, Role, VolumeMount

IMAGE = "torchx-provider/busybox:latest"


def app(replicas: int, *more: int) -> AppDef:
    roles = [
        Role(f"r{i}", image=IMAGE, entrypoint="true", num_replicas=n)
        for i, n in enumerate((replicas, *more))
    ]
    return AppDef("big", roles)


# ------------------------------------------------------------------------------ a fake engine
class FakeContainer:
    def __init__(self, engine: FakeClient, cid: str) -> None:
        self.engine, self.id = engine, cid

    def start(self) -> None:
        self.engine.started.append(self.id)


class FakeClient:
    """What ``DockerEngine.run`` asks of a ``docker.DockerClient``; creations take ``delay``
    seconds each, and the one named in ``fail`` raises."""

    def __init__(
        self,
        delay: float = 0.01,
        fail: str | None = None,
        attached: int = 0,
        answer: str = "no space left on device",
    ) -> None:
        self.delay, self.fail, self.attached, self.answer = delay, fail, attached, answer
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0
        self.attempts: list[str] = []
        self.failed_at: int | None = None
        self.started: list[str] = []
        self.removed: list[str] = []
        #: container id -> the labels it was created with
        self.made: dict[str, dict[str, str]] = {}
        self.api = self
        self.images = self
        self.containers = self
        self.base_url = "unix:///fake.sock"

    # client.info(), client.images.get(), client.api.networks()/inspect_network()
    def info(self) -> dict[str, Any]:
        return {"NCPU": 2, "MemTotal": 8 << 30}

    def get(self, image: str) -> None:
        return None

    def networks(self, names: list[str]) -> list[dict[str, Any]]:
        return [{"Name": names[0], "Id": "net-1", "Created": "2024-05-01T10:00:00Z"}]

    def inspect_network(self, network_id: str) -> dict[str, Any]:
        containers: dict[str, Any] = {f"c{i}": {} for i in range(self.attached)}
        return {"Driver": "bridge", "IPAM": {"Config": []}, "Containers": containers}

    # client.containers.create(), client.api.remove_container()
    def create(self, **kwargs: Any) -> FakeContainer:
        with self.lock:
            self.attempts.append(kwargs["name"])
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if kwargs["name"] == self.fail:
                self.failed_at = len(self.attempts)
                raise docker.errors.APIError("400", explanation=self.answer)
            time.sleep(self.delay)
            with self.lock:
                self.made[f"id-{kwargs['name']}"] = dict(kwargs.get("labels") or {})
            return FakeContainer(self, f"id-{kwargs['name']}")
        finally:
            with self.lock:
                self.in_flight -= 1

    # client.api.containers(all=True, filters=...): the list call (client.containers is
    # this object too, so the call is this object's)
    def __call__(self, filters: dict[str, Any] | None = None, **_: Any) -> list[Any]:
        wanted = dict(kv.split("=", 1) for kv in (filters or {}).get("label", []) if "=" in kv)
        with self.lock:
            return [
                {"Id": cid, "Names": [f"/{cid[3:]}"], "State": "created", "Labels": labels}
                for cid, labels in self.made.items()
                if cid not in self.removed and all(labels.get(k) == v for k, v in wanted.items())
            ]

    def remove_container(self, container_id: str, force: bool = False) -> None:
        with self.lock:
            self.removed.append(container_id)


def submit(client: FakeClient, the_app: AppDef) -> tuple[DockerScheduler, Any]:
    scheduler = DockerScheduler("test", client=client)
    return scheduler, scheduler.submit_dryrun(the_app, {"network": "n"})


# ------------------------------------------------------------------------- bounded and logged
def test_containers_are_created_a_bounded_window_at_a_time(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("torchx_provider.schedulers.docker.engine.PROGRESS_INTERVAL", 0.05)
    client = FakeClient(delay=0.02)
    scheduler, info = submit(client, app(60, 20))
    with caplog.at_level(logging.INFO, "torchx_provider.schedulers.docker.engine"):
        assert scheduler.schedule(info) == info.request.app_id
    assert len(client.started) == 80 and client.removed == []
    assert 1 < client.most_in_flight <= creation.CREATE_WINDOW
    lines = [r.getMessage() for r in caplog.records]
    app_id = info.request.app_id
    assert lines[0] == f"app {app_id}: creating and starting 80 containers, 16 at a time"
    progress = [line for line in lines if "of 80 containers created and started (" in line]
    assert progress, lines  # the creation took longer than the (shortened) interval
    assert lines[-1].startswith(f"app {app_id}: all 80 containers created and started in ")


def test_a_small_pool_narrows_the_window_and_small_apps_log_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = FakeClient(delay=0.01)
    scheduler = DockerScheduler("test", client=client, max_pool_size=3)
    with caplog.at_level(logging.INFO, "torchx_provider.schedulers.docker.engine"):
        scheduler.schedule(scheduler.submit_dryrun(app(12), {"network": "n"}))
        assert client.most_in_flight == 3
        small = DockerScheduler("test", client=FakeClient())
        small_id = small.schedule(small.submit_dryrun(app(2), {"network": "n"}))
    messages = [r.getMessage() for r in caplog.records]
    assert any("creating and starting 12 containers, 3 at a time" in m for m in messages)
    assert not [m for m in messages if small_id in m]  # one window: nothing to follow


# ------------------------------------------------------------------------------ all or nothing
def test_the_first_error_stops_the_creation_and_removes_what_was_made() -> None:
    client = FakeClient(delay=0.01)
    scheduler, info = submit(client, app(200))
    client.fail = info.request.containers[20]["name"]
    with pytest.raises(SubmissionError, match="no space left on device"):
        scheduler.schedule(info)
    # Once the failure is seen no replica is begun: at most those of about a window more.
    assert client.failed_at is not None
    assert len(client.attempts) <= client.failed_at + 2 * creation.CREATE_WINDOW < 200
    assert sorted(client.removed) == sorted(client.started) and client.started


def test_a_bind_mount_without_its_source_is_refused_as_configured_naming_it() -> None:
    answer = 'invalid mount config for type "bind": bind source path does not exist: /no/data'
    client = FakeClient(answer=answer)
    role = Role(
        "trainer",
        image=IMAGE,
        entrypoint="true",
        num_replicas=3,
        mounts=[VolumeMount("cache", "/cache"), BindMount("/no/data", "/data")],
    )
    scheduler, info = submit(
        client, AppDef("m", [Role("ps", image=IMAGE, entrypoint="true"), role])
    )
    client.fail = info.request.containers[2]["name"]
    with pytest.raises(RejectedConfigurationError) as raised:
        scheduler.schedule(info)
    text = str(raised.value)
    assert "roles[1].mounts[1] (bind /no/data -> /data) of role 'trainer'" in text, text
    assert "does not exist on the Docker host" in text, text
    assert isinstance(raised.value, SubmissionError)
    assert sorted(client.removed) == sorted(client.started)


def test_other_refusals_stay_submission_errors() -> None:
    client = FakeClient(answer="Conflict. The container name is already in use")
    scheduler, info = submit(client, app(3))
    client.fail = info.request.containers[1]["name"]
    with pytest.raises(SubmissionError) as raised:
        scheduler.schedule(info)
    assert not isinstance(raised.value, AppConfigurationError)


def test_a_stop_from_another_thread_removes_what_was_made() -> None:
    client = FakeClient(delay=0.02)
    scheduler, info = submit(client, app(500))
    app_id = info.request.app_id
    assert scheduler.engine.stop_submission(app_id) is False  # nothing in progress yet

    def stop_soon() -> None:
        while len(client.started) < 20:
            time.sleep(0.005)
        scheduler.cancel(app_id)

    stopper = threading.Thread(target=stop_soon)
    stopper.start()
    with pytest.raises(SubmissionError, match=f"submission of app '{app_id}' was stopped"):
        scheduler.schedule(info)
    stopper.join()
    assert len(client.attempts) < 100
    assert sorted(client.removed) == sorted(client.started)
    assert scheduler.engine.stop_submission(app_id) is False  # over


class Interrupted(BaseException):
    """What a signal handler raises in the submitting thread (Airflow's task timeout)."""


@pytest.fixture
def alarm() -> Iterator[Any]:
    """``alarm(seconds, handler)``: run ``handler`` from SIGALRM in this thread."""
    previous = signal.getsignal(signal.SIGALRM)

    def arm(seconds: float, handler: Any) -> None:
        signal.signal(signal.SIGALRM, lambda *_: handler())
        signal.setitimer(signal.ITIMER_REAL, seconds)

    yield arm
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def test_an_exception_raised_by_a_signal_handler_removes_what_was_made(alarm: Any) -> None:
    client = FakeClient(delay=0.02)
    scheduler, info = submit(client, app(500))

    def timeout() -> None:
        raise Interrupted()

    alarm(0.3, timeout)
    with pytest.raises(Interrupted):
        scheduler.schedule(info)
    assert client.started and len(client.attempts) < 500
    assert sorted(client.removed) == sorted(client.started)


def test_an_interruption_anywhere_in_the_creation_loop_rolls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Wherever in the creation loop a signal handler's exception lands, the roll back runs:
    at any of its bytecodes, its jumps back to the loop's start included (CPython 3.14 leaves
    those out of the ``try`` around a loop, and handles pending signals there). The calls in
    flight end at once, so that the loop spins and timers at random moments land all over
    it; 300 interruptions (before the fix, 3.14 skipped the roll back for about 1 in 30).
    The timers run on this process's CPU clock: a busy machine delays them as it delays
    the loop."""
    client = FakeClient()
    scheduler, info = submit(client, app(50))
    rolled_back: list[BaseException] = []
    submitted: list[int] = []

    def counted(self: InFlight[Any], fn: Any) -> None:
        self.pending.add(next(self._numbers))
        submitted.append(1)

    def one_ends(self: InFlight[Any], timeout: float | None) -> None:
        self.pending.pop()

    monkeypatch.setattr(InFlight, "submit", counted)
    monkeypatch.setattr(InFlight, "next", one_ends)
    monkeypatch.setattr(InFlight, "drain", lambda self, quiet: [])
    monkeypatch.setattr(
        DockerEngine,
        "_roll_back",
        lambda self, app_id, running, created, why: rolled_back.append(why),
    )
    job = SimpleNamespace(app_id=info.request.app_id, containers=info.request.containers * 4000)

    def timeout() -> None:
        raise Interrupted()

    in_the_loop = 0
    previous = signal.signal(signal.SIGVTALRM, lambda *_: timeout())
    try:
        for attempt in range(300):
            rolled_back.clear()
            submitted.clear()
            with pytest.raises(Interrupted):
                signal.setitimer(signal.ITIMER_VIRTUAL, random.uniform(0.001, 0.005))
                scheduler.engine._create_all(job, "net-1", threading.Event())
            if submitted:  # (one before the first creation began has nothing to roll back)
                in_the_loop += 1
                assert len(rolled_back) == 1 and isinstance(rolled_back[0], Interrupted), attempt
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)
    assert in_the_loop > 150


def test_a_cancel_from_a_signal_handler_of_the_submitting_thread_stops_it(alarm: Any) -> None:
    """Airflow calls the operator's ``on_kill`` from its SIGTERM handler, in the thread that
    is submitting: the cancel returns at once and the submission removes what it made."""
    client = FakeClient(delay=0.02)
    scheduler, info = submit(client, app(500))
    alarm(0.3, lambda: scheduler.cancel(info.request.app_id))
    with pytest.raises(SubmissionError, match="was stopped after"):
        scheduler.schedule(info)
    assert client.started and len(client.attempts) < 500
    assert sorted(client.removed) == sorted(client.started)


# ----------------------------------------------------------------------- what an engine holds
def test_more_replicas_than_max_replicas_are_refused_in_the_dry_run() -> None:
    scheduler = DockerScheduler("test", client=FakeClient())
    with pytest.raises(InvalidAppError) as e:
        scheduler.submit_dryrun(app(10, 10_000), {})
    assert e.value.field == "roles[1].num_replicas"
    assert "has 10,010 replicas (role 'r1': 10,000), more than the 1,023" in str(e.value)
    assert "max_replicas" in str(e.value) and "lower num_replicas" in str(e.value)
    with pytest.raises(InvalidAppError, match="more than the 4 local_docker runs"):
        scheduler.submit_dryrun(app(5), {"max_replicas": 4})
    assert len(scheduler.submit_dryrun(app(1500), {"max_replicas": 2000}).request.containers) == (
        1500
    )
    assert len(scheduler.submit_dryrun(app(1023), {}).request.containers) == 1023


def test_max_replicas_must_be_positive() -> None:
    from torchx_provider.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="max_replicas must be at least 1"):
        DockerScheduler("test").submit_dryrun(app(1), {"max_replicas": 0})


def test_every_container_says_how_many_the_app_has() -> None:
    job = app_to_containers(app(3, 2), DockerOpts(), "big-1", {})
    assert {spec["labels"][LABEL_CONTAINERS] for spec in job.containers} == {"5"}


@pytest.mark.parametrize(
    ("network", "capacity"),
    [
        ({"Driver": "bridge", "IPAM": {"Config": [{"Subnet": "172.18.0.0/16"}]}}, 1023),
        (
            {
                "Driver": "bridge",
                "IPAM": {"Config": [{"Subnet": "10.0.0.0/24", "Gateway": "10.0.0.1"}]},
            },
            253,
        ),
        (
            {
                "Driver": "bridge",
                "IPAM": {"Config": [{"Subnet": "10.0.0.0/16", "IPRange": "10.0.1.0/26"}]},
            },
            61,
        ),
        ({"Driver": "macvlan", "IPAM": {"Config": [{"Subnet": "fd00::/64"}]}}, None),
        ({"Driver": "ipvlan", "IPAM": {"Config": [{"Subnet": "10.1.0.0/22"}]}}, 1021),
    ],
)
def test_network_capacity(network: dict[str, Any], capacity: int | None) -> None:
    assert network_capacity(network) == capacity


def test_an_app_that_does_not_fit_its_network_is_refused_before_anything_is_made() -> None:
    job = app_to_containers(app(300), DockerOpts(network="small"), "big-1", {})
    small = {"Driver": "bridge", "IPAM": {"Config": [{"Subnet": "10.0.0.0/24"}]}}
    with pytest.raises(InvalidAppError) as e:
        check_network_room(job, small)
    assert e.value.field == "roles[0].num_replicas"
    assert "has 300 replicas but Docker network 'small' holds at most 253" in str(e.value)
    busy = {"Driver": "bridge", "Containers": {str(i): {} for i in range(800)}}
    with pytest.raises(SubmissionError, match="800 are attached to it now"):
        check_network_room(job, busy)
    check_network_room(job, {"Driver": "bridge", "Containers": {"a": {}}})

    client = FakeClient(attached=900)
    scheduler, info = submit(client, app(200))
    with pytest.raises(SubmissionError, match="1,023 containers and 900 are attached"):
        scheduler.schedule(info)
    assert client.attempts == []


# ------------------------------------------------------------------------------ cut short
def container(app_id: str, replica: int, status: str = "running", declared: str = "3") -> Any:
    labels = {LABEL_APP_ID: app_id, "torchx.pytorch.org/replica-id": str(replica)}
    if declared:
        labels[LABEL_CONTAINERS] = declared
    return ContainerInfo(
        id=f"{app_id}-{replica}", name=f"{app_id}-{replica}", status=status, labels=labels
    )


def test_a_creation_cut_short_is_told_from_a_whole_app() -> None:
    whole = [container("a", i) for i in range(3)]
    assert creation.cut_short(whole) == ""
    assert creation.cut_short([*whole[:2]]) == "2 of its 3 containers exist"
    assert creation.cut_short([*whole[:2], container("a", 2, "created")]) == "1 never started"
    assert creation.cut_short([container("a", 0, "created")]) == (
        "1 of its 3 containers exist, 1 never started"
    )
    # Finished replicas count as they are; containers of older versions declare nothing.
    assert creation.cut_short([container("a", i, "exited") for i in range(3)]) == ""
    assert creation.cut_short([container("a", 0, declared="")]) == ""


def test_find_apps_marks_an_app_whose_creation_was_cut_short() -> None:
    key = TaskInstanceKey("dag", "task", "run", try_number=1)
    job = app_to_containers(app(3), DockerOpts(), "big-1", {}, key)
    rows = [
        {"Id": f"id{i}", "Names": [f"/{s['name']}"], "State": "running", "Labels": s["labels"]}
        for i, s in enumerate(job.containers[:2])
    ]

    class Listing:
        @property
        def api(self) -> Listing:  # the low-level API: the same calls here
            return self

        def containers(self, all: bool, filters: dict[str, Any]) -> list[dict[str, Any]]:
            return rows

    client = Listing()
    engine = DockerEngine(client=client)
    found = engine.find_apps(TaskInstanceKey("dag", "task", "run", try_number=2), str)
    assert [(a.app_id, a.incomplete) for a in found] == [("big-1", "2 of its 3 containers exist")]
    rows.append({**rows[0], "Id": "id2", "Labels": job.containers[2]["labels"]})
    assert engine.find_apps(TaskInstanceKey("dag", "task", "run"), str)[0].incomplete == ""


def test_a_finished_app_with_containers_missing_is_not_cut_short() -> None:
    """Try 1's app ran, one container was removed from outside, the other failed: the app
    ended FAILED, which is what a retry is told, not a creation cut short to remove."""
    key = TaskInstanceKey("dag", "task", "run", try_number=1)
    job = app_to_containers(app(2), DockerOpts(), "big-1", {}, key)
    spec = job.containers[1]
    rows = [
        {
            "Id": "id1",
            "Names": [f"/{spec['name']}"],
            "State": "exited",
            "Status": "Exited (1) 3 seconds ago",
            "Labels": spec["labels"],
        }
    ]

    class Listing:
        @property
        def api(self) -> Listing:
            return self

        def containers(self, all: bool, filters: dict[str, Any]) -> list[dict[str, Any]]:
            return rows

    engine = DockerEngine(client=Listing())
    found = engine.find_apps(TaskInstanceKey("dag", "task", "run", try_number=2), str)
    assert [(a.app_id, a.state.name, a.incomplete) for a in found] == [("big-1", "FAILED", "")]


def test_the_submitting_thread_never_holds_a_creations_lock_while_taking_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An exception a signal handler raises in the submitting thread (Airflow's task
    timeout) while it holds futures' locks leaves them held: the workers that finish those
    futures then block forever, and so does the roll back that waits for them (seen:
    ``concurrent.futures.wait`` interrupted while it took its futures' locks one after the
    other). The submitting thread never holds one while it takes another: the creations'
    outcomes come through a queue."""
    from concurrent.futures import Future, ThreadPoolExecutor

    submitting = threading.get_ident()
    held = [0]
    nested: list[int] = []

    def taking() -> None:
        if threading.get_ident() == submitting:
            if held[0]:
                nested.append(held[0])
            held[0] += 1

    def giving() -> None:
        if threading.get_ident() == submitting:
            held[0] -= 1

    class Watched(threading.Condition):
        """A future's lock that counts what the submitting thread holds of such locks
        (``with``, and ``acquire``/``release`` as ``concurrent.futures.wait`` calls them)."""

        def __init__(self) -> None:
            super().__init__()
            acquire, release = self.acquire, self.release

            def acquire_counted(*args: Any) -> bool:
                got = acquire(*args)
                if got:
                    taking()
                return got

            def release_counted() -> None:
                giving()
                release()

            self.acquire, self.release = acquire_counted, release_counted  # type: ignore[method-assign]

        def __enter__(self) -> bool:
            got = super().__enter__()
            taking()
            return got

        def __exit__(self, *exc: Any) -> None:
            giving()
            super().__exit__(*exc)

    class Recording(ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
            future = super().submit(fn, *args, **kwargs)
            future._condition = Watched()  # type: ignore[attr-defined]
            return future

    pool = Recording(max_workers=4)
    client = FakeClient(delay=0.01)
    scheduler, info = submit(client, app(60))
    client.fail = info.request.containers[30]["name"]
    monkeypatch.setattr(scheduler.engine, "_executor", lambda: pool)
    try:
        with pytest.raises(SubmissionError):
            scheduler.schedule(info)
    finally:
        pool.shutdown(wait=True)
    assert nested == [], f"{len(nested)} times a lock taken while another was held"
    assert sorted(client.removed) == sorted(client.started)
