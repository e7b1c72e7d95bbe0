"""What a follow has seen of its app: each ``describe`` taken in, turned into the lines the
task log gets (state transitions, replica status lines, restarts, why a replica waits) and
the figures its end reports (the replicas, the time in each phase, preemptions)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import InitVar, dataclass, field
from datetime import datetime, timezone

from torchx_provider.failures import stamp_unseen_ends
from torchx_provider.schedulers.api import DescribeAppResponse
from torchx_provider.specs.api import AppState, is_terminal
from torchx_provider.tasklog import TaskLogger
from torchx_provider.triggers.events import ReplicaRow, replica_rows
from torchx_provider.triggers.status import StatusPace
from torchx_provider.triggers.summary import restart_notes, waiting_notes
from torchx_provider.triggers.waiting import WAITING, PhaseTimes, QueueWait


@dataclass(eq=False)
class Observation:
    """The app ``app_id`` as the describes so far showed it.

    :param log: where the lines go; :param say_once: warns a text once per key (the log
        pumps' notices share the keys).
    :param state: the last state a previous follow persisted, if any.
    :param queue_timeout: seconds the app may wait to run, per wait (``None``: no limit).
    :param waiting_since: when the first wait began, on ``clock`` (``None``: now).
    :param earlier_preemptions: the preemptions a previous follow of the app saw (its
        timeline's, restored with it).
    """

    app_id: str
    log: TaskLogger
    say_once: Callable[[str, str], None]
    clock: Callable[[], float]
    state: AppState | None = None
    queue_timeout: InitVar[float | None] = None
    waiting_since: InitVar[float | None] = None
    earlier_preemptions: int = 0
    queue: QueueWait = field(init=False)
    #: time in each phase and returns to waiting, as this follow saw them (a resumed
    #: follow of an app that ran counts from its first describe)
    phases: PhaseTimes = field(init=False)
    #: evictions the backend counts (Kueue's Workload), ``-1``: not told
    evictions: int = field(default=-1, init=False)
    rows: tuple[ReplicaRow, ...] = field(default=(), init=False)
    ui_url: str | None = field(default=None, init=False)
    #: the backend's message on the app (its failure, most often)
    message: str = field(default="", init=False)
    #: the app's in-cluster restarts at the last describe (-1: none yet)
    restarts: int = field(default=-1, init=False)
    #: role name -> its image, from the last describe
    images: Mapping[str, str] = field(default_factory=dict, init=False)
    #: lines held back while the app's last logs are read (it is terminal)
    held: list[str] = field(default_factory=list, init=False)
    #: when the replicas' status line is said, and how (folded for a large app)
    status: StatusPace = field(default_factory=StatusPace, init=False)

    def __post_init__(self, queue_timeout: float | None, waiting_since: float | None) -> None:
        # A follow resumed (a triggerer restart) after the app ran: its first wait is over;
        # a later one is timed from when it is seen waiting. A state the backend could not
        # tell says nothing of whether it ran.
        ran = self.state not in (None, AppState.UNKNOWN) and self.state not in WAITING
        first_wait = self.clock() if waiting_since is None else waiting_since
        self.queue = QueueWait(queue_timeout, None if ran else first_wait)
        self.phases = (
            PhaseTimes(resumed="running" if self.state is AppState.RUNNING else None)
            if ran
            else PhaseTimes(phase="queued", since=first_wait)
        )

    def observe(self, resp: DescribeAppResponse) -> bool:
        """Take in a describe: log a state transition and a status line when the replicas
        changed -- held back (:attr:`held`), when the app is terminal, until its logs are
        read. Whether the app's state changed (progress a checkpoint stores)."""
        msg = "" if resp.msg in (None, "<NONE>") else str(resp.msg)
        state = self._known(resp.state, msg)
        out = self.held if is_terminal(state) else None
        if resp.evictions >= 0:
            self.evictions = resp.evictions
        for i, words in enumerate(resp.disruptions):
            self.say_once(
                f"disruption:{self.app_id}:{i}",
                f"app {self.app_id}: the platform ended a replica's pod (an eviction or a "
                f"preemption, not a failure of the replica's): {words}",
            )
        returns = self.phases.returns
        self.phases.observe(state, self.clock())
        changed = state != self.state
        if changed:
            before = "-" if self.state is None else self.state.name
            self._say(
                out,
                f"app {self.app_id}: {before} -> {state.name}"
                + (f" ({msg})" if msg else "")
                + self._phase_note(state, self.phases.returns > returns),
            )
            self.state = state
        self.queue.observe(state, self.clock())
        rows = stamp_unseen_ends(self.rows, replica_rows(resp), datetime.now(timezone.utc))
        restarts = (self.restarts, resp.num_restarts)
        for note in restart_notes(self.app_id, restarts, self.rows, rows, msg):
            self._say(out, note)
        for key, note in waiting_notes(rows):
            self.say_once(key, note)
        self.restarts = resp.num_restarts
        line = self.status.line(rows, is_terminal(state), self.clock())
        if line is not None:
            self._say(out, f"replicas: {line}")
        self.rows = rows
        self.message = msg or (
            resp.structured_error_msg if resp.structured_error_msg != "<NONE>" else ""
        )
        self.ui_url = resp.ui_url or self.ui_url
        self.images = {role.name: role.image for role in resp.roles if role.image}
        return changed

    def _known(self, state: AppState, msg: str) -> AppState:
        """``state``; but ``UNKNOWN`` -- a phase this version does not know, a container
        being removed -- after a known state leaves that one standing (said once, not as a
        transition at every flip)."""
        last = self.state
        if state is not AppState.UNKNOWN or last is None or last is AppState.UNKNOWN:
            return state
        self.say_once(
            f"unknown-state:{self.app_id}",
            f"app {self.app_id}: the backend reports a state this version cannot tell"
            + (f" ({msg})" if msg else "")
            + f"; taken as still {last.name} until it tells one",
        )
        return last

    def release_held(self) -> None:
        """Log the lines held back while the app's last logs were read."""
        for line in self.held:
            self.log.info("%s", line)
        self.held = []

    @property
    def preemptions(self) -> int:
        """How often the app was preempted or evicted and went back to waiting: what the
        backend counts, or the returns to waiting the follows saw (a previous follow's and
        this one's), whichever is more."""
        return max(self.evictions, self.earlier_preemptions + self.phases.returns)

    def _phase_note(self, state: AppState, went_back: bool) -> str:
        """What a transition means for a preempted app: it waits again (not a failure), or
        it runs again."""
        if went_back:
            return (
                "; back to waiting (preempted, evicted or requeued by the cluster): not a "
                "failure, the follow stays on it"
            )
        if state is AppState.RUNNING and self.state in WAITING and self.preemptions > 0:
            n = self.preemptions
            what = "preemption or eviction" if n == 1 else "preemptions or evictions"
            return f"; running again, after {n} {what}"
        return ""

    def _say(self, held: list[str] | None, line: str) -> None:
        if held is None:
            self.log.info("%s", line)
        else:
            held.append(line)
