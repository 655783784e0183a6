"""The holds guard: an undrain of a provider the caller holds nothing on while others hold it
is refused, per provider, naming the holds' owners (the API server's policy would refuse the
write too). ``--release-all`` removes every hold and is not refused here."""

from __future__ import annotations

import dataclasses

from xtask.drain.core.holds import undrain_refusal
from xtask.drain.guards.base import Look, Verdict
from xtask.drain.snapshot import Snapshot
from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class HoldsGuard(Record):
    name: str = "holds"
    field: str | None = None

    def check(self, snapshot: Snapshot, look: Look) -> Verdict:
        if look.req.drain or look.req.release_all:
            return Verdict(self.name)
        found = (
            undrain_refusal(p, key=look.hold_key, name=p["metadata"]["name"]) for p in snapshot.selected(look.changes)
        )
        return Verdict(self.name, refusals=tuple(r for r in found if r))


GUARD = HoldsGuard()
