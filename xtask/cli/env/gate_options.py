"""provider-drain's wave gate flags as click options, made from each gate's declaration
(:mod:`xtask.drain.gates`), and their values taken back out of the command's keywords. No
state, no I/O."""

from __future__ import annotations

from typing import Any

import click

from xtask.drain.gates import gate_flags
from xtask.drain.gates.base import GateFlag


def gate_options() -> list[Any]:
    """The click options of every wave gate's flags, as each gate declares them (an older name
    of a flag becomes a hidden option of its own, merged by :func:`gate_values`)."""
    out: list[Any] = []
    for flag in gate_flags():
        kwargs: dict[str, Any] = {"metavar": flag.metavar, "type": flag.type, "multiple": flag.multiple}
        out.append(click.option(flag.name, flag.key, help=flag.help, **kwargs))
        if flag.alias is not None:
            out.append(click.option(flag.alias, _alias_key(flag), hidden=True, **kwargs))
    return out


def _alias_key(flag: GateFlag) -> str:
    return f"{flag.key}__alias"


def gate_values(flags: dict[str, Any]) -> dict[str, Any]:
    """Take every gate flag's value out of ``flags`` (an alias's values join its flag's)."""
    values = {}
    for flag in gate_flags():
        value = flags.pop(flag.key, None)
        alias = flags.pop(_alias_key(flag), None) if flag.alias is not None else None
        if flag.multiple:
            value = tuple(value or ()) + tuple(alias or ())
        elif value is None:
            value = alias
        if flag.given(value):
            values[flag.key] = value
    return values
