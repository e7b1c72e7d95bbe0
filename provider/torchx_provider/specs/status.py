"""An app's status as ``torchx.specs.AppStatus`` gives it: state, restarts, messages, roles.

TorchX code reads a run's outcome from an :class:`AppStatus`: ``status.is_terminal()``,
``status.raise_for_status()``, ``print(status.format())`` or ``print(status)``. The same
calls work here, with the same text; the schedulers' ``describe`` answers (``state``,
``num_restarts``, ``msg``, ``structured_error_msg``, ``ui_url``, ``roles_statuses``) hold
what it is made of.

>>> status = AppStatus(AppState.FAILED, msg="replica trainer/0 exited with 1")
>>> status.is_terminal()
True
>>> status.raise_for_status()
Traceback (most recent call last):
...
torchx_provider.specs.exceptions.AppStatusError: job did not succeed: AppStatus:
  msg: replica trainer/0 exited with 1
  num_restarts: 0
  roles: []
  state: FAILED (5)
  structured_error_msg: <NONE>
  ui_url: null
<BLANKLINE>
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import yaml

from torchx_provider.specs.api import NONE, AppState, ReplicaStatus, RoleStatus, is_terminal
from torchx_provider.specs.exceptions import AppStatusError

# The part of a message that is a torch.distributed.rpc error raised on another worker:
# ``RuntimeError('On WorkerInfo(id=1, name=trainer:0:0):\n<its traceback>\n')``.
_RPC_ERROR = re.compile(r"\w*\('On WorkerInfo\(.+\):\n(?:.*\n)*'\)")
# An error written inside another's message rather than chained to it: only the line just
# before the first line starting with ``Exception`` is shown (``c10::Error: CUDA error: ...``
# then ``Exception raised from ...``).
_NESTED_ERROR = re.compile(r"(?P<msg>.+)\nException")

#: The width :meth:`AppStatus.format` wraps an error message at.
_WIDTH = 80


def _state_text(state: Any) -> Any:
    """A state as TorchX's ``repr(AppState)`` writes it: ``FAILED (5)``."""
    return f"{state.name} ({state.value})" if isinstance(state, AppState) else state


def _wrapped(msg: str, header: str, width: int = _WIDTH) -> str:
    """``header`` then ``msg``, broken before a space once a line holds ``width`` characters
    of it; the lines after the first are indented as far as the header reaches."""
    if len(header) >= width:
        raise ValueError(f"header {header!r} is not shorter than the width {width}")
    match = _RPC_ERROR.search(msg)
    if match:
        msg = match.group(0)
    match = _NESTED_ERROR.search(msg)
    if match:
        msg = match.group("msg")
    starts = [0]
    for i, char in enumerate(msg):
        if char == " " and i - starts[-1] >= width:
            starts.append(i)
    ends = [*starts[1:], len(msg)]
    indent = " " * len(header)
    return "\n".join(
        (indent if n else header) + msg[start:end]
        for n, (start, end) in enumerate(zip(starts, ends, strict=True))
    )


def _error_file(text: str) -> tuple[str, int, Any] | None:
    """The message, timestamp and exit code of TorchX's JSON error file, or None when
    ``text`` is not one (a backend's plain message)."""
    try:
        data = json.loads(text)
        error = data["message"]
        return str(error["message"]), int(error["extraInfo"]["timestamp"]), error["errorCode"]
    except (ValueError, TypeError, KeyError):
        return None


@dataclass
class AppStatus:
    """The status of an app (TorchX's ``AppStatus``).

    Args:
        state: the app's state.
        num_restarts: how many times the app was restarted.
        msg: what the backend says about it.
        structured_error_msg: the error, as TorchX's JSON error file or as text.
        ui_url: where a backend's UI shows the app.
        roles: each role's replicas, of the latest attempt when the app was retried.
    """

    state: AppState
    num_restarts: int = 0
    msg: str = ""
    structured_error_msg: str = NONE
    ui_url: str | None = None
    roles: list[RoleStatus] = field(default_factory=list)

    def is_terminal(self) -> bool:
        """Whether the app has ended (SUCCEEDED, FAILED or CANCELLED)."""
        return is_terminal(self.state)

    def raise_for_status(self) -> None:
        """Raise :class:`~torchx_provider.specs.AppStatusError` unless the app SUCCEEDED."""
        if self.state != AppState.SUCCEEDED:
            raise AppStatusError(self, f"job did not succeed: {self}")

    def __repr__(self) -> str:
        """The status as YAML, its structured error read as JSON when it is JSON."""
        data = dataclasses.asdict(self)
        data["state"] = _state_text(self.state)
        error: Any = self.structured_error_msg
        if error != NONE:
            # a backend's plain message is shown as it is
            with contextlib.suppress(TypeError, ValueError):
                error = json.loads(error)
        data["structured_error_msg"] = error
        for role in data["roles"]:
            for replica in role["replicas"]:
                replica["state"] = _state_text(replica["state"])
        return yaml.safe_dump({"AppStatus": data})

    def format(self, filter_roles: list[str] | None = None) -> str:
        """The status as text for people: state, restarts, each replica of the roles in
        ``filter_roles`` (all roles when not given) with its error, message, UI URL."""
        roles = [r for r in self.roles if not filter_roles or r.role in filter_roles]
        replicas = "".join(
            self._replica_text(replica)
            for role in roles
            for replica in sorted(role.replicas, key=lambda r: r.id)
        )
        return (
            "AppStatus:\n"
            f"    State: {self.state}\n"
            f"    Num Restarts: {self.num_restarts}\n"
            f"    Roles: {replicas}\n"
            f"    Msg: {self.msg}\n"
            f"    Structured Error Msg: {self.structured_error_msg}\n"
            f"    UI URL: {self.ui_url}\n"
            "    "
        )

    @staticmethod
    def _replica_text(replica: ReplicaStatus) -> str:
        """One replica's lines; the first replica of each role is marked ``*``."""
        mark = "*" if replica.id == 0 else " "
        head = f"\n {mark}{replica.role}[{replica.id}]:{replica.state}"
        error = replica.structured_error_msg
        if error == NONE:
            failed = replica.state in (AppState.CANCELLED, AppState.FAILED)
            return head + (" (no reply file)" if failed else "")
        found = _error_file(error)
        if found is None:  # a backend's own message
            message, when, exit_code = error, None, replica.exit_code
        else:
            message, timestamp, exit_code = found
            when = datetime.fromtimestamp(timestamp)
        lines = [f"{head} (exitcode: {exit_code or '<N/A>'})"]
        if when is not None:
            lines.append(f"        timestamp: {when}")
        lines.append(f"        hostname: {replica.hostname}")
        lines.append("    " + _wrapped(message, "    error_msg: "))
        return "\n".join(lines)
