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
from collections.abc import Mapping
from typing import Any, Protocol

from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class GateReading(Record):
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


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class GateFlag(Record):
    """A flag of ``provider-drain`` that a gate takes, declared in the gate's module; the CLI
    makes its click option from this, and the request holds its value under :attr:`key`."""

    name: str  # e.g. "--max-error-ratio"
    key: str  # the value's key in DrainRequest.gate_options
    help: str
    metavar: str | None = None
    type: Any = None  # a click parameter type (None: text)
    multiple: bool = False
    alias: str | None = None  # an older name, still accepted, not shown in --help

    def given(self, value: Any) -> bool:
        return value is not None and value != ()


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class GateSetup(Record):
    """What a gate is made from: its flags' values, the named consumers (as read before any
    write, or None for one that does not exist) and the soak."""

    options: Mapping[str, Any]
    consumers: Mapping[str, Mapping[str, Any] | None]
    soak_seconds: float


class GateModule(Protocol):
    """A gate's module: its flags, the check of their values, and the factory of its gate.

    ``check`` raises :class:`~xtask.errors.UsageError` naming the flag (before anything is
    read). ``make`` returns the gate (None: its flags ask for none) or the problems that refuse
    the run before any write (a reading that cannot be taken)."""

    FLAGS: tuple[GateFlag, ...]

    def check(self, options: Mapping[str, Any], *, consumers: tuple[str, ...], soak: float | None) -> None: ...

    def make(self, setup: GateSetup) -> tuple[Gate | None, list[str]]: ...
