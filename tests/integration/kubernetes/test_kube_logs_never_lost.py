"""Logs that are never lost, on the real API server, Volcano and kwok's log streams.

Each test follows a Volcano job with the trigger's follow loop (:class:`JobFollower` over the
real async client, through the restricted kubeconfig) and checks the task log it writes:
a replica crashing again and again under ``RestartTask`` (Volcano replaces the pod by one
with the same name), a TTL that removes the job a second after it ended, a replacement pod
whose node clock is behind, progress lines redrawn with ``\\r``, and the failure summary.
A helper thread plays the kubelet: when a new pod (a new uid) appears it gives that instance
its own log file, as a kubelet keeps one log per container instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import pytest

from kube_apps import kube_role, volcano_pod_names
from task_log import SequenceLog, TaskLog, rss_mb
from torchx_provider import specs
from torchx_provider.schedulers.kube.volcano import create_async_client, create_scheduler
from torchx_provider.schedulers.streams import StreamSlots
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.follow import JobFollower

pytestmark = pytest.mark.kubernetes


@pytest.fixture
def scheduler(tracked_scheduler: Any) -> Any:
    return tracked_scheduler(
        create_scheduler, local_only="pod outcomes and logs are driven by the local cluster's kwok"
    )


QUEUE = "default"
#: seconds after which a pod still deleting is taken for a deletion kwok lost (its stage
#: takes 200 ms)
LOST_DELETION = 15.0


def role(name: str, replicas: int, behaviour: dict[str, str], **kw: Any) -> specs.Role:
    return kube_role(name, behaviour, replicas=replicas, args=["-m", "train"], **kw)


def pod_names(info: Any) -> dict[str, str]:
    """``role/replica`` -> the pod Volcano names for it (``{job}-{task}-0``)."""
    return {
        f"{role}/{replica}": pod for (role, replica), pod in volcano_pod_names(info.request).items()
    }


class Kubelet(threading.Thread):
    """Gives each new instance (uid) of the watched pods its log, when it appears.

    ``lines(pod, n)`` gives the ``(datetime, text)`` lines of the ``n``-th instance of
    ``pod`` (0-based); ``seen`` lists the uids per pod, in order, and ``ran`` those whose
    container was seen started. Volcano may replace a pod before it ever ran (a restart it
    carries out twice): such an instance wrote nothing, and no follower can read its lines.

    It also ends, as a kubelet would, a deletion kwok lost: kwok's stage ends a deleted pod
    within 200 ms, but once, on a machine busy with other builds, it never did, and the
    Volcano Job waited for the pod to go before its restart, past the test's 180 s. A pod
    still deleting after :data:`LOST_DELETION` seconds is removed at once, so that what the
    test checks is the follow, not kwok under load.
    """

    def __init__(
        self, kube_cluster: Any, pods: list[str], lines: Callable[[str, int], list[Any]]
    ) -> None:
        super().__init__(daemon=True)
        self.kube_cluster = kube_cluster
        self.pods = pods
        self.lines = lines
        self.seen: dict[str, list[str]] = {p: [] for p in pods}
        self.ran: set[str] = set()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def start(self) -> None:
        """Each pod's first instance gets its lines before any pod exists, then the thread
        starts. (kwok serves a pod's log once it has read the pod's new Logs object; made
        when the first pod was seen, on a loaded machine that came after its container had
        started and its log had been followed, empty -- which no kubelet does. A later
        instance's lines are a change of that object, made while its pod waits to start.)"""
        for name in self.pods:
            self.kube_cluster.set_pod_logs(name, self.lines(name, 0), file_tag="first")
        super().start()

    def run(self) -> None:
        from kubernetes import client

        api = client.CoreV1Api(self.kube_cluster.api_client())
        try:
            while not self.stop.is_set():
                for name in self.pods:
                    try:
                        pod = api.read_namespaced_pod(name, self.kube_cluster.namespace)
                    except client.ApiException as e:
                        if e.status == 404:
                            continue
                        raise
                    uid = pod.metadata.uid
                    if uid not in self.seen[name]:
                        n = len(self.seen[name])
                        if n:  # the first one's are given before (see start)
                            lines = self.lines(name, n)
                            self.kube_cluster.set_pod_logs(name, lines, file_tag=uid)
                        self.seen[name].append(uid)
                    if any(
                        c.state is not None and (c.state.running or c.state.terminated)
                        for c in pod.status.container_statuses or []
                    ):
                        self.ran.add(uid)
                    deleting = pod.metadata.deletion_timestamp
                    if (
                        deleting is not None
                        and (dt.datetime.now(dt.timezone.utc) - deleting).total_seconds()
                        > LOST_DELETION
                    ):
                        with contextlib.suppress(client.ApiException):
                            api.delete_namespaced_pod(
                                name, self.kube_cluster.namespace, grace_period_seconds=0
                            )
                self.stop.wait(0.05)
        except BaseException as e:  # reported by the test
            self.error = e


async def follow(kube_cluster: Any, app_id: str, **kw: Any) -> tuple[Any, TaskLog]:
    client = create_async_client(
        kubeconfig=kube_cluster.restricted_kubeconfig, namespace=kube_cluster.namespace
    )
    log = TaskLog()
    try:
        event = await asyncio.wait_for(
            JobFollower(client, app_id, log=log, **kw).run(), timeout=180
        )
    finally:
        await client.close()
    return event, log


async def schedule_and_follow(
    kube_cluster: Any, scheduler: Any, info: Any, kubelet: Kubelet
) -> tuple[str, Any, TaskLog]:
    """Submit the dry-run ``info`` and follow the app while ``kubelet`` gives its pods their
    lines; the app id, the follow's final event and the task log."""
    kubelet.start()
    try:
        app_id = scheduler.schedule(info)
        scheduler.created.append(app_id)
        event, log = await follow(kube_cluster, app_id, poll_interval=10.0)
        return app_id, event, log
    finally:
        kubelet.stop.set()
        kubelet.join()


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


async def test_a_replica_crashing_three_times_has_every_line_of_every_incarnation(
    kube_cluster: Any, scheduler: Any
) -> None:
    """RestartTask, max_retries=5: pods of one name, each printing a traceback and crashing,
    each replacement on a node clock 3 s further behind. Every line of every incarnation that
    ran (three at least) is in the task log, in order, then the terminal state, then the
    failure summary with the last incarnation's traceback. (Volcano at times replaces a pod
    again before it ran, which uses up a retry -- two of three retries, once, on a loaded
    machine; that one wrote nothing, so it is not expected in the log.)"""
    crash = kube_cluster.pod_behaviour(
        exit_code=1, reason="Error", run_seconds=2, start_seconds=1.5
    )
    app = specs.AppDef(
        "it-crash",
        [role("trainer", 1, crash, max_retries=5, retry_policy=specs.RetryPolicy.REPLICA)],
    )
    info = scheduler.submit_dryrun(app, {"queue": QUEUE})
    (pod,) = pod_names(info).values()

    def lines(_: str, n: int) -> list[Any]:
        base = now() - dt.timedelta(seconds=3 * n)  # each replacement on a clock further behind
        texts = [f"incarnation {n} step {i}" for i in range(5)] + [
            "Traceback (most recent call last):",
            f'  File "train.py", line {n + 1}, in <module>',
            f"RuntimeError: boom {n}",
        ]
        return [(base + dt.timedelta(milliseconds=10 * i), t) for i, t in enumerate(texts)]

    kubelet = Kubelet(kube_cluster, [pod], lines)
    _, event, log = await schedule_and_follow(kube_cluster, scheduler, info, kubelet)
    assert kubelet.error is None, kubelet.error
    assert event.state is AppState.FAILED, event
    ran = [n for n, uid in enumerate(kubelet.seen[pod]) if uid in kubelet.ran]
    assert len(ran) >= 3, (kubelet.seen, kubelet.ran)
    expected = [text for n in ran for _, text in lines(pod, n)]
    last = ran[-1]
    # every line of every incarnation, once, in order
    assert log.of("trainer/0") == expected, log.text
    terminal = next(i for i, ln in enumerate(log.lines) if "-> FAILED" in ln)
    group = next(i for i, ln in enumerate(log.lines) if ln.startswith("::group::"))
    last_line = max(i for i, ln in enumerate(log.lines[:group]) if ln.startswith("[trainer/0] "))
    assert last_line < terminal < group, log.text
    assert log.lines[group].startswith("::group::trainer/0 failed: exit code 1 (Error"), log.text
    assert log.lines[group].endswith(f"— last {len(expected)} lines"), log.text
    assert log.lines[-4:] == [
        "[trainer/0] Traceback (most recent call last):",
        f'[trainer/0]   File "train.py", line {last + 1}, in <module>',
        f"[trainer/0] RuntimeError: boom {last}",
        "::endgroup::",
    ], log.text


async def test_a_one_second_ttl_loses_no_line_and_progress_lines_come_once(
    kube_cluster: Any, scheduler: Any
) -> None:
    """The job is deleted a second after it succeeded, long before the 10 s poll interval:
    every line is in the task log anyway (each was streamed as it was written), the last
    ``FINAL`` line included; a tqdm-style line redrawn with ``\\r`` is its last state, once."""
    ok = kube_cluster.pod_behaviour(run_seconds=3, start_seconds=1.5)
    app = specs.AppDef("it-ttl", [role("trainer", 2, ok)])
    info = scheduler.submit_dryrun(app, {"queue": QUEUE, "ttl_seconds_after_finished": 1})
    pods = pod_names(info)

    def lines(name: str, _: int) -> list[Any]:
        base = now()
        texts = [f"{name} line {i}" for i in range(7)] + [
            "epoch 1:  10%|#         |\repoch 1:  60%|######    |\repoch 1: 100%|##########|",
            "FINAL: accuracy=0.93",
        ]
        return [(base + dt.timedelta(milliseconds=5 * i), t) for i, t in enumerate(texts)]

    kubelet = Kubelet(kube_cluster, list(pods.values()), lines)
    app_id, event, log = await schedule_and_follow(kube_cluster, scheduler, info, kubelet)
    assert kubelet.error is None, kubelet.error
    assert event.state is AppState.SUCCEEDED, event
    for key, name in pods.items():
        assert log.of(key) == [f"{name} line {i}" for i in range(7)] + [
            "epoch 1: 100%|##########|",
            "FINAL: accuracy=0.93",
        ]
    assert not any("10%" in ln for ln in log.lines)
    # nothing was given up on, and the TTL did remove the job (a second after it ended)
    for _ in range(100):
        if scheduler.describe(app_id) is None:
            break
        await asyncio.sleep(0.1)
    assert scheduler.describe(app_id) is None
    # (neither the end's "could not be read" nor a lost run's "cannot be read")
    assert not any("could not be read" in ln or "cannot be read" in ln for ln in log.lines)


async def test_a_100_mib_log_is_followed_with_flat_memory(
    kube_cluster: Any, scheduler: Any
) -> None:
    """100,000 lines of 1 KiB (100 MiB) from one replica: every line once, in order, while
    the follow's memory stays flat (it streams; it never holds the log)."""
    total = 100_000
    ok = kube_cluster.pod_behaviour(run_seconds=2, start_seconds=0.5)
    app = specs.AppDef("it-big", [role("trainer", 1, ok)])
    info = scheduler.submit_dryrun(app, {"queue": QUEUE})
    (pod,) = pod_names(info).values()
    pad = "x" * 1000
    base = now()
    kube_cluster.set_pod_logs(
        pod,
        (f"{i:010d} {pad}" for i in range(total)),
        start=base,
        interval=dt.timedelta(microseconds=10),
    )
    log = SequenceLog("trainer/0")
    samples: list[tuple[int, float]] = []  # (lines so far, RSS)

    async def sample() -> None:
        while True:
            samples.append((log.next, rss_mb()))
            await asyncio.sleep(0.05)

    client = create_async_client(
        kubeconfig=kube_cluster.restricted_kubeconfig, namespace=kube_cluster.namespace
    )
    sampler = None
    try:
        app_id = scheduler.schedule(info)
        scheduler.created.append(app_id)
        await client.describe(app_id)  # clients imported, caches open: the baseline
        # as in a triggerer, Airflow's configuration (the stream cap) is loaded before the
        # follow: its import is not the follow's memory, whichever test runs first
        StreamSlots.current()
        before = rss_mb()
        sampler = asyncio.ensure_future(sample())
        event = await asyncio.wait_for(
            JobFollower(client, app_id, log=log, poll_interval=10.0).run(), timeout=300
        )
    finally:
        if sampler is not None:
            sampler.cancel()
        await client.close()
    assert event.state is AppState.SUCCEEDED, event
    assert (log.next, log.lost, log.repeated) == (total, 0, 0), log.other[-5:]
    assert len(samples) >= 5 and samples[-1][0] > total // 2, samples  # sampled throughout
    growth = max(rss for _, rss in samples) - before
    assert growth < 24, f"RSS grew {growth:.0f} MiB following a 100 MiB log"
