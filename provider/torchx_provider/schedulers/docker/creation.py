"""Creating an app's containers: how many at a time, what the log says, and what a creation
cut short leaves behind. Pure: no docker import, no I/O.

:meth:`~.engine.DockerEngine.run` creates and starts an app's containers a window at a time
(:func:`creation_window`), logs its progress every :data:`PROGRESS_INTERVAL` seconds
(:func:`progress_line`), and removes them all when one fails or the submission is stopped or
interrupted. A submitter killed outright (SIGKILL, a lost worker) removes nothing: what it
created carries the app's labels, and :func:`cut_short` tells the next try that the app is
not whole, so that it removes it and submits anew instead of following a gang with replicas
missing.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchx_provider.schedulers.docker.state import ContainerInfo
from torchx_provider.schedulers.docker.translation import LABEL_CONTAINERS

#: Containers created and started at a time (fewer with a smaller connection pool). On 2
#: CPUs the engine's own work per start (network endpoint, init) is the limit: 3.6 a second
#: one at a time, 5.1 four at a time, 4.8-5.3 sixteen at a time (200 replicas); eight at a
#: time was a fifth slower than sixteen on a busy machine, and 32 no faster.
CREATE_WINDOW = 16

#: Seconds between two progress lines of a creation that takes longer than that.
PROGRESS_INTERVAL = 5.0


def creation_window(pool_size: int, total: int) -> int:
    """Containers in flight at a time: :data:`CREATE_WINDOW`, at most the engine
    connection's pool, at most the app, at least one.

    >>> creation_window(16, 1000), creation_window(4, 1000), creation_window(32, 2)
    (16, 4, 2)
    """
    return max(1, min(CREATE_WINDOW, pool_size, total))


def progress_line(app_id: str, done: int, total: int, elapsed: float) -> str:
    """One line of a creation's progress, with its rate and what is left.

    >>> progress_line("big-1", 250, 1000, 50.0)
    'app big-1: 250 of 1,000 containers created and started (5.0 a second, about 150 s to go)'
    """
    rate = done / elapsed if elapsed > 0 else 0.0
    left = f", about {(total - done) / rate:.0f} s to go" if rate > 0 and done < total else ""
    return (
        f"app {app_id}: {done:,} of {total:,} containers created and started "
        f"({rate:.1f} a second{left})"
    )


def cut_short(containers: Sequence[ContainerInfo]) -> str:
    """What shows that the creation of the app made of ``containers`` was cut short: fewer
    containers than it declares (:data:`~.translation.LABEL_CONTAINERS`), or some never
    started (every container is started right after it is created). Empty when neither.

    Such an app cannot run as submitted (its gang lacks replicas) and never will.
    """
    declared = max((_declared(c) for c in containers), default=0)
    never_started = sum(1 for c in containers if c.status == "created")
    found = []
    if len(containers) < declared:
        found.append(f"{len(containers):,} of its {declared:,} containers exist")
    if never_started:
        found.append(f"{never_started:,} never started")
    return ", ".join(found)


def _declared(c: ContainerInfo) -> int:
    value = c.labels.get(LABEL_CONTAINERS, "")
    return int(value) if value.isdigit() else 0
