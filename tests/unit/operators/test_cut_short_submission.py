"""A submission cut short: the next try removes the half-made app and submits anew; where the
dry run fixes the app id (Docker), the handle is logged and stored, and ``on_kill`` knows the
app, before the backend makes anything; an app refused at schedule time as too large is a bad
input (no retries); an app that succeeded after its try died is followed, not run again."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

import pytest

import torchx_fakes
from torchx_provider.errors import InvalidAppError, InvalidOptionError
from torchx_provider.operators import TorchXOperator
from torchx_provider.operators.submission import STATE_STORE_KEY, live_apps
from torchx_provider.schedulers.api import ListAppResponse
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.specs.api import AppDryRunInfo
from torchx_provider.specs.names import make_unique

APP = {"name": "hello", "roles": [{"name": "echo", "image": "busybox", "entrypoint": "echo"}]}


class PlannedScheduler(torchx_fakes.FakeScheduler):
    """The fake backend, fixing the app id in the dry run as ``local_docker`` does; apps in
    ``cut`` are reported cut short, and ``during`` runs inside ``schedule``."""

    def __init__(self) -> None:
        super().__init__()
        self.cut: dict[str, str] = {}
        self.during: Callable[[str], None] = lambda app_id: None

    def _submit_dryrun(self, app: Any, cfg: Any, ti_key: Any) -> AppDryRunInfo[dict]:
        info = super()._submit_dryrun(app, cfg, ti_key)
        info.request["app_id"] = make_unique(app.name)
        return info

    def planned_app_id(self, dryrun_info: AppDryRunInfo[dict]) -> str:
        return str(dryrun_info.request["app_id"])

    def schedule(self, dryrun_info: AppDryRunInfo[dict]) -> str:
        app_id = self.planned_app_id(dryrun_info)
        self.during(app_id)
        key = dryrun_info.request["ti_key"]
        cluster = torchx_fakes.CLUSTER
        assert dryrun_info.app is not None
        cluster.apps[app_id] = torchx_fakes.FakeApp(
            app_id,
            dryrun_info.app,
            {},
            None if key is None else TaskInstanceKey.from_dict(key),
            created=datetime.now(timezone.utc),
        )
        cluster.submitted.append(app_id)
        return app_id

    def find_apps(
        self, ti_key: TaskInstanceKey, namespaces: Sequence[str] = ()
    ) -> list[ListAppResponse]:
        return [
            dataclasses.replace(a, incomplete=self.cut.get(a.app_id, ""))
            for a in super().find_apps(ti_key, namespaces)
        ]


class Recorder:
    """The operator's log, as text."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, msg: str, *args: Any) -> None:
        self.lines.append(msg % args)

    warning = info


class Recorded(TorchXOperator):
    recorder = Recorder()

    @property
    def log(self) -> Any:
        return self.recorder


class Store:
    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value


class TI:
    try_number, max_tries = 2, 1  # a retry (retries=1), never cleared


def operator(**kwargs: Any) -> Recorded:
    Recorded.recorder = Recorder()
    return Recorded(task_id="t", app=APP, scheduler="fake", retries=1, **kwargs)


def test_a_retry_removes_an_app_whose_submission_was_cut_short_and_submits_anew(
    fake_cluster: Any,
) -> None:
    scheduler = PlannedScheduler()
    first = torchx_fakes.plan_for(scheduler, 1)
    old = scheduler.schedule(first.dryrun)
    scheduler.cut[old] = "120 of its 300 containers exist"
    store = Store()
    store.values[STATE_STORE_KEY] = scheduler.app_handle(old)  # the first try stored it

    retry = torchx_fakes.plan_for(scheduler, 2)
    apps = live_apps(retry, store, Recorder(), 1)
    assert (apps.resumable, apps.superseded, apps.cut_short) == (
        [],
        [],
        {old: "120 of its 300 containers exist"},
    )
    op = operator()
    app_id, reattached = op.submit_or_reattach(
        retry, torchx_fakes.task_context(TI(), task_state_store=store)
    )
    assert not reattached and app_id != old
    assert fake_cluster.deleted == [old] and fake_cluster.submitted == [old, app_id]
    assert op.recorder.lines[0] == (
        f"removing app {old}: an earlier try's submission of it was cut short (120 of its 300 "
        "containers exist), so it cannot run as submitted; submitting anew"
    )
    assert store.values[STATE_STORE_KEY] == scheduler.app_handle(app_id)


def test_a_retry_follows_an_app_that_already_succeeded_instead_of_running_it_again(
    fake_cluster: Any,
) -> None:
    """Try 1 died after submitting, and its app ran to success before try 2 started: try 2
    follows that app (its logs and result) and submits nothing. An earlier app that ended
    otherwise (cancelled) is not taken; neither is any when reattach is off or the task was
    cleared since (the user asked for a new run)."""
    scheduler = PlannedScheduler()
    first = torchx_fakes.plan_for(scheduler, 1)
    cancelled = scheduler.schedule(first.dryrun)
    done = scheduler.schedule(scheduler.submit_dryrun(first.app, ti_key=first.ti_key))
    fake_cluster.apps[cancelled].cancelled = True
    fake_cluster.apps[done].ticks = 1000  # past its run: SUCCEEDED

    retry = torchx_fakes.plan_for(scheduler, 2)
    apps = live_apps(retry, Store(), Recorder(), 1)
    assert (apps.resumable, apps.succeeded, apps.cut_short) == ([], [done], {})
    op = operator()
    assert op.submit_or_reattach(retry, torchx_fakes.task_context(TI())) == (done, True)
    assert fake_cluster.submitted == [cancelled, done]
    assert op.recorder.lines == [
        f"app {cancelled} of try 1 ended CANCELLED; left as it is",
        f"reattaching to app {done} of an earlier try: it already succeeded, so it is "
        "followed for its logs and result instead of run again",
    ]

    class Cleared:
        try_number, max_tries = 2, 2  # cleared during try 1 (max_tries = 1 + retries)

    for op, ti in ((operator(), Cleared()), (operator(reattach=False), TI())):
        app_id, reattached = op.submit_or_reattach(retry, torchx_fakes.task_context(ti))
        assert not reattached and app_id not in (cancelled, done)
        assert fake_cluster.submitted[-1] == app_id


def test_the_handle_is_logged_stored_and_known_to_on_kill_before_anything_is_made(
    fake_cluster: Any,
) -> None:
    scheduler = PlannedScheduler()
    plan = torchx_fakes.plan_for(scheduler, 1)
    store = Store()
    op = operator(on_kill_action="keep")
    seen: list[Any] = []

    def killed_while_creating(app_id: str) -> None:
        seen.append((list(op.recorder.lines), store.get(STATE_STORE_KEY)))
        op.on_kill()  # Airflow's SIGTERM handler, in the thread that is submitting

    scheduler.during = killed_while_creating
    app_id, _ = op.submit_or_reattach(plan, torchx_fakes.task_context(TI(), task_state_store=store))
    handle = scheduler.app_handle(app_id)
    assert seen == [([f"submitted app {handle}; creating it"], handle)]
    # Cancelled though on_kill_action is keep: half made, it could never run as submitted
    # (the fake app is made after the cancel here: what matters is that it was asked).
    assert fake_cluster.cancelled == [] and op.recorder.lines[1:] == [
        f"task killed while app {app_id} was being submitted",
        f"task killed; cancelled app {app_id}",
    ]
    op.on_kill()  # submitted: keep applies again
    assert op.recorder.lines[-1] == f"task killed; app {app_id} left running (on_kill_action=keep)"


@pytest.mark.parametrize(
    ("refusal", "match"),
    [
        (
            InvalidAppError("app has 300 replicas but network holds 253", "roles[0].num_replicas"),
            r"holds 253 .*nothing was submitted",
        ),
        (
            InvalidOptionError("Volcano queue 'nope' does not exist on this cluster", "queue"),
            r"'nope' does not exist .*nothing was submitted",
        ),
    ],
    ids=["app-too-large", "no-such-queue"],
)
def test_an_input_refused_when_scheduled_fails_without_retries(
    fake_cluster: Any, refusal: Exception, match: str
) -> None:
    """An app too large for its network, or a Volcano queue that does not exist, is found
    when the app is scheduled (its check reads the cluster), before anything is made: a bad
    input too."""
    from torchx_provider.compat import fail_exception

    scheduler = PlannedScheduler()

    def refuse(app_id: str) -> None:
        raise refusal

    scheduler.during = refuse
    with pytest.raises(fail_exception(), match=match):
        operator().submit_or_reattach(
            torchx_fakes.plan_for(scheduler, 1), torchx_fakes.task_context(TI())
        )
    assert torchx_fakes.CLUSTER.submitted == []


def test_a_retry_tells_how_an_earlier_try_s_app_ended_and_leaves_it(fake_cluster: Any) -> None:
    """Try 1's app ran and failed: try 2 says so and submits anew; the failed app is kept
    (as try 1's on_finish_action left it), not removed as a submission cut short."""
    scheduler = PlannedScheduler()
    first = torchx_fakes.plan_for(scheduler, 1)
    old = scheduler.schedule(first.dryrun)
    fake_cluster.apps[old].app.metadata["fake.outcome"] = "FAILED"
    fake_cluster.apps[old].ticks = 1000  # past its run: FAILED

    retry = torchx_fakes.plan_for(scheduler, 2)
    apps = live_apps(retry, Store(), Recorder(), 1)
    assert (apps.resumable, apps.succeeded, apps.cut_short) == ([], [], {})
    assert apps.ended == {old: ("FAILED", 1)}
    op = operator()
    app_id, reattached = op.submit_or_reattach(retry, torchx_fakes.task_context(TI()))
    assert not reattached and app_id != old
    assert fake_cluster.deleted == [] and fake_cluster.submitted == [old, app_id]
    assert op.recorder.lines[0] == f"app {old} of try 1 ended FAILED; left as it is"
