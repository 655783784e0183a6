"""The waves of one drain run, and how they show.

A drain without ``--wave-size`` is a plan of one wave without gates: the conductor
(:mod:`xtask.drain.run`) runs it on the same path as a drain in waves — write under the locks,
wait, soak under the gates (none), end. What differs is only what a wave leaves behind, decided
here once: a drain in waves journals each wave (its header's waves and each ``wave`` record),
reports it (the report's ``waves``), announces it and names it in its last line ("wave 2 of 3:
..."), and says how to resume; a single drain's one wave shows none of that (its report has no
``waves``, its journal no wave records), and says it is waiting instead (a progress event).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xtask.drain.core.changes import Change
from xtask.drain.core.progress import Progress, Said, WaitBegun
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.states import RunState, WaveState
from xtask.drain.gates.base import Gate
from xtask.drain.record import RunRecord
from xtask.drain.results import WaveResult, WaveStep
from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class WavePlan(Record):
    """The waves to run (each with its changes), the gates each soaks under, and whether the
    waves show (``shown``: a drain in waves)."""

    waves: tuple[WaveResult, ...]
    changes: tuple[tuple[Change, ...], ...]
    gates: tuple[Gate, ...] = ()
    shown: bool = False

    @classmethod
    def of(
        cls, changes: list[Change], *, waves: tuple[WaveResult, ...] | None, gates: list[Gate], req: DrainRequest
    ) -> WavePlan:
        """A drain in waves' planned waves; else (no ``--wave-size``, or nothing to change) one
        wave of every change, without gates."""
        if req.in_waves and waves:
            by_name = {c.provider: c for c in changes}
            return cls(tuple(waves), tuple(tuple(by_name[n] for n in w.providers) for w in waves), tuple(gates), True)
        return cls((WaveResult(1, tuple(c.provider for c in changes)),), (tuple(changes),))

    @property
    def total(self) -> int:
        return len(self.waves)

    def where(self, wave: WaveResult) -> str:
        """Where a look under the locks stands (the guards' ``checked``)."""
        return f"before wave {wave.number} of {self.total}" if self.shown else "before writing"

    def label(self, wave: WaveResult) -> str:
        """The wave in a run's last line."""
        return f"wave {wave.number} of {self.total}: " if self.shown else ""

    def resumable(self, path: Path | None) -> str:
        """How to undo or go on with a drain in waves that stopped (its journal at ``path``)."""
        if not self.shown or path is None:
            return ""
        return f"; undo with: python -m xtask env drain-restore {path}; or continue with the same flags and --resume {path}"

    def journal_fields(self, selection: Sequence[str]) -> dict[str, Any]:
        """The journal header's waves and selection (a drain in waves; None for one wave)."""
        if not self.shown:
            return {"waves": None, "selection": None}
        return {"waves": [list(w.providers) for w in self.waves], "selection": list(selection)}

    def begin(self, wave: WaveResult, record: RunRecord, progress: Progress) -> None:
        """A wave begins: say which, and journal that the run applies again."""
        if self.shown:
            progress(Said(f"wave {wave.number} of {self.total}: {', '.join(wave.providers)}"))
            record.enter(RunState.APPLYING)

    def mark(
        self, wave: WaveResult, state: WaveState, record: RunRecord, progress: Progress, **details: Any
    ) -> WaveStep | None:
        """Wave ``wave`` reached ``state``: journaled and said; its report entry's step (None:
        the waves do not show)."""
        if not self.shown:
            return None
        from xtask.drain.core.progress_phases import WaveChanged  # only a drain in waves says it

        record.wave(wave.number, state, **details)
        progress(WaveChanged(wave.number, self.total, state))
        return WaveStep(wave.number, state=state)

    def waiting(self, req: DrainRequest, progress: Progress) -> None:
        """The wait for convergence begins (a drain in waves says it per wave as it changes)."""
        if not self.shown:
            progress(
                WaitBegun(f"waiting for {', '.join(req.consumers)} to serve the change (timeout {req.timeout:.0f}s)")
            )

    def done(self, req: DrainRequest, *, converged_line: str) -> str:
        """The last line of a run whose every wave converged (and whose sessions went quiet)."""
        consumers = ", ".join(req.consumers)
        if self.shown:
            gated = f", each soaked {req.soak_seconds:g}s with every gate held" if self.gates else ""
            return f"{self.total} wave(s) converged on {consumers}{gated}"
        if req.wait_sessions is not None:
            return f"drained, serving on {consumers}, and its sessions quiet"
        return converged_line
