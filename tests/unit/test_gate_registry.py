"""The wave gate registry (``GATES`` in xtask/drain/gates/__init__.py) is what the flags, their
check and the run's gates are read from: a gate registered by one line (this module is the gate)
gets its click option, its check and its place in every wave, with no other change."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click
import click.testing
import pytest

from xtask.drain import gates
from xtask.drain.gates.base import GateFlag, GateReading, GateSetup
from xtask.errors import UsageError

FLAGS = (GateFlag("--canary-floor", "canary_floor", help="Waves: a test gate.", metavar="N", type=int),)
checked: list[Any] = []


class CanaryGate:
    name = "canary"

    def __init__(self, floor: int) -> None:
        self.floor = floor

    def begin(self) -> None:
        pass

    def read(self, window_seconds: float) -> GateReading:
        return GateReading(self.name, self.floor <= 1, float(self.floor), "<= 1", "a test reading")


def check(options: Mapping[str, Any], *, consumers: tuple[str, ...], soak: float | None) -> None:
    checked.append(options.get("canary_floor"))
    if options.get("canary_floor") == -1:
        raise UsageError("--canary-floor must not be negative")


def make(setup: GateSetup) -> tuple[CanaryGate | None, list[str]]:
    floor = setup.options.get("canary_floor")
    if floor is None:
        return None, []
    if floor > 100:
        return None, ["the canary cannot be read"]
    return CanaryGate(floor), []


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setattr(gates, "GATES", [*gates.GATES, gates.RegisteredGate(__name__, FLAGS)])
    checked.clear()


def setup(**options: Any) -> GateSetup:
    values = {f.key: None for f in gates.gate_flags()} | options
    return GateSetup(options=values, consumers={"c": {}}, soak_seconds=5.0)


def test_one_registry_line_gives_the_flag_its_option(registered):
    from xtask.cli.env.gate_options import gate_options

    @click.command()
    def cmd(**flags: Any) -> None:
        click.echo(repr(flags["canary_floor"]))

    for option in gate_options():
        cmd = option(cmd)
    result = click.testing.CliRunner().invoke(cmd, ["--canary-floor", "7"])
    assert result.output.strip() == "7"


def test_one_registry_line_gets_its_check(registered):
    gates.check_gate_options({"canary_floor": 3}, consumers=("c",), soak=5.0)
    assert checked == [3]
    with pytest.raises(UsageError, match="--canary-floor"):
        gates.check_gate_options({"canary_floor": -1}, consumers=("c",), soak=5.0)


def test_one_registry_line_gets_a_place_in_every_wave(monkeypatch):
    # Alone in the registry: the error-ratio gate would read real gateways' /metrics here.
    monkeypatch.setattr(gates, "GATES", [gates.RegisteredGate(__name__, FLAGS)])
    made, problems = gates.wave_gates(setup(canary_floor=3))
    assert problems == [] and [g.name for g in made] == ["canary"]
    assert made[0].read(5.0).held is False
    assert gates.wave_gates(setup(canary_floor=101)) == ([], ["the canary cannot be read"])


def test_an_unregistered_gate_is_nowhere():
    assert "--canary-floor" not in {f.name for f in gates.gate_flags()}
    with pytest.raises(ValueError, match="no gate takes canary_floor"):
        gates.check_gate_options({"canary_floor": 3}, consumers=("c",), soak=5.0)
