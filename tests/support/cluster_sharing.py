"""Two sessions of the Kubernetes tier on one cluster at the same time.

The Kubernetes tier can run more than once at a time on one cluster: in the main environment,
and with the lowest client libraries, whose tier CI runs as two sessions at once
(``scripts/other_versions.sh 3.3.2+lowest@cluster``, see docs/development.md). Objects with
random names never meet; what the tests name themselves, and what they count cluster-wide,
would. So:

* a session that shares the cluster with another run of the same tests has a tag
  (``TORCHX_TEST_CLUSTER_TAG``, a few lowercase letters): the names the tests choose
  (ServiceAccounts and Roles, ClusterRoles, the DAG ids of task instance keys, workspace
  images) end with it, and it takes a spare pair of the cluster's Kueue queues (a
  ClusterQueue with the same quota, in no cohort: the quota tests fill and the preemptions
  they count stay its own): the second, or the third (:func:`session_queues`);
* a test that counts what the API server holds for every client (its open watches) is marked
  ``cluster_quiet``: where ``TORCHX_TEST_CLUSTER_LOCK`` names a lock file, it runs while no
  test of the other session does (:func:`cluster_turn`), and every other test of the tier
  waits for it to end.

The test command's own two processes on the cluster at once ('kube' and 'rows',
scripts/test.sh) share such a lock as well, a file of their own where none is set: the fault
rows and the Airflow deployment's triggerer open watches of their own.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from pathlib import Path

TAG_VARIABLE = "TORCHX_TEST_CLUSTER_TAG"
LOCK_VARIABLE = "TORCHX_TEST_CLUSTER_LOCK"
QUEUES_VARIABLE = "TORCHX_TEST_CLUSTER_QUEUES"


def session_tag() -> str:
    """This session's tag, or "" in a session that has the cluster's names to itself."""
    tag = os.environ.get(TAG_VARIABLE, "")
    if tag and not re.fullmatch(r"[a-z]{1,6}", tag):
        raise ValueError(f"{TAG_VARIABLE}={tag!r}: use 1 to 6 lowercase letters")
    return tag


def session_queues() -> str:
    """Which of the cluster's spare pairs of Kueue queues a tagged session takes: the
    ``second`` (the default), or the ``third`` (free once the real node's training tier,
    whose pair it is, has run; a second tagged session at the same time takes it,
    ``TORCHX_TEST_CLUSTER_QUEUES=third``)."""
    which = os.environ.get(QUEUES_VARIABLE, "second")
    if which not in ("second", "third"):
        raise ValueError(f"{QUEUES_VARIABLE}={which!r}: use 'second' or 'third'")
    return which


def tagged(name: str, limit: int = 63) -> str:
    """``name`` with this session's tag at its end (cut to ``limit`` characters with it)."""
    tag = session_tag()
    if not tag:
        return name[:limit]
    suffix = f"-{tag}"
    return name[: limit - len(suffix)] + suffix


@contextlib.contextmanager
def cluster_turn(exclusive: bool) -> Iterator[None]:
    """Hold the sessions' shared lock while a test runs: shared for most tests, exclusive
    for a ``cluster_quiet`` one. A turnstile lock taken first keeps a waiting exclusive test
    from being passed forever by the other session's shared turns. Nothing to hold where
    ``TORCHX_TEST_CLUSTER_LOCK`` is unset."""
    path = os.environ.get(LOCK_VARIABLE)
    if not path:
        yield
        return
    lock = Path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+") as main, open(f"{lock}.turnstile", "a+") as turnstile:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(main, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(main, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


#: the DAG id of the task instance keys the Kubernetes tier's tests label their apps with
#: (the provider finds a task's apps by that key: another session's must not match)
IT_DAG = tagged("it_dag")
