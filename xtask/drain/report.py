"""The drain report: everything a run did, as data, and the exit code it maps to. Pure.

The phases of a run (:mod:`xtask.drain.run`) return frozen results that the conductor folds
into one :class:`~xtask.drain.results.RunResults` (:func:`xtask.drain.results.fold`);
:func:`build_report` turns it, and the run's last line (:class:`Ending`), into the
:class:`Report` once, at the end, and :func:`exit_code` — the one function that decides it —
maps that report to its exit code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from xtask.drain.core.states import IdleWaitState, WaitState, WaveState, WriteOutcome, restored_ok
from xtask.drain.results import RunResults
from xtask.errors import ExitCode
from xtask.record import Record
from xtask.reports import PROVIDER_DRAIN, envelope, exit_status


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Ending(Record):
    """How a run ended: its last line (the exit code is the report's: :func:`exit_code`)."""

    summary: str


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
        restorations=[dict(r) for r in results.restorations],
        stored=_plain(results.stored),
        convergence=_plain(results.convergence),
        idle=_plain(results.idle),
        sessions=_plain(results.sessions),
        interrupted=results.interrupted,
        journal=results.journal,
        events=events,
        holder=results.holder,
        still_held={k: list(v) for k, v in results.still_held.items()},
        timings={**results.timings, "totalSeconds": round(total_seconds, 3)},
        summary=ending.summary,
        plan_file=_plain(results.plan_file),
        budget=_plain(results.budget),
        capacity=_plain(results.capacity),
        waves=None if results.waves is None else [w.to_dict() for w in results.waves],
        lock=_plain(results.lock),
        guards=[dict(g) for g in results.guards.values()],
    )
    report.exit_code = exit_code(report)
    return report


def _plain(section: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if section is None else dict(section)


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
        data = {f.name: _plain_data(getattr(self, f.name)) for f in dataclasses.fields(self)}
        data["dryRun"] = data.pop("dry_run")
        data["dryRunOutcomes"] = data.pop("dry_run_outcomes")
        data["stillHeld"] = data.pop("still_held")
        data["planFile"] = data.pop("plan_file")
        del data["exit_code"]
        data["exit"] = exit_status(self.exit_code)
        return envelope(PROVIDER_DRAIN, data)


def _plain_data(value: Any) -> Any:
    """``value`` as :func:`dataclasses.asdict` gives it (nested dataclasses as dicts, containers
    rebuilt), without its deep copy of every word and number: a report holds several per provider."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain_data(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple, rebuilt field by field
        return type(value)(*(_plain_data(v) for v in value))
    if isinstance(value, list | tuple):
        return type(value)(_plain_data(v) for v in value)
    return value


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
