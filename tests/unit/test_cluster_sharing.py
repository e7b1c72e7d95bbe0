"""Two sessions of the Kubernetes tier on one cluster (tests/support/cluster_sharing.py): the
names they choose and the turns they take."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from cluster_sharing import cluster_turn, session_queues, session_tag, tagged


def test_names_end_with_the_sessions_tag_within_their_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TORCHX_TEST_CLUSTER_TAG", raising=False)
    assert tagged("torchx-no-get-pods") == "torchx-no-get-pods"
    monkeypatch.setenv("TORCHX_TEST_CLUSTER_TAG", "lo")
    assert tagged("torchx-no-get-pods") == "torchx-no-get-pods-lo"
    assert tagged("x" * 70, 60) == "x" * 57 + "-lo"


def test_a_tag_that_cannot_end_a_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHX_TEST_CLUSTER_TAG", "Low_1")
    with pytest.raises(ValueError, match="TORCHX_TEST_CLUSTER_TAG='Low_1': use 1 to 6"):
        session_tag()


def test_a_tagged_session_takes_the_second_pair_of_queues_or_the_third(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TORCHX_TEST_CLUSTER_QUEUES", raising=False)
    assert session_queues() == "second"
    monkeypatch.setenv("TORCHX_TEST_CLUSTER_QUEUES", "third")
    assert session_queues() == "third"
    monkeypatch.setenv("TORCHX_TEST_CLUSTER_QUEUES", "fourth")
    with pytest.raises(ValueError, match="use 'second' or 'third'"):
        session_queues()


def _enter(exclusive: bool, entered: list[str], name: str, leave: threading.Event) -> None:
    with cluster_turn(exclusive):
        entered.append(name)
        leave.wait(10)


def test_a_quiet_test_waits_for_the_other_sessions_tests_and_passes_before_new_ones(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TORCHX_TEST_CLUSTER_LOCK", str(tmp_path / "turn.lock"))
    entered: list[str] = []
    leave_first, leave_quiet, leave_later = threading.Event(), threading.Event(), threading.Event()
    first = threading.Thread(target=_enter, args=(False, entered, "first", leave_first))
    quiet = threading.Thread(target=_enter, args=(True, entered, "quiet", leave_quiet))
    later = threading.Thread(target=_enter, args=(False, entered, "later", leave_later))
    first.start()
    time.sleep(0.2)
    quiet.start()  # waits for "first" to end
    time.sleep(0.2)
    later.start()  # comes after "quiet", which is waiting: it waits too
    time.sleep(0.3)
    assert entered == ["first"]
    leave_first.set()
    first.join(5)
    time.sleep(0.3)
    assert entered == ["first", "quiet"]
    leave_later.set()
    leave_quiet.set()
    quiet.join(5)
    later.join(5)
    assert entered == ["first", "quiet", "later"]


def test_shared_turns_run_together_and_nothing_is_held_without_a_lock(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TORCHX_TEST_CLUSTER_LOCK", str(tmp_path / "turn.lock"))
    with cluster_turn(False), cluster_turn(False):
        pass
    monkeypatch.delenv("TORCHX_TEST_CLUSTER_LOCK")
    with cluster_turn(True), cluster_turn(True):
        pass
