"""The drain report: everything a run did, as data, and the exit code it maps to. Pure."""

from __future__ import annotations

import dataclasses
from typing import Any

from xtask.drain.core.states import IdleWaitState, WaitState, restored_ok
from xtask.errors import ExitCode
from xtask.reports import PROVIDER_DRAIN, envelope, exit_status


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
    interrupted: str | None = None
    journal: str | None = None
    events: dict[str, Any] | None = None  # Kubernetes Events about this run: recorded, notRecorded
    holder: str | None = None  # whose hold this run adds or removes (--holder)
    still_held: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # undrain: provider -> other holders
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    exit_code: ExitCode = ExitCode.OK
    summary: str = ""
    plan_file: dict[str, Any] | None = None  # --plan-out / --plan: path, digest, action (written | applied)
    budget: dict[str, Any] | None = None  # --max-unavailable: the budget and its groups
    waves: list[dict] | None = None  # a drain in waves: per wave its providers, state and gates' readings

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
_IDLE_EXIT = {
    IdleWaitState.IDLE: ExitCode.OK,
    IdleWaitState.TIMEOUT: ExitCode.NOT_IDLE,
    IdleWaitState.INTERRUPTED: ExitCode.INTERRUPTED,
}
