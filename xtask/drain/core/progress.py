"""Progress events: what a drain run says while it runs, as typed values.

The conductor and its edges emit these through one :data:`Progress` callable; the CLI renders
them (plain lines, or the live view on a terminal) and nothing else reads them. They are not
Kubernetes Events (the ``events.k8s.io`` objects a run records about each provider,
:mod:`xtask.drain.edges.kube_events`): a progress event lives only as long as the run.

The events of the phases a single drain does not run (waves and gates, ``--wait-idle``, a
restoration, a wait for another run's drain lock) are in :mod:`~xtask.drain.core.progress_phases`,
loaded by what emits them (issue #44: each frozen class costs its creation at import).

Pure: plain frozen values. Must not: print, or carry anything the report does not also say.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from xtask.drain.core.states import Outcome
from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Said(Record):
    """One line of progress: a selection, a journal path, a budget row, a wave's providers."""

    text: str


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class WaitBegun(Record):
    """A wait starts (for convergence or for idle): ``text`` says for what and how long."""

    text: str


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Planned(Record):
    """One provider's planned change, as the report's ``plan`` holds it."""

    provider: str
    current: bool
    requested: bool
    already: bool
    drain_after: bool
    holders: tuple[str, ...] = ()
    # A re-run by a holder: the update of its hold ("updated hold: reason 'a' -> 'b'"), or that
    # its hold already says what was asked; and the fields the update changes ({field, from, to}).
    note: str | None = None
    hold_update: tuple[Mapping[str, str | None], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "provider": self.provider,
            "current": self.current,
            "requested": self.requested,
            "alreadyInState": self.already,
            "drainAfter": self.drain_after,
            "holders": list(self.holders),
        }
        if self.note is not None:
            out["note"] = self.note
        if self.hold_update:
            out["holdUpdate"] = [dict(c) for c in self.hold_update]
        return out


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class DryRunChecked(Record):
    """The server-side dry run answered for one provider."""

    outcome: Outcome


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class WriteStarted(Record):
    provider: str


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class WriteFinished(Record):
    outcome: Outcome


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Observed(Record):
    """The convergence waiter looked: how the targets stand, and who lags."""

    state: str
    lagging: tuple[str, ...]


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class ApiServerNotice(Record):
    """Every watch has been failing for ``seconds`` (``reachable`` false), or works again."""

    reachable: bool
    seconds: float
    error: str | None


if TYPE_CHECKING:
    from xtask.drain.core.progress_phases import (
        GateRead,
        IdleChanged,
        IdleTick,
        LockWaiting,
        RestoreFinished,
        Soaking,
        WaveChanged,
    )

    ProgressEvent = (
        Said
        | LockWaiting
        | WaitBegun
        | Planned
        | DryRunChecked
        | WriteStarted
        | WriteFinished
        | RestoreFinished
        | Observed
        | ApiServerNotice
        | IdleChanged
        | IdleTick
        | WaveChanged
        | Soaking
        | GateRead
    )
Progress = Callable[["ProgressEvent"], None]


def quiet(_event: ProgressEvent) -> None:
    """A :data:`Progress` that shows nothing (``drain-restore``'s restorations, tests)."""
