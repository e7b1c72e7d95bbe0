"""What each permission of the documented Role buys: for every verb of every rule in
``tests/cluster/rbac.yaml``'s Role, an account without it runs what a task does (look for
its earlier jobs, submit, follow to the end with logs, cancel another job, delete) and the
outcome is recorded: refused at once (where, and that the message names the rule to add),
or works, with what the task log said about what it could not do.

``scripts/permission_table.py`` renders the results into the permission table of docs/rbac.md;
CI checks the page shows what this run measured. A row that waits longer than a minute
before saying what is wrong, or that is refused without naming the rule, fails here.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from rbac_accounts import Accounts

from kube_apps import one_replica_app
from task_log import TaskLog
from torchx_provider import specs
from torchx_provider.errors import AppConfigurationError, TorchXProviderError
from torchx_provider.schedulers.kube import appwrapper, jobset, volcano
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import EventKind
from torchx_provider.triggers.follow import JobFollower

pytestmark = pytest.mark.kubernetes

REPO = Path(__file__).resolve().parents[3]
RBAC_YAML = REPO / "tests" / "cluster" / "rbac.yaml"
RESULTS = Path(
    os.environ.get("TORCHX_PERMISSIONS_RESULTS", REPO / ".ci-logs" / "permissions" / "results.json")
)
#: the longest a misconfiguration may go unsaid
SAY_WITHIN = 60.0
#: the backend whose path a rule's API group is on (the others: Volcano's, which also
#: reads pods, their logs and events as every backend does)
APPWRAPPER_GROUPS = {"workload.codeflare.dev", "batch", "scheduling.x-k8s.io", "kueue.x-k8s.io"}
JOBSET_GROUP = "jobset.x-k8s.io"
#: each backend's package
MODULES = {"kubernetes": volcano, "kubernetes_appwrapper": appwrapper, "kubernetes_jobset": jobset}


def documented_rows() -> list[tuple[str, str, str]]:
    """``(api group, resource, verb)`` of every verb of every rule of the documented Role,
    in the Role's order (a rule naming two groups is listed under its first)."""
    for doc in yaml.safe_load_all(RBAC_YAML.read_text()):
        if doc and doc.get("kind") == "Role" and doc["metadata"]["name"] == "torchx-provider":
            return [
                (rule["apiGroups"][0], resource, verb)
                for rule in doc["rules"]
                for resource in rule["resources"]
                for verb in rule["verbs"]
            ]
    raise AssertionError(f"no Role torchx-provider in {RBAC_YAML}")


def row_id(group: str, resource: str, verb: str) -> str:
    return f"{group or 'core'}/{resource}:{verb}"


def backend_of(group: str, resource: str) -> str:
    if group in APPWRAPPER_GROUPS or resource == "services":
        return "kubernetes_appwrapper"
    if group == JOBSET_GROUP:
        return "kubernetes_jobset"
    return "kubernetes"


@dataclass
class Run:
    """What one account met doing what a task does."""

    steps: list[str] = field(default_factory=list)
    refused_at: str | None = None
    error: BaseException | None = None
    said: list[str] = field(default_factory=list)
    seconds: float = 0.0


def record(row: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    rows = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    rows[row["id"]] = row
    RESULTS.write_text(json.dumps(rows, indent=2, sort_keys=True) + "\n")


class Task:
    """What a task does with one account, step by step, on one backend."""

    def __init__(self, kube_cluster: Any, backend: str, kubeconfig: str) -> None:
        self.cluster = kube_cluster
        self.module: Any = MODULES[backend]
        self.cfg = {"queue": "default"} if backend == "kubernetes" else {}
        self.kubeconfig = kubeconfig
        ns = kube_cluster.namespace
        self.mine = self.module.create_scheduler("perm", kubeconfig=kubeconfig, namespace=ns)
        self.admin = self.module.create_scheduler(
            "perm", kubeconfig=kube_cluster.restricted_kubeconfig, namespace=ns
        )
        self.created: list[str] = []

    def close(self) -> None:
        for app_id in self.created:
            with contextlib.suppress(Exception):
                self.admin.delete(app_id)
        self.mine.close()
        self.admin.close()

    def submit(self, scheduler: Any, app: specs.AppDef, key: TaskInstanceKey) -> tuple[str, Any]:
        info = scheduler.submit_dryrun(app, self.cfg, ti_key=key)
        if self.module is volcano:  # its pods have a log line to forward
            pod = f"{info.request.body['metadata']['name']}-worker-0-0"
            self.cluster.set_pod_logs(pod, ["hello from worker 0"])
        app_id: str = scheduler.schedule(info)
        self.created.append(app_id)
        return app_id, info

    async def run(self, run: Run) -> None:
        key = TaskInstanceKey("perm-dag", "perm-task", f"run-{time.time_ns()}")
        run.steps.append("find")
        self.mine.find_apps(key)
        run.steps.append("submit")
        app_id, _ = self.submit(
            self.mine, one_replica_app(self.cluster, "perm", run_seconds=1), key
        )
        run.steps.append("follow")
        await self.follow(app_id, run)
        run.steps.append("cancel")
        other, _ = self.submit(
            self.admin, one_replica_app(self.cluster, "perm-other", keep_running=True), key
        )
        self.mine.cancel(other)
        self.wait(other, lambda state: state is AppState.CANCELLED)
        run.steps.append("delete")
        self.mine.delete(app_id)
        self.wait(app_id, None)

    async def follow(self, app_id: str, run: Run) -> None:
        client = self.module.create_async_client(
            kubeconfig=self.kubeconfig, namespace=self.cluster.namespace
        )
        log = TaskLog()
        try:
            event = await asyncio.wait_for(
                JobFollower(client, app_id, log=log, poll_interval=2.0).run(), SAY_WITHIN
            )
        finally:
            await client.close()
        # Why a job waits cannot be read without Events: said only while the job is seen
        # waiting, which a job here seldom is; the table's note says it.
        run.said = [ln for ln in log.lines if "add the rule" in ln and "why a job waits" not in ln]
        if event.kind == EventKind.ERROR:
            raise (
                AppConfigurationError(event.message)
                if event.error
                else TorchXProviderError(event.message)
            )
        assert event.state is AppState.SUCCEEDED, (event, log.lines)
        if self.module is volcano and not run.said:
            # nothing said about the logs: they must all have arrived
            assert log.of("worker/0") == ["hello from worker 0"], log.lines

    def wait(self, app_id: str, until: Any) -> None:
        """Until the documented account sees ``app_id`` in a state ``until`` accepts (gone,
        for ``None``)."""
        deadline = time.monotonic() + 30
        while True:
            desc = self.admin.describe(app_id)
            if (desc is None) if until is None else (desc is not None and until(desc.state)):
                return
            assert time.monotonic() < deadline, f"{app_id}: {desc}"
            time.sleep(0.5)


@pytest.fixture(scope="module")
def kube_local(kube_cluster: Any) -> Any:
    kube_cluster.skip_unless_local("makes ServiceAccounts and Roles on the local cluster")
    return kube_cluster


@pytest.fixture
def accounts(kube_local: Any, tmp_path: Path) -> Iterator[Accounts]:
    made = Accounts(kube_local, tmp_path)
    yield made
    made.delete()


@pytest.mark.parametrize(
    ("group", "resource", "verb"),
    documented_rows(),
    ids=[row_id(*row) for row in documented_rows()],
)
async def test_without_one_permission(
    kube_local: Any, accounts: Accounts, group: str, resource: str, verb: str
) -> None:
    backend = backend_of(group, resource)
    task = Task(kube_local, backend, accounts.without(group, resource, verb))
    run = Run()
    started = time.monotonic()
    try:
        await task.run(run)
    except TorchXProviderError as e:
        run.refused_at, run.error = run.steps[-1], e
    finally:
        run.seconds = time.monotonic() - started
        task.close()
    rule = f'resources: ["{resource}"], verbs: ["{verb}"]'
    if run.error is not None:
        # refused: at once, as a configuration error naming the rule to add
        assert isinstance(run.error, AppConfigurationError), repr(run.error)
        assert rule in str(run.error), str(run.error)
        outcome = f"refused when it {STEPS[run.refused_at]}"
    elif run.said:
        assert all(rule in line for line in run.said), run.said
        outcome = "works; the task log says once: " + said_summary(run.said)
    else:
        outcome = "works"
    assert run.seconds < SAY_WITHIN + 30
    record(
        {
            "id": row_id(group, resource, verb),
            "order": documented_rows().index((group, resource, verb)),
            "group": group,
            "resource": resource,
            "verb": verb,
            "backend": backend,
            "outcome": outcome,
            "seconds": round(run.seconds, 1),
            "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
    )


#: what the task was doing at each step, for the table
STEPS = {
    "find": "looks for the task's earlier jobs (every submit does)",
    "submit": "submits",
    "follow": "follows the job",
    "cancel": "cancels",
    "delete": "deletes",
}


def said_summary(lines: list[str]) -> str:
    """What the warnings said, in words that do not change from run to run (which part of
    the follow met the refusal first depends on timing; each says what it could not do)."""
    known = ("its state is followed", "are not forwarded")
    assert all(any(k in ln for k in known) for ln in lines), lines
    return "what it cannot do and the rule to add"
