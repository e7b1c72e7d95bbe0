"""What a follow writes, in which order: every replica's last line before the terminal
state, and a failed app's failure summary at the very end."""

from __future__ import annotations

from typing import Any

import pytest

import torchx_fakes
from task_log import TaskLog as Log
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import JobEvent, ReplicaRow
from torchx_provider.triggers.follow import JobFollower
from torchx_provider.triggers.selection import LogSelection
from torchx_provider.triggers.summary import failure_summary, replica_failure


async def follow(app_id: str, **kw: Any) -> JobEvent:
    """Follow the fake backend's app to its end (``kw`` as :class:`JobFollower`'s): the
    final event."""
    return await JobFollower(torchx_fakes.FakeAsyncClient(), app_id, **kw).run()


def submit(**meta: Any) -> str:
    return torchx_fakes.FakeScheduler().submit(torchx_fakes.make_app(**meta))


async def test_the_terminal_state_comes_after_every_replicas_last_line(fake_cluster: Any) -> None:
    app_id = submit(lines=6, ticks=2, replicas=2)
    log = Log()
    event = await follow(app_id, log=log, poll_interval=0.001)
    assert event.succeeded
    terminal = next(i for i, ln in enumerate(log.lines) if ln.endswith("-> SUCCEEDED"))
    last_lines = [log.lines.index(f"[worker/{r}] worker {r} line 5") for r in range(2)]
    assert max(last_lines) < terminal
    assert not any(ln.startswith("::group::") for ln in log.lines)


async def test_a_failed_app_ends_with_one_summary_group_per_failed_replica(
    fake_cluster: Any,
) -> None:
    app_id = submit(lines=4, ticks=2, replicas=3, outcome="FAILED", fail_replicas="worker/1")
    log = Log()
    event = await follow(app_id, log=log, poll_interval=0.001)
    assert event.state == AppState.FAILED
    start = log.lines.index(
        "::group::worker/1 failed: exit code 1 (no reason given) — last 4 lines"
    )
    assert log.lines[start + 1 : start + 6] == [
        "[worker/1] worker 1 line 0",
        "[worker/1] worker 1 line 1",
        "[worker/1] worker 1 line 2",
        "[worker/1] worker 1 line 3",
        "::endgroup::",
    ]
    assert log.lines[-1] == "::endgroup::"
    assert sum(ln.startswith("::group::") for ln in log.lines) == 1
    terminal = next(i for i, ln in enumerate(log.lines) if "-> FAILED" in ln)
    assert terminal < start


def test_summary_keeps_the_last_lines_and_names_the_reason() -> None:
    rows = [
        ReplicaRow("trainer", 0, AppState.SUCCEEDED, 0),
        ReplicaRow("trainer", 1, AppState.FAILED, 137, message="OOMKilled"),
        ReplicaRow("ps", 0, AppState.FAILED, None),
    ]
    out = failure_summary(rows, {"trainer/1": ["Traceback", "MemoryError"]})
    assert out == [
        "::group::trainer/1 failed: exit code 137 (OOMKilled) — last 2 lines",
        "[trainer/1] Traceback",
        "[trainer/1] MemoryError",
        "::endgroup::",
        "::group::ps/0 failed: exit code unknown (no reason given) — last 0 lines",
        "::endgroup::",
    ]
    assert replica_failure(rows[1]) == "trainer/1 failed: exit code 137 (OOMKilled)"


def test_selection_of_other_containers() -> None:
    sel = LogSelection.parse("trainer, trainer/0:init, ps/*:sidecar")
    assert [s.key for s in sel.sources("trainer", 0)] == ["trainer/0", "trainer/0:init"]
    assert [s.key for s in sel.sources("trainer", 1)] == ["trainer/1"]
    assert [s.key for s in sel.sources("ps", 2)] == ["ps/2:sidecar"]
    assert [s.key for s in LogSelection.parse(None).sources("x", 0)] == ["x/0"]


async def test_a_backend_with_one_container_says_why_a_container_is_not_forwarded(
    fake_cluster: Any,
) -> None:
    app_id = submit(lines=2, ticks=1, replicas=1)
    log = Log()
    event = await follow(
        app_id, log=log, poll_interval=0.001, selection=LogSelection.parse("worker, worker/0:init")
    )
    assert event.succeeded
    assert "[worker/0] worker 0 line 1" in log.lines
    assert any("worker/0:init are not forwarded" in ln and "log_replicas" in ln for ln in log.lines)


async def test_of_several_failed_replicas_the_one_whose_log_shows_the_error_leads(
    fake_cluster: Any,
) -> None:
    """All end in the same second with exit code 1 (as under torchrun): the traceback in
    worker/2's log names it the root cause, in the summary and in the event."""
    app_id = submit(
        lines=4,
        ticks=2,
        replicas=3,
        outcome="FAILED",
        fail_replicas="worker/0,worker/2",
        traceback_replicas="worker/2",
    )
    log = Log()
    event = await follow(app_id, log=log, poll_interval=0.001)
    assert (event.root_cause, event.root_error) == (
        "worker/2",
        "ValueError: worker 2 got a bad batch",
    )
    groups = [ln for ln in log.lines if ln.startswith("::group::")]
    assert groups == [
        "::group::worker/2 failed first: exit code 1 (ValueError: worker 2 got a bad batch)"
        " — last 4 lines",
        "::group::worker/0 failed: exit code 1 (no reason given) — last 4 lines",
    ]
    rows = {r.key: r for r in event.replicas}
    assert rows["worker/2"].message == "ValueError: worker 2 got a bad batch"
    assert rows["worker/0"].message == ""
    again = JobEvent.from_payload(event.to_payload())
    assert (again.root_cause, again.root_error) == (event.root_cause, event.root_error)


@pytest.mark.parametrize("cancel", [True, False], ids=["cancel", "keep"])
async def test_a_replica_that_cannot_start_ends_the_follow_past_the_grace(
    fake_cluster: Any, cancel: bool
) -> None:
    from torchx_provider.errors import AppConfigurationError
    from torchx_provider.operators.finishing import failure_error
    from torchx_provider.triggers.events import ErrorKind, EventKind

    app_id = submit(ticks=100_000, replicas=2, waiting_replicas="worker/1")
    log = Log()
    event = await follow(
        app_id, log=log, poll_interval=0.01, start_grace=0.2, cancel_on_timeout=cancel
    )
    assert (event.kind, event.error) == (EventKind.ERROR, ErrorKind.START)
    assert event.message.startswith("worker/1 waited ")
    assert "without starting: image 'busybox' cannot be pulled (check the image's" in (
        event.message
    )
    assert event.message.endswith("cancelled" if cancel else "left waiting (on_kill_action=keep)")
    assert fake_cluster.cancelled == ([app_id] if cancel else [])
    # told once while it waited, then given up
    assert sum("worker/1 waits: ImagePullBackOff" in ln for ln in log.lines) == 1
    error = failure_error(event)
    assert type(error) is AppConfigurationError
    assert str(error).startswith(f"TorchX app {app_id} could not start as configured: worker/1")
    assert (error.role, error.replica_id, error.reason) == ("worker", 1, "ImagePullBackOff")


async def test_an_image_that_can_never_be_pulled_ends_the_follow_at_once(
    fake_cluster: Any,
) -> None:
    """No grace for a pull that waiting cannot heal: the first describe that shows it ends
    the follow, naming the replica, the image and the backend's words."""
    from torchx_provider.errors import AppConfigurationError
    from torchx_provider.operators.finishing import failure_error
    from torchx_provider.triggers.events import ErrorKind, EventKind

    app_id = submit(ticks=100_000, replicas=2, missing_image_replicas="worker/1")
    log = Log()
    event = await follow(app_id, log=log, poll_interval=0.01, start_grace=3600)
    assert (event.kind, event.error, event.root_cause) == (
        EventKind.ERROR,
        ErrorKind.START,
        "worker/1",
    )
    assert event.message == (
        "worker/1 cannot start: image 'busybox' cannot be pulled (the registry has no such "
        "image: check its name and tag): ErrImagePull: busybox: not found; the app was cancelled"
    )
    assert fake_cluster.cancelled == [app_id]
    error = failure_error(event)
    assert type(error) is AppConfigurationError
    assert (error.role, error.replica_id, error.reason) == ("worker", 1, "ErrImagePull")
    assert error.replica_message == "ErrImagePull: busybox: not found"
    again = JobEvent.from_payload(event.to_payload())
    assert [r.cannot_start for r in again.replicas] == [False, True]


def test_a_registry_limiting_pulls_past_the_grace_is_an_infrastructure_error() -> None:
    """A wait that could have healed and did not: its kind decides the class."""
    from torchx_provider.errors import InfrastructureError
    from torchx_provider.operators.finishing import failure_error
    from torchx_provider.triggers.events import ErrorKind, EventKind

    row = ReplicaRow(
        "trainer",
        0,
        AppState.PENDING,
        reason="ImagePullBackOff",
        failure="infrastructure",
        message="ImagePullBackOff: 429 Too Many Requests",
    )
    event = JobEvent(
        kind=EventKind.ERROR,
        app_id="a-1",
        state=AppState.PENDING,
        message="trainer/0 waited 300s without starting",
        replicas=(row,),
        error=ErrorKind.START,
        root_cause="trainer/0",
    )
    error = failure_error(event)
    assert type(error) is InfrastructureError
    assert error.reason == "ImagePullBackOff"


async def test_a_replica_that_starts_within_the_grace_is_followed_on(fake_cluster: Any) -> None:
    """Waiting less than the grace (a registry's hiccup) ends nothing."""
    app_id = submit(ticks=3, replicas=1, waiting_replicas="worker/0")
    app = fake_cluster.apps[app_id]
    event = await follow(app_id, log=Log(), poll_interval=0.01, start_grace=60)
    assert event.succeeded, event
    assert app.ticks > 3
