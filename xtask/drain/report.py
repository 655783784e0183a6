"""The drain report: everything a run did, as data, and the exit code it maps to. Pure.

The phases of a run (:mod:`xtask.drain.run`) keep what they found in one :class:`RunResults`
(the guards' verdicts through one fold, :meth:`RunResults.fold_verdicts`); :func:`build_report`
turns it, and the run's last line (:class:`Ending`), into the :class:`Report` once, at the end,
and :func:`exit_code` — the one function that decides it — maps that report to its exit code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from xtask.drain.core.progress import Planned
from xtask.drain.core.states import IdleWaitState, Outcome, WaitState, WaveState, WriteOutcome, restored_ok
from xtask.errors import ExitCode
from xtask.reports import PROVIDER_DRAIN, envelope, exit_status

if TYPE_CHECKING:
    from xtask.drain.guards.base import Verdict


@dataclasses.dataclass(frozen=True)
class Ending:
    """How a run ended: its last line (the exit code is the report's: :func:`exit_code`)."""

    summary: str


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
    capacity: dict[str, Any] | None = None  # the load-aware capacity guard (xtask.drain.guards.capacity)
    guards: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # each guard's last verdict
    forced_notes: dict[str, str] = dataclasses.field(default_factory=dict)  # guard -> what --force set aside
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

    def fold_verdicts(self, verdicts: Sequence[Verdict], *, where: str) -> None:
        """The guards' verdicts of one look, kept: each guard's section in its report field, its
        timings added up, its verdict in ``guards``, what ``--force`` set aside for the Events."""
        for v in verdicts:
            guard_field = _GUARD_FIELDS.get(v.guard)
            if guard_field is not None and v.section is not None:
                setattr(self, guard_field, dict(v.section))
            for key, seconds in v.timings.items():
                self.add_time(key, seconds)
            self.guards[v.guard] = v.to_dict(where)
            if v.forced_note:
                self.forced_notes[v.guard] = v.forced_note

    @property
    def capacity_override(self) -> str | None:
        """What ``--force`` set aside of the capacity guard, for the Events' note."""
        return self.forced_notes.get("capacity")


# The guards whose section is a field of the report of its own (any other guard's verdict is in
# ``guards`` only).
_GUARD_FIELDS = {"budget": "budget", "capacity": "capacity"}


def build_report(results: RunResults, ending: Ending, *, events: dict[str, Any], total_seconds: float) -> Report:
    """The report of a finished run, from its results and how it ended; its exit code is
    :func:`exit_code`'s reading of it."""
    report = Report(
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
        summary=ending.summary,
        plan_file=results.plan_file,
        budget=results.budget,
        capacity=results.capacity,
        waves=None if results.waves is None else [w.to_dict() for w in results.waves],
        lock=results.lock,
        guards=list(results.guards.values()),
    )
    report.exit_code = exit_code(report)
    return report


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
    guards: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # each guard's last verdict

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


def exit_code(report: Report) -> ExitCode:
    """The documented exit code of a finished run, read from its report (see
    ``xtask.errors.ExitCode``); the one place it is decided."""
    if not all(restored_ok(r["outcome"]) for r in report.restorations):
        return ExitCode.NEEDS_INSPECTION  # a restoration (after a failure, a signal or a breach) incomplete
    if report.interrupted:
        return ExitCode.INTERRUPTED
    failed = [o for o in report.outcomes if o["outcome"] == WriteOutcome.FAILED]
    if failed:
        # Every failed write refused by the API server on its merits (its RBAC or an admission
        # policy changed after the dry run), the rest put back: a refusal, as at the dry run.
        denied = all(o.get("status") in (403, 422) for o in failed)
        return ExitCode.REFUSED if denied else ExitCode.PARTIAL_RESTORED
    if any(w["state"] == WaveState.BREACHED for w in report.waves or []):
        return ExitCode.GATE_BREACHED
    if report.refused:
        return ExitCode.REFUSED
    if report.stored is not None and not report.stored["ok"]:
        return ExitCode.NEEDS_INSPECTION
    waited = WaitState(report.convergence["state"]) if report.convergence else None
    if waited is not None and waited is not WaitState.CONVERGED:
        return _WAIT_EXIT[waited]
    if report.sessions and report.sessions["state"] != IdleWaitState.IDLE:
        return _SESSIONS_EXIT[IdleWaitState(report.sessions["state"])]
    if report.idle:
        return _IDLE_EXIT[IdleWaitState(report.idle["state"])]
    return ExitCode.OK


_WAIT_EXIT = {
    WaitState.CONVERGED: ExitCode.OK,
    WaitState.NOT_ELIGIBLE: ExitCode.NOT_ELIGIBLE,
    WaitState.TIMEOUT: ExitCode.TIMEOUT,
    WaitState.INTERRUPTED: ExitCode.INTERRUPTED,
    WaitState.UNREACHABLE: ExitCode.ERROR,
}


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
