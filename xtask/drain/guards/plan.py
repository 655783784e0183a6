"""The plan guard: a drain applied from a plan file (``--plan``) must still describe the cluster.
:func:`xtask.drain.edges.planfile.plan_differences` decides, on the selection as the snapshot
read it: the cluster and namespace, the plan's age against ``--max-plan-age``, and each provider
that joined or left the selection, or changed since the plan was made. Each difference is one
refusal, named as that check names it (exit 3). It judges a run's looks before its first write
only: a later wave's look sees this run's own writes, which are no change the plan missed."""

from __future__ import annotations

import dataclasses

from xtask.drain.guards.base import Look, Verdict
from xtask.drain.snapshot import Snapshot
from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class PlanGuard(Record):
    name: str = "plan"
    field: str | None = None

    def check(self, snapshot: Snapshot, look: Look) -> Verdict:
        plan = look.req.plan
        if plan is None or look.written:
            return Verdict(self.name)
        from xtask.drain.edges.planfile import DEFAULT_MAX_AGE, plan_differences  # plans load when used

        differences = plan_differences(
            plan,
            snapshot.selection,
            cluster=snapshot.kube.host,
            namespace=snapshot.namespace,
            now=snapshot.now,
            max_age=look.req.max_plan_age or DEFAULT_MAX_AGE,
        )
        if not differences:
            return Verdict(self.name)
        said = f"the plan {plan.path} no longer describes the cluster: " + "; ".join(differences)
        return Verdict(self.name, refusals=tuple(differences), said=(said,))


GUARD = PlanGuard()
