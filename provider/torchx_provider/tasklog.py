"""What a follow and the operator's steps write their lines to: the task's logger (on the
worker) or the trigger's (in the triggerer): a :class:`logging.Logger`, or the logger
Airflow gives a task."""

from __future__ import annotations

from typing import Any, Protocol


class TaskLogger(Protocol):
    """The two levels the follow and the operator's steps write at."""

    def info(self, msg: str, /, *args: Any) -> None:
        """A line of progress (``%``-style arguments, as :mod:`logging` takes them)."""

    def warning(self, msg: str, /, *args: Any) -> None:
        """A line about something that went wrong but did not end the task."""
