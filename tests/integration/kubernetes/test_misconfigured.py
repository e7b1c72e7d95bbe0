"""A misconfigured connection or cluster fails fast and says the fix, on the real API server
and Volcano: a ServiceAccount bound to the documented Role minus one permission, a token the
server rejects, a kubeconfig without the cluster's CA, a Volcano queue that does not exist.

Each case must tell the task log what is wrong within a minute (most within a second), and
refusals by configuration are :class:`AppConfigurationError` (not an outage to ride out)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rbac_accounts import ROLE, Accounts

from kube_apps import one_replica_app
from task_log import TaskLog
from torchx_provider import specs
from torchx_provider.errors import (
    AppConfigurationError,
    BackendConfigurationError,
)
from torchx_provider.schedulers.kube.volcano import create_async_client, create_scheduler
from torchx_provider.triggers.events import ErrorKind, EventKind
from torchx_provider.triggers.follow import JobFollower

pytestmark = pytest.mark.kubernetes

QUEUE = "default"


def app(kube_cluster: Any, name: str = "misconf") -> specs.AppDef:
    return one_replica_app(kube_cluster, name, exit_code=0, run_seconds=1)


@pytest.fixture
def accounts(kube_cluster: Any, tmp_path: Path) -> Iterator[Accounts]:
    kube_cluster.skip_unless_local("makes ServiceAccounts and Roles on the local cluster")
    made = Accounts(kube_cluster, tmp_path)
    yield made
    made.delete()


@pytest.fixture
def admin(tracked_scheduler: Any) -> Any:
    """A scheduler with the documented account, to set up and to clean up."""
    return tracked_scheduler(create_scheduler)


def submit(scheduler: Any, application: specs.AppDef, **cfg: Any) -> str:
    app_id: str = scheduler.schedule(scheduler.submit_dryrun(application, {"queue": QUEUE, **cfg}))
    return app_id


async def follow(kubeconfig: str, namespace: str, app_id: str, timeout: float = 60) -> Any:
    client = create_async_client(kubeconfig=kubeconfig, namespace=namespace)
    log = TaskLog()
    started = time.monotonic()
    try:
        event = await asyncio.wait_for(
            JobFollower(client, app_id, log=log, poll_interval=2.0).run(), timeout
        )
    finally:
        await client.close()
    return event, log, time.monotonic() - started


async def test_without_list_on_pods_the_app_is_followed_from_its_job_and_the_rule_said_once(
    kube_cluster: Any, accounts: Accounts, admin: Any
) -> None:
    """Before: every describe's pod list was 'backend unreachable' for the whole outage
    budget (600 s), then 'lost track', leaving the completed job behind."""
    kubeconfig = accounts.without("", "pods", "list")
    app_id = submit(admin, app(kube_cluster))
    admin.created.append(app_id)
    event, log, took = await follow(kubeconfig, kube_cluster.namespace, app_id)
    assert event.kind == EventKind.FINISHED and event.state == specs.AppState.SUCCEEDED, (
        event.message,
        log.lines,
    )
    said = [ln for ln in log.lines if 'resources: ["pods"], verbs: ["list"]' in ln]
    assert len(said) == 1, log.lines
    assert not any("unreachable" in ln for ln in log.lines)
    assert took < 60


def test_without_create_on_jobs_the_submit_fails_at_once_naming_the_rule(
    kube_cluster: Any, accounts: Accounts
) -> None:
    kubeconfig = accounts.without("batch.volcano.sh", "jobs", "create")
    scheduler = create_scheduler("it", kubeconfig=kubeconfig, namespace=kube_cluster.namespace)
    try:
        started = time.monotonic()
        with pytest.raises(AppConfigurationError) as raised:
            submit(scheduler, app(kube_cluster))
        assert time.monotonic() - started < 5
    finally:
        scheduler.close()
    message = str(raised.value)
    assert isinstance(raised.value, BackendConfigurationError) and raised.value.status == 403
    assert (
        f"may not create jobs in namespace {kube_cluster.namespace}; add the rule "
        '{apiGroups: ["batch.volcano.sh"], resources: ["jobs"], verbs: ["create"]} to its Role'
    ) in message


async def test_a_token_the_server_rejects_fails_the_submit_and_the_follow_at_once(
    kube_cluster: Any, accounts: Accounts, admin: Any
) -> None:
    kubeconfig = accounts.kubeconfig("bad-token", "not-a-token")
    scheduler = create_scheduler("it", kubeconfig=kubeconfig, namespace=kube_cluster.namespace)
    try:
        with pytest.raises(AppConfigurationError, match="rejected the credentials") as raised:
            submit(scheduler, app(kube_cluster))
        assert isinstance(raised.value, BackendConfigurationError) and raised.value.status == 401
    finally:
        scheduler.close()
    app_id = submit(admin, app(kube_cluster))
    admin.created.append(app_id)
    event, _, took = await follow(kubeconfig, kube_cluster.namespace, app_id)
    assert event.kind == EventKind.ERROR and event.error == ErrorKind.CONFIGURATION, event
    assert "rejected the credentials" in event.message and took < 20


async def test_a_kubeconfig_without_the_clusters_ca_names_the_certificate_fix(
    kube_cluster: Any, accounts: Accounts, admin: Any
) -> None:
    def no_ca(config: dict[str, Any]) -> None:
        cluster = config["clusters"][0]["cluster"]
        cluster.pop("certificate-authority-data", None)
        cluster.pop("insecure-skip-tls-verify", None)

    kubeconfig = accounts.kubeconfig("no-ca", accounts.token(ROLE), edit=no_ca)
    scheduler = create_scheduler("it", kubeconfig=kubeconfig, namespace=kube_cluster.namespace)
    try:
        with pytest.raises(AppConfigurationError) as raised:
            submit(scheduler, app(kube_cluster))
    finally:
        scheduler.close()
    for message in (str(raised.value),):
        assert "certificate is not trusted" in message and "disable_verify_ssl" in message
        assert "cannot be reached" not in message
    app_id = submit(admin, app(kube_cluster))
    admin.created.append(app_id)
    event, _, took = await follow(kubeconfig, kube_cluster.namespace, app_id)
    assert event.error == ErrorKind.CONFIGURATION, event
    assert "certificate is not trusted" in event.message and took < 20


def test_a_queue_that_does_not_exist_is_refused_where_queues_may_be_read(
    kube_cluster: Any, accounts: Accounts, unique_name: Any
) -> None:
    kubeconfig = accounts.with_cluster_role(
        "read-queues",
        [{"apiGroups": ["scheduling.volcano.sh"], "resources": ["queues"], "verbs": ["get"]}],
    )
    scheduler = create_scheduler("it", kubeconfig=kubeconfig, namespace=kube_cluster.namespace)
    name = unique_name("misconf")
    try:
        # a configuration a retry cannot heal: AppConfigurationError, before any submission
        with pytest.raises(AppConfigurationError, match="Volcano queue 'nope' does not exist"):
            submit(scheduler, app(kube_cluster, name), queue="nope")
        found = [a.app_id for a in scheduler.list() if a.name.startswith(name)]
    finally:
        scheduler.close()
    assert found == []  # nothing was created


async def test_a_queue_that_does_not_exist_is_said_in_the_task_log_where_queues_cannot_be_read(
    kube_cluster: Any, admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented Role may not read cluster-scoped queues: the job is submitted, Volcano
    gives it no status, and the task log says what usually causes that (here after 3 s
    instead of 30)."""
    from torchx_provider.schedulers.kube.volcano import translation

    monkeypatch.setattr(translation, "STATUS_WAIT", 3.0)
    app_id = submit(admin, app(kube_cluster, "noqueue"), queue="nope")
    admin.created.append(app_id)
    client = create_async_client(
        kubeconfig=kube_cluster.restricted_kubeconfig, namespace=kube_cluster.namespace
    )
    log = TaskLog()
    follower = JobFollower(client, app_id, log=log, poll_interval=1.0)
    task = asyncio.ensure_future(follower.run())
    try:
        deadline = time.monotonic() + 30
        while not any("usually its queue 'nope'" in ln for ln in log.lines):
            assert time.monotonic() < deadline, log.lines
            await asyncio.sleep(0.5)
        await asyncio.sleep(3)
        assert sum("usually its queue 'nope'" in ln for ln in log.lines) == 1
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await client.close()
