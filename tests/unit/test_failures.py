"""Which replica failed first, what error it shows, and what the task raises (pure)."""

from __future__ import annotations

import pytest

from torchx_provider import errors
from torchx_provider.failures import (
    FailureKind,
    error_class,
    evidence,
    kind_of,
    python_error,
    root_cause,
    root_cause_time,
)
from torchx_provider.operators.finishing import (
    deferral_failure,
    failure_error,
    replica_results,
)
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import ErrorKind, EventKind, JobEvent, ReplicaRow
from torchx_provider.triggers.summary import failure_summary

T0 = "2024-05-01T10:00:03.100000+00:00"
T0_LATER_SAME_SECOND = "2024-05-01T10:00:03.900000+00:00"
T1 = "2024-05-01T10:00:04+00:00"
#: more than a second after T0
T2 = "2024-05-01T10:00:04.200000+00:00"

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/app/train.py", line 9, in <module>',
    "    main()",
    "ValueError: rank 3 got a bad batch",
]
#: what torchrun prints for a worker of its own that failed
ROOT_CAUSE_BLOCK = [
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "============================================================",
    "train.py FAILED",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2024-05-01_10:00:03",
    "  host      : trainer-3",
    "  rank      : 3 (local_rank: 0)",
    "  exitcode  : 1 (pid: 42)",
    "  error_file: <N/A>",
]
#: torchrun on a replica it was told to stop
TORN_DOWN = [
    "Traceback (most recent call last):",
    '  File "/usr/bin/torchrun", line 8, in <module>',
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15",
]
TORN_DOWN_BLOCK = [
    "Root Cause (first observed failure):",
    "[0]:",
    "  exitcode  : -15 (pid: 8)",
]


def failed(
    replica: int, code: int | None, at: str = "", kind: str = "user", reason: str = "Error"
) -> ReplicaRow:
    return ReplicaRow(
        "trainer", replica, AppState.FAILED, code, reason=reason, failure=kind, finished_at=at
    )


# -- evidence in the logs --------------------------------------------------------------------
def test_python_error_is_the_last_tracebacks_error_line() -> None:
    assert python_error(TRACEBACK) == "ValueError: rank 3 got a bad batch"
    assert python_error(["[3]:Traceback (most recent call last):", "[3]:KeyError: 'x'"]) == (
        "KeyError: 'x'"
    )
    two = ["Traceback (most recent call last):", "OSError: first", *TRACEBACK]
    assert python_error(two) == "ValueError: rank 3 got a bad batch"
    assert python_error(["ValueError: not after a traceback"]) == ""
    assert python_error([]) == ""


@pytest.mark.parametrize(
    ("tail", "strength"),
    [
        (ROOT_CAUSE_BLOCK, 2),
        ([*TRACEBACK, *ROOT_CAUSE_BLOCK], 2),
        (TRACEBACK, 1),
        (TORN_DOWN, 0),  # a teardown by signal is no evidence
        (TORN_DOWN_BLOCK, 0),  # nor is torchrun's block about a worker it signalled
        (["epoch 1 done", "NCCL watchdog timeout"], 0),
        ([], 0),
    ],
)
def test_evidence(tail: list[str], strength: int) -> None:
    assert evidence(tail) == strength


#: torchrun's summary of a worker that raised, with the traceback it recorded (``@record``)
RECORDED_BLOCK = [
    "Root Cause (first observed failure):",
    "[1]:",
    "  time      : 2024-05-01_10:00:03",
    "  rank      : 3 (local_rank: 1)",
    "  exitcode  : 1 (pid: 12)",
    "  error_file: <N/A>",
    "  traceback : Traceback (most recent call last):",
    '    File "/app/train.py", line 109, in main',
    '      raise RuntimeError(f"rank {rank} failed")',
    "  RuntimeError: rank 3 failed at step 3",
    "  ",
    "============================================================",
]


def test_python_error_of_torchruns_summary_is_its_recorded_error_line() -> None:
    tail = [*TRACEBACK, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"]
    assert python_error([*tail, *RECORDED_BLOCK]) == "RuntimeError: rank 3 failed at step 3"
    assert python_error([f"[1]:{line}" for line in RECORDED_BLOCK]) == (
        "RuntimeError: rank 3 failed at step 3"
    )


def test_root_cause_time_is_the_last_blocks_time() -> None:
    assert root_cause_time(ROOT_CAUSE_BLOCK) == "2024-05-01_10:00:03"
    later = [line.replace("10:00:03", "10:00:33") for line in RECORDED_BLOCK]
    assert root_cause_time([*ROOT_CAUSE_BLOCK, *later]) == "2024-05-01_10:00:33"
    assert root_cause_time(TORN_DOWN_BLOCK) is None
    assert root_cause_time(["  time      : 2024-05-01_10:00:03"]) is None  # no block
    assert root_cause_time([]) is None


# -- root cause --------------------------------------------------------------------------------
def test_the_replica_that_failed_first_is_the_root_cause() -> None:
    rows = [failed(0, 1, T1), failed(1, 1, T0)]
    assert root_cause(rows, {}) == rows[1]


def test_a_tie_within_one_second_is_broken_by_the_logs() -> None:
    """Kubernetes reports whole seconds, and under torchrun every container exits 1."""
    rows = [failed(0, 1, T0), failed(1, 1, T0_LATER_SAME_SECOND), failed(3, 1, T0)]
    tails = {"trainer/0": TORN_DOWN, "trainer/1": TRACEBACK, "trainer/3": ROOT_CAUSE_BLOCK}
    assert root_cause(rows, tails) == rows[2]
    del tails["trainer/3"]
    assert root_cause(rows, tails) == rows[1]


def test_of_two_torchrun_summaries_the_earlier_failure_is_first() -> None:
    """torchrun's nodes wait for each other before they exit: the node whose worker raised
    first may end after the node whose workers failed later, on the lost connection."""
    raised = RECORDED_BLOCK
    lost = [
        line.replace("10:00:03", "10:00:13").replace("rank 3 failed", "Connection closed")
        for line in RECORDED_BLOCK
    ]
    rows = [failed(0, 1, T0), failed(1, 1, T0_LATER_SAME_SECOND)]
    assert root_cause(rows, {"trainer/0": lost, "trainer/1": raised}) == rows[1]
    assert root_cause(rows, {"trainer/0": raised, "trainer/1": lost}) == rows[0]
    # beyond the window too: the node whose rank raised stops its other rank and waits at
    # torchrun's exit barrier, and can end seconds after its peers (seen on real containers)
    rows = [failed(0, 1, T0), failed(1, 1, T2)]
    assert root_cause(rows, {"trainer/0": lost, "trainer/1": raised}) == rows[1]
    # but where the first to end tells no torchrun time, the finish times decide
    traceback = ["Traceback (most recent call last):", "ValueError: bad batch"]
    assert root_cause(rows, {"trainer/0": traceback, "trainer/1": raised}) == rows[0]


#: the rank on the other node, as gloo words a peer that is gone, in torchrun's summary
PEER_LOST_BLOCK = [
    line.replace("10:00:03", "10:00:13").replace(
        "RuntimeError: rank 3 failed at step 3",
        "RuntimeError: [./gloo/transport/tcp/pair.cc:598] Connection closed by peer "
        "[10.89.0.8]:9124",
    )
    for line in RECORDED_BLOCK
]
#: the node whose rank raised, stopped from outside at torchrun's exit barrier before it
#: printed its summary: its rank's traceback, then torchrun's teardown
RAISED_THEN_STOPPED = [
    *TRACEBACK[:3],
    "RuntimeError: rank 3 failed at step 3",
    "[0]:rank=2 step=3 lost a peer, waiting to be stopped",
    "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 9 closing signal "
    "SIGTERM",
    "INFO:torch.distributed.elastic.agent.server.api:Local worker group finished "
    "(WorkerState.FAILED). Waiting 300 seconds for other agents to finish",
    *TORN_DOWN,
]


def test_a_replica_that_lost_its_peer_is_never_the_root_cause() -> None:
    """Seen on real containers under load: the node whose rank raised was stopped from
    outside (Volcano's fail-fast policy, once its peer node's pod failed) before its torchrun
    printed its summary, and ended seconds later than its peer, whose summary names gloo's
    lost connection."""
    rows = [failed(0, 1, T0), failed(1, 1, T2)]
    tails = {"trainer/0": PEER_LOST_BLOCK, "trainer/1": RAISED_THEN_STOPPED}
    assert root_cause(rows, tails) == rows[1]
    assert python_error(RAISED_THEN_STOPPED) == "RuntimeError: rank 3 failed at step 3"
    # whichever ended first, and with both summaries printed
    rows = [failed(0, 1, T2), failed(1, 1, T0)]
    assert root_cause(rows, tails) == rows[1]
    assert root_cause(rows, {**tails, "trainer/1": RECORDED_BLOCK}) == rows[1]
    # two replicas that both lost a peer: the other rules decide between them
    both = {"trainer/0": PEER_LOST_BLOCK, "trainer/1": PEER_LOST_BLOCK}
    assert root_cause([failed(0, 1, T2), failed(1, 1, T0)], both).key == "trainer/1"


def test_a_replica_still_stopping_whose_log_shows_its_error_is_a_suspect() -> None:
    """Volcano fails the job at its first failed pod, which can be the node that lost its
    peer; the node whose rank raised is then still being stopped."""
    from torchx_provider.failures import suspects, with_log_errors

    lost = failed(0, 1, T0)
    stopping = ReplicaRow("trainer", 1, AppState.RUNNING)
    tails = {"trainer/0": PEER_LOST_BLOCK, "trainer/1": TRACEBACK[:3] + RAISED_THEN_STOPPED[3:5]}
    rows = with_log_errors([lost, stopping], tails)
    assert rows[1].message == "RuntimeError: rank 3 failed at step 3"
    assert (rows[1].state, rows[1].failure, rows[1].exit_code) == (AppState.RUNNING, "user", None)
    assert suspects(rows, tails) == list(rows)
    assert root_cause(suspects(rows, tails), tails) == rows[1]
    # a failed replica that tells its own error stays ahead of one not ended
    own = {**tails, "trainer/0": RECORDED_BLOCK}
    assert root_cause(suspects(with_log_errors([lost, stopping], own), own), own).key == "trainer/0"
    # so does one that tells nothing (a replica killed, no traceback)
    quiet = {**tails, "trainer/0": ["step 3"]}
    assert root_cause(suspects([lost, stopping], quiet), quiet) == lost
    # not a suspect: a replica not ended that only lost its peer or was torn down, one that
    # succeeded, one without a log
    for state, tail in [
        (AppState.RUNNING, PEER_LOST_BLOCK),
        (AppState.RUNNING, TORN_DOWN),
        (AppState.SUCCEEDED, TRACEBACK),
        (AppState.RUNNING, []),
    ]:
        row = ReplicaRow("trainer", 1, state)
        assert suspects([lost, row], {"trainer/1": tail}) == [lost], (state, tail)
        assert with_log_errors([row], {"trainer/1": tail}) == (row,)
    # one stopped from outside (CANCELLED) after it raised is one
    cancelled = ReplicaRow("trainer", 1, AppState.CANCELLED, 143)
    assert suspects([lost, cancelled], tails) == [lost, cancelled]


def test_the_summary_and_error_name_a_root_cause_not_ended() -> None:
    lost = failed(0, 1, T0)
    stopping = ReplicaRow(
        "trainer", 1, AppState.RUNNING, message="RuntimeError: rank 3 failed", failure="user"
    )
    heads = [
        ln
        for ln in failure_summary([lost, stopping], {"trainer/1": TRACEBACK}, "trainer/1")
        if ln.startswith("::group::")
    ]
    assert heads == [
        "::group::trainer/1 failed first: its log shows its error; still RUNNING when the app "
        "failed (RuntimeError: rank 3 failed) — last 4 lines",
        "::group::trainer/0 failed: exit code 1 (Error) — last 0 lines",
    ]
    event = finished(AppState.FAILED, lost, stopping, root="trainer/1")
    error = failure_error(event)
    assert type(error) is errors.UserCodeError and error.replica_id == 1
    [result] = [r for r in replica_results(event) if r["root_cause"]]
    assert (result["replica_id"], result["state"]) == (1, "RUNNING")


@pytest.mark.parametrize(
    "error",
    [
        "RuntimeError: [./gloo/transport/tcp/pair.cc:598] Connection closed by peer [::1]:1",
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:575] Connection "
        "reset by peer",
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, "
        "remote process exited or there was a network error, NCCL version 2.19.3",
        "RuntimeError: NCCL communicator was aborted on rank 1.",
    ],
)
def test_peer_losses_as_each_library_words_them(error: str) -> None:
    from torchx_provider.failures import is_peer_loss

    assert is_peer_loss(error)


def test_the_tracebacks_of_two_ranks_interleaved_line_by_line() -> None:
    """Two ranks of one node fail at once and write their tracebacks to the same stream; the
    node was then stopped from outside before its torchrun printed a summary."""
    tail = [
        "Traceback (most recent call last):",
        "Traceback (most recent call last):",
        '  File "/app/train.py", line 117, in main',
        '  File "/app/train.py", line 126, in main',
        '    raise RuntimeError(f"rank {rank} failed at step {step} as asked")',
        "    loss.backward()",
        "RuntimeError: rank 3 failed at step 3 as asked",
        "RuntimeError: [./gloo/transport/tcp/pair.cc:598] Connection closed by peer [::1]:1",
        *TORN_DOWN,
    ]
    assert python_error(tail) == "RuntimeError: rank 3 failed at step 3 as asked"
    rows = [failed(0, 1, T0), failed(1, 1, T2)]
    assert root_cause(rows, {"trainer/0": PEER_LOST_BLOCK, "trainer/1": tail}) == rows[1]
    # torchrun's own ChildFailedError line (no text of its own) is no error: its summary is
    torchrun = [
        "Traceback (most recent call last):",
        '  File "/usr/bin/torchrun", line 33, in <module>',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
    ]
    assert "Connection closed by peer" in python_error([*torchrun, *PEER_LOST_BLOCK])


def test_a_teardown_is_the_error_only_where_there_is_no_other() -> None:
    assert python_error([*TRACEBACK, *TORN_DOWN]) == "ValueError: rank 3 got a bad batch"
    assert python_error([*TORN_DOWN, *TRACEBACK]) == "ValueError: rank 3 got a bad batch"
    assert python_error(TORN_DOWN).endswith("SignalException: Process 7 got signal: 15")
    assert evidence([*TRACEBACK, *TORN_DOWN]) == 1
    # the replica's own error over a lost peer's, whichever torchrun named its root cause
    assert python_error([*RECORDED_BLOCK, *PEER_LOST_BLOCK]) == (
        "RuntimeError: rank 3 failed at step 3"
    )
    assert "Connection closed by peer" in python_error([*PEER_LOST_BLOCK, *TORN_DOWN])


@pytest.mark.parametrize(
    ("killed_at", "exited_at", "first"),
    [
        # Docker's times: the window is a second from the first failure, wherever the
        # seconds' boundaries fall
        ("10:00:01.200", "10:00:02.110", "trainer/1"),  # 0.91 s, across a boundary
        ("10:00:01.200", "10:00:01.860", "trainer/1"),  # 0.66 s
        ("10:00:01.200", "10:00:01.550", "trainer/1"),  # 0.35 s
        ("10:00:01.200", "10:00:02.200", "trainer/1"),  # a second: still the same moment
        ("10:00:01.200", "10:00:02.300", "trainer/0"),  # 1.1 s: the first is first
        # Kubernetes' times, whole seconds: the same second or the next one
        ("10:00:01", "10:00:01", "trainer/1"),
        ("10:00:01", "10:00:02", "trainer/1"),
        ("10:00:01", "10:00:03", "trainer/0"),
        # the exit that is no signal came first: it is first whatever the window
        ("10:00:02.100", "10:00:01.200", "trainer/1"),
    ],
)
def test_within_a_second_of_the_first_failure_a_non_signal_exit_is_first(
    killed_at: str, exited_at: str, first: str
) -> None:
    """``exit 137`` on replica 0, ``exit 2`` on replica 1 a moment later: one moment when
    within a second (``ROOT_CAUSE_WINDOW``), measured on the backend's own finish times."""
    day = "2024-05-01T"
    rows = [failed(0, 137, day + killed_at + "Z"), failed(1, 2, day + exited_at + "Z")]
    assert root_cause(rows, {}).key == first


def test_within_the_window_the_earliest_wins_when_nothing_else_tells() -> None:
    rows = [failed(0, 1, "2024-05-01T10:00:01.900Z"), failed(1, 1, "2024-05-01T10:00:01.200Z")]
    assert root_cause(rows, {}) == rows[1]


def test_then_a_non_signal_exit_wins_over_137_and_143() -> None:
    rows = [failed(0, 143, T0), failed(1, 137, T0), failed(2, 2, T0)]
    assert root_cause(rows, {}) == rows[2]


def test_then_the_app_order_and_unknown_times_come_last() -> None:
    rows = [failed(0, 1), failed(1, 1, T1), failed(2, 1, T1)]
    assert root_cause(rows, {}) == rows[1]
    assert root_cause([failed(0, 1), failed(1, 1)], {}) == failed(0, 1)
    assert root_cause([], {}) is None


def test_the_summary_leads_with_the_root_cause_marked_when_others_failed() -> None:
    rows = [failed(0, 143, T0), failed(3, 1, T0)]
    tails = {"trainer/0": TORN_DOWN, "trainer/3": TRACEBACK}
    first = root_cause(rows, tails)
    assert first is not None
    heads = [ln for ln in failure_summary(rows, tails, first.key) if ln.startswith("::group::")]
    assert heads == [
        "::group::trainer/3 failed first: exit code 1 (Error) — last 4 lines",
        "::group::trainer/0 failed: exit code 143 (Error) — last 3 lines",
    ]


def test_the_error_is_found_further_back_than_the_summary_shows() -> None:
    """The pumps keep more of each log than the summary shows: the node whose rank raised
    can print its error 80 lines before its end (torchrun's summary, then its teardown)."""
    from torchx_provider.triggers.logpump import TAIL_LINES
    from torchx_provider.triggers.summary import SUMMARY_LINES

    noise = [f"INFO:torch.distributed.elastic: line {n}" for n in range(80)]
    log = [*TRACEBACK, *noise, *TORN_DOWN]
    assert SUMMARY_LINES < len(log) <= TAIL_LINES
    rows = [failed(0, 1, T0), failed(1, 1, T2)]
    tails = {"trainer/0": PEER_LOST_BLOCK, "trainer/1": log}
    assert root_cause(rows, tails) == rows[1]
    assert python_error(log) == "ValueError: rank 3 got a bad batch"
    summary = failure_summary(rows, tails, "trainer/1")
    assert summary[0] == (
        f"::group::trainer/1 failed first: exit code 1 (Error) — last {SUMMARY_LINES} lines"
    )
    assert summary[1 : SUMMARY_LINES + 1] == [
        f"[trainer/1] {line}" for line in log[-SUMMARY_LINES:]
    ]


# -- the exception the task raises --------------------------------------------------------
def test_each_kind_is_one_class_and_an_unknown_one_the_base() -> None:
    assert error_class(FailureKind.USER) is errors.UserCodeError
    assert error_class(FailureKind.INFRASTRUCTURE) is errors.InfrastructureError
    assert error_class(FailureKind.CONFIGURATION) is errors.AppConfigurationError
    assert error_class(FailureKind.CANCELLED) is errors.AppCancelledError
    assert error_class(None) is errors.AppFailedError
    assert kind_of("user") is FailureKind.USER
    assert kind_of("") is None and kind_of("something-newer") is None


def finished(state: AppState, *rows: ReplicaRow, root: str = "", error: str = "") -> JobEvent:
    return JobEvent(EventKind.FINISHED, "app-1", state, "", rows, root_cause=root, root_error=error)


@pytest.mark.parametrize(
    ("kind", "cls"),
    [
        ("user", errors.UserCodeError),
        ("infrastructure", errors.InfrastructureError),
        ("configuration", errors.AppConfigurationError),
        ("", errors.AppFailedError),
    ],
)
def test_a_failed_app_raises_its_root_causes_class(kind: str, cls: type[Exception]) -> None:
    rows = (failed(0, 143, T0, kind="", reason="Terminated"), failed(3, 3, T0, kind=kind))
    error = failure_error(finished(AppState.FAILED, *rows, root="trainer/3", error="E: x"))
    assert type(error) is cls
    assert isinstance(error, errors.AppFailedError)
    assert (error.app_id, error.state, error.role, error.replica_id, error.exit_code) == (
        "app-1",
        "FAILED",
        "trainer",
        3,
        3,
    )
    assert "first failed replica: trainer/3 failed: exit code 3 (Error)\nE: x\n" in str(error)


def test_an_older_event_without_a_root_cause_names_the_first_by_time() -> None:
    error = failure_error(finished(AppState.FAILED, failed(0, 1, T2), failed(1, 137, T0)))
    assert isinstance(error, errors.UserCodeError) and error.replica_id == 1


def test_the_other_ends() -> None:
    assert failure_error(finished(AppState.SUCCEEDED)) is None
    cancelled = failure_error(finished(AppState.CANCELLED))
    assert type(cancelled) is errors.AppCancelledError and cancelled.root_cause is None
    unknown = failure_error(finished(AppState.UNKNOWN))
    assert type(unknown) is errors.AppFailedError
    timeout = failure_error(JobEvent(EventKind.TIMEOUT, "a", AppState.RUNNING, "deadline"))
    assert type(timeout) is errors.AppTimeoutError
    lost = failure_error(JobEvent(EventKind.ERROR, "a", AppState.RUNNING, "unreachable"))
    assert type(lost) is errors.AppLostError and not isinstance(lost, errors.AppFailedError)
    refused = JobEvent(EventKind.ERROR, "a", AppState.RUNNING, "no", error=ErrorKind.CONFIGURATION)
    assert type(failure_error(refused)) is errors.AppConfigurationError


def test_airflows_failed_resumptions() -> None:
    assert deferral_failure("execute_complete", {}, "a") is None
    timeout = deferral_failure("__fail__", {"error": "Trigger timeout"}, "a")
    assert type(timeout) is errors.AppTimeoutError and timeout.app_id == "a"
    lost = deferral_failure("__fail__", {"error": "Trigger failure"}, None)
    assert type(lost) is errors.AppLostError and "Trigger failure" in str(lost)


def test_the_replicas_xcom_has_every_replicas_facts_and_marks_the_root_cause() -> None:
    ok = ReplicaRow("trainer", 0, AppState.SUCCEEDED, 0, "h0", restarts=0)
    oom = ReplicaRow(
        "trainer", 1, AppState.FAILED, 137, "h1", "y" * 500, "OOMKilled", "user", T0, 2
    )
    got = replica_results(finished(AppState.FAILED, ok, oom, root="trainer/1"))
    assert got[0] == {
        "role": "trainer",
        "replica_id": 0,
        "state": "SUCCEEDED",
        "exit_code": 0,
        "reason": "",
        "failure": "",
        "message": "",
        "restarts": 0,
        "host": "h0",
        "root_cause": False,
        # no log was read: no progress
        "last_line": "",
        "last_line_at": "",
        "step": None,
        "step_at": "",
        "stopped_first": False,
    }
    assert (got[1]["reason"], got[1]["failure"], got[1]["restarts"]) == ("OOMKilled", "user", 2)
    assert got[1]["root_cause"] is True and len(got[1]["message"]) == 300


def test_each_tries_log_names_its_own_job() -> None:
    from torchx_provider.operators.submission import try_header

    assert try_header(3, "kubernetes://s/ns:app-1", "https://ui/jobs/app-1") == (
        "try 3 follows TorchX app kubernetes://s/ns:app-1 (URL https://ui/jobs/app-1)"
    )
    assert try_header(1, "local_docker://s/app-2", None).endswith("(no job URL)")


def test_in_cluster_restarts_are_told_as_they_happen() -> None:
    from torchx_provider.triggers.summary import restart_notes

    running = ReplicaRow("trainer", 0, AppState.RUNNING, restarts=0)
    again = ReplicaRow("trainer", 0, AppState.RUNNING, 1, reason="Error", restarts=1)
    assert restart_notes("a", (-1, 0), [], [running]) == []  # the first describe
    assert restart_notes("a", (0, 0), [running], [running]) == []
    assert restart_notes("a", (0, 0), [running], [again]) == [
        "trainer/0 restarted (restart 1; last exit code 1, Error)"
    ]
    assert restart_notes("a", (1, 2), [again], [again], "RestartJob: pod failed") == [
        "app a restarted in the cluster (restart 2): RestartJob: pod failed"
    ]
    told_nothing = ReplicaRow("trainer", 0, AppState.RUNNING)
    assert restart_notes("a", (-1, -1), [told_nothing], [told_nothing]) == []


def test_a_failed_replica_without_a_message_gets_its_logs_python_error() -> None:
    from torchx_provider.failures import with_log_errors

    rows = (
        failed(0, 1, T0),
        ReplicaRow("trainer", 1, AppState.FAILED, 1, message="Error: termination message"),
        ReplicaRow("trainer", 2, AppState.SUCCEEDED, 0),
        failed(3, 1, T0),
    )
    tails = {key: TRACEBACK for key in ("trainer/0", "trainer/1", "trainer/2")}
    got = with_log_errors(rows, tails)
    assert [r.message for r in got] == [
        "ValueError: rank 3 got a bad batch",
        "Error: termination message",  # the backend's own message stays
        "",  # succeeded
        "",  # no traceback in its log
    ]
    # a termination message that only tells torchrun's teardown (the log's last lines):
    # the error before it in the log takes the teardown's place
    teardown = ReplicaRow("trainer", 4, AppState.FAILED, 1, message="Error: " + TORN_DOWN[-1])
    got = with_log_errors([teardown], {"trainer/4": [*TRACEBACK, *TORN_DOWN]})
    assert got[0].message == "Error: ValueError: rank 3 got a bad batch"
    # the same for a lost peer's error, torchrun's root cause when two ranks failed in the
    # same second; a message cut at its start is still read
    lost = PEER_LOST_BLOCK[-3].strip()
    said = ReplicaRow("trainer", 4, AppState.FAILED, 1, message=f"Error: …{lost[4:]}")
    got = with_log_errors([said], {"trainer/4": [*RECORDED_BLOCK, *PEER_LOST_BLOCK]})
    assert got[0].message == "Error: RuntimeError: rank 3 failed at step 3"
    # a log with nothing but the teardown leaves the message as it was
    assert with_log_errors([teardown], {"trainer/4": TORN_DOWN}) == (teardown,)


def test_a_failure_the_backend_gives_no_time_is_timed_when_first_seen() -> None:
    """A container removed from outside has no finish time; the replica that then failed
    because of it must not be blamed first."""
    from datetime import datetime, timezone

    from torchx_provider.failures import stamp_unseen_ends

    seen = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)
    later = datetime(2024, 5, 1, 10, 5, 0, tzinfo=timezone.utc)
    running = ReplicaRow("trainer", 0, AppState.RUNNING)
    removed = failed(1, None, kind="infrastructure", reason="RemovedFromOutside")
    first = stamp_unseen_ends([], [running, removed], seen)
    assert first[1].finished_at == seen.isoformat() and first[0] == running
    # the next describe keeps the stamp; rank 0 then fails of it, with a time of its own
    rank0 = failed(0, 1, "2024-05-01T10:04:00+00:00")
    second = stamp_unseen_ends(first, [rank0, removed], later)
    assert second[1].finished_at == seen.isoformat()
    assert root_cause(second, {}) == second[1]
    assert root_cause([rank0, removed], {}) == rank0  # unstamped, it would be blamed


def test_a_replica_that_starts_waiting_on_its_configuration_is_told_once() -> None:
    from torchx_provider.triggers.summary import waiting_notes

    pending = ReplicaRow("trainer", 0, AppState.PENDING)
    pulling = ReplicaRow("trainer", 0, AppState.PENDING, reason="ImagePullBackOff")
    assert waiting_notes([pending]) == []
    [(key, note)] = waiting_notes([pulling])
    assert note == (
        "trainer/0 waits: ImagePullBackOff (check the image's name, its tag and the pull secret)"
    )
    # the key is the replica, its reason and the backend's words: said once per change
    limited = ReplicaRow(
        "trainer",
        0,
        AppState.PENDING,
        reason="ErrImagePull",
        message="ErrImagePull: 429 Too Many Requests - toomanyrequests: rate limit",
    )
    [(other, note)] = waiting_notes([limited])
    assert other != key
    assert note == (
        "trainer/0 waits: ErrImagePull: 429 Too Many Requests - toomanyrequests: rate limit "
        "(the registry limits the rate of pulls (HTTP 429))"
    )
    assert waiting_notes([ReplicaRow("t", 1, AppState.PENDING, reason="Odd")])[0][1] == (
        "t/1 waits: Odd"
    )
    assert waiting_notes([failed(0, 1)]) == []  # a failure is the summary's


def test_waiting_on_configuration_is_timed_without_a_break() -> None:
    from torchx_provider.triggers.policy import cannot_start, waiting_on_configuration

    pulling = ReplicaRow("t", 0, AppState.PENDING, reason="ErrImagePull", failure="configuration")
    backoff = ReplicaRow(
        "t", 0, AppState.PENDING, reason="ImagePullBackOff", failure="configuration"
    )
    other = ReplicaRow(
        "t", 1, AppState.PENDING, reason="CreateContainerConfigError", failure="configuration"
    )
    since = waiting_on_configuration({}, [pulling], 10.0)
    since = waiting_on_configuration(since, [backoff, other], 200.0)  # the reasons alternate
    assert since == {"t/0": 10.0, "t/1": 200.0}
    assert cannot_start(since, 309.0, 300.0) is None
    assert cannot_start(since, 310.0, 300.0) == "t/0"
    assert cannot_start(since, 600.0, 300.0) == "t/0"  # the longest first
    started = ReplicaRow("t", 0, AppState.RUNNING)
    assert waiting_on_configuration(since, [started, other], 400.0) == {"t/1": 200.0}
    crashing = ReplicaRow("t", 0, AppState.RUNNING, reason="CrashLoopBackOff", failure="user")
    assert waiting_on_configuration({}, [crashing], 1.0) == {}  # its code's, not the setup's


def test_the_python_error_is_said_once_in_the_message() -> None:
    plain = failed(3, 1, T0)
    error = failure_error(finished(AppState.FAILED, plain, root="trainer/3", error="E: x"))
    assert "(Error)\nE: x\n" in str(error)
    shown = ReplicaRow("trainer", 3, AppState.FAILED, 1, message="E: x", failure="user")
    error = failure_error(finished(AppState.FAILED, shown, root="trainer/3", error="E: x"))
    assert str(error).count("E: x") == 2  # the header and the table, not a third time


def test_the_result_counts_in_cluster_restarts() -> None:
    from torchx_provider.operators.finishing import task_result

    event = JobEvent(EventKind.FINISHED, "a", AppState.SUCCEEDED, num_restarts=2)
    assert task_result(event, "h")["num_restarts"] == 2
    assert JobEvent.from_payload(event.to_payload()).num_restarts == 2


def test_failures_sits_below_the_triggers() -> None:
    """The failure rules read the replica rows of a lower module, not the triggers' events
    (which use them): the events' row is that same class, still importable from there."""
    import ast
    import inspect

    from torchx_provider import failures, replicas
    from torchx_provider.triggers import events

    tree = ast.parse(inspect.getsource(failures))
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not [m for m in imported if m.startswith("torchx_provider.triggers")]
    assert events.ReplicaRow is replicas.ReplicaRow
