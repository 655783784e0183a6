"""The fleet budget: per network and per selection group, how many providers are unavailable now
(drained by anyone, or kept out by a hard failure) and would be after this run, and which groups
the run would push over the budget. Pure: objects and ``now`` in, rows out; the run reads the
objects (under the network's drain lock before each write: :mod:`xtask.drain.core.lock`).

Two bounds apply to a group, the smaller one binding: the budget the network declares
(``spec.disruptionBudget.maxUnavailable``, read through :func:`agn.objects.network_view`), which
every drain by anyone is checked against, and ``--max-unavailable``, a stricter bound for one run.
``--override-budget REASON`` sets the declared one aside for this run (it is recorded); the flag
still binds.

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
from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class GroupBudget(Record):
    network: str
    group: str
    size: int
    budget: int | None  # the binding bound (None: neither bound applies)
    drained: tuple[str, ...]  # drained now, by anyone
    failed: tuple[str, ...]  # kept out by a hard failure now (and not drained)
    by_this_run: tuple[str, ...]  # this run would drain them, and they are not counted yet
    declared: str | None = None  # the network's disruptionBudget.maxUnavailable as written
    declared_budget: int | None = None  # ... of this group (None: none declared)
    flag_budget: int | None = None  # --max-unavailable of this group (None: not given)
    overridden: bool = False  # --override-budget: the declared bound is set aside

    @property
    def unavailable_now(self) -> int:
        return len(self.drained) + len(self.failed)

    @property
    def unavailable_after(self) -> int:
        return self.unavailable_now + len(self.by_this_run)

    @property
    def exceeded(self) -> bool:
        return bool(self.by_this_run) and self.budget is not None and self.unavailable_after > self.budget

    def bounds(self, amount: Amount | None) -> str:
        """The bounds that bind, as people read them."""
        named = []
        if amount is not None and self.flag_budget == self.budget:
            named.append(f"--max-unavailable {amount} ({self.flag_budget})")
        if self.declared is not None and not self.overridden and self.declared_budget == self.budget:
            named.append(f"the network's disruptionBudget.maxUnavailable {self.declared} ({self.declared_budget})")
        return " and ".join(named)

    def describe(self, amount: Amount | None) -> str:
        return (
            f"budget: network {self.network}, selection group {self.group!r}: {self.unavailable_after} of "
            f"{self.size} provider(s) would be unavailable ({len(self.drained)} drained, {len(self.failed)} "
            f"out for a hard failure, {len(self.by_this_run)} drained by this run: "
            f"{', '.join(self.by_this_run)}), over {self.bounds(amount)}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "network": self.network,
            "group": self.group,
            "size": self.size,
            "budget": self.budget,
            "declared": self.declared,
            "declaredBudget": self.declared_budget,
            "flagBudget": self.flag_budget,
            "overridden": self.overridden,
            "unavailableNow": self.unavailable_now,
            "unavailableAfter": self.unavailable_after,
            "drained": list(self.drained),
            "failed": list(self.failed),
            "byThisRun": list(self.by_this_run),
            "exceeded": self.exceeded,
        }


def declared_amount(value: int | str | None) -> Amount | None:
    """A network's declared ``maxUnavailable`` as an :class:`Amount`; None when none is declared.
    A value the API server's validation would refuse (an object stored before it) counts as 0:
    the strictest reading, never a free pass."""
    if value is None:
        return None
    if isinstance(value, int):
        return Amount(value) if value >= 0 else Amount(0)
    try:
        return Amount.parse(value) if value.endswith("%") else Amount(0)
    except ValueError:
        return Amount(0)


def declares_budget(networks: Iterable[Mapping[str, Any]]) -> bool:
    """Whether any of ``networks`` declares a disruption budget."""
    return any(network_view(n).max_unavailable is not None for n in networks)


def group_budgets(
    providers: Iterable[Mapping[str, Any]],
    networks: Iterable[Mapping[str, Any]],
    to_drain: Iterable[str],
    amount: Amount | None,
    *,
    heartbeat: float | None,
    now: float,
    override: bool = False,
) -> list[GroupBudget]:
    """One row per (network, selection group) holding a provider of ``to_drain``, sorted."""
    views = [provider_view(p, heartbeat) for p in providers]
    draining = set(to_drain)
    rows = []
    for net_obj in sorted(networks, key=lambda n: n.get("metadata", {}).get("name", "")):
        net = network_view(net_obj)
        declared = declared_amount(net.max_unavailable)
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
            flag_budget = amount.of(len(members)) if amount is not None else None
            declared_budget = declared.of(len(members)) if declared is not None else None
            binding = [b for b in (flag_budget, None if override else declared_budget) if b is not None]
            rows.append(
                GroupBudget(
                    network=net.name,
                    group=group,
                    size=len(members),
                    budget=min(binding) if binding else None,
                    drained=tuple(drained),
                    failed=tuple(failed),
                    by_this_run=tuple(by_run),
                    declared=None if net.max_unavailable is None else str(net.max_unavailable),
                    declared_budget=declared_budget,
                    flag_budget=flag_budget,
                    overridden=override and declared is not None,
                )
            )
    return rows


def networks_of(providers: Iterable[Mapping[str, Any]], networks: Iterable[Mapping[str, Any]]) -> list[str]:
    """The names of the networks that select any of ``providers``, sorted (the drain locks a run
    takes, in the order it takes them)."""
    views = [provider_view(p) for p in providers]
    names = set()
    for net_obj in networks:
        net = network_view(net_obj)
        if any(selects(net, v.labels) for v in views):
            names.add(net.name)
    return sorted(names)
