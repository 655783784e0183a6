"""The wave gates: what decides, after each wave of a drain in waves has soaked, whether the
next may start (:class:`~xtask.drain.gates.base.Gate`).

A gate is one module of this package with ``FLAGS`` (its flags of ``provider-drain``, from which
the CLI makes the click options), ``check`` (their values, before anything is read) and
``make`` (the gate, or the problems that refuse the run before any write): the
:class:`~xtask.drain.gates.base.GateModule` shape. Adding one is that module plus one line in
:data:`GATES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xtask.drain.gates import error_ratio, min_requests, promql
from xtask.drain.gates.base import Gate, GateFlag, GateModule, GateSetup


def _gate(module: GateModule) -> GateModule:
    """A gate module, checked against :class:`GateModule` by the type checker."""
    return module


# Every gate, in the order a wave reads them.
GATES: tuple[GateModule, ...] = (_gate(error_ratio), _gate(min_requests), _gate(promql))


def gate_flags() -> list[GateFlag]:
    """Every gate's flags, in registry order."""
    return [flag for module in GATES for flag in module.FLAGS]


def check_gate_options(options: Mapping[str, Any], *, consumers: tuple[str, ...], soak: float | None) -> None:
    """Every gate checks its flags' values (a UsageError names the flag)."""
    unknown = sorted(set(options) - {f.key for f in gate_flags()})
    if unknown:
        raise ValueError(f"no gate takes {', '.join(unknown)}")
    for module in GATES:
        module.check(options, consumers=consumers, soak=soak)


def wave_gates(setup: GateSetup) -> tuple[list[Gate], list[str]]:
    """The gates each wave soaks under, and the problems that refuse the run before any write.
    No gates with ``--soak 0``."""
    if setup.soak_seconds <= 0:
        return [], []
    gates: list[Gate] = []
    for module in GATES:
        gate, problems = module.make(setup)
        if problems:
            return [], problems
        if gate is not None:
            gates.append(gate)
    return gates, []
