"""The follow loop's policies on the ``fake`` backend with a fake clock: outages measured in
time, unreadable replicas, the final state from what the backend said, the deadline."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import torchx_fakes
from follow_fakes import Clock, Scripted, follower
from task_log import TaskLog as ListLog
from torchx_fakes import submit, trigger_args
from torchx_provider.errors import (
    BackendConfigurationError,
    BackendUnavailableError,
    UnknownAppError,
)
from torchx_provider.operators.finishing import deferral_timed_out, unfinished
from torchx_provider.operators.following import follow_deadline
from torchx_provider.schedulers.api import Notice, refusal_key
from torchx_provider.schedulers.kube.errors import Permission
from torchx_provider.schedulers.logs import LogCursor
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import ErrorKind, EventKind, JobEvent
from torchx_provider.triggers.job import CHECKPOINT_XCOM_KEY, TorchXJobTrigger, checkpoint_value
from torchx_provider.triggers.policy import REFUSAL_GRACE, retry_delay


class DownUntil(torchx_fakes.FakeAsyncClient):
    """Describes fail with 503 while the clock is before ``until``."""

    def __init__(self, clock: Clock, until: float) -> None:
        super().__init__()
        self.clock, self.until = clock, until

    async def describe(self, app_id: str) -> Any:
        if self.clock() < self.until:
            raise BackendUnavailableError("API server down", status=503)
        return await super().describe(app_id)


# -- outages -------------------------------------------------------------------------------------
async def test_a_70s_outage_is_ridden_out(fake_cluster: Any) -> None:
    app_id = submit(lines=4, ticks=3, replicas=2)
    clock = Clock()
    log = ListLog()
    event = await follower(DownUntil(clock, 70.0), app_id, clock, log).run()
    assert event.succeeded, event.message
    assert clock.now >= 70.0
    warnings = [ln for ln in log.lines if "backend unreachable" in ln]
    # 1, 2, 4, 8, then the 10 s poll interval: 10 retries cover 70 s (6 would have given up)
    assert len(warnings) == 10
    assert any("reachable again after 75s" in ln for ln in log.lines)
    assert len(log.replica_lines()) == 8


async def test_retries_back_off_exponentially_up_to_the_poll_interval_with_jitter() -> None:
    assert [retry_delay(n, 10.0, 0.5) for n in range(7)] == [1, 2, 4, 8, 10, 10, 10]
    assert retry_delay(2, 10.0, 0.0) == pytest.approx(3.2)
    assert retry_delay(2, 10.0, 0.999999) == pytest.approx(4.8)
    assert retry_delay(100, 3.0, 0.5) == 3.0


async def test_an_outage_past_the_budget_ends_with_an_error_naming_the_time(
    fake_cluster: Any,
) -> None:
    app_id = submit(ticks=1000)
    clock = Clock()
    event = await follower(DownUntil(clock, 1e9), app_id, clock, outage_budget=120).run()
    assert event.kind == EventKind.ERROR
    # Gives up when the budget runs out, not at the next poll after it: the last wait is cut.
    assert "unreachable for 120s (outage_budget 120s)" in event.message
    assert "it may still be running" in event.message
    assert clock.sleeps[:6] == [1, 2, 4, 8, 10, 10]
    assert sum(clock.sleeps) == 120


async def test_an_outage_is_timed_from_when_the_backend_was_first_found_failing(
    fake_cluster: Any,
) -> None:
    """A shared watch that broke 50 s before the follow's describe found the API down: the
    budget counts those 50 s."""
    app_id = submit(ticks=1000)
    clock = Clock()

    class DownForLong(torchx_fakes.FakeAsyncClient):
        async def describe(self, app_id: str) -> Any:
            raise BackendUnavailableError("API server down", status=503, unreachable_for=50.0)

    event = await follower(DownForLong(), app_id, clock, outage_budget=120).run()
    assert event.kind == EventKind.ERROR
    assert "unreachable for 120s (outage_budget 120s)" in event.message
    assert sum(clock.sleeps) == 70


async def test_a_401_gets_fresh_credentials_once_then_counts_as_an_outage(
    fake_cluster: Any,
) -> None:
    app_id = submit()
    clock = Clock()

    class Refused(torchx_fakes.FakeAsyncClient):
        async def describe(self, app_id: str) -> Any:
            raise BackendUnavailableError("Unauthorized", status=401)

    fresh: list[Any] = []

    async def reconnect() -> Any:
        fresh.append(torchx_fakes.FakeAsyncClient())
        return fresh[-1]

    f = follower(Refused(), app_id, clock, reconnect=reconnect)
    event = await f.run()
    assert event.succeeded and len(fresh) == 1 and f.client is fresh[0]
    assert clock.sleeps[0] == 10.0  # no outage wait: the new client was used at once

    async def still_refused() -> Any:
        fresh.append(Refused())
        return fresh[-1]

    fresh.clear()
    event = await follower(
        Refused(), submit(), clock, reconnect=still_refused, outage_budget=30
    ).run()
    assert event.kind == EventKind.ERROR and "outage_budget 30s" in event.message
    assert len(fresh) == 1  # re-resolved once, not in a loop


async def test_a_refused_permission_ends_the_follow_at_once_as_a_configuration_error(
    fake_cluster: Any,
) -> None:
    """A 403 does not heal by waiting: no outage is ridden out, the event says what kind of
    error it is, and the task fails with AppConfigurationError."""
    clock = Clock()

    class Forbidden(torchx_fakes.FakeAsyncClient):
        async def describe(self, app_id: str) -> Any:
            raise BackendConfigurationError("jobs is forbidden: add the rule {...}", status=403)

    log = ListLog()
    event = await follower(Forbidden(), submit(), clock, log).run()
    assert event.kind == EventKind.ERROR and event.error == ErrorKind.CONFIGURATION
    assert clock.now == 0.0 and not any("unreachable" in ln for ln in log.lines)
    assert JobEvent.from_payload(event.to_payload()) == event
    message = unfinished(event)
    assert message is not None and "as configured: jobs is forbidden" in message


class AllowedThenRefused(torchx_fakes.FakeAsyncClient):
    """The first describe is answered, then ``refusals`` of them get a 403 (an API server
    that restarted and has not loaded its Roles yet), then they are answered again."""

    def __init__(self, refusals: float) -> None:
        super().__init__()
        self.calls, self.refusals = 0, refusals

    async def describe(self, app_id: str) -> Any:
        self.calls += 1
        if 1 < self.calls <= 1 + self.refusals:
            raise BackendConfigurationError("jobs is forbidden: role not found", status=403)
        return await super().describe(app_id)


async def test_a_refusal_of_what_was_allowed_is_ridden_out_briefly(fake_cluster: Any) -> None:
    """An API server answers 403 for a few seconds after it restarts: a follow that has
    described the app before retries, and finishes."""
    clock = Clock()
    log = ListLog()
    event = await follower(AllowedThenRefused(3), submit(ticks=3), clock, log).run()
    assert event.succeeded, event.message
    assert clock.now > 0 and any("role not found" in ln for ln in log.lines)


async def test_a_refusal_of_what_was_allowed_is_final_after_the_grace(fake_cluster: Any) -> None:
    clock = Clock()
    event = await follower(AllowedThenRefused(float("inf")), submit(ticks=50), clock).run()
    assert event.kind == EventKind.ERROR and event.error == ErrorKind.CONFIGURATION
    assert f"refused for {REFUSAL_GRACE:.0f}s after it was allowed" in event.message
    assert REFUSAL_GRACE <= clock.now < REFUSAL_GRACE + 20


class UnansweredThenRefused(torchx_fakes.FakeAsyncClient):
    """The follow's first describes get no answer, the next ``refusals`` a 403, then it is
    answered: an API server that was down when the follow began, and came back with its
    authorizer still loading the Roles."""

    def __init__(self, refusals: float) -> None:
        super().__init__()
        self.calls, self.refusals = 0, refusals

    async def describe(self, app_id: str) -> Any:
        self.calls += 1
        if self.calls <= 2:
            raise BackendUnavailableError("connection refused", status=None)
        if self.calls <= 2 + self.refusals:
            raise BackendConfigurationError("jobs is forbidden: role not found", status=403)
        return await super().describe(app_id)


async def test_a_refusal_right_after_an_outage_is_ridden_out_though_nothing_was_allowed(
    fake_cluster: Any,
) -> None:
    clock = Clock()
    log = ListLog()
    event = await follower(UnansweredThenRefused(3), submit(ticks=3), clock, log).run()
    assert event.succeeded, event.message
    said = [ln for ln in log.lines if "role not found" in ln]
    assert said and all("after the backend came back" in ln for ln in said), said


async def test_a_refusal_right_after_an_outage_is_final_after_the_grace(
    fake_cluster: Any,
) -> None:
    clock = Clock()
    event = await follower(UnansweredThenRefused(float("inf")), submit(ticks=50), clock).run()
    assert event.kind == EventKind.ERROR and event.error == ErrorKind.CONFIGURATION
    assert f"refused for {REFUSAL_GRACE:.0f}s after the backend came back" in event.message
    assert REFUSAL_GRACE <= clock.now < REFUSAL_GRACE + 30


async def test_credentials_refused_again_after_resolving_them_end_the_follow_at_once(
    fake_cluster: Any,
) -> None:
    clock = Clock()

    class Refused(torchx_fakes.FakeAsyncClient):
        async def describe(self, app_id: str) -> Any:
            raise BackendConfigurationError("Unauthorized", status=401)

    fresh: list[Any] = []

    async def reconnect() -> Any:
        fresh.append(Refused())
        return fresh[-1]

    event = await follower(Refused(), submit(), clock, reconnect=reconnect).run()
    assert event.error == ErrorKind.CONFIGURATION and len(fresh) == 1 and clock.now == 0.0


async def test_what_the_client_works_around_is_said_once(fake_cluster: Any) -> None:
    app_id = submit(lines=2, ticks=3, replicas=1)
    clock = Clock()

    class NoPods(torchx_fakes.FakeAsyncClient):
        """Refused the pods, then their logs: the same permission, said once."""

        def take_notices(self) -> list[Notice]:
            return [Notice(refusal_key(refused), f"the pods of app x cannot be read: {refused}")]

        async def read_logs(self, *args: Any) -> Any:
            raise refused

    refused = BackendConfigurationError("pods is forbidden", 403)
    refused.permission = Permission("u", "list", "pods", "", "ns")
    log = ListLog()
    event = await follower(NoPods(), app_id, clock, log).run()
    assert event.succeeded
    assert sum("pods is forbidden" in ln for ln in log.lines) == 1, log.lines


# -- queue_timeout -------------------------------------------------------------------------------
async def test_a_wait_past_queue_timeout_cancels_and_names_the_last_reason() -> None:
    clock = Clock()
    client = Scripted(clock, lambda now: AppState.PENDING)
    event = await follower(client, "app-q", clock, queue_timeout=60.0).run()
    assert event.kind == EventKind.TIMEOUT and event.error == ErrorKind.QUEUE
    assert 60.0 <= clock.now < 61.0 and client.cancels == ["app-q"]
    assert "waited 60s without running (queue_timeout 60s); the app was cancelled" in event.message
    assert "the last reason given: pod p is not scheduled: Unschedulable" in event.message
    assert JobEvent.from_payload(event.to_payload()) == event


async def test_queue_timeout_counts_each_wait_from_its_start() -> None:
    """Running by 50 s, preempted at 100 s, running again at 150 s: no wait was 60 s long."""
    clock = Clock()

    def script(now: float) -> AppState:
        if now < 50 or 100 <= now < 150:
            return AppState.PENDING
        return AppState.RUNNING if now < 200 else AppState.SUCCEEDED

    client = Scripted(clock, script)
    event = await follower(client, "app-q", clock, queue_timeout=60.0, poll_interval=5.0).run()
    assert event.succeeded, event.message
    assert client.cancels == []

    clock = Clock()  # preempted at 100 s and never running again: 60 s after the preemption
    client = Scripted(clock, lambda now: AppState.RUNNING if 50 <= now < 100 else AppState.PENDING)
    event = await follower(client, "app-q", clock, queue_timeout=60.0, poll_interval=5.0).run()
    assert event.error == ErrorKind.QUEUE and 160.0 <= clock.now < 166.0


async def test_a_preemption_is_a_suspension_with_its_time_and_count_in_the_result() -> None:
    """Queued 20 s, running 30 s, preempted (back to waiting) for 40 s, running again 10 s,
    succeeded: the follow stays on it, says it waits again and runs again, and ends with
    the time in each phase and one preemption."""
    clock = Clock()

    def script(now: float) -> AppState:
        if now < 20 or 50 <= now < 90:
            return AppState.PENDING
        return AppState.RUNNING if now < 100 else AppState.SUCCEEDED

    client = Scripted(clock, script)
    log = ListLog()
    event = await follower(client, "app-p", clock, log, poll_interval=5.0, waiting_since=0.0).run()
    assert event.succeeded, event.message
    assert event.preemptions == 1
    assert (event.queued_seconds, event.running_seconds) == (60.0, 40.0)
    [back] = [ln for ln in log.lines if "RUNNING -> PENDING" in ln]
    assert "back to waiting (preempted, evicted or requeued by the cluster): not a failure" in back
    first, again = [ln for ln in log.lines if "PENDING -> RUNNING" in ln]
    assert "running again" not in first
    assert again.endswith("running again, after 1 preemption or eviction")
    assert JobEvent.from_payload(event.to_payload()) == event
    from torchx_provider.operators.finishing import task_result

    result = task_result(event, "h")
    assert (result["queued_seconds"], result["running_seconds"], result["preemptions"]) == (
        60.0,
        40.0,
        1,
    )


async def test_a_count_of_evictions_told_by_the_backend_wins() -> None:
    """Kueue counts evictions on its Workload: a follow that began after one (a restarted
    triggerer) still reports it."""
    clock = Clock()

    class Counted(Scripted):
        async def describe(self, app_id: str) -> Any:
            resp = await super().describe(app_id)
            resp.evictions = 2
            return resp

    client = Counted(clock, lambda now: AppState.RUNNING if now < 10 else AppState.SUCCEEDED)
    event = await follower(client, "app-p", clock, state=AppState.RUNNING).run()
    assert event.succeeded and event.preemptions == 2
    assert event.queued_seconds == 0.0 and event.running_seconds is not None
    older = {k: v for k, v in event.to_payload().items() if k not in ("preemptions",)}
    assert JobEvent.from_payload(older).preemptions is None


async def test_queue_timeout_may_keep_the_app_and_counts_from_submission() -> None:
    clock = Clock()
    clock.now = 1000.0
    client = Scripted(clock, lambda now: AppState.PENDING)
    event = await follower(
        client, "app-q", clock, queue_timeout=60.0, waiting_since=970.0, cancel_on_timeout=False
    ).run()
    assert event.error == ErrorKind.QUEUE and 1030.0 <= clock.now < 1031.0
    assert client.cancels == [] and "left running (on_kill_action=keep)" in event.message


async def test_the_operators_queue_timeout_reaches_the_trigger_and_fails_the_task(
    fake_cluster: Any,
) -> None:
    """Deferred: the trigger times the wait from the submission it is told of, cancels the
    app, and the task fails with QueueTimeoutError."""
    from torchx_provider.errors import QueueTimeoutError
    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.operators import TorchXOperator
    from torchx_provider.operators.finishing import failure_error
    from torchx_provider.operators.following import job_trigger
    from torchx_provider.schedulers.labels import TaskInstanceKey

    app_id = submit(pending=10_000)
    op = TorchXOperator(
        task_id="t", app="utils.echo", scheduler="fake", queue_timeout=10, poll_interval=0.01
    )
    # 9.8 of its 10 s spent before the trigger starts: a wait timed from the trigger's
    # start would take 10 s, one timed from the submission 0.2 (however loaded the machine)
    submitted = datetime.now(timezone.utc) - timedelta(seconds=9.8)
    trigger = job_trigger(
        BackendTarget("fake"),
        app_id,
        TaskInstanceKey("d", "t", "r", -1, 1),
        op.following,
        op.lifecycle,
        waiting_since=submitted,
    )
    kwargs = trigger.serialize()[1]
    assert kwargs["queue_timeout"] == 10 and kwargs["waiting_since"] == submitted.timestamp()
    trigger = TorchXJobTrigger(**{**kwargs, "task_instance": None})
    started = asyncio.get_running_loop().time()
    event = JobEvent.from_payload((await asyncio.wait_for(trigger.run().__anext__(), 30)).payload)
    took = asyncio.get_running_loop().time() - started
    assert event.kind == EventKind.TIMEOUT and event.error == ErrorKind.QUEUE
    assert took < 5, "timed from the submission, not from the trigger's start"
    assert fake_cluster.cancelled == [app_id]
    error = failure_error(event)
    assert isinstance(error, QueueTimeoutError) and error.app_id == app_id
    assert "did not start in time" in str(error) and "(queue_timeout 10s)" in str(error)


# -- one replica's logs --------------------------------------------------------------------------
async def test_one_replicas_unreadable_logs_never_end_or_pause_the_follow(
    fake_cluster: Any,
) -> None:
    app_id = submit(lines=6, ticks=4, replicas=3)
    clock = Clock()
    reads: dict[int, int] = {}

    class NodeDown(torchx_fakes.FakeAsyncClient):
        async def read_logs(
            self, app_id: str, role_name: str, replica_id: int, cursor: LogCursor
        ) -> Any:
            reads[replica_id] = reads.get(replica_id, 0) + 1
            if replica_id == 1:  # its node does not answer
                raise BackendUnavailableError("kubelet: 502 Bad Gateway", status=502)
            if replica_id == 2 and reads[2] <= 2:  # its pod was gone between list and read
                raise UnknownAppError(app_id, "pod not found")
            return await super().read_logs(app_id, role_name, replica_id, cursor)

    log = ListLog()
    event = await follower(NodeDown(), app_id, clock, log).run()
    assert event.kind == EventKind.FINISHED and event.state == AppState.SUCCEEDED
    assert sum("logs of worker/1 cannot be read" in ln for ln in log.lines) == 1
    assert sum("logs of worker/2 cannot be read" in ln for ln in log.lines) == 1
    assert any("logs of worker/2 readable again" in ln for ln in log.lines)
    for rid in (0, 2):  # the readable replicas lost nothing
        mine = [ln for ln in log.replica_lines() if ln.startswith(f"[worker/{rid}]")]
        assert mine == [f"[worker/{rid}] worker {rid} line {i}" for i in range(6)]
    assert any("last lines of worker/1 could not be read" in ln for ln in log.lines)
    assert not any("backend unreachable" in ln for ln in log.lines)  # no outage


async def test_a_log_read_refused_by_rbac_is_said_once_and_not_retried(
    fake_cluster: Any,
) -> None:
    app_id = submit(lines=3, ticks=3, replicas=2)
    clock = Clock()
    reads: list[int] = []

    class NoLogPermission(torchx_fakes.FakeAsyncClient):
        async def read_logs(
            self, app_id: str, role_name: str, replica_id: int, cursor: LogCursor
        ) -> Any:
            if replica_id == 1:
                reads.append(replica_id)
                raise BackendConfigurationError("pods/log is forbidden: add the rule", 403)
            return await super().read_logs(app_id, role_name, replica_id, cursor)

    log = ListLog()
    event = await follower(NoLogPermission(), app_id, clock, log).run()
    assert event.succeeded, event.message
    assert reads == [1]
    assert (
        sum("logs of worker/1 are not forwarded: pods/log is forbidden" in ln for ln in log.lines)
        == 1
    )
    assert [ln for ln in log.replica_lines() if ln.startswith("[worker/0]")] == [
        f"[worker/0] worker 0 line {i}" for i in range(3)
    ]


@pytest.mark.parametrize("first_read", ["answered", "unanswered"])
async def test_a_log_read_refused_by_a_restarting_server_is_retried_and_loses_no_line(
    fake_cluster: Any, first_read: str
) -> None:
    """Replica 1's second and third reads are refused (403: an API server back from a
    restart, its authorizer loading the Roles). Its first read was answered, or got no
    answer (a replica whose log was never read before the server went down): either way
    the refusals are retried, not taken for a missing permission."""
    app_id = submit(lines=3, ticks=3, replicas=2)
    clock = Clock()
    reads: list[int] = []

    class RestartingServer(torchx_fakes.FakeAsyncClient):
        async def read_logs(
            self, app_id: str, role_name: str, replica_id: int, cursor: LogCursor
        ) -> Any:
            if replica_id == 1:
                reads.append(replica_id)
                if len(reads) == 1 and first_read == "unanswered":
                    raise BackendUnavailableError("connection refused", status=None)
                if len(reads) in (2, 3):
                    raise BackendConfigurationError("pods/log is forbidden: role not found", 403)
            return await super().read_logs(app_id, role_name, replica_id, cursor)

    log = ListLog()
    event = await follower(RestartingServer(), app_id, clock, log, poll_interval=0.01).run()
    assert event.succeeded, event.message
    assert len(reads) > 3
    assert not any("not forwarded" in ln for ln in log.lines)
    assert [ln for ln in log.replica_lines() if ln.startswith("[worker/1]")] == [
        f"[worker/1] worker 1 line {i}" for i in range(3)
    ]


async def test_a_401_on_a_log_read_gets_fresh_credentials_and_loses_no_line(
    fake_cluster: Any,
) -> None:
    # A watched app is described from a cache opened with the old credentials: only the log
    # reads see the 401 once the token was rotated.
    app_id = submit(lines=3, ticks=2, replicas=2)
    clock = Clock()
    log = ListLog()

    class LogsRefused(torchx_fakes.FakeAsyncClient):
        async def read_logs(self, *args: Any) -> Any:
            raise BackendUnavailableError("Unauthorized", status=401)

    fresh: list[Any] = []

    async def reconnect() -> Any:
        fresh.append(torchx_fakes.FakeAsyncClient())
        return fresh[-1]

    event = await follower(LogsRefused(), app_id, clock, log, reconnect=reconnect).run()
    assert event.succeeded, event.message
    assert len(fresh) == 1
    assert len(log.replica_lines()) == 6
    assert not any("cannot be read" in ln for ln in log.lines)


# -- the final state -----------------------------------------------------------------------------
@pytest.mark.parametrize("last", [AppState.SUCCEEDED, AppState.FAILED])
async def test_an_app_seen_ended_then_removed_keeps_its_state(
    fake_cluster: Any, last: AppState
) -> None:
    app_id = submit()
    fake_cluster.apps[app_id].deleted = True  # a TTL removed it
    event = await follower(torchx_fakes.FakeAsyncClient(), app_id, Clock(), state=last).run()
    assert event.kind == EventKind.FINISHED and event.state == last
    assert "then removed" in event.message


@pytest.mark.parametrize("last", [AppState.SUCCEEDED, AppState.FAILED])
async def test_an_app_removed_between_two_looks_ends_as_the_watch_last_saw_it(
    fake_cluster: Any, last: AppState
) -> None:
    # Seen RUNNING; it ends and a short TTL removes it before the follow looks again. A
    # client that watches still knows the state it ended in (``last_seen``).
    app_id = submit()
    app = fake_cluster.apps[app_id]
    ended = app.describe()
    ended.state = last

    class Watching(torchx_fakes.FakeAsyncClient):
        reports_changes = True

        async def describe(self, app_id: str) -> Any:
            return None if app.deleted else await super().describe(app_id)

        async def wait_changed(self, app_id: str, timeout: float) -> bool:
            app.deleted = True  # what happened while the follow waited
            return True

        async def last_seen(self, app_id: str) -> Any:
            return ended if app.deleted else None

    event = await follower(Watching(), app_id, Clock()).run()
    assert event.kind == EventKind.FINISHED and event.state == last, event.message


async def test_without_a_last_sight_a_running_app_that_vanished_failed_on_the_platform(
    fake_cluster: Any,
) -> None:
    # Not cancelled: the task did not cancel it, something else took it off the backend.
    app_id = submit()
    fake_cluster.apps[app_id].deleted = True
    event = await follower(
        torchx_fakes.FakeAsyncClient(), app_id, Clock(), state=AppState.RUNNING
    ).run()
    assert event.kind == EventKind.FINISHED and event.state == AppState.FAILED


async def test_a_restarted_trigger_reports_the_stored_state_of_a_vanished_app(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchx_provider import compat

    store: dict[str, Any] = {}

    async def aget_one(key: str, **scope: Any) -> Any:
        return store.get(key)

    async def aset(key: str, value: Any, **scope: Any) -> None:
        store[key] = json.loads(json.dumps(value))

    monkeypatch.setattr(compat, "xcom_get_one", aget_one)
    monkeypatch.setattr(compat, "xcom_set", aset)
    ti = {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1}

    # a follow stores the last state with its cursors
    app_id = submit(lines=2, ticks=2, replicas=1)
    [event] = [
        e async for e in TorchXJobTrigger.from_args(trigger_args(app_id, task_instance=ti)).run()
    ]
    assert JobEvent.from_payload(event.payload).succeeded
    assert store[CHECKPOINT_XCOM_KEY]["state"] == "SUCCEEDED"

    # the successor finds the app deleted (TTL): it ended as it was last seen
    fake_cluster.apps[app_id].deleted = True
    [event] = [
        e async for e in TorchXJobTrigger.from_args(trigger_args(app_id, task_instance=ti)).run()
    ]
    payload = JobEvent.from_payload(event.payload)
    assert payload.kind == EventKind.FINISHED and payload.state == AppState.SUCCEEDED

    # seen running, then gone: taken off the backend before it finished, not by the task
    store[CHECKPOINT_XCOM_KEY] = checkpoint_value(app_id, {}, AppState.RUNNING)
    [event] = [
        e async for e in TorchXJobTrigger.from_args(trigger_args(app_id, task_instance=ti)).run()
    ]
    payload = JobEvent.from_payload(event.payload)
    assert payload.kind == EventKind.FINISHED and payload.state == AppState.FAILED

    # a checkpoint of an earlier version (no state): never seen, so an error as before
    store[CHECKPOINT_XCOM_KEY] = {"app_id": app_id, "cursors": {}}
    [event] = [
        e async for e in TorchXJobTrigger.from_args(trigger_args(app_id, task_instance=ti)).run()
    ]
    assert JobEvent.from_payload(event.payload).kind == EventKind.ERROR


# -- the deadline --------------------------------------------------------------------------------
@pytest.mark.parametrize("cancel", [True, False], ids=["cancel", "keep"])
async def test_the_deadline_ends_the_follow_and_cancels_per_on_kill_action(
    fake_cluster: Any, cancel: bool
) -> None:
    app_id = submit(ticks=100_000)
    clock = Clock()
    event = await follower(
        torchx_fakes.FakeAsyncClient(),
        app_id,
        clock,
        deadline=25.0,
        cancel_on_timeout=cancel,
    ).run()
    assert event.kind == EventKind.TIMEOUT
    assert clock.now == 25.0  # the last sleep stopped at the deadline
    assert (app_id in fake_cluster.cancelled) is cancel
    assert ("cancelled" if cancel else "left running") in event.message
    assert "timed out (execution_timeout / follow_timeout)" in (unfinished(event) or "")


async def test_the_deadline_holds_during_an_outage(fake_cluster: Any) -> None:
    app_id = submit(ticks=100_000)
    clock = Clock()
    event = await follower(DownUntil(clock, 1e9), app_id, clock, deadline=12.0).run()
    assert event.kind == EventKind.TIMEOUT and clock.now == 12.0


def test_the_deadline_is_the_earlier_of_execution_and_follow_timeout() -> None:
    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    now = t0 + timedelta(minutes=10)
    assert follow_deadline(t0, timedelta(hours=1), None, now) == t0 + timedelta(hours=1)
    assert follow_deadline(t0, timedelta(hours=1), 600, now) == now + timedelta(seconds=600)
    assert follow_deadline(None, timedelta(minutes=5), None, now) == now + timedelta(minutes=5)
    assert follow_deadline(t0, None, None, now) is None
    naive = t0.replace(tzinfo=None)  # read as UTC
    assert follow_deadline(naive, timedelta(hours=1), None, now) == t0 + timedelta(hours=1)


def test_airflows_deferral_timeout_is_told_from_other_resumptions() -> None:
    assert deferral_timed_out("__fail__", {"error": "Trigger timeout"})
    assert not deferral_timed_out("__fail__", {"error": "Trigger failure"})
    assert not deferral_timed_out("execute_complete", {"error": "Trigger timeout"})
    assert not deferral_timed_out("__fail__", None)
    finished = JobEvent(kind=EventKind.FINISHED, app_id="a", state=AppState.SUCCEEDED)
    assert unfinished(finished) is None
