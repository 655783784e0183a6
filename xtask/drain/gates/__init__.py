"""The wave gates: what decides, after each wave of a drain in waves has soaked, whether the
next may start (:class:`~xtask.drain.gates.base.Gate`).

A gate is one module of this package with ``FLAGS`` (its flags of ``provider-drain``, from which
the CLI makes the click options; declared in :mod:`xtask.drain.gates.flags`), ``check`` (their
values, before anything is read) and ``make`` (the gate, or the problems that refuse the run
before any write): the :class:`~xtask.drain.gates.base.GateModule` shape. Adding one is that
module, its flags, and one name in :data:`GATE_NAMES`.

The gate modules load only when a run sets one of their flags or soaks: a drain without waves
never imports them (nor the Prometheus text parser and HTTP pools they use).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from xtask.drain.gates.base import Gate, GateFlag, GateModule, GateSetup
from xtask.drain.gates.flags import ALL_FLAGS

# Every gate, in the order a wave reads them.
GATE_NAMES = ("error_ratio", "min_requests", "promql")


@functools.cache
def gate_modules() -> tuple[GateModule, ...]:
    """The gate modules, imported on first use."""
    from xtask.drain.gates import error_ratio, min_requests, promql

    return (error_ratio, min_requests, promql)


def gate_flags() -> list[GateFlag]:
    """Every gate's flags, in registry order."""
    return list(ALL_FLAGS)


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
