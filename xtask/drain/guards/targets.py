"""The targets and last-provider guard: the named network and consumers exist and can serve the
selection, and draining must not take a consumer's selection group's last admitted provider
(unless ``--force``). :func:`xtask.drain.core.guard.target_refusals` decides, on the targets and
overlays of the snapshot. Under the drain lock, providers the snapshot shows drained elsewhere
in a group this run drains count as leaving (an overlay that lags still shows them admitted).

For a plan file (``--plan-out``) it also counts each consumer's admitted providers per group
(``extra["counts"]``), also for an undrain or a ``--force`` drain."""

from __future__ import annotations

import dataclasses

from agn.objects import drain_of
from xtask.drain.core.changes import GroupCount
from xtask.drain.core.guard import target_refusals
from xtask.drain.guards.base import Look, Verdict
from xtask.drain.snapshot import Snapshot
from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class TargetsGuard(Record):
    name: str = "targets"
    field: str | None = None

    def check(self, snapshot: Snapshot, look: Look) -> Verdict:
        targets = snapshot.targets
        if targets is None:  # no --network: no targets to check
            return Verdict(self.name)
        names = {c.provider for c in look.changes}
        elsewhere = (
            [p for p in snapshot.members if drain_of(p) and p["metadata"]["name"] not in names]
            if look.under_lock and look.req.drain
            else []
        )
        counts: list[GroupCount] | None = [] if look.counting else None
        refusals = target_refusals(
            targets,
            look.req,
            snapshot.selected(look.changes),
            list(look.changes),
            snapshot.overlays,
            counts=counts,
            drained_elsewhere=elsewhere,
        )
        return Verdict(self.name, refusals=tuple(refusals), extra={"counts": counts or []})


GUARD = TargetsGuard()
