"""The operator's options, grouped into small typed objects and checked when the DAG is parsed.

Pure: no Airflow, no clients. :class:`Lifecycle` says what happens to the job around the
task (submit or reattach, wait, kill, finish); :class:`Following` says how the task follows
it (deferred or on the worker, how often, whose logs, how long).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from torchx_provider.errors import InvalidOptionError
from torchx_provider.triggers.policy import OUTAGE_BUDGET, positive_seconds
from torchx_provider.triggers.progress import ProgressPattern
from torchx_provider.triggers.selection import LogSelection


class OnKillAction(str, enum.Enum):
    """What killing the task (``on_kill``: mark failed/success, clear) or its timeout
    (``execution_timeout``, ``follow_timeout``) does to the job."""

    CANCEL = "cancel"
    KEEP = "keep"


class OnFinishAction(str, enum.Enum):
    """What happens to the job's backend objects once it finished and the task saw it."""

    #: delete them whatever the outcome
    DELETE = "delete"
    #: leave them (their logs stay readable on the backend)
    KEEP = "keep"
    #: delete them when the app succeeded; keep failed ones for inspection
    DELETE_SUCCEEDED = "delete_succeeded"


#: The longest wait, budget or timeout an option may give: ten years. Longer ones are
#: mistakes (a unit, a misplaced digit) and would overflow the dates a deadline is kept in.
MAX_SECONDS = 10 * 365 * 24 * 3600


def _flag(value: object, name: str) -> bool:
    """A true/false option; anything else (``"false"``, ``0``) is refused, since Python would
    read a non-empty string as true."""
    if not isinstance(value, bool):
        raise InvalidOptionError(
            f"{name} must be True or False, got {type(value).__name__} {value!r}", name
        )
    return value


def check_session_name(value: object) -> str:
    """The session part of app handles (``{scheduler}://{session}/{app_id}``): a string
    without ``/``, whitespace or control characters, which would make the handle unreadable.

    >>> check_session_name("airflow")
    'airflow'
    """
    if not isinstance(value, str) or any(
        c == "/" or not c.isprintable() or c.isspace() for c in value
    ):
        raise InvalidOptionError(
            f"session_name must be a string without '/', spaces or control characters, got "
            f"{value!r}; e.g. session_name='airflow'",
            "session_name",
        )
    return value


def check_scheduler(given: object, fixed: str | None, operator: str) -> str:
    """The backend a task runs on. ``TorchXOperator`` (``fixed`` is ``None``) takes it from
    ``scheduler=`` and has no default: a DAG that forgets it would otherwise run on whatever
    backend the default named. An operator fixed to one backend (``fixed``) takes no other:
    ``scheduler=`` may be left out or repeat it.

    >>> check_scheduler(None, "kubernetes", "TorchXKubernetesOperator")
    'kubernetes'
    >>> check_scheduler("local_docker", None, "TorchXOperator")
    'local_docker'
    """
    if fixed is None:
        if given is None or given == "":
            raise InvalidOptionError(
                f"{operator} needs scheduler=, the backend to run the app on: one of "
                f"{_backend_choices()}; e.g. scheduler='local_docker', or use the operator "
                "fixed to a backend (TorchXDockerOperator, TorchXKubernetesOperator, ...)",
                "scheduler",
            )
        if not isinstance(given, str):
            raise InvalidOptionError(
                f"scheduler must be a backend name (a string) such as 'kubernetes', got "
                f"{type(given).__name__} {given!r}",
                "scheduler",
            )
        return given
    if given is None or given == "" or given == fixed:
        return fixed
    raise InvalidOptionError(
        f"{operator} runs on scheduler={fixed!r} only, got scheduler={given!r}; leave "
        f"scheduler= out, or use {_operator_for(given)}",
        "scheduler",
    )


def _backend_choices() -> str:
    """The backends ``scheduler=`` takes, each with the operator fixed to it (read from the
    backend table only when a message needs them: a parse never does)."""
    from torchx_provider.backends import backends

    return ", ".join(
        f"{name!r} ({row.title}, {row.operator.rpartition(':')[2]})"
        for name, row in backends().items()
    )


def _operator_for(name: object) -> str:
    """What runs ``name``: the operator fixed to it, or ``TorchXOperator(scheduler=...)``."""
    from torchx_provider.backends import backends

    row = backends().get(name) if isinstance(name, str) else None
    if row is None:
        return f"TorchXOperator(scheduler=...) with one of {sorted(backends())}"
    return f"{row.operator.rpartition(':')[2]} (or TorchXOperator(scheduler={name!r}))"


def _enum(cls: type[enum.Enum], value: object, name: str) -> enum.Enum:
    try:
        return cls(value.value if isinstance(value, enum.Enum) else str(value).lower())
    except ValueError:
        valid = [m.value for m in cls]
        raise InvalidOptionError(f"{name}={value!r} is not one of {valid}", name) from None


@dataclass(frozen=True)
class Lifecycle:
    """What the task does with the job.

    Args:
        wait_for_completion: follow the job to the end (``False``: submit, push the app
            handle and succeed at once).
        on_kill_action: ``cancel`` (default) or ``keep`` the job when the task is killed.
        on_finish_action: ``delete``, ``keep`` or ``delete_succeeded`` (default).
        reattach: on a retry, follow a job an earlier try of this task instance left running
            instead of submitting a new one (default). Off: such a job is cancelled first, so
            there are never two live jobs for one task instance.
    """

    wait_for_completion: bool = True
    on_kill_action: OnKillAction = OnKillAction.CANCEL
    on_finish_action: OnFinishAction = OnFinishAction.DELETE_SUCCEEDED
    reattach: bool = True

    @classmethod
    def build(
        cls,
        wait_for_completion: bool = True,
        on_kill_action: str | OnKillAction = OnKillAction.CANCEL,
        on_finish_action: str | OnFinishAction = OnFinishAction.DELETE_SUCCEEDED,
        reattach: bool = True,
    ) -> Lifecycle:
        """Check and convert the operator's keyword arguments."""
        return cls(
            wait_for_completion=_flag(wait_for_completion, "wait_for_completion"),
            on_kill_action=_enum(OnKillAction, on_kill_action, "on_kill_action"),  # type: ignore[arg-type]
            on_finish_action=_enum(OnFinishAction, on_finish_action, "on_finish_action"),  # type: ignore[arg-type]
            reattach=_flag(reattach, "reattach"),
        )

    def deletes(self, succeeded: bool) -> bool:
        """Whether a finished job is deleted."""
        return self.on_finish_action == OnFinishAction.DELETE or (
            succeeded and self.on_finish_action == OnFinishAction.DELETE_SUCCEEDED
        )


@dataclass(frozen=True)
class Following:
    """How the task follows the job.

    Args:
        deferrable: hand the waiting to the triggerer (frees the worker slot).
        poll_interval: seconds between state/log reads (> 0).
        log_replicas: whose logs reach the task log: ``None`` (all), or patterns such as
            ``["trainer"]``, ``["trainer/0", "ps/*"]``; ``[]`` forwards none.
        outage_budget: seconds of backend outage a follow rides out before it gives up
            (> 0; the task then fails and a retry reattaches to the job).
        follow_timeout: seconds of following after which the job is cancelled (per
            ``on_kill_action``) and the task fails; ``None``: only ``execution_timeout``.
        queue_timeout: seconds the app may wait to run, per wait (from the submission, and
            from each preemption or requeue), after which the job is cancelled (per
            ``on_kill_action``) and the task fails; ``None``: no limit of its own.
        stall_timeout: seconds no replica of the running app may go without moving (a
            line, or a new step) before the job is cancelled (per ``on_kill_action``) and
            the task fails with ``AppStalledError``; ``None``: no limit.
        straggler_after: seconds without moving after which a replica whose peers went on
            is named in the task log; ``None``: none is named.
        progress_pattern: a regular expression whose group (``step``, or the first) is a
            replica's step in its lines; ``None``: the app's own (a component's), if any.
    """

    deferrable: bool = False
    poll_interval: float = 10.0
    log_replicas: tuple[str, ...] | None = None
    outage_budget: float = OUTAGE_BUDGET
    follow_timeout: float | None = None
    queue_timeout: float | None = None
    stall_timeout: float | None = None
    straggler_after: float | None = None
    progress_pattern: str | None = None

    @classmethod
    def build(
        cls,
        deferrable: bool = False,
        poll_interval: float = 10.0,
        log_replicas: str | Iterable[str] | None = None,
        outage_budget: float | timedelta = OUTAGE_BUDGET,
        follow_timeout: float | timedelta | None = None,
        queue_timeout: float | timedelta | None = None,
        stall_timeout: float | timedelta | None = None,
        straggler_after: float | timedelta | None = None,
        progress_pattern: str | None = None,
    ) -> Following:
        replicas = LogSelection.parse(_log_replicas(log_replicas)).patterns
        return cls(
            deferrable=_flag(deferrable, "deferrable"),
            poll_interval=_seconds(poll_interval, "poll_interval"),
            log_replicas=replicas,
            outage_budget=_seconds(outage_budget, "outage_budget"),
            follow_timeout=_optional_seconds(follow_timeout, "follow_timeout"),
            queue_timeout=_optional_seconds(queue_timeout, "queue_timeout"),
            stall_timeout=_optional_seconds(stall_timeout, "stall_timeout"),
            straggler_after=_optional_seconds(straggler_after, "straggler_after"),
            progress_pattern=None
            if progress_pattern is None
            else ProgressPattern.parse(progress_pattern).source,
        )

    @property
    def selection(self) -> LogSelection:
        """``log_replicas`` as the follow loop asks it."""
        return LogSelection(self.log_replicas)


#: the run option (a key of a dict ``cfg``) that gives ``progress_pattern``; taken out of the
#: run options before they reach the backend
PROGRESS_OPTION = "progress_pattern"


def split_progress_pattern(cfg: Any) -> tuple[Any, str | None]:
    """``cfg`` without its ``progress_pattern`` run option, and that option (``None``: not
    given). Only a dict ``cfg`` carries it (a regular expression does not fit TorchX's
    ``"key=value,..."`` form).

    >>> split_progress_pattern({"queue": "q", "progress_pattern": "step ([0-9]+)"})
    ({'queue': 'q'}, 'step ([0-9]+)')
    >>> split_progress_pattern("queue=q")
    ('queue=q', None)
    """
    if not isinstance(cfg, Mapping) or PROGRESS_OPTION not in cfg:
        return cfg, None
    rest = {k: v for k, v in cfg.items() if k != PROGRESS_OPTION}
    return rest, ProgressPattern.parse(cfg[PROGRESS_OPTION], f"cfg[{PROGRESS_OPTION!r}]").source


def progress_following(following: Following, from_cfg: str | None, app: Any) -> Following:
    """``following`` with the app's progress pattern settled: the operator's
    ``progress_pattern``, else the run option's, else the one the app names in its metadata
    (:data:`~torchx_provider.triggers.progress.PROGRESS_METADATA_KEY`: a built-in component
    names its script's); checked as the operator's would be."""
    from torchx_provider.specs.metadata import PROGRESS_METADATA_KEY

    if following.progress_pattern is not None:
        return following
    pattern = from_cfg
    if pattern is None:
        named = (getattr(app, "metadata", None) or {}).get(PROGRESS_METADATA_KEY)
        if named is None:
            return following
        where = f"the app's metadata {PROGRESS_METADATA_KEY!r}"
        pattern = ProgressPattern.parse(named, where).source
    return dataclasses.replace(following, progress_pattern=pattern)


def _log_replicas(value: object) -> str | list[str] | None:
    """``log_replicas`` as :meth:`LogSelection.parse` takes it: ``None``, a string, or a list
    (any iterable) of strings; anything else names the option."""
    if value is None or isinstance(value, str):
        return value
    items = list(value) if isinstance(value, Iterable) else None
    if items is None or not all(isinstance(v, str) for v in items):
        raise InvalidOptionError(
            f"log_replicas must be a string or a list of strings such as ['trainer/0', "
            f"'ps/*'], got {value!r}",
            "log_replicas",
        )
    return items


def _seconds(value: object, name: str) -> float:
    """A positive, finite number of seconds of at most :data:`MAX_SECONDS`."""
    seconds = positive_seconds(value, name)
    if seconds > MAX_SECONDS:
        raise InvalidOptionError(
            f"{name} must be at most {MAX_SECONDS:,} seconds (ten years), got {value!r}", name
        )
    return seconds


def _optional_seconds(value: object, name: str) -> float | None:
    """:func:`_seconds` of ``value``, or ``None`` where it is not set."""
    return None if value is None else _seconds(value, name)


class TaskOptions(NamedTuple):
    """A task's checked options (see :func:`task_options`)."""

    lifecycle: Lifecycle
    following: Following
    #: ``deferrable=None``: :attr:`TorchXOperator.following` reads Airflow's setting first
    default_deferrable: bool

    def settled(self) -> TaskOptions:
        """These options, ``deferrable=None`` replaced by Airflow's ``[operators]
        default_deferrable``: read on first use rather than when the task is built, since a
        parse builds every task of the file, and reading the setting cost about a quarter
        of what building a task costs Airflow itself."""
        if not self.default_deferrable:
            return self
        from torchx_provider.compat import airflow_conf

        deferrable = airflow_conf().getboolean("operators", "default_deferrable", fallback=False)
        following = dataclasses.replace(self.following, deferrable=deferrable)
        return self._replace(following=following, default_deferrable=False)


def _build_options(
    wait_for_completion: Any,
    on_kill_action: Any,
    on_finish_action: Any,
    reattach: Any,
    deferrable: Any,
    poll_interval: Any,
    log_replicas: Any,
    outage_budget: Any,
    follow_timeout: Any,
    queue_timeout: Any,
    stall_timeout: Any = None,
    straggler_after: Any = None,
    progress_pattern: Any = None,
) -> TaskOptions:
    """Check the operator's options, each failing with its own message."""
    return TaskOptions(
        Lifecycle.build(wait_for_completion, on_kill_action, on_finish_action, reattach),
        Following.build(
            False if deferrable is None else deferrable,
            poll_interval,
            log_replicas,
            outage_budget,
            follow_timeout,
            queue_timeout,
            stall_timeout,
            straggler_after,
            progress_pattern,
        ),
        deferrable is None,
    )


# The tasks of a sweep repeat the same options, and the checked objects are immutable: they
# are kept per distinct arguments. Only arguments that passed their checks are kept (a bad
# one raises, with its message, every time), and ``typed`` keeps ``1`` apart from ``True``
# and ``"keep"`` apart from ``OnKillAction.KEEP``.
_cached_options = functools.lru_cache(maxsize=64, typed=True)(_build_options)


def task_options(*args: Any) -> TaskOptions:
    """:func:`_build_options`, from the cache when the arguments can key it (a list of
    ``log_replicas`` cannot)."""
    try:
        hash(args)
    except TypeError:
        return _build_options(*args)
    return _cached_options(*args)


#: the types of plain data (see :meth:`TorchXOperator._set_xcomargs_dependencies`)
_PLAIN_SCALARS = frozenset({str, int, float, bool, type(None)})


def plain_data(value: Any) -> bool:
    """Whether ``value`` is plain data: of exactly those types (a subclass may be anything),
    and lists, tuples and dicts (their values) of them."""
    kind = type(value)
    if kind in _PLAIN_SCALARS:
        return True
    if kind is dict:
        value = value.values()
    elif kind is not list and kind is not tuple:
        return False
    return all(plain_data(item) for item in value)
