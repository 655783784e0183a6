"""The words a drain run records: the run's states (the journal's ``state`` records), how a wait
ended, and the outcome of each write and each restoration. Pure; no I/O.

Each is an :class:`enum.StrEnum`: a member *is* its text, so journal lines, JSON reports and
messages read exactly as the plain strings did. The report schemas in ``schemas/`` list the
same words; ``tests/unit/test_reports.py`` holds them equal. What counts as "restored OK" is
decided here and nowhere else (:func:`restored_ok`, :func:`settled`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from xtask.record import Record


class WriteOutcome(enum.StrEnum):
    """One provider's write (or its server-side dry run) in the fan-out."""

    CHANGED = "changed"
    UNCHANGED = "unchanged"  # already in the requested state
    FAILED = "failed"
    NOT_ATTEMPTED = "not-attempted"  # a signal stopped the fan-out first
    DRY_RUN_OK = "dry-run-ok"
    DRY_RUN_REJECTED = "dry-run-rejected"


class RestoreOutcome(enum.StrEnum):
    """One provider's restoration (by a failed or interrupted run, or by ``drain-restore``)."""

    RESTORED = "restored"
    WOULD_RESTORE = "would-restore"  # a dry run of drain-restore
    ALREADY = "already-at-previous-value"  # our write never landed, or was undone already
    OTHER_WRITER = "changed-by-another-writer"
    GONE = "provider-deleted"
    FAILED = "failed"


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Outcome(Record):
    """One provider's write (or its server-side dry run), as the fan-out ended it."""

    provider: str
    outcome: WriteOutcome
    error: str | None = None
    reason: str | None = None
    status: int | None = None
    generation: int | None = None
    note: str | None = None
    # A re-run that updated the caller's hold: the fields it changed ({field, from, to} each).
    hold_update: tuple[Mapping[str, str | None], ...] | None = None
    # The resourceVersion the write returned (a number; not reported): the convergence waiter
    # needs no fresh read of a kind whose watch has shown an event at or after it.
    resource_version: int | None = dataclasses.field(default=None, compare=False)

    def to_dict(self) -> dict:
        # Its fields are flat (words and numbers): read as they are, no deep copy (a report has two per provider).
        out = {k: v for k in _OUTCOME_FIELDS if (v := getattr(self, k)) is not None}
        if self.hold_update is not None:
            out["holdUpdate"] = [dict(c) for c in self.hold_update]
        return out

    @property
    def denied(self) -> bool:
        """A write the API server refused on its merits (RBAC: 403; an admission policy or the
        schema: 422), not one that failed on the way (a timeout, a 5xx): retrying cannot help."""
        return self.status in (403, 422)


# What an outcome reports, in order (its hold update is reported as holdUpdate; its resourceVersion not).
_OUTCOME_FIELDS = tuple(
    f.name for f in dataclasses.fields(Outcome) if f.name not in ("hold_update", "resource_version")
)


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Restoration(Record):
    """One provider's restoration."""

    provider: str
    outcome: RestoreOutcome
    error: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k in ("provider", "outcome", "error") if (v := getattr(self, k)) is not None}


# Nothing is left to undo for the provider: it was put back, or never changed.
SETTLED = frozenset({RestoreOutcome.RESTORED, RestoreOutcome.ALREADY})
# Restored OK: settled, or (in a dry run) it would be.
RESTORED_OK = SETTLED | {RestoreOutcome.WOULD_RESTORE}


def settled(outcome: str | None) -> bool:
    """Whether a recorded restoration outcome leaves nothing to undo (a journal's text may hold any word)."""
    return outcome in SETTLED


def restored_ok(outcome: str) -> bool:
    """Whether a restoration went as it should: the provider is (or in a dry run would be) as before the run."""
    return outcome in RESTORED_OK


class WaitState(enum.StrEnum):
    """How the convergence wait ended."""

    CONVERGED = "converged"
    NOT_ELIGIBLE = "not-eligible"  # undrain served, but a hard failure keeps a provider out
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    UNREACHABLE = "unreachable"  # every watch failed for UNREACHABLE_BOUND


class WaveState(enum.StrEnum):
    """Where one wave of a drain in waves stands (the journal's ``wave`` records, the report's
    ``waves[].state``); the last record of a wave wins."""

    PENDING = "pending"  # not started (or planned only: a dry run)
    WRITTEN = "written"  # its fan-out finished without a failure
    CONVERGED = "converged"  # every named consumer serves it
    SOAKED = "soaked"  # its soak ended and its gates were read
    PASSED = "held"  # every gate held over the soak: finished, the next wave may start (written "held")
    BREACHED = "breached"  # a gate did not hold: the run stopped before the next wave


class IdleWaitState(enum.StrEnum):
    """How the ``--wait-idle`` wait ended."""

    IDLE = "idle"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"


class RunState(enum.StrEnum):
    """A run's state as its journal records it; the last ``state`` record wins."""

    APPLYING = "applying"  # implied by the header: writes may be in flight
    RESTORING = "restoring"
    RESTORED = "restored"
    NEEDS_INSPECTION = "needs-inspection"
    WAITING = "waiting"
    WAITING_IDLE = "waiting-idle"
    WAITING_SESSIONS = "waiting-sessions"  # --wait-sessions
    COMPLETE = "complete"
    APPLIED_TIMEOUT = "applied-timeout"
    APPLIED_INTERRUPTED = "applied-interrupted"
    APPLIED_UNREACHABLE = "applied-unreachable"
    APPLIED_IDLE_TIMEOUT = "applied-idle-timeout"
    APPLIED_IDLE_INTERRUPTED = "applied-idle-interrupted"
    APPLIED_SESSIONS_TIMEOUT = "applied-sessions-timeout"  # --wait-sessions: not quiet in time
    SOAKING = "soaking"  # waves: a wave converged and its gates are being read over the soak
    APPLIED_BREACHED = "applied-breached"  # waves: a gate did not hold; the written waves are kept
    APPLIED_REFUSED = "applied-refused"  # refused under the drain lock before a wave; written waves are kept

    @classmethod
    def after_restoring(cls, outcomes: list[str]) -> RunState:
        """Restored when every restoration went as it should; otherwise a person must look."""
        return cls.RESTORED if all(restored_ok(o) for o in outcomes) else cls.NEEDS_INSPECTION

    @classmethod
    def after_wait(cls, state: WaitState) -> RunState:
        """Complete once served (or served but not eligible); else applied, and how the wait ended."""
        return _AFTER_WAIT[state]

    @classmethod
    def after_idle_wait(cls, state: IdleWaitState) -> RunState:
        return _AFTER_IDLE_WAIT[state]


_AFTER_WAIT = {
    WaitState.CONVERGED: RunState.COMPLETE,
    WaitState.NOT_ELIGIBLE: RunState.COMPLETE,
    WaitState.TIMEOUT: RunState.APPLIED_TIMEOUT,
    WaitState.INTERRUPTED: RunState.APPLIED_INTERRUPTED,
    WaitState.UNREACHABLE: RunState.APPLIED_UNREACHABLE,
}
_AFTER_IDLE_WAIT = {
    IdleWaitState.IDLE: RunState.COMPLETE,
    IdleWaitState.TIMEOUT: RunState.APPLIED_IDLE_TIMEOUT,
    IdleWaitState.INTERRUPTED: RunState.APPLIED_IDLE_INTERRUPTED,
}
