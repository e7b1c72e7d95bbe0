"""An image pull a submission can cut short: at the end of the wait it may take
(``queue_timeout``), or when the submission is stopped (a task killed).

The engine sends the first byte of its answer to a pull only once the registry has
answered it: a registry that accepts connections and never answers holds the request
without a byte for 25 s (Docker 20.10's own limits), and a pull that keeps moving may last
any time. So :func:`bounded_pull` asks with a read timeout of the time left, which ends a
request still unanswered at the deadline; once the engine streams, a watcher thread shuts
the connection's socket at the deadline or the stop. Either way the connection closes, and
the engine cancels the pull: it makes no further attempt at the registry (one attempt in
flight runs out on its own, 10 s at most). A stop before the engine's first byte takes
effect at that byte or at the deadline: the request has no socket to shut until then.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torchx_provider.schedulers.docker.logbody import shut

if TYPE_CHECKING:
    from torchx_provider.schedulers.docker.apitypes import DockerApi

#: Seconds between two looks of the watcher of a streaming pull at its deadline and stop.
WATCH_POLL = 0.1

#: Seconds a pull request may take to connect to the engine (not the pull itself).
CONNECT_TIMEOUT = 60.0


@dataclass(frozen=True)
class PullBound:
    """What cuts a pull short: ``stop`` set, or ``deadline`` (on ``time.monotonic()``)
    passed; ``None``: no deadline.

    >>> b = PullBound(deadline=10.0)
    >>> b.left(4.0), b.over(4.0), b.over(10.0), PullBound().left(4.0)
    (6.0, False, True, None)
    """

    stop: threading.Event = field(default_factory=threading.Event)
    deadline: float | None = None

    def left(self, now: float) -> float | None:
        """Seconds until the deadline (at least 0), ``None`` without one."""
        return None if self.deadline is None else max(0.0, self.deadline - now)

    def over(self, now: float) -> bool:
        """Whether a pull must stop now."""
        return self.stop.is_set() or (self.deadline is not None and now >= self.deadline)


class PullCut(Exception):
    """A pull was cut short by its :class:`PullBound` (the caller says why)."""


def bounded_pull(
    api: DockerApi,
    repo: str,
    tag: str,
    auth_config: Mapping[str, str] | None,
    bound: PullBound,
) -> Iterator[Mapping[str, Any]]:
    """The engine's events of a pull of ``repo:tag`` (``api``: a docker ``APIClient``), as
    ``APIClient.pull(stream=True, decode=True)`` gives them, ended by :class:`PullCut` when
    ``bound`` cuts it short (see the module docstring). Errors of the engine are raised as
    the docker SDK raises them."""
    import requests

    if bound.over(time.monotonic()):
        raise PullCut()
    left = bound.left(time.monotonic())
    try:
        response = api._post(
            api._url("/images/create"),
            params={"fromImage": repo, "tag": tag},
            headers=_auth_headers(api, repo, auth_config),
            stream=True,
            timeout=None if left is None else (CONNECT_TIMEOUT, max(left, 0.01)),
        )
    except requests.exceptions.ReadTimeout as e:
        raise PullCut() from e
    api._raise_for_status(response)
    cut = threading.Event()
    finished = threading.Event()

    def watch() -> None:
        while not finished.wait(WATCH_POLL):
            if bound.over(time.monotonic()):
                cut.set()
                shut(response)
                return

    watcher = threading.Thread(target=watch, name="torchx-docker-pull-watch", daemon=True)
    watcher.start()
    try:
        for event in api._stream_helper(response, decode=True):
            if cut.is_set():
                break
            yield event
    except Exception as e:
        # cut by the watcher, or by the read timeout at the deadline (whichever came first)
        if not (cut.is_set() or bound.over(time.monotonic())):
            raise
        raise PullCut() from e
    finally:
        finished.set()
        response.close()
    if cut.is_set():
        raise PullCut()


def _auth_headers(
    api: DockerApi, repo: str, auth_config: Mapping[str, str] | None
) -> dict[str, Any]:
    """The registry credentials of a pull, as the docker SDK sends them: ``auth_config``,
    else what the engine's client configuration holds for the registry (none: no header)."""
    from docker import auth

    if auth_config is not None:
        return {"X-Registry-Auth": auth.encode_header(dict(auth_config))}
    registry, _ = auth.resolve_repository_name(repo)
    header = auth.get_config_header(api, registry)
    return {"X-Registry-Auth": header} if header else {}
