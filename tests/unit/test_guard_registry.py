"""The drain guards' registry: one list, whose order is the order a look reports its refusals in
(a stale plan first, then the rules of the drain itself)."""

from __future__ import annotations

import dataclasses

from xtask.drain import guards
from xtask.drain.guards.base import Look, Verdict, refusals_of


def test_the_registry_lists_every_guard_once_in_its_documented_order():
    assert [g.name for g in guards.GUARDS] == ["plan", "holds", "budget", "capacity", "targets"]


@dataclasses.dataclass(frozen=True)
class Says:
    name: str
    field: str | None = None

    def check(self, snapshot, look: Look) -> Verdict:
        return Verdict(self.name, refusals=(f"{self.name} says no",))


def test_refusals_come_in_registry_order_whatever_the_guards_find(monkeypatch):
    monkeypatch.setattr(guards, "GUARDS", [Says("targets"), Says("budget"), Says("holds")])
    verdicts = guards.check_all(None, None)  # type: ignore[arg-type]  # these guards read neither
    assert refusals_of(verdicts) == ["targets says no", "budget says no", "holds says no"]
