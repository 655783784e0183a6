"""The disruption budget guard: the networks' declared ``disruptionBudget`` and
``--max-unavailable`` per selection group (:mod:`xtask.drain.core.budget` decides); its rows are
the report's ``budget`` and the refusals name each group over its bound. A drain only."""

from __future__ import annotations

import dataclasses

from xtask.drain.core.budget import declares_budget, group_budgets
from xtask.drain.guards.base import Look, Verdict
from xtask.drain.snapshot import Snapshot
from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class BudgetGuard(Record):
    name: str = "budget"
    field: str | None = "budget"

    def check(self, snapshot: Snapshot, look: Look) -> Verdict:
        req = look.req
        override = req.override_budget is not None
        if not req.drain or not (req.max_unavailable is not None or override or declares_budget(snapshot.networks)):
            return Verdict(self.name)
        amount = req.max_unavailable
        rows = group_budgets(
            snapshot.members,
            snapshot.networks,
            sorted(look.to_change),
            amount,
            heartbeat=snapshot.heartbeat,
            now=snapshot.now,
            override=override,
        )
        section = {
            "maxUnavailable": None if amount is None else str(amount),
            "override": req.override_budget,
            "groups": [r.to_dict() for r in rows],
        }
        said = []
        for r in rows:
            bound = "no bound" if r.budget is None else f"at most {r.budget}"
            overridden = f"; declared {r.declared} overridden: {req.override_budget}" if r.overridden else ""
            said.append(
                f"budget: network {r.network}, group {r.group!r}: {r.unavailable_now} -> {r.unavailable_after} "
                f"of {r.size} unavailable ({bound}{overridden})"
            )
        refusals = tuple(r.describe(amount) for r in rows if r.exceeded)
        return Verdict(self.name, refusals=refusals, section=section, said=tuple(said))


GUARD = BudgetGuard()
