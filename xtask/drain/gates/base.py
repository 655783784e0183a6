"""What a wave gate is: the one interface between the waves of a drain and the checks that
decide whether the next wave may start.

A wave is written, converges on its targets, then *soaks* for ``--soak`` seconds. During the
soak the conductor calls :meth:`Gate.begin` once at its start and :meth:`Gate.read` at its
end; the reading says whether the gate held over that window. A gate never writes anything.

A reading that cannot be taken (a gateway or Prometheus that does not answer, an empty query
result, no requests at all) is not a pass: ``held`` is False and ``detail`` says why, so a
drain never proceeds on the absence of evidence.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol


@dataclasses.dataclass(frozen=True)
class GateReading:
    """One gate's verdict over one soak window."""

    gate: str  # the gate's name as the report shows it, e.g. "error-ratio" or "promql"
    held: bool
    value: float | None  # the measured value (None when it could not be measured)
    threshold: str  # what it was held against, human readable: "<= 0.01", "non-empty and true"
    detail: str  # one line: what was measured, or why nothing could be

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


class Gate(Protocol):
    """A health check over a soak window. ``begin`` marks the window's start (a gate that reads
    counters snapshots them here); ``read`` returns the verdict for the window since ``begin``."""

    name: str

    def begin(self) -> None: ...

    def read(self, window_seconds: float) -> GateReading: ...
