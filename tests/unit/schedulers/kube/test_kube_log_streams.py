"""Following a replica's log on Kubernetes: container instances and their streams.

The stream reader runs against a stand-in API (pods from a cache, logs as chunked streams
that, like kwok's, stay open after the container ended) so that every way an instance can
end is exercised without a cluster; the local cluster tests run the same code for real.
It runs on simulated time (:mod:`virtual_time`): each test is a timeline of what the
cluster does when, and takes no real time however long the follower's waits.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from torchx_provider.errors import SubmissionError, UnknownAppError
from torchx_provider.schedulers.kube.logfollow import (
    APP_ENDED_IDLE,
    DRAIN_IDLE,
    EOF_RECHECK,
    ReplicaLogFollower,
)
from torchx_provider.schedulers.kube.podlogs import replica_instances
from torchx_provider.schedulers.labels import LABEL_REPLICA_ID, LABEL_ROLE_NAME
from torchx_provider.schedulers.logs import LogCursor, LogSource, format_timestamp
from torchx_provider.schedulers.streams import StreamSlots
from virtual_time import VirtualClock, settle

BASE = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)


def pod(
    uid: str,
    *,
    name: str = "job-trainer-0",
    phase: str = "Running",
    restarts: int = 0,
    state: str = "running",
    created: str = "2024-05-01T10:00:00Z",
    replica: int = 0,
    init: bool = False,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase,
        "containerStatuses": [{"name": "trainer", "restartCount": restarts, "state": {state: {}}}],
    }
    if init:
        status["initContainerStatuses"] = [
            {"name": "setup", "restartCount": 0, "state": {"terminated": {"exitCode": 0}}}
        ]
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "creationTimestamp": created,
            "labels": {LABEL_ROLE_NAME: "trainer", LABEL_REPLICA_ID: str(replica)},
        },
        "spec": {"containers": [{"name": "trainer"}]},
        "status": status,
    }


# -- which instances, in which order --------------------------------------------------------------


def test_instances_are_each_pod_and_restart_oldest_first() -> None:
    pods = [
        pod("b", created="2024-05-01T10:00:05Z"),
        pod("a", phase="Failed", state="terminated"),
        pod("other", replica=1),
    ]
    found = replica_instances(pods, "trainer", 0)
    assert [i.key for i in found] == ["a/trainer/0", "b/trainer/0"]
    assert [(i.started, i.ended) for i in found] == [(True, True), (True, False)]


def test_a_restarted_container_has_its_previous_run_first() -> None:
    found = replica_instances([pod("a", restarts=2)], "trainer", 0)
    assert [(i.key, i.previous, i.ended) for i in found] == [
        ("a/trainer/1", True, True),
        ("a/trainer/2", False, False),
    ]
    assert ("previous", "true") in found[0].query(None, follow=True)
    assert ("follow", "true") not in found[0].query(None, follow=True)


def test_a_pending_pod_has_no_log_yet_and_init_containers_can_be_named() -> None:
    waiting = pod("a", phase="Pending", state="waiting", init=True)
    assert [i.started for i in replica_instances([waiting], "trainer", 0)] == [False]
    init = replica_instances([waiting], "trainer", 0, "setup")
    assert [(i.container, i.started, i.ended) for i in init] == [("setup", True, True)]


def test_the_query_is_absolute_in_whole_seconds() -> None:
    (instance,) = replica_instances([pod("a")], "trainer", 0)
    query = dict(instance.query(BASE + timedelta(seconds=3, microseconds=900_000), follow=True))
    assert query == {
        "container": "trainer",
        "timestamps": "true",
        "sinceTime": "2024-05-01T10:00:03Z",
        "follow": "true",
    }


# -- the stream reader --------------------------------------------------------------------------


def cri(second: float, text: str) -> bytes:
    return f"{format_timestamp(BASE + timedelta(seconds=second))} {text}\n".encode()


class Content:
    """A response body: the chunks given, then (like kwok) open until closed."""

    def __init__(self, chunks: list[bytes], *, ends: bool, breaks: bool = False) -> None:
        self.items: deque[bytes | BaseException] = deque(chunks)
        if breaks:
            import aiohttp

            self.items.append(aiohttp.ClientPayloadError("connection reset"))
        elif ends:
            self.items.append(b"")

    async def read(self, n: int) -> bytes:
        if not self.items:
            await asyncio.Event().wait()  # open, and nothing more comes
        return self.take_next()

    def read_nowait(self, n: int) -> bytes:
        """As aiohttp's: the bytes already received (``b""``: none, or the end), or the
        stream's error."""
        if not self.items or self.items[0] == b"":
            return b""
        return self.take_next()

    def take_next(self) -> bytes:
        item = self.items.popleft()
        if isinstance(item, BaseException):
            raise item
        return item


class Transport:
    """The connection's transport: records pauses of its socket's reading."""

    def __init__(self) -> None:
        self.paused = False
        self.pauses = 0
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        assert not self.paused
        self.paused, self.pauses = True, self.pauses + 1

    def resume_reading(self) -> None:
        assert self.paused
        self.paused = False


class Protocol:
    """The HTTP client's protocol (never paused by the reader: that holds its parser)."""

    def __init__(self) -> None:
        self.transport = Transport()
        self._reading_paused = False

    def pause_reading(self) -> None:
        raise AssertionError("the reader pauses the transport, not the protocol")

    resume_reading = pause_reading


class Connection:
    def __init__(self) -> None:
        self.protocol = Protocol()


class Response:
    def __init__(self, content: Content, connection: Connection | None) -> None:
        self.content = content
        self.released = False
        #: ``None`` once aiohttp has given the connection back to its pool
        self.connection = connection

    def release(self) -> None:
        self.released = True


class FakeWatch:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self._pods = pods
        self.healthy = True
        self.listeners: set[asyncio.Event] = set()

    def pods(self) -> list[dict[str, Any]]:
        return list(self._pods)

    def set_pods(self, pods: list[dict[str, Any]]) -> None:
        self._pods = pods
        for e in self.listeners:
            e.set()

    def listen(self) -> asyncio.Event:
        e = asyncio.Event()
        self.listeners.add(e)
        return e

    def unlisten(self, e: asyncio.Event) -> None:
        self.listeners.discard(e)


class LogServingKube:
    """``open_log``: per instance uid, a list of bodies served in turn; records queries."""

    def __init__(self, watch: FakeWatch) -> None:
        self.watch = watch
        self.logs: dict[str, list[bytes]] = {}
        self.opened: list[tuple[str, dict[str, str]]] = []
        self.break_first: set[str] = set()
        self.eof_always: set[str] = set()  # a server that ends every stream (an empty log)
        self.silent_follow: set[str] = set()  # a server that answers a follow only with data
        self.responses: list[Response] = []
        #: the connection each answer is read from (a new one per answer)
        self.connect: Callable[[], Connection | None] = Connection

    async def open_log(self, namespace: str, name: str, query: list[tuple[str, str]]) -> Any:
        live = [p for p in self.watch.pods() if p["metadata"]["name"] == name]
        if not live:
            raise UnknownAppError("pod gone")
        uid = live[0]["metadata"]["uid"]
        q = dict(query)
        self.opened.append((uid, q))
        lines = self.logs.get(uid, [])
        if "sinceTime" in q:
            since = q["sinceTime"]
            lines = [ln for ln in lines if ln.decode()[:19] + "Z" >= since]
        if uid in self.silent_follow and q.get("follow") == "true":
            await asyncio.Event().wait()  # never answers (cancelled by the reader)
        breaks = uid in self.break_first
        self.break_first.discard(uid)
        if breaks:
            return Response(Content(lines[:2], ends=False, breaks=True), self.connect())
        ended = q.get("follow") != "true" or uid in self.eof_always
        self.responses.append(Response(Content(lines, ends=ended), self.connect()))
        return self.responses[-1]


OpenLog = Callable[[str, str, list[tuple[str, str]]], Awaitable[Any]]


class FakeClient:
    """A :class:`FollowedApp` whose pods are always cached (so never asked for)."""

    def __init__(self, watch: FakeWatch) -> None:
        self.pod_cache = watch
        self.kube = LogServingKube(watch)
        #: what answers ``open_log`` (a test may wrap the fake server's)
        self.serve: OpenLog = self.kube.open_log
        #: what the follower told the task log: ``(key, text)``
        self.notices: list[tuple[str, str]] = []

    async def watch(self, app_id: str) -> FakeWatch:
        return self.pod_cache

    async def replica_pods(
        self, app_id: str, role_name: str, replica_id: int
    ) -> list[dict[str, Any]]:
        raise AssertionError("the pod cache is always healthy here")

    async def open_log(self, namespace: str, pod: str, query: list[tuple[str, str]]) -> Any:
        return await self.serve(namespace, pod, query)

    def notice(self, text: str, key: str) -> None:
        self.notices.append((key, text))


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


def follower_of(
    client: FakeClient, ended: asyncio.Event, clock: VirtualClock, replica: int = 0
) -> ReplicaLogFollower:
    """A follower of replica ``trainer/<replica>`` of app ``ns:job``, on ``clock``."""
    source = LogSource("trainer", replica)
    return ReplicaLogFollower(client, "ns:job", source, ended, clock=clock, sleep=clock.sleep)


async def collect(follower: ReplicaLogFollower, start: LogCursor) -> tuple[list[str], LogCursor]:
    out: list[str] = []
    cursor = start
    async for lines, moved in follower.follow(start):
        out += [ln.text.rstrip("\n") for ln in lines]
        cursor = moved
    return out, cursor


def serve_two_runs(client: FakeClient, previous: list[bytes], current: list[bytes]) -> None:
    """The kubelet's two kept runs of pod ``a``'s container: the ended one (``previous``)
    and the current one."""

    async def serve(namespace: str, name: str, query: list[tuple[str, str]]) -> Any:
        client.kube.logs["a"] = previous if ("previous", "true") in query else current
        return await client.kube.open_log(namespace, name, query)

    client.serve = serve


async def follow_noting(
    follower: ReplicaLogFollower, client: FakeClient, start: LogCursor
) -> tuple[list[str], LogCursor]:
    """What a follow read, with ``notice KEY`` where the follower told the task log, and
    its cursor."""
    lines: list[str] = []
    cursor, told = start, 0
    async for batch, moved in follower.follow(start):
        lines.extend(f"notice {key}" for key, _ in client.notices[told:])
        told = len(client.notices)
        lines.extend(ln.text.rstrip("\n") for ln in batch)
        cursor = moved
    lines.extend(f"notice {key}" for key, _ in client.notices[told:])
    return lines, cursor


def follow_from_the_start(
    client: FakeClient, clock: VirtualClock
) -> tuple[asyncio.Event, asyncio.Future[tuple[list[str], LogCursor]]]:
    """Start following replica trainer/0 from the start, until the app ends: the event that
    says it ended, and the task that collects what the follow reads."""
    ended = asyncio.Event()
    return ended, asyncio.ensure_future(collect(follower_of(client, ended, clock), LogCursor()))


async def follow_until_pod_a_succeeds(
    client: FakeClient, watch: FakeWatch, clock: VirtualClock, followed: bool = True
) -> tuple[list[str], LogCursor]:
    """Follow replica trainer/0 from the start; 0.1 s after its log was first followed (or
    first read, when not ``followed``), its pod ``a`` succeeds and the app ends. What the
    follow read, and its cursor."""
    ended, task = follow_from_the_start(client, clock)
    await clock.until(
        lambda: any(q.get("follow") == "true" or not followed for _, q in client.kube.opened),
        limit=60,
    )
    await clock.advance(0.1)
    watch.set_pods([pod("a", phase="Succeeded", state="terminated")])
    ended.set()
    return await clock.run(task, limit=60)


async def test_a_replaced_pod_is_read_to_its_end_then_its_replacement(clock: VirtualClock) -> None:
    """Volcano replaces a crashed pod by one with the same name; kwok's streams stay open:
    the crashed instance's traceback is read before its replacement's first line."""
    watch = FakeWatch([pod("a")])
    client = FakeClient(watch)
    client.kube.logs["a"] = [cri(0, "start a"), cri(1, "Traceback (most recent call last):")]
    client.kube.logs["b"] = [cri(2, "start b"), cri(3, "done")]
    ended = asyncio.Event()
    follower = follower_of(client, ended, clock)
    task = asyncio.ensure_future(collect(follower, LogCursor()))
    await clock.advance(1)
    watch.set_pods([pod("a", phase="Failed", state="terminated")])
    await clock.advance(2 * DRAIN_IDLE)
    watch.set_pods([pod("b", created="2024-05-01T10:00:02Z")])  # a is gone
    await clock.advance(1)
    watch.set_pods(
        [pod("b", created="2024-05-01T10:00:02Z", phase="Succeeded", state="terminated")]
    )
    ended.set()
    lines, cursor = await clock.run(task, limit=60)
    assert lines == ["start a", "Traceback (most recent call last):", "start b", "done"]
    assert cursor.done == ("a/trainer/0", "b/trainer/0")
    assert not follower.warn


async def test_a_broken_stream_is_reopened_from_its_cursor_without_repeats(
    clock: VirtualClock,
) -> None:
    watch = FakeWatch([pod("a")])
    client = FakeClient(watch)
    client.kube.logs["a"] = [cri(0, "l0"), cri(0.5, "l1"), cri(0.7, "l2"), cri(1.2, "l3")]
    client.kube.break_first.add("a")
    lines, _ = await follow_until_pod_a_succeeds(client, watch, clock)
    assert lines == ["l0", "l1", "l2", "l3"]
    reopened = client.kube.opened[1][1]
    assert reopened["sinceTime"] == "2024-05-01T10:00:00Z"


async def test_a_running_instance_s_backlog_is_read_then_it_is_followed_from_its_cursor(
    clock: VirtualClock,
) -> None:
    """The backlog comes from a read that does not follow (the API server sends it in large
    pieces); the follow then starts at the backlog's last second, and what it sends again of
    that second is dropped."""
    watch = FakeWatch([pod("a")])
    client = FakeClient(watch)
    client.kube.logs["a"] = [cri(0, "l0"), cri(1.2, "l1"), cri(1.5, "l2")]
    opened = client.kube.open_log

    async def open_log(namespace: str, name: str, query: list[tuple[str, str]]) -> Any:
        resp = await opened(namespace, name, query)
        if len(client.kube.opened) == 1:  # written after the backlog was answered
            client.kube.logs["a"].append(cri(1.7, "l3"))
        return resp

    client.serve = open_log
    lines, cursor = await follow_until_pod_a_succeeds(client, watch, clock)
    assert lines == ["l0", "l1", "l2", "l3"]
    assert cursor.is_done("a/trainer/0")
    backlog, follow = (q for _, q in client.kube.opened[:2])
    assert "follow" not in backlog and "sinceTime" not in backlog
    assert follow["follow"] == "true" and follow["sinceTime"] == "2024-05-01T10:00:01Z"


@pytest.mark.parametrize(
    ("backlog_end", "ends"),
    [
        # what a kubelet sends of a line still being written: no newline yet (a record
        # cut by its write, or a long line's records so far)
        (cri(1, "hello world")[:-6], True),
        (cri(1, "hello world")[:-6], False),  # the answer stalls there, and the pod ends
    ],
    ids=["unfinished-line", "stalled-mid-line"],
)
async def test_a_line_still_being_written_at_the_backlog_s_end_is_read_whole(
    backlog_end: bytes, ends: bool, clock: VirtualClock
) -> None:
    watch = FakeWatch([pod("a")])
    client = FakeClient(watch)
    client.kube.logs["a"] = [cri(0, "l0"), cri(1, "hello world"), cri(2, "l2")]
    opened = client.kube.open_log

    async def open_log(namespace: str, name: str, query: list[tuple[str, str]]) -> Any:
        if not client.kube.opened:  # the backlog, answered while the line was written
            client.kube.opened.append(("a", dict(query)))
            return Response(Content([cri(0, "l0"), backlog_end], ends=ends), Connection())
        return await opened(namespace, name, query)

    client.serve = open_log
    lines, cursor = await follow_until_pod_a_succeeds(client, watch, clock, followed=ends)
    assert lines == ["l0", "hello world", "l2"]
    assert cursor.is_done("a/trainer/0")


async def test_a_backlog_is_followed_on_in_the_same_turn_of_its_slot(clock: VirtualClock) -> None:
    """At the stream cap, an instance whose backlog was read does not queue again for its
    follow behind the others (a turn may last a slice: 20 s)."""
    slots = StreamSlots(limit=1, slice=3600.0)
    StreamSlots.use(slots)
    one = pod("b", name="job-trainer-1", replica=1)
    watch = FakeWatch([pod("a"), one])
    client = FakeClient(watch)
    client.kube.logs["a"] = [cri(0, "a0"), cri(1, "a1")]
    client.kube.logs["b"] = [cri(0, "b0"), cri(1, "b1")]
    ended = asyncio.Event()
    followers = [follower_of(client, ended, clock, r) for r in (0, 1)]
    first = asyncio.ensure_future(collect(followers[0], LogCursor()))
    await settle()
    second = asyncio.ensure_future(collect(followers[1], LogCursor()))
    await clock.advance(1)
    assert [(uid, q.get("follow")) for uid, q in client.kube.opened] == [
        ("a", None),
        ("a", "true"),  # in the same turn: b still waits for the slot
    ]
    watch.set_pods(
        [
            pod("a", phase="Succeeded", state="terminated"),
            pod("b", name="job-trainer-1", replica=1, phase="Succeeded", state="terminated"),
        ]
    )
    ended.set()
    (a, _), (b, _) = await clock.run(asyncio.gather(first, second), limit=60)
    assert (a, b) == (["a0", "a1"], ["b0", "b1"])
    assert slots.held == 0


async def test_an_instance_ended_before_it_is_read_is_read_once_without_following(
    clock: VirtualClock,
) -> None:
    watch = FakeWatch([pod("a", phase="Succeeded", state="terminated")])
    client = FakeClient(watch)
    client.kube.logs["a"] = [cri(0, "l0"), cri(1, "l1")]
    ended = asyncio.Event()
    ended.set()
    follower = follower_of(client, ended, clock)
    lines, cursor = await clock.run(collect(follower, LogCursor()), limit=1)
    assert lines == ["l0", "l1"] and cursor.is_done("a/trainer/0")
    assert [q.get("follow") for _, q in client.kube.opened] == [None]


async def test_a_resumed_follow_skips_finished_instances_and_resumes_the_current_one(
    clock: VirtualClock,
) -> None:
    watch = FakeWatch(
        [
            pod("a", phase="Failed", state="terminated"),
            pod(
                "b", name="x", created="2024-05-01T10:00:02Z", phase="Succeeded", state="terminated"
            ),
        ]
    )
    client = FakeClient(watch)
    client.kube.logs["a"] = [cri(0, "a0")]
    client.kube.logs["b"] = [cri(2, "b0"), cri(2, "b1"), cri(3, "b2")]
    ended = asyncio.Event()
    ended.set()
    cursor = LogCursor(BASE + timedelta(seconds=2), 1, "b/trainer/0", ("a/trainer/0",))
    follower = follower_of(client, ended, clock)
    lines, cursor = await clock.run(collect(follower, cursor), limit=1)
    assert lines == ["b1", "b2"]
    assert [uid for uid, _ in client.kube.opened] == ["b"]


async def test_an_instance_whose_pod_vanished_mid_read_is_reported_lost(
    clock: VirtualClock,
) -> None:
    watch = FakeWatch(
        [pod("b", created="2024-05-01T10:00:02Z", phase="Succeeded", state="terminated")]
    )
    client = FakeClient(watch)
    client.kube.logs["b"] = [cri(2, "b0")]
    ended = asyncio.Event()
    ended.set()
    cursor = LogCursor(BASE, 1, "a/trainer/0")  # a was being read when the follow stopped
    follower = follower_of(client, ended, clock)
    lines, cursor = await clock.run(collect(follower, cursor), limit=1)
    assert lines == ["b0"]
    assert follower.warn == ["a/trainer/0"]
    assert cursor.done == ("a/trainer/0", "b/trainer/0")
    # and the task log says so: which run, from when on its lines are missing
    ((key, text),) = client.notices
    assert key == "log end lost:ns:job:a/trainer/0"
    assert text.startswith("[trainer/0] the end of an earlier run's log cannot be read"), text
    assert "(pod uid a, container trainer, restart 0)" in text, text
    assert f"after {BASE.isoformat()}" in text, text


async def test_a_run_whose_pod_came_and_went_before_its_log_was_opened_is_reported_lost(
    clock: VirtualClock,
) -> None:
    """While an earlier run's log is being read (its stream broke twice), the next run's pod
    is seen started, then replaced before its turn came (a controller that names each new pod
    anew): the earlier run is read on from where it was, once, to its end; the task log then
    says which run's lines are missing -- never a run left out without a word -- and the
    follow goes on to the run after it."""
    a = pod("a", phase="Failed", state="terminated")
    b = pod("b", name="job-trainer-0-b", created="2024-05-01T10:00:02Z")
    c = pod("c", name="job-trainer-0-c", created="2024-05-01T10:00:04Z")
    watch = FakeWatch([a])
    client = FakeClient(watch)
    client.kube.logs["a"] = [cri(0, "a0"), cri(1, "a1"), cri(2, "a2")]
    client.kube.logs["c"] = [cri(4, "c0")]
    serve = client.kube.open_log
    opened_a = 0

    async def runs_come_and_go(namespace: str, name: str, query: list[tuple[str, str]]) -> Any:
        nonlocal opened_a
        if name == "job-trainer-0":
            opened_a += 1
            if opened_a <= 2:  # a's stream breaks after two lines, twice
                client.kube.break_first.add("a")
            resp = await serve(namespace, name, query)
            # b starts while a is read, and is replaced by c before its turn
            watch.set_pods([a, b] if opened_a == 1 else [a, c])
            return resp
        return await serve(namespace, name, query)

    client.serve = runs_come_and_go
    ended = asyncio.Event()
    # what was read, and where among it a notice was given
    task = asyncio.ensure_future(
        follow_noting(follower_of(client, ended, clock), client, LogCursor())
    )
    await clock.advance(5)
    watch.set_pods(
        [
            pod(
                "c",
                name=c["metadata"]["name"],
                created="2024-05-01T10:00:04Z",
                phase="Succeeded",
                state="terminated",
            )
        ]
    )
    ended.set()
    lines, cursor = await clock.run(task, limit=60)
    assert opened_a == 3
    assert lines == ["a0", "a1", "a2", "notice log lost:ns:job:b/trainer/0", "c0"]
    assert cursor.done == ("a/trainer/0", "b/trainer/0", "c/trainer/0")
    said = (
        "[trainer/0] an earlier run's log cannot be read: it was gone (its pod removed or "
        "replaced, or the run no longer kept by the kubelet) before its log could be opened "
        "(pod uid b, container trainer, restart 0); its lines are not in the task log"
    )
    assert client.notices == [("log lost:ns:job:b/trainer/0", said)]


async def test_a_pod_never_seen_started_is_not_reported_lost(clock: VirtualClock) -> None:
    """A pod replaced before it started wrote nothing: nothing is said of it."""
    watch = FakeWatch([pod("a", phase="Pending", state="waiting")])
    client = FakeClient(watch)
    client.kube.logs["b"] = [cri(2, "b0")]
    ended, task = follow_from_the_start(client, clock)
    await clock.advance(1)
    watch.set_pods(
        [pod("b", created="2024-05-01T10:00:02Z", phase="Succeeded", state="terminated")]
    )
    ended.set()
    lines, cursor = await clock.run(task, limit=60)
    assert lines == ["b0"] and cursor.done == ("b/trainer/0",)
    assert not client.notices


async def test_a_previous_run_the_kubelet_no_longer_keeps_is_skipped_not_waited_for(
    clock: VirtualClock,
) -> None:
    """A container restarted in place, then its pod ended: the kubelet removes the dead
    container of the earlier run (``lastState`` goes, ``restartCount`` stays), and the API
    answers its ``previous`` log with 400, as a real kubelet does. A follow that comes to it
    late reads the run after it, says the earlier one is missing, and does not wait."""
    watch = FakeWatch([pod("a", phase="Succeeded", state="terminated", restarts=1)])
    client = FakeClient(watch)
    client.kube.logs["a"] = [cri(5, "second run"), cri(6, "done")]

    async def serve(namespace: str, name: str, query: list[tuple[str, str]]) -> Any:
        if ("previous", "true") in query:
            raise SubmissionError(
                f'previous terminated container "trainer" in pod "{name}" not found', status=400
            )
        return await client.kube.open_log(namespace, name, query)

    client.serve = serve
    ended = asyncio.Event()
    ended.set()
    follower = follower_of(client, ended, clock)
    lines, cursor = await clock.run(collect(follower, LogCursor()), limit=1)
    assert lines == ["second run", "done"]
    assert cursor.done == ("a/trainer/0", "a/trainer/1")
    assert follower.warn == ["a/trainer/0"]
    said = (
        "[trainer/0] an earlier run's log cannot be read: the kubelet no longer keeps it "
        "(pod job-trainer-0, uid a, container trainer, restart 0); its lines are not in the "
        "task log"
    )
    assert client.notices == [("log gone:ns:job:a/trainer/0", said)]


@pytest.mark.parametrize(
    ("start", "restarts", "first", "last"),
    [
        # a follow that begins when the container has restarted three times
        (LogCursor(), 3, 0, 1),
        # a follow resumed from run 0, read to its end: runs 1 and 2 ended meanwhile
        (LogCursor(BASE, 1, "a/trainer/0", ("a/trainer/0",)), 4, 1, 2),
        # resumed from the middle of run 1, no longer kept either (its end is said lost)
        (LogCursor(BASE, 1, "a/trainer/1"), 4, 2, 2),
    ],
)
async def test_runs_restarted_past_before_the_follow_came_are_said_lost_before_the_next(
    clock: VirtualClock, start: LogCursor, restarts: int, first: int, last: int
) -> None:
    """The kubelet keeps the current run of a container and the one before: runs that
    ended before a follow came to them (begun or resumed late, or a container restarting
    twice between two looks) cannot be read. The task log says which, once, before the
    lines of the run after them; the follow reads on."""
    watch = FakeWatch([pod("a", phase="Succeeded", state="terminated", restarts=restarts)])
    client = FakeClient(watch)
    serve_two_runs(client, [cri(5, "kept ended run")], [cri(6, "last run"), cri(7, "done")])
    ended = asyncio.Event()
    ended.set()
    follower = follower_of(client, ended, clock)
    lines, cursor = await clock.run(follow_noting(follower, client, start), limit=5)
    key = f"log lost:ns:job:a/trainer/{first}-{last}"
    assert [ln for ln in lines if not ln.startswith("notice log end lost")] == [
        f"notice {key}",
        "kept ended run",
        "last run",
        "done",
    ]
    runs = f"run {first}" if first == last else f"runs {first} to {last}"
    assert dict(client.notices)[key] == (
        f"[trainer/0] {last - first + 1} earlier run(s) of its container cannot be read: they "
        "ended before this follow could read them, and the kubelet keeps only the last ended "
        f"run (pod job-trainer-0, uid a, container trainer, {runs} of its restarts); their "
        "lines are not in the task log"
    )
    assert [w for w in follower.warn if w != start.instance] == [f"a/trainer/{first}-{last}"]
    assert cursor.done[-2:] == (f"a/trainer/{restarts - 1}", f"a/trainer/{restarts}")


@pytest.mark.parametrize(
    "start",
    [
        # the follow read run 2 to its end: run 3, the previous one, is next
        LogCursor(BASE, 1, "a/trainer/2", ("a/trainer/2",)),
        # a cursor from a time that names no run asks for no earlier run
        LogCursor(BASE, 1),
    ],
)
async def test_no_run_is_said_lost_where_the_follow_knows_of_the_one_before(
    clock: VirtualClock, start: LogCursor
) -> None:
    watch = FakeWatch([pod("a", phase="Succeeded", state="terminated", restarts=4)])
    client = FakeClient(watch)
    serve_two_runs(client, [cri(5, "kept ended run")], [cri(6, "last run"), cri(7, "done")])
    ended = asyncio.Event()
    ended.set()
    lines, _ = await clock.run(
        follow_noting(follower_of(client, ended, clock), client, start), limit=5
    )
    assert lines == ["kept ended run", "last run", "done"]
    assert not client.notices


async def test_a_container_lingering_after_the_app_ended_is_read_then_left(
    clock: VirtualClock,
) -> None:
    watch = FakeWatch([pod("a")])  # running, and stays so
    client = FakeClient(watch)
    client.kube.logs["a"] = [cri(0, "last words")]
    ended, task = follow_from_the_start(client, clock)
    await clock.advance(1)
    ended.set()
    lines, cursor = await clock.run(task, limit=60)
    assert lines == ["last words"]
    assert cursor.is_done("a/trainer/0")
    # left once quiet for APP_ENDED_IDLE (its line came at 0), not waited on for its end
    assert APP_ENDED_IDLE <= clock() < APP_ENDED_IDLE + 1


async def test_a_pod_deleted_for_good_is_not_waited_for_once_the_app_ended(
    clock: VirtualClock,
) -> None:
    """A pod deleted while it is followed (kubectl delete, an eviction): its stream is left
    once the cache shows it gone, what it wrote kept. While the app runs a controller may
    replace it, so the follow waits; once the app has ended it stops at once -- it never
    waits for a pod that will not come back."""
    watch = FakeWatch([pod("a")])
    client = FakeClient(watch)
    client.kube.logs["a"] = [cri(0, "a0")]
    ended, task = follow_from_the_start(client, clock)
    await clock.advance(1)
    watch.set_pods([])  # deleted, and no replacement comes
    await clock.advance(600)
    assert not task.done()
    ended.set()
    lines, cursor = await clock.run(task, limit=0)  # at once
    assert lines == ["a0"] and cursor.is_done("a/trainer/0")


async def test_a_stream_the_server_ends_early_is_waited_on_not_hammered(
    clock: VirtualClock,
) -> None:
    """The server ends the stream of a container the cache shows running (its exit is not
    in the watch yet): no warning, no failure, no reopening in a loop -- it waits for the
    pod to change, then reads the end."""
    watch = FakeWatch([pod("a")])
    client = FakeClient(watch)
    client.kube.logs["a"] = [cri(0, "only line")]
    client.kube.eof_always.add("a")
    ended, task = follow_from_the_start(client, clock)
    await clock.advance(EOF_RECHECK - 1)
    # its backlog, then a follow the server ended: waiting for a change, not reopening
    assert [q.get("follow") for _, q in client.kube.opened] == [None, "true"]
    watch.set_pods([pod("a", phase="Succeeded", state="terminated")])
    await clock.advance(0.1)
    ended.set()
    lines, cursor = await clock.run(task, limit=60)
    assert lines == ["only line"] and cursor.is_done("a/trainer/0")
    assert len(client.kube.opened) == 3


async def test_a_follow_the_server_never_answers_does_not_hold_up_the_end(
    clock: VirtualClock,
) -> None:
    """A quiet log's follow may not be answered until its first line: once the cache shows
    the container ended, the reader gives the follow up and reads the log without it."""
    watch = FakeWatch([pod("a")])
    client = FakeClient(watch)
    client.kube.logs["a"] = [cri(0, "late line")]
    client.kube.silent_follow.add("a")
    lines, cursor = await follow_until_pod_a_succeeds(client, watch, clock)
    assert lines == ["late line"] and cursor.is_done("a/trainer/0")
    # its backlog, the follow given up, the log read to its end without following
    assert [q.get("follow") for _, q in client.kube.opened] == [None, "true", None]


# -- the cap on open streams -------------------------------------------------------------------


async def test_stream_slots_are_capped_and_handed_out_in_turn() -> None:
    slots = StreamSlots(limit=2, slice=0.0)
    order: list[str] = []
    release = asyncio.Event()

    async def reader(name: str) -> None:
        async with slots.hold() as slot:
            order.append(name)
            if name in ("a", "b"):
                await release.wait()
                assert slot.should_yield  # others wait, the slice is over

    tasks = [asyncio.ensure_future(reader(n)) for n in "abcd"]
    await settle()
    assert order == ["a", "b"] and slots.held == 2 and len(slots.waiting) == 2
    release.set()
    await asyncio.gather(*tasks)
    assert order == ["a", "b", "c", "d"] and slots.held == 0


async def test_a_cancelled_waiter_does_not_leak_a_slot() -> None:
    slots = StreamSlots(limit=1)

    async def hold(event: asyncio.Event) -> None:
        async with slots.hold():
            await event.wait()

    gate = asyncio.Event()
    first = asyncio.ensure_future(hold(gate))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(hold(asyncio.Event()))
    await asyncio.sleep(0)
    second.cancel()
    gate.set()
    await first
    await asyncio.gather(second, return_exceptions=True)
    assert slots.held == 0 and not slots.waiting


def test_the_stream_cap_comes_from_airflows_config(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchx_provider.errors import InvalidOptionError
    from torchx_provider.schedulers.kube.client_config import SPARE_CONNECTIONS
    from torchx_provider.schedulers.streams import MAX_STREAMS, stream_cap

    monkeypatch.delenv("AIRFLOW__TORCHX__MAX_LOG_STREAMS", raising=False)
    assert stream_cap() == MAX_STREAMS
    monkeypatch.setenv("AIRFLOW__TORCHX__MAX_LOG_STREAMS", "2048")
    assert stream_cap() == 2048

    async def made_in_a_loop() -> int:
        return StreamSlots.current().limit

    assert asyncio.run(made_in_a_loop()) == 2048
    assert SPARE_CONNECTIONS > 0  # the client's pool: the streams, plus room for the rest
    for bad in ("0", "-3", "many"):
        monkeypatch.setenv("AIRFLOW__TORCHX__MAX_LOG_STREAMS", bad)
        with pytest.raises(InvalidOptionError, match=r"\[torchx\] max_log_streams=.*at least 1"):
            stream_cap()


async def test_an_ended_apps_read_goes_first_and_running_streams_make_room() -> None:
    """Past the cap, the reads of an app that ended (its task's outcome waits on them) jump
    the queue, also when the app ends while they wait, and a running app's stream gives its
    slot up at once for them, its slice not over."""
    slots = StreamSlots(limit=1, slice=3600.0)
    order: list[str] = []
    running_gate = asyncio.Event()
    ended = asyncio.Event()

    async def running() -> None:
        async with slots.hold(asyncio.Event()) as slot:
            order.append("running")
            await asyncio.wait_for(slots.wanted.wait(), 1)
            assert slot.should_yield and not slot.urgent
            running_gate.set()

    async def reader(name: str, app_ended: asyncio.Event) -> None:
        async with slots.hold(app_ended) as slot:
            order.append(name)
            assert slot.urgent == app_ended.is_set()

    first = asyncio.ensure_future(running())
    await settle()
    queued = asyncio.ensure_future(reader("queued-running", asyncio.Event()))
    late = asyncio.ensure_future(reader("ended-later", ended))
    await settle()
    assert len(slots.waiting) == 2 and not slots.wanted.is_set()
    ended.set()  # its app ends while it waits behind another
    await asyncio.wait_for(asyncio.gather(first, queued, late), 2)
    assert order == ["running", "ended-later", "queued-running"]
    assert slots.held == 0 and not slots.waiting and not slots.urgent
    assert not slots.wanted.is_set()


async def test_a_trickling_stream_is_left_unread_briefly_so_lines_come_in_bulk(
    monkeypatch: pytest.MonkeyPatch, clock: VirtualClock
) -> None:
    """A server that sends every line on its own (as the API server does for a followed log)
    would cost a read per line: after a small read the socket is left unread for GATHER
    seconds (its reading paused, then resumed), and a large read is followed at once."""
    from torchx_provider.schedulers.kube import logbody

    monkeypatch.setattr(logbody, "GATHER_BELOW", 100)
    small = [cri(i, f"l{i}") for i in range(3)]  # one line per read: under GATHER_BELOW
    big = b"".join(cri(3 + i / 1000, f"b{i}") for i in range(20))  # a read of 20 lines
    watch = FakeWatch([pod("a")])
    client = FakeClient(watch)
    client.kube.logs["a"] = [*small, big]
    lines, _ = await follow_until_pod_a_succeeds(client, watch, clock)
    assert lines == [f"l{i}" for i in range(3)] + [f"b{i}" for i in range(20)]
    connection = client.kube.responses[0].connection
    assert connection is not None
    transport = connection.protocol.transport
    assert (transport.pauses, transport.paused) == (3, False)


@pytest.mark.parametrize(
    ("state", "pauses"),
    [("open", 3), ("closing", 0), ("client-paused", 0), ("released", None)],
)
async def test_a_closing_or_client_paused_connection_is_not_paused_again(
    monkeypatch: pytest.MonkeyPatch, state: str, pauses: int | None, clock: VirtualClock
) -> None:
    """A connection the server closed, or one the HTTP client paused for its own flow
    control, is only waited on: pausing it would fail, or resume what the client paused.
    A response whose connection was already released is waited on too. (An open one, for
    comparison, is paused after each small read.)"""
    from torchx_provider.schedulers.kube import logbody

    monkeypatch.setattr(logbody, "GATHER_BELOW", 100)
    watch = FakeWatch([pod("a")])
    client = FakeClient(watch)
    client.kube.logs["a"] = [cri(i, f"l{i}") for i in range(3)]  # each read under GATHER_BELOW
    made: list[Connection] = []

    def connect() -> Connection | None:
        if state == "released":
            return None
        made.append(Connection())
        made[-1].protocol.transport.closing = state == "closing"
        made[-1].protocol._reading_paused = state == "client-paused"
        return made[-1]

    client.kube.connect = connect
    lines, _ = await follow_until_pod_a_succeeds(client, watch, clock)
    assert lines == ["l0", "l1", "l2"]
    assert [c.protocol.transport.pauses for c in made[:1]] == ([] if pauses is None else [pauses])
    if pauses == 0:
        assert all(c.protocol.transport.pauses == 0 for c in made)
