"""Failures of the platform and of the setup, on the real API server and controllers, each
ending the follow (the loop the worker and the triggerer run) with the class the operator
raises (``failure_error``):

* an image that can never be pulled fails the app at once with ``AppConfigurationError``,
  naming the replica, the image and the kubelet's words (kwok plays the pull from markers in
  the image name, tests/cluster/README.md);
* a registry that limits the rate of pulls is said while it lasts and fails nothing before
  the start grace; past it, the app fails with ``InfrastructureError``;
* a running replica's pod evicted through the Eviction API ends a Volcano job (max_retries
  0) with ``InfrastructureError`` naming the replica, which the shipped retry policy
  retries, where it fails a ``UserCodeError`` at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from kube_apps import one_replica_app
from task_log import TaskLog
from torchx_provider import specs
from torchx_provider.errors import (
    AppConfigurationError,
    InfrastructureError,
    UserCodeError,
)
from torchx_provider.operators.finishing import failure_error
from torchx_provider.schedulers.kube import appwrapper, mcad, volcano
from torchx_provider.specs.api import is_terminal
from torchx_provider.triggers.events import ErrorKind, EventKind, JobEvent
from torchx_provider.triggers.follow import JobFollower

pytestmark = pytest.mark.kubernetes

#: a registry name that resolves nowhere: kwok pulls nothing, the marker decides
REGISTRY = "registry.torchx.test"

BACKENDS: dict[str, Any] = {"volcano": volcano, "appwrapper": appwrapper, "mcad": mcad}


def kubeconfig_of(name: str, kube_cluster: Any) -> str:
    """The restricted kubeconfig of backend ``name`` (MCAD has an API server of its own)."""
    if name != "mcad":
        return str(kube_cluster.restricted_kubeconfig)
    if kube_cluster.mcad_restricted_kubeconfig is None or not kube_cluster.mcad_controller:
        pytest.skip("this cluster does not run MCAD's controller")
    return str(kube_cluster.mcad_restricted_kubeconfig)


@pytest.fixture(params=sorted(BACKENDS))
def backend(
    request: pytest.FixtureRequest, kube_cluster: Any, tracked_scheduler: Any
) -> tuple[str, Any]:
    """``(name, scheduler)`` of each Kubernetes backend; what it submits is deleted after
    the test."""
    name = request.param
    kubeconfig_of(name, kube_cluster)  # skips without MCAD's controller
    return name, tracked_scheduler(BACKENDS[name].create_scheduler, mcad=name == "mcad")


def start_failure(event: JobEvent, log: TaskLog) -> Exception | None:
    """The error the operator raises for ``event``, which must be the failure of ``worker/0``
    to start."""
    assert (event.kind, event.error, event.root_cause) == (
        EventKind.ERROR,
        ErrorKind.START,
        "worker/0",
    ), log.lines
    return failure_error(event)


def pulling_app(kube_cluster: Any, marker: str) -> specs.AppDef:
    app = one_replica_app(kube_cluster, marker, exit_code=0, run_seconds=1)
    app.roles[0].image = f"{REGISTRY}/{marker}/train:1"
    return app


def submit(name: str, scheduler: Any, app: specs.AppDef) -> str:
    cfg = {"queue": "default"} if name == "volcano" else {}
    app_id = str(scheduler.schedule(scheduler.submit_dryrun(app, cfg)))
    scheduler.created.append(app_id)
    return app_id


def async_client(name: str, kube_cluster: Any) -> Any:
    return BACKENDS[name].create_async_client(
        kubeconfig=kubeconfig_of(name, kube_cluster), namespace=kube_cluster.namespace
    )


async def follow(
    name: str, kube_cluster: Any, app_id: str, log: TaskLog, **kwargs: Any
) -> JobEvent:
    client = async_client(name, kube_cluster)
    try:
        return await JobFollower(client, app_id, log=log, poll_interval=1.0, **kwargs).run()
    finally:
        await client.close()


@pytest.mark.parametrize("marker", ["pull-not-found", "pull-invalid", "pull-never"])
async def test_an_image_that_can_never_be_pulled_fails_at_once(
    kube_cluster: Any, backend: tuple[str, Any], marker: str
) -> None:
    name, scheduler = backend
    app = pulling_app(kube_cluster, marker)
    image = app.roles[0].image
    started = time.monotonic()
    app_id = submit(name, scheduler, app)
    log = TaskLog()
    event = await asyncio.wait_for(follow(name, kube_cluster, app_id, log), 60)
    took = time.monotonic() - started
    error = start_failure(event, log)
    assert type(error) is AppConfigurationError, error
    text = str(error)
    assert "could not start as configured: worker/0 cannot start" in text, text
    assert f"image {image!r} cannot be pulled" in text, text
    assert "the app was cancelled" in text, text
    kubelet_words = {
        "pull-not-found": f"{image}: not found",
        "pull-invalid": "invalid reference format",
        "pull-never": "is not present with pull policy of Never",
    }[marker]
    assert kubelet_words in text, text
    assert (error.role, error.replica_id) == ("worker", 0)
    assert error.reason in (
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
    ), error.reason
    assert took < 20, (took, log.lines)  # no start grace: seconds, not minutes
    print(f"{name} {marker}: AppConfigurationError {took:.1f} s after submission")
    if (name, marker) == ("volcano", "pull-not-found"):
        from reliability_results import outcome_row, record_row

        for _ in range(60):  # Volcano acts on the abort command in its own time
            described = scheduler.describe(app_id)
            if described is None or is_terminal(described.state):
                break
            await asyncio.sleep(0.5)
        orphans = int(described is not None and not is_terminal(described.state))
        record_row(
            outcome_row(
                "image-not-found",
                "Volcano: the replica's image does not exist in its registry (the kubelet's "
                "pull answered 'not found', played by kwok)",
                "fails at once (no start grace) with AppConfigurationError naming the replica, "
                "the image and the kubelet's words; the job cancelled",
                f"{type(error).__name__} naming worker/0 and the image in under 20 s; job "
                f"{'deleted' if described is None else described.state.name}",
                lines=False,
                orphans=orphans,
                duplicates=0,
                seconds=took,
            )
        )
        assert orphans == 0, described


async def test_a_registry_limiting_pulls_is_said_and_waited_for_then_fails_as_the_platforms(
    kube_cluster: Any, backend: tuple[str, Any]
) -> None:
    """Not failed at once: each reason the kubelet gives is said once while it lasts; the
    start grace (shortened here) ends it, as the platform's failure."""
    name, scheduler = backend
    app = pulling_app(kube_cluster, "pull-rate-limited")
    started = time.monotonic()
    app_id = submit(name, scheduler, app)
    log = TaskLog()
    grace = 15.0
    event = await asyncio.wait_for(follow(name, kube_cluster, app_id, log, start_grace=grace), 120)
    took = time.monotonic() - started
    waits = [ln for ln in log.lines if "worker/0 waits:" in ln]
    assert any("ErrImagePull" in ln and "429 Too Many Requests" in ln for ln in waits), log.lines
    assert all("the registry limits the rate of pulls" in ln for ln in waits), waits
    # the kubelet alternates ErrImagePull and ImagePullBackOff: each said once, not per turn
    assert len(waits) <= 2, waits
    assert took >= grace, (took, log.lines)
    error = start_failure(event, log)
    assert type(error) is InfrastructureError, error
    assert "worker/0 waited" in str(error) and "429 Too Many Requests" in str(error), error
    print(f"{name} rate limit: said {waits[0][:60]!r}..., InfrastructureError after {took:.1f} s")


# -- eviction ---------------------------------------------------------------------------------


@pytest.fixture
def volcano_scheduler(tracked_scheduler: Any) -> Any:
    return tracked_scheduler(volcano.create_scheduler)


def running_pod(kube_cluster: Any, app_id: str) -> str | None:
    """The name of the app's running pod, if there is one."""
    from kubernetes import client

    namespace, job = app_id.split(":")
    pods = client.CoreV1Api(kube_cluster.api_client()).list_namespaced_pod(
        namespace, label_selector=f"volcano.sh/job-name={job}"
    )
    names = [p.metadata.name for p in pods.items if p.status.phase == "Running"]
    return names[0] if names else None


def evict(kube_cluster: Any, namespace: str, pod: str) -> None:
    """``POST pods/<pod>/eviction`` (policy/v1), as a node drain or a descheduler does."""
    from kubernetes import client

    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
    client.CoreV1Api(kube_cluster.api_client()).create_namespaced_pod_eviction(pod, namespace, body)


async def follow_and_evict(
    kube_cluster: Any,
    app_id: str,
    log: TaskLog,
    wait_until: Callable[..., Any],
    *,
    end_within: float,
) -> tuple[JobEvent, float]:
    """Follow a Volcano app, evict its replica's pod once it runs (and was followed running
    for 2 s), and return the follow's last event and the seconds from the eviction to it."""
    followed = asyncio.ensure_future(follow("volcano", kube_cluster, app_id, log))
    try:
        pod = await asyncio.to_thread(
            wait_until,
            lambda: running_pod(kube_cluster, app_id),
            timeout=60,
            message="the replica's pod running",
        )
        await asyncio.sleep(2)  # followed while it runs
        evicted_at = time.monotonic()
        await asyncio.to_thread(evict, kube_cluster, kube_cluster.namespace, pod)
        event = await asyncio.wait_for(asyncio.shield(followed), end_within)
    finally:
        if not followed.done():
            followed.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await followed
    return event, time.monotonic() - evicted_at


def retry_action(e: BaseException) -> Any:
    """What Airflow 3.3 does with ``e`` under the shipped policy; ``None`` before 3.3."""
    try:
        from airflow.sdk import ExceptionRetryPolicy  # noqa: F401
    except ImportError:
        return None
    from torchx_provider.retry import RETRY_INFRASTRUCTURE_ONLY

    return RETRY_INFRASTRUCTURE_ONLY.evaluate(e, try_number=1, max_tries=4).action


async def test_an_evicted_replica_ends_the_job_as_the_platforms_failure_and_is_retried(
    kube_cluster: Any, volcano_scheduler: Any, wait_until: Callable[..., Any]
) -> None:
    app = one_replica_app(kube_cluster, "evicted", keep_running=True)
    app.roles[0].max_retries = 0
    app_id = submit("volcano", volcano_scheduler, app)
    log = TaskLog()
    event, took = await follow_and_evict(kube_cluster, app_id, log, wait_until, end_within=90)
    assert event.kind == EventKind.FINISHED and event.state.name == "FAILED", (event, log.lines)
    error = failure_error(event)
    assert type(error) is InfrastructureError, (error, log.lines)
    assert (error.role, error.replica_id) == ("worker", 0), error
    assert error.reason == "EvictionByEvictionAPI", (error.reason, log.lines)
    assert "worker/0" in str(error), error
    # the shipped retry policy retries it, and fails a replica's own failure at once
    action = retry_action(error)
    if action is not None:
        from airflow.sdk import RetryAction

        assert action == RetryAction.DEFAULT
        assert retry_action(UserCodeError("exit 1", app_id=app_id)) == RetryAction.FAIL
    print(f"eviction -> InfrastructureError {took:.1f} s after the eviction: {error}")


async def test_a_replica_evicted_then_restarted_by_its_job_counts_as_an_eviction(
    kube_cluster: Any, volcano_scheduler: Any, wait_until: Callable[..., Any]
) -> None:
    """Volcano restarts a job whose pod was evicted: the app runs again and succeeds, and its
    end counts the eviction as one (``preemptions``), said by the platform's word, not taken
    for a failure of the replica's.

    Two retries, not one: under load Volcano v1.14 may spend two of the job's retries on one
    eviction (its controller executed ``RestartJob`` twice within 0.3 s, with a sync that
    made the pod again between them; with ``max_retries=1`` the job failed, 3 of 9 runs
    beside six busy loops). The follow said that failure rightly (``worker/0``, the eviction's
    reason), so it is Volcano's count that the test leaves room for."""
    app = one_replica_app(kube_cluster, "evicted-again", run_seconds=20)
    app.roles[0].max_retries = 2
    app_id = submit("volcano", volcano_scheduler, app)
    log = TaskLog()
    event, _ = await follow_and_evict(kube_cluster, app_id, log, wait_until, end_within=150)
    # on one line: a test summary shows a message's first line only
    story = " | ".join(log.lines[-40:])
    assert event.kind == EventKind.FINISHED and event.state.name == "SUCCEEDED", (
        f"{event.kind.name} {event.state.name}: {event.message!r}; {story}"
    )
    assert event.preemptions == 1, (event.preemptions, log.lines)
    said = [ln for ln in log.lines if "the platform ended a replica's pod" in ln]
    assert len(said) == 1 and "worker/0: EvictionByEvictionAPI" in said[0], log.lines
