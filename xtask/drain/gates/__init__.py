"""The wave gates: what decides, after each wave of a drain in waves has soaked, whether the
next may start (:class:`~xtask.drain.gates.base.Gate`).

A gate is one module of this package with ``FLAGS`` (its flags of ``provider-drain``, from which
the CLI makes the click options; declared in :mod:`xtask.drain.gates.flags`), ``check`` (their
values, before anything is read) and ``make`` (the gate, or the problems that refuse the run
before any write): the :class:`~xtask.drain.gates.base.GateModule` shape. Adding one is that
module, its flags, and one line in :data:`GATES`, the registry the CLI's options, the plan's
record, the request's check and the run's gates are all read from.

The gate modules load only when a run sets one of their flags or soaks: a drain without waves
never imports them (nor the Prometheus text parser and the HTTP client they use); a registry line
names its module and carries the flags, declared apart (:mod:`xtask.drain.gates.flags`).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import Any, cast

from xtask.drain.gates.base import Gate, GateFlag, GateModule, GateSetup
from xtask.drain.gates.flags import ERROR_RATIO_FLAGS, MIN_REQUESTS_FLAGS, PROMQL_FLAGS
from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class RegisteredGate(Record):
    """One line of :data:`GATES`: the gate's module (imported on first use) and its flags."""

    module: str  # a dotted module path with the GateModule shape
    flags: tuple[GateFlag, ...]


# The gate registry: every gate, in the order a wave reads them.
GATES: list[RegisteredGate] = [
    RegisteredGate("xtask.drain.gates.error_ratio", ERROR_RATIO_FLAGS),
    RegisteredGate("xtask.drain.gates.min_requests", MIN_REQUESTS_FLAGS),
    RegisteredGate("xtask.drain.gates.promql", PROMQL_FLAGS),
]


def gate_modules() -> tuple[GateModule, ...]:
    """The registered gates' modules, in registry order, imported on first use."""
    modules = []
    for entry in GATES:
        module = importlib.import_module(entry.module)
        assert module.FLAGS == entry.flags, f"{entry.module} declares other flags than its registry line"
        modules.append(cast(GateModule, module))
    return tuple(modules)


def gate_flags() -> list[GateFlag]:
    """Every registered gate's flags, in registry order."""
    return [flag for entry in GATES for flag in entry.flags]


def check_gate_options(options: Mapping[str, Any], *, consumers: tuple[str, ...], soak: float | None) -> None:
    """Every gate checks its flags' values (a UsageError names the flag)."""
    unknown = sorted(set(options) - {f.key for f in gate_flags()})
    if unknown:
        raise ValueError(f"no gate takes {', '.join(unknown)}")
    flags = {f.key: f for f in gate_flags()}
    if not any(flags[key].given(value) for key, value in options.items()):
        return  # no gate flag: nothing to check, and no gate to load
    for module in gate_modules():
        module.check(options, consumers=consumers, soak=soak)


def wave_gates(setup: GateSetup) -> tuple[list[Gate], list[str]]:
    """The gates each wave soaks under, and the problems that refuse the run before any write.
    No gates with ``--soak 0``."""
    if setup.soak_seconds <= 0:
        return [], []
    gates: list[Gate] = []
    for module in gate_modules():
        gate, problems = module.make(setup)
        if problems:
            return [], problems
        if gate is not None:
            gates.append(gate)
    return gates, []
