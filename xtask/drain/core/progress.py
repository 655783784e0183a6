"""Progress events: what a drain run says while it runs, as typed values.

The conductor and its edges emit these through one :data:`Progress` callable; the CLI renders
them (plain lines, or the live view on a terminal) and nothing else reads them. They are not
Kubernetes Events (the ``events.k8s.io`` objects a run records about each provider,
:mod:`xtask.drain.edges.kube_events`): a progress event lives only as long as the run.

Pure: plain frozen values. Must not: print, or carry anything the report does not also say.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from xtask.drain.core.states import Outcome, Restoration


@dataclasses.dataclass(frozen=True)
class Said:
    """One line of progress: a selection, a journal path, a budget row, a wave's providers."""

    text: str


@dataclasses.dataclass(frozen=True)
class WaitBegun:
    """A wait starts (for convergence or for idle): ``text`` says for what and how long."""

    text: str


@dataclasses.dataclass(frozen=True)
class Planned:
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


@dataclasses.dataclass(frozen=True)
class DryRunChecked:
    """The server-side dry run answered for one provider."""

    outcome: Outcome


@dataclasses.dataclass(frozen=True)
class WriteStarted:
    provider: str


@dataclasses.dataclass(frozen=True)
class WriteFinished:
    outcome: Outcome


@dataclasses.dataclass(frozen=True)
class RestoreFinished:
    restoration: Restoration


@dataclasses.dataclass(frozen=True)
class Observed:
    """The convergence waiter looked: how the targets stand, and who lags."""

    state: str
    lagging: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class ApiServerNotice:
    """Every watch has been failing for ``seconds`` (``reachable`` false), or works again."""

    reachable: bool
    seconds: float
    error: str | None


@dataclasses.dataclass(frozen=True)
class IdleChanged:
    """One provider's idle state or reading changed (its entry of the report's ``idle``)."""

    provider: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class IdleTick:
    """Every awaited provider's last reading, about once a second (for a live view)."""

    providers: tuple[dict[str, Any], ...]


@dataclasses.dataclass(frozen=True)
class WaveChanged:
    """A wave of a drain in waves reached ``state`` (:class:`~xtask.drain.core.states.WaveState`)."""

    wave: int
    of: int
    state: str


@dataclasses.dataclass(frozen=True)
class Soaking:
    """A converged wave has soaked ``elapsed`` of ``seconds``."""

    wave: int
    elapsed: float
    seconds: float


@dataclasses.dataclass(frozen=True)
class GateRead:
    """A wave gate's reading at the end of a soak (``reading``: its JSON form)."""

    wave: int
    reading: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class LockWaiting:
    """Another run holds the drain lock of ``network`` (the Lease ``lease``): this run has waited
    ``waited`` of ``timeout`` seconds for it (said when the holder changes, and every few seconds)."""

    network: str
    lease: str
    holder: str
    waited: float
    timeout: float

    @property
    def text(self) -> str:
        return (
            f"waiting for the drain lock of network {self.network} held by {self.holder or 'nobody known'} "
            f"({self.waited:g}s of --lock-timeout {self.timeout:g}s)"
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
Progress = Callable[[ProgressEvent], None]


def quiet(_event: ProgressEvent) -> None:
    """A :data:`Progress` that shows nothing (``drain-restore``'s restorations, tests)."""
