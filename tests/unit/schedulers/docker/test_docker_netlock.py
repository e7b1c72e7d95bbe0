"""The host-wide lock around creating a Docker network (it spans processes, not only threads)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from torchx_provider.schedulers.docker import netlock
from torchx_provider.schedulers.docker.netlock import lock_path, network_lock

HOLD = """
import sys, time
from torchx_provider.schedulers.docker.netlock import network_lock
with network_lock(sys.argv[1], sys.argv[2]) as held:
    print("held" if held else "free", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def tmpdir_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(netlock.tempfile, "gettempdir", lambda: str(tmp_path))
    return tmp_path


def holder(engine: str, network: str, tmp: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, engine, network],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"TMPDIR": str(tmp), "PATH": "/usr/bin:/bin"},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_another_process_holding_the_lock_makes_a_submitter_wait(tmpdir_locks: Path) -> None:
    proc = holder("unix:///run/docker.sock", "torchx", tmpdir_locks)
    try:
        with network_lock("unix:///run/docker.sock", "torchx", wait=0.3) as held:
            assert held is False  # gave up waiting: creation goes on without it
        acquired: list[float] = []

        def take() -> None:
            with network_lock("unix:///run/docker.sock", "torchx", wait=30) as held:
                assert held
                acquired.append(time.monotonic())

        waiter = threading.Thread(target=take)
        waiter.start()
        time.sleep(0.3)
        assert acquired == []  # still waiting for the other process
        released = time.monotonic()
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        waiter.join(timeout=30)
        assert acquired and acquired[0] >= released
    finally:
        proc.kill()
        proc.wait()


def test_other_networks_and_engines_are_not_held(tmpdir_locks: Path) -> None:
    proc = holder("unix:///run/docker.sock", "torchx", tmpdir_locks)
    try:
        for engine, network in (("unix:///run/docker.sock", "other"), ("tcp://h:2375", "torchx")):
            with network_lock(engine, network, wait=0) as held:
                assert held
    finally:
        proc.kill()
        proc.wait()


def test_threads_of_one_process_exclude_each_other(tmpdir_locks: Path) -> None:
    inside = 0
    most = 0
    guard = threading.Lock()

    def enter() -> None:
        nonlocal inside, most
        with network_lock("e", "n", wait=30) as held:
            assert held
            with guard:
                inside += 1
                most = max(most, inside)
            time.sleep(0.02)
            with guard:
                inside -= 1

    threads = [threading.Thread(target=enter) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert most == 1


def test_an_unopenable_lock_file_does_not_stop_creation(tmpdir_locks: Path) -> None:
    Path(lock_path("e", "n")).mkdir()  # a directory where the file should be
    with network_lock("e", "n", wait=0) as held:
        assert held is False


def test_lock_files_are_named_by_engine_and_network(tmpdir_locks: Path) -> None:
    paths = {lock_path(e, n) for e in ("a", "b") for n in ("x", "y")}
    assert len(paths) == 4
    assert all(Path(p).parent == tmpdir_locks for p in paths)
