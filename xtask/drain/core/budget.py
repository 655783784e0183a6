"""The fleet budget of ``--max-unavailable N|P%``: per network and per selection group, how many
providers are unavailable now (drained by anyone, or kept out by a hard failure) and would be
after this run, and which groups the run would push over the budget. Pure: objects and ``now``
in, rows out; the run reads the objects.

A group is the providers a network selects that share ``spec.selectionGroup`` (as the capacity
guard and the overlays group them). ``P%`` is of the group's size, rounded up
(:class:`~xtask.drain.core.amounts.Amount`). Only groups this run drains a provider of are checked:
a run is refused when it raises a group's count above the budget; one that drains only
providers already counted (already failed) adds nothing and is not refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from agn.model import hard_failure, selects
from agn.objects import network_view, provider_view
from xtask.drain.core.amounts import Amount


@dataclasses.dataclass(frozen=True)
class GroupBudget:
    network: str
    group: str
    size: int
    budget: int
    drained: tuple[str, ...]  # drained now, by anyone
    failed: tuple[str, ...]  # kept out by a hard failure now (and not drained)
    by_this_run: tuple[str, ...]  # this run would drain them, and they are not counted yet

    @property
    def unavailable_now(self) -> int:
        return len(self.drained) + len(self.failed)

    @property
    def unavailable_after(self) -> int:
        return self.unavailable_now + len(self.by_this_run)

    @property
    def exceeded(self) -> bool:
        return bool(self.by_this_run) and self.unavailable_after > self.budget

    def describe(self, amount: Amount) -> str:
        return (
            f"budget: network {self.network}, selection group {self.group!r}: {self.unavailable_after} of "
            f"{self.size} provider(s) would be unavailable ({len(self.drained)} drained, {len(self.failed)} "
            f"out for a hard failure, {len(self.by_this_run)} drained by this run: "
            f"{', '.join(self.by_this_run)}), over --max-unavailable {amount} ({self.budget})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "network": self.network,
            "group": self.group,
            "size": self.size,
            "budget": self.budget,
            "unavailableNow": self.unavailable_now,
            "unavailableAfter": self.unavailable_after,
            "drained": list(self.drained),
            "failed": list(self.failed),
            "byThisRun": list(self.by_this_run),
            "exceeded": self.exceeded,
        }


def group_budgets(
    providers: Iterable[Mapping[str, Any]],
    networks: Iterable[Mapping[str, Any]],
    to_drain: Iterable[str],
    amount: Amount,
    *,
    heartbeat: float | None,
    now: float,
) -> list[GroupBudget]:
    """One row per (network, selection group) holding a provider of ``to_drain``, sorted."""
    views = [provider_view(p, heartbeat) for p in providers]
    draining = set(to_drain)
    rows = []
    for net_obj in sorted(networks, key=lambda n: n.get("metadata", {}).get("name", "")):
        net = network_view(net_obj)
        groups: dict[str, list] = {}
        for v in views:
            if selects(net, v.labels):
                groups.setdefault(v.selection_group, []).append(v)
        for group, members in sorted(groups.items()):
            if not any(v.name in draining for v in members):
                continue
            drained = sorted(v.name for v in members if v.drain)
            failed = sorted(v.name for v in members if not v.drain and hard_failure(v, net, now=now) is not None)
            counted = set(drained) | set(failed)
            by_run = sorted(v.name for v in members if v.name in draining and v.name not in counted)
            rows.append(
                GroupBudget(
                    network=net.name,
                    group=group,
                    size=len(members),
                    budget=amount.of(len(members)),
                    drained=tuple(drained),
                    failed=tuple(failed),
                    by_this_run=tuple(by_run),
                )
            )
    return rows
