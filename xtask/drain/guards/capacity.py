"""The load-aware capacity guard: the load the drained providers carry against the headroom
staying in each selection group (:mod:`xtask.drain.core.capacity` decides). Its rows are the
report's ``capacity``; with ``--force`` its refusals are set aside and recorded (the report, the
Events' note and the journal's header). A drain only."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

from xtask.drain.core.budget import declares_budget
from xtask.drain.core.capacity import CapacityGroup, capacity_groups, capacity_refusals
from xtask.drain.guards.base import Look, Verdict
from xtask.drain.snapshot import Snapshot
from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class CapacityGuard(Record):
    name: str = "capacity"
    field: str | None = "capacity"

    def check(self, snapshot: Snapshot, look: Look) -> Verdict:
        req = look.req
        budgeted = req.max_unavailable is not None or req.override_budget is not None
        if not req.drain or not (look.to_change or budgeted or declares_budget(snapshot.networks)):
            return Verdict(self.name)
        started = time.monotonic()
        rows = capacity_groups(
            snapshot.members,
            snapshot.networks,
            look.to_change,
            req.capacity_margin,
            heartbeat=snapshot.heartbeat,
            now=snapshot.now,
        )
        refusals = capacity_refusals(rows)
        previous: list[str] = list((look.earlier.get("capacity") or {}).get("overridden", []))
        overridden = previous + [r for r in refusals if req.force and r not in previous]
        section = {
            "margin": None if req.capacity_margin is None else str(req.capacity_margin),
            "checked": look.where,
            "forced": bool(overridden),
            "overridden": overridden,
            "groups": [r.to_dict() for r in rows],
        }
        said = [r.summary() for r in rows]
        timings = {"capacitySeconds": time.monotonic() - started}  # every check of the run, added up
        if req.force and refusals:
            said.append(f"capacity guard overridden by --force: {'; '.join(refusals)}")
            return Verdict(
                self.name,
                section=section,
                forced=tuple(refusals),
                forced_note=override_note(rows),
                said=tuple(said),
                timings=timings,
            )
        return Verdict(self.name, refusals=tuple(refusals), section=section, said=tuple(said), timings=timings)


def override_note(rows: Iterable[CapacityGroup]) -> str:
    """What ``--force`` set aside, short enough for an Event's note."""
    return "; ".join(
        f"network {r.network}, group {r.group!r}: {r.verdict} (load {r.load}, headroom {r.headroom})"
        for r in rows
        if r.verdict != "fits"
    )


GUARD = CapacityGuard()
