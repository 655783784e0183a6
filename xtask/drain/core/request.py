"""What a ``provider-drain`` run and a ``drain-restore`` are asked to do, checked as a whole
before anything is read or written, and the names both write under. No I/O (:func:`actor` only
asks the system who and where).
"""

from __future__ import annotations

import dataclasses
import getpass
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agn.model import (
    MAX_SESSION_DEADLINE_SECONDS,
    MAX_SLOW_START_SECONDS,
    MIN_SESSION_DEADLINE_SECONDS,
    MIN_SLOW_START_SECONDS,
)
from agn.yamltext import show
from xtask.drain.core.amounts import Amount
from xtask.drain.core.defaults import (
    DEFAULT_CONCURRENCY,
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_SOAK,
    DEFAULT_TIMEOUT,
    MAX_CONCURRENCY,
    MAX_LOCK_TIMEOUT,
    ON_BREACH,
)
from xtask.drain.core.holds import MAX_EXPIRES_SECONDS, holder_problem, override_problem, ticket_problem
from xtask.drain.core.selection import Selector
from xtask.errors import UsageError
from xtask.record import Record

if TYPE_CHECKING:
    from xtask.drain.core.plandoc import LoadedPlan

FIELD_MANAGER = "agn-xtask-provider-drain"


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class DrainRequest(Record):
    """One ``provider-drain`` run; a combination of flags that makes no sense is a usage error here."""

    selector: Selector
    drain: bool
    context: str | None = None
    kubeconfig: str | None = None
    namespace: str | None = None
    dry_run: bool = False
    network: str | None = None
    consumers: tuple[str, ...] = ()
    concurrency: int = DEFAULT_CONCURRENCY
    qps: float | None = None
    timeout: float = DEFAULT_TIMEOUT
    reason: str | None = None
    force: bool = False
    journal_dir: Path | None = None
    wait_idle: bool = False
    idle_timeout: float | None = None  # None: DEFAULT_IDLE_TIMEOUT (and not given on the command line)
    plan_out: Path | None = None  # --plan-out: write the plan there instead of draining
    plan: LoadedPlan | None = None  # --plan: apply this plan (the selection and operation are its)
    max_plan_age: float | None = None  # --max-plan-age seconds (None: planfile.DEFAULT_MAX_AGE)
    max_unavailable: Amount | None = None  # --max-unavailable: the fleet budget
    # --override-budget REASON: set the networks' declared disruption budgets aside (recorded).
    override_budget: str | None = None
    # --capacity-margin N|P%: requests held back from the staying providers' headroom
    # (xtask.drain.core.capacity; P% of their declared capacity). None: not given (0).
    capacity_margin: Amount | None = None
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT  # --lock-timeout: seconds to wait for the drain locks
    # Waves (None: not given on the command line; the defaults are DEFAULT_SOAK and so on).
    soak: float | None = None
    on_breach: str | None = None  # hold | restore (None: hold)
    resume: Path | None = None  # a journal of a drain in waves to continue
    wave_size: Amount | None = None  # --wave-size (None: one wave)
    # Drain holders (xtask.drain.core.holds): who holds the drain (None: actor(), user@host), a
    # ticket, seconds until the hold expires; --undrain --release-all removes every hold.
    holder: str | None = None
    ticket: str | None = None
    expires_in: int | None = None
    release_all: bool = False
    # --undrain --slow-start DURATION: the returning providers' window, whole seconds (None: none).
    slow_start: int | None = None
    # --session-deadline DURATION: whole seconds after the drain's write (server clock) at which the
    # drained providers' sessions are moved; --wait-sessions QUIET and its --sessions-timeout.
    session_deadline: int | None = None
    wait_sessions: float | None = None
    sessions_timeout: float | None = None  # None: DEFAULT_SESSIONS_TIMEOUT
    # The wave gates' flags by key (xtask.drain.gates: each gate declares and checks its own).
    gate_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def in_waves(self) -> bool:
        return self.wave_size is not None or self.resume is not None

    @property
    def soak_seconds(self) -> float:
        return DEFAULT_SOAK if self.soak is None else self.soak

    def _check_sessions(self) -> None:
        """--session-deadline, --wait-sessions and --sessions-timeout (docs/provider-drain.md)."""
        if self.session_deadline is not None and not self.drain:
            raise UsageError(
                "--session-deadline moves the sessions of providers a drain takes out: it does not apply to "
                "--undrain (an undrain clears a deadline)"
            )
        if self.session_deadline is not None and not (
            MIN_SESSION_DEADLINE_SECONDS <= self.session_deadline <= MAX_SESSION_DEADLINE_SECONDS
        ):
            raise UsageError(
                f"--session-deadline {self.session_deadline} must be between {MIN_SESSION_DEADLINE_SECONDS} and "
                f"{MAX_SESSION_DEADLINE_SECONDS} seconds"
            )
        if self.wait_sessions is not None and not self.drain:
            raise UsageError("--wait-sessions waits for drained providers' sessions; it does not apply to --undrain")
        if self.wait_sessions is not None and not self.network:
            raise UsageError(
                "--wait-sessions reads the consumers' session reports once the drain is serving: name --network "
                "and every --consumer to wait for"
            )
        if self.sessions_timeout is not None and self.wait_sessions is None:
            raise UsageError("--sessions-timeout bounds the wait of --wait-sessions; it does nothing without it")

    def __post_init__(self) -> None:
        if bool(self.network) != bool(self.consumers):
            raise UsageError("--network and --consumer go together: name the network and every consumer to wait for")
        if self.wait_idle and not self.drain:
            raise UsageError("--wait-idle waits for drained providers to go idle; it does not apply to --undrain")
        if self.wait_idle and not self.network:
            raise UsageError(
                "--wait-idle runs once the drain is serving: name --network and every --consumer to wait for"
            )
        if self.idle_timeout is not None and not self.wait_idle:
            raise UsageError("--idle-timeout bounds the wait of --wait-idle; it does nothing without it")
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise UsageError(f"--concurrency must be between 1 and {MAX_CONCURRENCY}")
        if self.reason and not self.drain:
            raise UsageError("--reason records why a provider is drained; it does not apply to --undrain")
        if self.plan_out is not None and self.plan is not None:
            raise UsageError("--plan-out makes a plan and --plan applies one: give one of them")
        if self.max_plan_age is not None and self.plan is None:
            raise UsageError("--max-plan-age bounds the age of the plan given with --plan; it does nothing without it")
        if self.max_unavailable is not None and not self.drain:
            raise UsageError("--max-unavailable bounds what a drain takes out; it does not apply to --undrain")
        if self.override_budget is not None and not self.drain:
            raise UsageError("--override-budget sets a drain's budget aside; it does not apply to --undrain")
        if self.capacity_margin is not None and not self.drain:
            raise UsageError("--capacity-margin weighs what a drain moves; it does not apply to --undrain")
        if self.override_budget is not None and (problem := override_problem(self.override_budget)):
            raise UsageError(f"--override-budget {show(self.override_budget)} {problem}")
        if not 0 < self.lock_timeout <= MAX_LOCK_TIMEOUT:
            raise UsageError(f"--lock-timeout must be between 1 and {MAX_LOCK_TIMEOUT} seconds")
        if self.release_all and self.drain:
            raise UsageError("--release-all removes every holder's hold on --undrain; it does not apply to a drain")
        if self.ticket is not None and not self.drain:
            raise UsageError("--ticket is recorded with the caller's hold on a drain; it does not apply to --undrain")
        if self.expires_in is not None and not self.drain:
            raise UsageError(
                "--expires-in is recorded with the caller's hold on a drain; it does not apply to --undrain"
            )
        if self.holder is not None and (problem := holder_problem(self.holder)):
            raise UsageError(f"--holder {show(self.holder)} {problem}")
        if self.ticket is not None and (problem := ticket_problem(self.ticket)):
            raise UsageError(f"--ticket {show(self.ticket)} {problem}")
        if self.slow_start is not None and self.drain:
            raise UsageError(
                "--slow-start ramps the share of providers an undrain returns: give it with --undrain "
                "(a drain cancels a slow start in progress)"
            )
        if self.slow_start is not None and not MIN_SLOW_START_SECONDS <= self.slow_start <= MAX_SLOW_START_SECONDS:
            raise UsageError(
                f"--slow-start {self.slow_start} must be between {MIN_SLOW_START_SECONDS} and "
                f"{MAX_SLOW_START_SECONDS} seconds"
            )
        self._check_sessions()
        if self.expires_in is not None and not 0 < self.expires_in <= MAX_EXPIRES_SECONDS:
            raise UsageError(f"--expires-in must be between 1 and {MAX_EXPIRES_SECONDS} seconds")
        self._check_waves()

    @property
    def hold_holder(self) -> str:
        """Who holds what this run drains (``--holder``, default ``user@host``)."""
        return self.holder if self.holder is not None else actor()

    def _check_waves(self) -> None:
        if self.resume is not None and (self.plan is not None or self.plan_out is not None):
            raise UsageError(
                "--resume continues the drain its journal records; do not give --plan or --plan-out with it"
            )
        if self.wave_size is not None and self.resume is not None:
            raise UsageError("--resume continues the waves its journal records; do not give --wave-size with it")
        if self.in_waves and not self.network:
            flag = "--wave-size" if self.wave_size is not None else "--resume"
            raise UsageError(
                f"{flag}: each wave must converge on its targets before it soaks; "
                "name --network and every --consumer to wait for"
            )
        from xtask.drain.gates import check_gate_options, gate_flags  # the gates load only for a drain

        if not self.in_waves:
            gate_given = [f.name for f in gate_flags() if f.given(self.gate_options.get(f.key))]
            given = (["--soak"] if self.soak is not None else []) + gate_given
            given += ["--on-breach"] if self.on_breach is not None else []
            if given:
                raise UsageError(f"{', '.join(given)} applies to a drain in waves: give --wave-size (or --resume)")
        check_gate_options(self.gate_options, consumers=self.consumers, soak=self.soak)
        if self.on_breach is not None and self.on_breach not in ON_BREACH:
            raise UsageError(f"--on-breach must be one of {', '.join(ON_BREACH)}")


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class RestoreRequest(Record):
    """One ``drain-restore JOURNAL``."""

    journal: Path
    context: str | None = None  # None: the context the journal records
    kubeconfig: str | None = None
    dry_run: bool = False
    concurrency: int = 8


def actor() -> str:
    """Who runs this (``user@host``), as the ``agn.dev/drain-by`` annotation and the Events record it."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
