"""The drain report: everything a run did, as data, and the exit code it maps to. Pure."""

from __future__ import annotations

import dataclasses
from typing import Any

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
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    exit_code: ExitCode = ExitCode.OK
    summary: str = ""

    def to_dict(self) -> dict:
        """The ``ProviderDrainReport`` (schema: ``schemas/provider-drain-report.schema.json``)."""
        data = dataclasses.asdict(self)
        data["dryRun"] = data.pop("dry_run")
        data["dryRunOutcomes"] = data.pop("dry_run_outcomes")
        del data["exit_code"]
        data["exit"] = exit_status(self.exit_code)
        return envelope(PROVIDER_DRAIN, data)


def exit_code_for(
    *,
    refused: bool,
    failed: int,
    interrupted_during_writes: bool,
    restorations: list[dict],
    wait_state: str | None,
    stored_ok: bool | None,
    idle_state: str | None = None,
) -> ExitCode:
    """The documented exit code for a finished run (see ``xtask.errors.ExitCode``)."""
    if refused:
        return ExitCode.REFUSED
    if failed or interrupted_during_writes:
        incomplete = any(r["outcome"] not in ("restored", "already-at-previous-value") for r in restorations)
        if incomplete:
            return ExitCode.NEEDS_INSPECTION
        return ExitCode.INTERRUPTED if interrupted_during_writes else ExitCode.PARTIAL_RESTORED
    if wait_state == "converged" and idle_state is not None:
        return {"idle": ExitCode.OK, "timeout": ExitCode.NOT_IDLE, "interrupted": ExitCode.INTERRUPTED}[idle_state]
    if wait_state is not None:
        return {
            "converged": ExitCode.OK,
            "not-eligible": ExitCode.NOT_ELIGIBLE,
            "timeout": ExitCode.TIMEOUT,
            "interrupted": ExitCode.INTERRUPTED,
            "unreachable": ExitCode.ERROR,
        }[wait_state]
    if stored_ok is False:
        return ExitCode.NEEDS_INSPECTION
    return ExitCode.OK
