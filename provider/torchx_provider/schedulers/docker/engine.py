"""The I/O of ``local_docker``: every docker SDK call, and nothing else.

:class:`DockerEngine` is blocking (the docker SDK is). The sync
:class:`~torchx_provider.schedulers.docker.scheduler.DockerScheduler` calls it directly; the
async client runs the same methods in worker threads. Decisions -- what to create, what a
container's state means, which log lines are new, when an app may be removed -- are the pure
functions of :mod:`.translation`, :mod:`.state` and :mod:`torchx_provider.schedulers.logs`.

Calls on independent objects (inspecting the replicas of an app, starting them, stopping them)
run concurrently on the worker pool of its :class:`~.client.EngineConnection`: submitting N
replicas costs about as much as ``docker run`` N times in parallel. An app's containers are
created a bounded window at a time, with progress in the log (:mod:`.creation`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING, Any

from torchx_provider.errors import (
    BackendUnavailableError,
    RejectedConfigurationError,
    SubmissionError,
    TorchXProviderError,
    UnknownAppError,
)
from torchx_provider.schedulers.api import DescribeAppResponse, ListAppResponse, Notice
from torchx_provider.schedulers.docker.client import (
    DockerClientConfig,
    EngineConnection,
    make_client,
)
from torchx_provider.schedulers.docker.creation import (
    PROGRESS_INTERVAL,
    creation_window,
    cut_short,
    progress_line,
)
from torchx_provider.schedulers.docker.inflight import InFlight
from torchx_provider.schedulers.docker.logbody import RawLogStream, close_quietly, lines_of
from torchx_provider.schedulers.docker.netlock import network_lock
from torchx_provider.schedulers.docker.pull import PullBound
from torchx_provider.schedulers.docker.state import (
    CANCELLED_SUFFIX,
    REMOVING_SUFFIX,
    STOPPED_SUFFIX,
    ContainerInfo,
    describe_app,
    exec_failure,
    list_apps,
    may_be_stopped_by_engine,
    may_have_failed_exec,
    oldest_network,
    ready_to_remove,
    replica_state,
    survivors_to_stop,
)
from torchx_provider.schedulers.docker.translation import (
    DockerJob,
    check_engine_resources,
    check_network_room,
    log_params,
    missing_mount,
    spec_replica,
    with_image,
)
from torchx_provider.schedulers.labels import (
    LABEL_APP_ID,
    LABEL_KUBE_MANAGED_BY,
    LABEL_REPLICA_ID,
    LABEL_ROLE_NAME,
    MANAGED_BY,
    MANAGED_SELECTOR,
    TaskInstanceKey,
    label_value,
)
from torchx_provider.schedulers.logs import (
    LogCursor,
    TimestampedLine,
    advance,
    within,
)
from torchx_provider.schedulers.workspace import build_workspace_image, ensure_image
from torchx_provider.specs.api import is_terminal

if TYPE_CHECKING:
    from torchx_provider.schedulers.docker.apitypes import DockerClient

log = logging.getLogger(__name__)

#: Seconds ``cancel`` gives a replica between SIGTERM and SIGKILL (Docker's default).
STOP_TIMEOUT = 10
#: The most containers of one app stopped or removed at once. Docker 20.10 (Debian 12's
#: docker.io) loses count of a network's endpoints when many of its containers exit together:
#: 60 replicas with an init, stopped 16 at a time, left a network that can never be removed
#: ("has active endpoints") in 3 runs of 8; 8 at a time in none of 7 (nor 1 or 4 at a time).
#: A cancel of 60 replicas that end on SIGTERM takes ~5 s either way; of replicas that
#: ignore it, STOP_TIMEOUT seconds per window.
TEARDOWN_WINDOW = 8

#: Seconds a probe of the engine with a new connection may take (:meth:`DockerEngine.describe`).
PROBE_TIMEOUT = 5.0

#: Seconds within which a creation notices it was asked to stop.
STOP_POLL = 0.2

#: Lines read from the end of the log of a container whose init may have failed to start its
#: entrypoint (:meth:`DockerEngine.exec_errors`): the init's words are its last line.
EXEC_TAIL_LINES = 5

#: How many apps an engine remembers the end of after it removed them (:meth:`removed_app`).
REMOVED_KEPT = 256

#: One replica's creation: its container id (if created) and its error (if any).
Outcome = tuple[str | None, BaseException | None]


class DockerEngine(EngineConnection):
    """One Docker engine, as ``local_docker`` uses it. Thread-safe; create it cheaply (the
    client connects on first use)."""

    def __init__(
        self, config: DockerClientConfig | None = None, client: DockerClient | None = None
    ) -> None:
        super().__init__(config, client)
        self._limits: tuple[int, int] | None = None
        # app id -> replicas whose log has been read to its end (see ``remove``).
        self._drained: dict[str, set[tuple[str, int]]] = {}
        # app id -> set to stop its submission in progress (see ``stop_submission``).
        self._submitting: dict[str, threading.Event] = {}
        # containers seen ended by SIGKILL/SIGTERM, the engine probed since (``describe``).
        self._probed: set[str] = set()
        # (container id, finish time) -> the init's words on why it could not start the
        # entrypoint, "" for none (``exec_errors``); forgotten when the app is removed.
        self._exec_errors: dict[tuple[str, datetime | None], str] = {}
        # app id -> how it ended, for the apps this engine removed once they had ended and
        # their logs were read (``removed_app``), the latest REMOVED_KEPT.
        self._removed: dict[str, DescribeAppResponse] = {}
        # what a follow tells the task log once (``take_notices``)
        self._notices: list[Notice] = []

    # -- submitting ------------------------------------------------------------------------------
    def engine_limits(self) -> tuple[int, int]:
        """(CPUs, memory bytes) of the engine (asked once)."""
        if self._limits is None:
            with self.call("reading the Docker engine's CPUs and memory"):
                info = self.client.info()
            self._limits = (int(info.get("NCPU") or 0), int(info.get("MemTotal") or 0))
        return self._limits

    def ensure_network(self, name: str) -> str:
        """The id of the user-defined bridge network ``name``, created when missing.

        Safe when several submits race: on one host they create it one at a time
        (:mod:`.netlock`); from several hosts, each settles on the oldest
        (:func:`.state.oldest_network`).
        """
        found = self._existing_network(name)
        if found is not None:
            return str(found["Id"])
        with network_lock(str(self.client.api.base_url), name):
            return self._create_network(name)

    def _existing_network(self, name: str) -> Mapping[str, Any] | None:
        """The network every submitter settles on, if one is visible."""
        with self.call(f"looking up Docker network {name!r}"):
            return oldest_network(self.client.api.networks(names=[name]), name)

    def _create_network(self, name: str) -> str:
        api = self.client.api
        found = self._existing_network(name)
        if found is not None:  # another submitter created it while this one waited
            return str(found["Id"])
        created: str | None = None
        try:
            with self.call(f"creating Docker network {name!r}"):
                created = api.create_network(
                    name,
                    driver="bridge",
                    check_duplicate=True,
                    labels={LABEL_KUBE_MANAGED_BY: MANAGED_BY},
                )["Id"]
        except SubmissionError as e:
            if e.status != 409:  # 409: someone else created it first
                raise
        found = self._existing_network(name)
        if found is None:
            raise SubmissionError(f"Docker network {name!r} vanished right after its creation")
        if created is not None and found["Id"] != created:
            try:
                with self.call(f"removing duplicate Docker network {name!r}"):
                    api.remove_network(created)
            except SubmissionError as e:  # harmless: nothing is attached to it
                log.debug("could not remove duplicate network %s: %s", created, e)
        return str(found["Id"])

    def run(self, job: DockerJob, wait_timeout: float | None = None) -> str:
        """Create and start every container of ``job``; return the app id.

        Workspaces are built first. Then, concurrently: the engine's size is read, the images
        are found (or pulled), the network is ensured; an app the engine or its network
        cannot hold is refused. The containers are then created a window at a time
        (:meth:`_create_all`). If one cannot be created or started, or the submission is
        stopped (:meth:`stop_submission`) or interrupted, none is begun after it, the app's
        containers are removed and the error is raised.

        The image pulls (a workspace's base image too) are cut short when the submission is
        stopped, and ``wait_timeout`` seconds after this call (``None``: never), the time the
        app may wait before it runs: :class:`~torchx_provider.errors.SubmissionWaitTimeout`
        names the image and how far its pull got (:mod:`.pull`); nothing of the app is made
        by then.
        """
        deadline = None if wait_timeout is None else time.monotonic() + wait_timeout
        with self._submission(job.app_id) as stop:
            self._run(job, PullBound(stop, deadline))
        return job.app_id

    @contextlib.contextmanager
    def _submission(self, app_id: str) -> Iterator[threading.Event]:
        """The event that stops the submission of ``app_id`` while it is in progress."""
        stop = threading.Event()
        with self._lock:
            self._submitting[app_id] = stop
        try:
            yield stop
        finally:
            with self._lock:
                self._submitting.pop(app_id, None)

    def stop_submission(self, app_id: str) -> bool:
        """Stop a submission of ``app_id`` in progress on this engine: it begins no further
        container, removes those it created and raises. Returns at once, ``False`` when no
        such submission is in progress. Safe from a signal handler of the submitting thread
        (an Airflow task's ``on_kill``): the removal happens when the handler returns."""
        with self._lock:
            stop = self._submitting.get(app_id)
        if stop is None:
            return False
        stop.set()
        return True

    def _run(self, job: DockerJob, bound: PullBound) -> None:
        client = self.client
        for ws in job.workspaces:
            image = build_workspace_image(
                ws.workspace,
                ws.base_image,
                image_repo=ws.image_repo,
                client=client,
                config=self.config,
                quiet=job.quiet,
                role=ws.role,
                labels={LABEL_APP_ID: job.app_id},
                bound=bound,
            )
            job = with_image(job, ws.role, image)

        images: dict[str, str] = {}
        for spec in job.containers:
            images.setdefault(spec["image"], spec_replica(spec)[0])
        checks: list[Callable[[], Any]] = [
            self.engine_limits,
            partial(self.ensure_network, job.network),
            *(
                partial(
                    ensure_image,
                    client,
                    img,
                    quiet=job.quiet,
                    role=role,
                    auth_config=self.config.auth_config(img),
                    bound=bound,
                )
                for img, role in images.items()
            ),
        ]
        results = [f.result() for f in self._map(lambda check: check(), checks)]
        ncpu, mem = results[0]
        network_id = results[1]
        check_engine_resources(job, ncpu, mem)
        with self.call(f"inspecting Docker network {job.network!r}"):
            check_network_room(job, client.api.inspect_network(network_id))
        self._create_all(job, network_id, bound.stop)

    def _create_all(self, job: DockerJob, network_id: str, stop: threading.Event) -> None:
        """Create and start the containers, at most :func:`.creation.creation_window` at a
        time, logging progress every :data:`.creation.PROGRESS_INTERVAL` seconds; on the
        first error, a stop or an interruption (a timeout or signal raised in this thread),
        wait for those in flight, remove every one created and raise. The creations in
        flight are waited for through :class:`.inflight.InFlight`, which takes no lock an
        interruption could leave held."""
        total = len(job.containers)
        window = creation_window(self.config.max_pool_size, total)
        running: InFlight[Outcome] = InFlight(self._executor(), lambda e: (None, e))
        created: list[str] = []
        started = time.monotonic()
        log.log(
            logging.INFO if total > window else logging.DEBUG,
            "app %s: creating and starting %d containers, %d at a time",
            job.app_id,
            total,
            window,
        )
        # The loop is a call of its own: CPython 3.14 leaves a loop's jumps back to its start
        # out of the ``try`` around it, and an exception a signal handler raises at one of
        # them (they are where pending signals are handled) would skip the roll back; one
        # raised anywhere in a call comes out of the call, which the ``try`` covers.
        try:
            error, reported = self._create_window(job, network_id, window, stop, running, created)
        except BaseException as interrupted:
            self._roll_back(job.app_id, running, created, interrupted)
            raise
        if error is not None:
            self._roll_back(job.app_id, running, created, error)
            raise error
        log.log(
            logging.INFO if reported else logging.DEBUG,
            "app %s: all %d containers created and started in %.1f s",
            job.app_id,
            total,
            time.monotonic() - started,
        )

    def _create_window(
        self,
        job: DockerJob,
        network_id: str,
        window: int,
        stop: threading.Event,
        running: InFlight[Outcome],
        created: list[str],
    ) -> tuple[BaseException | None, bool]:
        """:meth:`_create_all`'s loop: keep ``window`` creations in flight until every
        container is made or the first error (or stop); ``created`` gets the ids made.
        Returns that error (``None``: all made) and whether progress was logged."""
        total = len(job.containers)
        specs = iter(job.containers)
        error: BaseException | None = None
        started = reported = time.monotonic()
        while True:
            if error is None and stop.is_set():
                error = SubmissionError(
                    f"the submission of app {job.app_id!r} was stopped after "
                    f"{len(created):,} of its {total:,} containers"
                )
            while error is None and len(running) < window:
                spec = next(specs, None)
                if spec is None:
                    break
                running.submit(partial(self._create_and_start, spec, network_id))
            if not running:
                return error, reported > started
            outcome = running.next(timeout=STOP_POLL)
            if outcome is not None:
                error = _collect([outcome], created, error)
            now = time.monotonic()
            if error is None and now - reported >= PROGRESS_INTERVAL:
                log.info(progress_line(job.app_id, len(created), total, now - started))
                reported = now

    def _roll_back(
        self,
        app_id: str,
        running: InFlight[Outcome],
        created: list[str],
        why: BaseException,
    ) -> None:
        """Wait for the creations in flight, then remove every container of the app made:
        those this submission saw created, and any other the engine lists with the app's
        labels (one whose outcome an interruption kept from being seen)."""
        _collect(running.drain(quiet=self.config.timeout + 5.0), created, None)
        with contextlib.suppress(SubmissionError, UnknownAppError):
            seen = set(created)
            created.extend(c.id for c in self.summaries(app_id) if c.id not in seen)
        if created:
            reason = str(why) or type(why).__name__
            log.warning(
                "app %s: removing the %d containers created so far (%s)",
                app_id,
                len(created),
                reason,
            )
            self._remove_ids(created)

    def _create_and_start(self, spec: dict[str, Any], network_id: str) -> Outcome:
        role, replica = spec_replica(spec)
        what = f"replica {role}/{replica} ({spec['name']})"
        kwargs = {**spec, "network": network_id}
        try:
            with self.call(f"creating {what}"):
                container = self.client.containers.create(**kwargs)
        except SubmissionError as e:  # reported once the others are cleaned up
            return None, _refused_as_configured(spec, what, e)
        except Exception as e:  # likewise
            return None, e
        try:
            with self.call(f"starting {what}"):
                container.start()
        except Exception as e:  # likewise
            return container.id, e
        return container.id, None

    def _remove_ids(self, ids: Sequence[str]) -> None:
        def remove(container_id: str) -> None:
            try:
                with self.call(f"removing container {container_id[:12]}"):
                    self.client.api.remove_container(container_id, force=True)
            except (SubmissionError, UnknownAppError) as e:
                log.warning("could not remove container %s: %s", container_id[:12], e)

        for f in self._map(remove, list(ids), TEARDOWN_WINDOW):
            f.result()

    # -- reading ---------------------------------------------------------------------------------
    def summaries(
        self, app_id: str | None = None, selector: Sequence[str] = ()
    ) -> list[ContainerInfo]:
        """The provider's containers (one list call), of one app or of all, matching the
        ``key=value`` labels of ``selector``."""
        labels = [MANAGED_SELECTOR, *selector]
        if app_id is not None:
            labels.append(f"{LABEL_APP_ID}={label_value(app_id)}")
        with self.call("listing containers"):
            rows = self.client.api.containers(all=True, filters={"label": labels})
        infos = [ContainerInfo.from_summary(r) for r in rows]
        return [c for c in infos if app_id is None or c.app_id == label_value(app_id)]

    def inspect(self, ids: Iterable[str]) -> list[ContainerInfo]:
        """Inspect containers concurrently; ones removed meanwhile are left out."""

        def one(container_id: str) -> ContainerInfo | None:
            try:
                # With an app id, the choke point turns a 404 into UnknownAppError.
                with self.call(f"inspecting container {container_id[:12]}", app_id=""):
                    return ContainerInfo.from_inspect(
                        self.client.api.inspect_container(container_id)
                    )
            except UnknownAppError:
                return None

        found = [f.result() for f in self._map(one, list(ids))]
        return [c for c in found if c is not None]

    def containers(self, app_id: str) -> list[ContainerInfo]:
        """Every container of ``app_id``, inspected (exact exit codes and restart counts)."""
        return self.inspect(c.id for c in self.summaries(app_id))

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """The app, its replicas judged with the engine's outages seen so far
        (:func:`~.state.describe_app`); a replica newly seen ended by SIGKILL/SIGTERM first
        has the engine probed (:meth:`probe_on_new_signal_exits`)."""
        return self.follow_describe(app_id, stop_on_failure=False)[0]

    def follow_describe(
        self, app_id: str, *, stop_on_failure: bool = True
    ) -> tuple[DescribeAppResponse | None, float | None]:
        """:meth:`describe` for a follow, which enforces the app's ``stop_on_failure``: once
        a replica has failed for good, the app's other replicas are stopped first
        (:func:`~.state.survivors_to_stop`) and the app described as they ended. Also in
        how many seconds to describe it again for that (``None``: no need)."""
        containers = self.exec_errors(self.containers(app_id))
        self.probe_on_new_signal_exits(containers)
        again: float | None = None
        if stop_on_failure:
            decided = survivors_to_stop(containers, datetime.now(timezone.utc))
            again = decided.again_in
            if decided.survivors:
                self.stop_survivors(app_id, decided.failed, decided.survivors)
                containers = self.exec_errors(self.containers(app_id))
        return describe_app(app_id, containers, self.outages), again

    def stop_survivors(self, app_id: str, failed: str, survivors: Sequence[ContainerInfo]) -> None:
        """Stop ``survivors`` because replica ``failed`` failed for good (SIGTERM, SIGKILL
        after :data:`STOP_TIMEOUT` seconds), marking them first (by name) so that they
        report why they ended; said once in the task log (:meth:`take_notices`)."""
        names = ", ".join(f"{c.role_name}/{c.replica_id}" for c in survivors)
        text = (
            f"app {app_id}: {failed} failed with no restarts left; stopping its other "
            f"replicas {names} (SIGTERM, SIGKILL after {STOP_TIMEOUT} s; the run option "
            "stop_on_failure=False lets them run on)"
        )
        log.info("%s", text)
        with self._lock:
            self._notices.append(Notice(f"stop survivors of {app_id}", text))
        self._stop_marked(app_id, survivors, STOPPED_SUFFIX)

    def take_notices(self) -> list[Notice]:
        """What a follow of this engine's apps tells the task log once, since last asked."""
        with self._lock:
            notices, self._notices = self._notices, []
        return notices

    def exec_errors(self, containers: Sequence[ContainerInfo]) -> list[ContainerInfo]:
        """``containers``, each one that ended as a container whose init could not start
        the entrypoint (:func:`~.state.may_have_failed_exec`) with the init's words from the
        end of its log (:func:`~.state.exec_failure`); read once per container and run."""

        def read(c: ContainerInfo) -> str:
            try:
                with self.call(f"reading the end of the log of {_replica(c)}", app_id=""):
                    raw = self.client.api.logs(c.id, stdout=True, stderr=True, tail=EXEC_TAIL_LINES)
            except UnknownAppError:
                return ""  # removed meanwhile
            return exec_failure(bytes(raw).decode("utf-8", "replace").splitlines())

        todo = [c for c in containers if may_have_failed_exec(c)]
        with self._answers:
            todo = [c for c in todo if (c.id, c.finished) not in self._exec_errors]
        for c, f in zip(todo, self._map(read, todo), strict=True):
            found = f.result()
            with self._answers:
                self._exec_errors[(c.id, c.finished)] = found
        with self._answers:
            known = dict(self._exec_errors)
        return [
            dataclasses.replace(c, exec_error=known.get((c.id, c.finished), ""))
            if may_have_failed_exec(c)
            else c
            for c in containers
        ]

    def probe_on_new_signal_exits(self, containers: Iterable[ContainerInfo]) -> None:
        """Probe the engine once for the replicas among ``containers`` newly seen ended by
        SIGKILL/SIGTERM (:func:`~.state.may_be_stopped_by_engine`).

        A ``dockerd`` that is stopped closes its API to new connections, then stops every
        container, and exits once they are gone; connections already open may still be
        answered meanwhile (the one that just read the replicas may be one). So the engine
        refusing a new connection right after such an end is an outage in which the engine
        stopped them (:meth:`probe`); a new connection it takes shows it still up. Not
        probed while an outage is open already, nor with a caller's client (this connection
        does not know how it reaches the engine).
        """
        fresh = [c.id for c in containers if may_be_stopped_by_engine(c)]
        with self._answers:
            fresh = [i for i in fresh if i not in self._probed]
            self._probed.update(fresh)
            down = bool(self._outages) and self._outages[-1].ended is None
        if fresh and not down and self._own_client:
            self.probe()

    def probe(self) -> bool:
        """Whether the engine takes a new connection (a ping on one, :data:`PROBE_TIMEOUT`
        seconds at most), recorded in :attr:`outages` like any call."""
        config = dataclasses.replace(self.config, timeout=PROBE_TIMEOUT, max_pool_size=1)
        try:
            with self.call("probing the Docker engine with a new connection"):
                client = make_client(config, version=self.client.api.api_version)
                try:
                    return bool(client.ping())
                finally:
                    client.close()
        except BackendUnavailableError:
            return False
        except TorchXProviderError as e:  # refused: it answered
            log.debug("probing the Docker engine: %s", e)
            return True

    def list_apps(self, app_handle: Callable[[str], str]) -> list[ListAppResponse]:
        return _listed(self.summaries(), app_handle)

    def find_apps(
        self, ti_key: TaskInstanceKey, app_handle: Callable[[str], str]
    ) -> list[ListAppResponse]:
        """The apps submitted by ``ti_key``'s task instance (any try), newest first."""
        found = [
            c
            for c in self.summaries(selector=ti_key.selector().split(","))
            if ti_key.same_instance(c.task_instance)
        ]
        return list(reversed(_listed(found, app_handle)))

    def replica(self, app_id: str, role: str, replica_id: int) -> ContainerInfo:
        """The container of one replica; :class:`UnknownAppError` names what exists."""
        labels = [
            MANAGED_SELECTOR,
            f"{LABEL_APP_ID}={label_value(app_id)}",
            f"{LABEL_ROLE_NAME}={label_value(role)}",
            f"{LABEL_REPLICA_ID}={replica_id}",
        ]
        with self.call("listing containers"):
            rows = self.client.api.containers(all=True, filters={"label": labels})
        found = [c for c in self.inspect(r["Id"] for r in rows) if c.role_name == role]
        if not found:
            others = sorted({f"{c.role_name}/{c.replica_id}" for c in self.summaries(app_id)})
            if not others:
                raise UnknownAppError(app_id)
            raise UnknownAppError(
                app_id,
                f"app {app_id!r} has no replica {role}/{replica_id}; its replicas are "
                f"{', '.join(others)}",
            )
        return found[0]

    # -- logs --------------------------------------------------------------------------------
    def iter_logs(
        self,
        app_id: str,
        role: str,
        replica_id: int,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        follow: bool = False,
        streams: str | None = None,
    ) -> Iterator[str]:
        """The lines of one replica (each ending with ``\\n``), following it with ``follow``.

        ``since`` and ``until`` are inclusive, to the microsecond, and must be timezone-aware.
        The arguments are checked, the replica looked up and the log opened now (an unknown
        app raises here); the lines come as the iterator is consumed.
        """
        params = log_params(streams, since, until)
        container = self.replica(app_id, role, replica_id)
        finished_before = is_terminal(replica_state(container))
        client = self.stream_client if follow else self.client
        with self.call(f"reading the log of {_replica(container)}", app_id=app_id):
            stream = RawLogStream.open(client.api, container.id, follow=follow, **params)
        return self._lines(container, stream, streams, since, until, follow, finished_before)

    def _lines(
        self,
        container: ContainerInfo,
        stream: RawLogStream,
        streams: str | None,
        since: datetime | None,
        until: datetime | None,
        follow: bool,
        finished_before: bool,
    ) -> Iterator[str]:
        app_id = container.app_id
        cursor = LogCursor()
        try:
            with self.call(f"reading the log of {_replica(container)}", app_id=app_id):
                for line in within(lines_of(stream), since, until):
                    cursor = cursor.after(line)
                    yield line.text
        finally:
            close_quietly(stream)
        if follow:
            # A follower is closed without the last line when that line has no newline
            # (Docker 20.10): read what was written after the last line emitted.
            rest = self._read(container, streams, cursor.since or since, until)
            new, cursor = advance(cursor, within(rest, since, until))
            yield from (line.text for line in new)
        # Read to its end without an upper bound: the log counts as read (see ``remove``).
        if until is not None or not (finished_before or follow):
            return
        if not finished_before:
            # Followed to the end: drained only if the replica finished (not restarting).
            current = self.replica(app_id, container.role_name, container.replica_id)
            if not is_terminal(replica_state(current)):
                return
        self.mark_drained(app_id, container.role_name, container.replica_id)

    def read_logs(
        self, app_id: str, role: str, replica_id: int, cursor: LogCursor
    ) -> tuple[list[TimestampedLine], LogCursor]:
        """What one replica wrote after ``cursor`` (both streams), and the advanced cursor."""
        container = self.replica(app_id, role, replica_id)
        finished_before = is_terminal(replica_state(container))
        new, cursor = advance(cursor, self._read(container, None, cursor.since, None))
        if finished_before:
            self.mark_drained(app_id, role, replica_id)
        return new, cursor

    def _read(
        self,
        container: ContainerInfo,
        streams: str | None,
        since: datetime | None,
        until: datetime | None,
    ) -> list[TimestampedLine]:
        """The replica's log between the bounds as it is now (not following)."""
        params = log_params(streams, since, until)
        with self.call(f"reading the log of {_replica(container)}", app_id=container.app_id):
            stream = RawLogStream.open(self.client.api, container.id, follow=False, **params)
            try:
                return list(lines_of(stream))
            finally:
                close_quietly(stream)

    # -- stopping and removing ---------------------------------------------------------------
    def cancel(self, app_id: str) -> None:
        """Stop the app's unfinished containers, marking them cancelled first (by name)."""
        live = [c for c in self.summaries(app_id) if not is_terminal(replica_state(c))]
        self._stop_marked(app_id, live, CANCELLED_SUFFIX)

    def _stop_marked(self, app_id: str, containers: Sequence[ContainerInfo], suffix: str) -> None:
        """Stop ``containers`` concurrently, each renamed with ``suffix`` first (unless it
        carries it already); one removed meanwhile is skipped. Every container is marked
        before the first is stopped: Docker 20.10 loses a network's count of endpoints when
        a running container on it is renamed while others on it stop (its rename rewrites
        that count as it read it), after which the network can never be removed ("has
        active endpoints"); a cancel of 60 replicas did so in 12 runs of 14 with marks and
        stops interleaved, in 1 of 10 marked first and then stopped :data:`TEARDOWN_WINDOW`
        at a time. A mark that fails for another reason is raised once the marked are
        stopped."""
        cancelling = suffix == CANCELLED_SUFFIX
        what = "cancelled" if cancelling else "stopped"

        def mark(c: ContainerInfo) -> ContainerInfo | None:
            if c.cancelled if cancelling else c.stopped_after_failure:
                return c
            try:
                with self.call(f"marking container {c.name} {what}", app_id=app_id):
                    self.client.api.rename(c.id, c.name + suffix)
            except UnknownAppError:
                return None  # removed meanwhile
            return c

        def stop(c: ContainerInfo) -> None:
            try:
                with self.call(f"stopping container {c.name}", app_id=app_id):
                    self.client.api.stop(c.id, timeout=STOP_TIMEOUT)
            except UnknownAppError:
                pass  # removed meanwhile

        marked: list[ContainerInfo] = []
        refused: BaseException | None = None
        for f in self._map(mark, list(containers)):
            try:
                found = f.result()
            except SubmissionError as e:
                refused = refused or e
                continue
            if found is not None:
                marked.append(found)
        for stopped in self._map(stop, marked, TEARDOWN_WINDOW):
            stopped.result()
        if refused is not None:
            raise refused

    def delete(self, app_id: str) -> None:
        """Remove every container of the app (killing running ones) and its workspace images."""
        self._remove_app(app_id, self.summaries(app_id))

    def mark_drained(self, app_id: str, role: str, replica_id: int) -> None:
        """Note that a replica's log has been read to its end; remove the app's containers
        when it is finished, asked for removal and every replica's log has been read."""
        with self._lock:
            drained = self._drained.setdefault(app_id, set())
            drained.add((role, replica_id))
            drained = set(drained)
        containers = self.summaries(app_id)
        if ready_to_remove(containers, drained):
            log.debug("app %s finished and its logs were read: removing it", app_id)
            ended = self.describe(app_id)
            if ended is not None:
                with self._lock:
                    self._removed[app_id] = ended
                    for old in list(self._removed)[:-REMOVED_KEPT]:
                        del self._removed[old]
            self._remove_app(app_id, containers)

    def removed_app(self, app_id: str) -> DescribeAppResponse | None:
        """How ``app_id`` ended, if this engine removed it once it had ended and its logs
        were read (:meth:`mark_drained`); ``None`` if it did not."""
        with self._lock:
            return self._removed.get(app_id)

    def _remove_app(self, app_id: str, containers: Sequence[ContainerInfo]) -> None:
        """Remove the app's containers, then its workspace images. One container is marked
        first and removed last: while it is left, a describe takes the replicas already
        gone for this removal, not for ones removed from outside (:mod:`.state`)."""
        last = self._mark_removing(containers)
        self._remove_ids([c.id for c in containers if c.id != last])
        if last is not None:
            self._remove_ids([last])
        with self._lock:
            self._drained.pop(app_id, None)
        gone = {c.id for c in containers}
        with self._answers:
            for key in [k for k in self._exec_errors if k[0] in gone]:
                del self._exec_errors[key]
        # Workspace images built for this app (labelled with its id) are of no further use
        # here; a pushed copy stays in its registry. An image still in use is kept.
        api = self.client.api
        with self.call("listing workspace images"):
            images = api.images(filters={"label": f"{LABEL_APP_ID}={label_value(app_id)}"})
        for image in images:
            try:
                with self.call(f"removing workspace image {image['Id']}"):
                    api.remove_image(image["Id"], force=True)
            except SubmissionError as e:
                log.debug("workspace image %s kept: %s", image["Id"], e)

    def _mark_removing(self, containers: Sequence[ContainerInfo]) -> str | None:
        """Rename one of ``containers`` with :data:`.state.REMOVING_SUFFIX`; its id, or
        ``None`` when none is left to mark (already marked counts)."""
        for c in containers:
            if c.removing:
                return c.id
            try:
                with self.call(f"marking container {c.name} as being removed", app_id=""):
                    self.client.api.rename(c.id, c.name + REMOVING_SUFFIX)
            except UnknownAppError:
                continue  # gone meanwhile: mark another
            except SubmissionError as e:  # removed last all the same
                log.debug("could not mark container %s as being removed: %s", c.name, e)
            return c.id
        return None


def _refused_as_configured(
    spec: Mapping[str, Any], what: str, e: SubmissionError
) -> SubmissionError:
    """The engine's refusal ``e`` to create ``spec``'s container: a
    :class:`RejectedConfigurationError` naming the mount when a bind mount's source does not
    exist (:func:`~.translation.missing_mount`: it never will by trying again), else ``e``."""
    problem = missing_mount(spec, str(e.body or e))
    if not problem:
        return e
    refused = RejectedConfigurationError(
        f"cannot create {what}: {problem}", status=e.status, body=e.body
    )
    refused.__cause__ = e
    return refused


def _replica(c: ContainerInfo) -> str:
    return f"replica {c.role_name}/{c.replica_id} of app {c.app_id!r}"


def _collect(
    done: Iterable[Outcome], created: list[str], error: BaseException | None
) -> BaseException | None:
    """Add the ids of finished creations to ``created``; the first error (``error`` first)."""
    for container_id, failed in done:
        if container_id:
            created.append(container_id)
        if error is None:
            error = failed
    return error


def _listed(
    containers: Sequence[ContainerInfo], app_handle: Callable[[str], str]
) -> list[ListAppResponse]:
    """:func:`.state.list_apps`, each unfinished app saying whether its creation was cut
    short. A finished app is told by how it ended: one that ran and ended with containers
    missing (removed from outside, its failure) is not mistaken for one whose creation
    was cut short, nor removed as one by the next try."""
    by_app: dict[str, list[ContainerInfo]] = {}
    for c in containers:
        by_app.setdefault(c.app_id, []).append(c)
    return [
        app
        if is_terminal(app.state)
        else dataclasses.replace(app, incomplete=cut_short(by_app.get(app.app_id, [])))
        for app in list_apps(containers, app_handle)
    ]
