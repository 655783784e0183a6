"""The drain report: everything a run did, as data, and the exit code it maps to. Pure.

The phases of a run (:mod:`xtask.drain.run`) return typed results that the conductor keeps in
one :class:`RunResults`; :func:`build_report` turns them, and how the run ended
(:class:`Ending`), into the :class:`Report` once, at the end.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from xtask.drain.core.progress import Planned
from xtask.drain.core.states import IdleWaitState, Outcome, WaitState, WaveState, restored_ok
from xtask.errors import ExitCode
from xtask.reports import PROVIDER_DRAIN, envelope, exit_status


@dataclasses.dataclass(frozen=True)
class Ending:
    """How a run ended: its last line, and its exit code (None: refused if anything was
    refused, else OK)."""

    summary: str
    code: ExitCode | None = None


@dataclasses.dataclass
class WaveResult:
    """One wave of a drain in waves: its providers, how far it got, and what was measured."""

    number: int
    providers: list[str]
    state: WaveState = WaveState.PENDING
    earlier: bool = False  # finished by the run this one resumes
    convergence_seconds: float | None = None
    soak_seconds: float | None = None
    gates: list[dict] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "wave": self.number,
            "providers": self.providers,
            "state": self.state,
            "gates": self.gates,
        }
        if self.earlier:
            out["earlier"] = True
        if self.convergence_seconds is not None:
            out["convergenceSeconds"] = round(self.convergence_seconds, 3)
        if self.soak_seconds is not None:
            out["soakSeconds"] = round(self.soak_seconds, 3)
        return out


@dataclasses.dataclass
class RunResults:
    """What the phases of one run returned, kept in order until the report is built."""

    context: str | None
    namespace: str
    request: str  # drain | undrain
    selector: str
    dry_run: bool
    holder: str | None
    operation: str | None = None  # set once every check before the writes passed
    selection: list[str] = dataclasses.field(default_factory=list)
    plan: list[Planned] = dataclasses.field(default_factory=list)
    refused: list[str] = dataclasses.field(default_factory=list)
    dry_run_outcomes: list[Outcome] = dataclasses.field(default_factory=list)
    plan_file: dict[str, Any] | None = None
    budget: dict[str, Any] | None = None
    capacity: dict[str, Any] | None = None  # the load-aware capacity guard (xtask.drain.capacity_check)
    waves: list[WaveResult] | None = None
    lock: dict[str, Any] | None = None  # the drain locks taken (xtask.drain.locked)
    outcomes: list[Outcome] = dataclasses.field(default_factory=list)
    restorations: list[dict] = dataclasses.field(default_factory=list)
    stored: dict[str, Any] | None = None
    still_held: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    convergence: dict[str, Any] | None = None
    idle: dict[str, Any] | None = None
    sessions: dict[str, Any] | None = None  # --wait-sessions
    interrupted: str | None = None
    journal: str | None = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)

    def add_time(self, key: str, seconds: float) -> None:
        """Waves add up: the apply and wait times of every wave."""
        self.timings[key] = round(self.timings.get(key, 0.0) + seconds, 3)


def build_report(results: RunResults, ending: Ending, *, events: dict[str, Any], total_seconds: float) -> Report:
    """The report of a finished run, from its results and how it ended."""
    code = ending.code
    if code is None:
        code = ExitCode.REFUSED if results.refused else ExitCode.OK
    return Report(
        context=results.context,
        namespace=results.namespace,
        request=results.request,
        selector=results.selector,
        dry_run=results.dry_run,
        operation=results.operation,
        selection=list(results.selection),
        plan=[p.to_dict() for p in results.plan],
        refused=list(results.refused),
        dry_run_outcomes=[o.to_dict() for o in results.dry_run_outcomes],
        outcomes=[o.to_dict() for o in results.outcomes],
        restorations=list(results.restorations),
        stored=results.stored,
        convergence=results.convergence,
        idle=results.idle,
        sessions=results.sessions,
        interrupted=results.interrupted,
        journal=results.journal,
        events=events,
        holder=results.holder,
        still_held=dict(results.still_held),
        timings={**results.timings, "totalSeconds": round(total_seconds, 3)},
        exit_code=code,
        summary=ending.summary,
        plan_file=results.plan_file,
        budget=results.budget,
        capacity=results.capacity,
        waves=None if results.waves is None else [w.to_dict() for w in results.waves],
        lock=results.lock,
    )


@dataclasses.dataclass
class Report:
    context: str | None
    namespace: str
    request: str  # drain | undrain
    selector: str
    dry_run: bool
    operation: str | None = None
    selection: list[str] = dataclasses.field(default_factory=list)
    plan: list[dict] = dataclasses.field(default_factory=list)
    refused: list[str] = dataclasses.field(default_factory=list)
    dry_run_outcomes: list[dict] = dataclasses.field(default_factory=list)
    outcomes: list[dict] = dataclasses.field(default_factory=list)
    restorations: list[dict] = dataclasses.field(default_factory=list)
    stored: dict[str, Any] | None = None
    convergence: dict[str, Any] | None = None
    idle: dict[str, Any] | None = None  # --wait-idle: state, and per provider idle | busy | unknown
    sessions: dict[str, Any] | None = (
        None  # --wait-sessions: state, and per consumer and provider quiet | talking | unknown
    )
    interrupted: str | None = None
    journal: str | None = None
    events: dict[str, Any] | None = None  # Kubernetes Events about this run: recorded, notRecorded
    holder: str | None = None  # whose hold this run adds or removes (--holder)
    still_held: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # undrain: provider -> other holders
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    exit_code: ExitCode = ExitCode.OK
    summary: str = ""
    plan_file: dict[str, Any] | None = None  # --plan-out / --plan: path, digest, action (written | applied)
    budget: dict[str, Any] | None = None  # declared budgets and --max-unavailable: the bounds and groups
    capacity: dict[str, Any] | None = None  # the capacity guard: margin, per group load and headroom, forced
    waves: list[dict] | None = None  # a drain in waves: per wave its providers, state and gates' readings
    lock: dict[str, Any] | None = None  # the drain locks: identity, networks, each acquisition, lost

    def to_dict(self) -> dict:
        """The ``ProviderDrainReport`` (schema: ``schemas/provider-drain-report.schema.json``)."""
        data = dataclasses.asdict(self)
        data["dryRun"] = data.pop("dry_run")
        data["dryRunOutcomes"] = data.pop("dry_run_outcomes")
        data["stillHeld"] = data.pop("still_held")
        data["planFile"] = data.pop("plan_file")
        del data["exit_code"]
        data["exit"] = exit_status(self.exit_code)
        return envelope(PROVIDER_DRAIN, data)


def exit_code_for(
    *,
    refused: bool,
    failed: int,
    interrupted_during_writes: bool,
    restorations: list[dict],
    wait_state: WaitState | None,
    stored_ok: bool | None,
    idle_state: IdleWaitState | None = None,
    breached: bool = False,
) -> ExitCode:
    """The documented exit code for a finished run (see ``xtask.errors.ExitCode``)."""
    if refused:
        return ExitCode.REFUSED
    if failed or interrupted_during_writes:
        incomplete = not all(restored_ok(r["outcome"]) for r in restorations)
        if incomplete:
            return ExitCode.NEEDS_INSPECTION
        return ExitCode.INTERRUPTED if interrupted_during_writes else ExitCode.PARTIAL_RESTORED
    if breached:
        return (
            ExitCode.GATE_BREACHED
            if all(restored_ok(r["outcome"]) for r in restorations)
            else ExitCode.NEEDS_INSPECTION
        )
    if wait_state == WaitState.CONVERGED and idle_state is not None:
        return _IDLE_EXIT[IdleWaitState(idle_state)]
    if wait_state is not None:
        return _WAIT_EXIT[WaitState(wait_state)]
    if stored_ok is False:
        return ExitCode.NEEDS_INSPECTION
    return ExitCode.OK


_WAIT_EXIT = {
    WaitState.CONVERGED: ExitCode.OK,
    WaitState.NOT_ELIGIBLE: ExitCode.NOT_ELIGIBLE,
    WaitState.TIMEOUT: ExitCode.TIMEOUT,
    WaitState.INTERRUPTED: ExitCode.INTERRUPTED,
    WaitState.UNREACHABLE: ExitCode.ERROR,
}


def sessions_exit(state: IdleWaitState) -> ExitCode:
    """The exit code of a converged run whose ``--wait-sessions`` ended in ``state``."""
    return _SESSIONS_EXIT[state]


_SESSIONS_EXIT = {  # --wait-sessions: quiet (IDLE), not quiet in time, interrupted
    IdleWaitState.IDLE: ExitCode.OK,
    IdleWaitState.TIMEOUT: ExitCode.SESSIONS_ACTIVE,
    IdleWaitState.INTERRUPTED: ExitCode.INTERRUPTED,
}
_IDLE_EXIT = {
    IdleWaitState.IDLE: ExitCode.OK,
    IdleWaitState.TIMEOUT: ExitCode.NOT_IDLE,
    IdleWaitState.INTERRUPTED: ExitCode.INTERRUPTED,
}
