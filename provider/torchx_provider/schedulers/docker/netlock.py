"""One creator at a time for a named Docker network, across the processes of a host.

The Docker engine does not make network names unique atomically: two submits that look up a
missing network at the same moment may both create it. :func:`.state.oldest_network` settles
which one every submitter uses when both are visible, but a create still in flight when
another submitter looks is not visible yet, and the two can then settle on different networks.
Workers and triggerers are separate processes, so a lock in memory is not enough: this one is
an advisory file lock (``flock``) in the temporary directory, keyed by the engine's address and
the network's name. It serialises every submitter on one host, whichever thread or process;
submitters on other hosts (a remote engine) still rely on the oldest-network rule.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Iterator

log = logging.getLogger(__name__)

#: Seconds a submitter waits for another one creating the same network before it goes on
#: without the lock (it then relies on the oldest-network rule alone).
WAIT = 60.0
_POLL = 0.02


def lock_path(engine: str, network: str) -> str:
    """The lock file of ``network`` on the engine at ``engine`` (its base URL)."""
    digest = hashlib.sha256(f"{engine}\0{network}".encode()).hexdigest()[:24]
    return os.path.join(tempfile.gettempdir(), f"torchx-docker-network-{digest}.lock")


@contextlib.contextmanager
def network_lock(engine: str, network: str, wait: float = WAIT) -> Iterator[bool]:
    """Hold the host-wide lock of ``network`` for the body; yields whether it is held.

    Yields False, after logging why, when the lock file cannot be opened (another user's,
    a read-only directory) or another holder kept it for ``wait`` seconds: creating the
    network goes on, as it would without the lock.
    """
    path = lock_path(engine, network)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        log.info("not locking the creation of Docker network %r (%s): %s", network, path, e)
        yield False
        return
    try:
        held = _acquire(fd, time.monotonic() + wait)
        if not held:
            log.warning(
                "Docker network %r: another submitter held %s for %.0f s; creating it "
                "without the lock",
                network,
                path,
                wait,
            )
        try:
            yield held
        finally:
            if held:
                _flock(fd, unlock=True)
    finally:
        os.close(fd)


def _flock(fd: int, *, unlock: bool = False) -> None:
    import fcntl  # POSIX only, as Airflow is

    fcntl.flock(fd, fcntl.LOCK_UN if unlock else fcntl.LOCK_EX | fcntl.LOCK_NB)


def _acquire(fd: int, deadline: float) -> bool:
    while True:
        try:
            _flock(fd)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL)
