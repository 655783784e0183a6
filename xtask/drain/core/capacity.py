"""The load-aware capacity guard: per network and selection group, does the load the providers
this run drains carry now fit in the headroom of the providers that stay admitted? Pure:
objects, ``now`` and the probes heartbeat in, rows out (docs/provider-drain.md, "Capacity").

A provider declares its capacity as ``spec.capacity.maxConcurrent``: how many requests it
serves at once (the in-flight bound). A provider's *load* is ``running + waiting`` from the
load reading the operator publishes in ``status.load`` (for a provider that declares a capacity,
and for a drained one: agn/operator/probe_recorder.py). For a group:

- **leaving** — the summed load of the providers this run drains (not drained yet);
- **headroom** — of the providers that stay admitted (not drained by anyone, not drained by this
  run, not out for a hard failure): their summed capacity minus their summed load, less the
  margin (``--capacity-margin``: N requests, or P% of their summed capacity, rounded up);
- **verdict** — ``fits`` when leaving <= headroom; ``exceeds`` when it does not, or when no
  provider stays admitted; ``unknown`` when any number is missing: a provider without a declared
  capacity, a load reading that is absent, expired, failed, or lacks a gauge (an absent reading
  is never read as 0; :func:`xtask.drain.core.idle.classify` judges each reading).

The guard applies only to a group in which at least one provider declares a capacity; a group
where none does keeps the guard it had before (a consumer's last admitted provider,
:mod:`xtask.drain.core.guard`), so nothing changes for fleets that declare no capacity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from agn.model import hard_failure, selects
from agn.objects import max_concurrent_of, network_view, provider_view
from xtask.drain.core.amounts import Amount
from xtask.drain.core.idle import UNKNOWN, classify
from xtask.record import Record

FITS = "fits"
EXCEEDS = "exceeds"
UNKNOWN_VERDICT = UNKNOWN


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class ProviderLoad(Record):
    """One provider's numbers as the guard read them; None: unknown (``detail`` says why)."""

    provider: str
    load: int | None
    capacity: int | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "load": self.load, "capacity": self.capacity, "detail": self.detail}


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class CapacityGroup(Record):
    """One (network, selection group) a run drains a provider of, in which a capacity is declared."""

    network: str
    group: str
    leaving: tuple[ProviderLoad, ...]  # drained by this run
    staying: tuple[ProviderLoad, ...]  # stay admitted
    margin: int  # requests held back from the headroom

    @property
    def unknown(self) -> list[str]:
        """What is not known, per provider, in words."""
        out = [f"{p.provider}: load unknown ({p.detail})" for p in self.leaving if p.load is None]
        for p in self.staying:
            if p.capacity is None:
                out.append(f"{p.provider}: capacity unknown (no spec.capacity.maxConcurrent)")
            if p.load is None:
                out.append(f"{p.provider}: load unknown ({p.detail})")
        return out

    @property
    def load(self) -> int | None:
        """The load leaving; None when any of it is unknown."""
        return _sum(p.load for p in self.leaving)

    @property
    def capacity(self) -> int | None:
        return _sum(p.capacity for p in self.staying)

    @property
    def staying_load(self) -> int | None:
        return _sum(p.load for p in self.staying)

    @property
    def headroom(self) -> int | None:
        if self.capacity is None or self.staying_load is None:
            return None
        return self.capacity - self.staying_load - self.margin

    @property
    def verdict(self) -> str:
        if self.unknown:
            return UNKNOWN_VERDICT
        load, headroom = self.load, self.headroom
        assert load is not None and headroom is not None
        return FITS if self.staying and load <= headroom else EXCEEDS

    def describe(self) -> str:
        """Why the group refuses (the verdict is not ``fits``), naming the numbers."""
        where = f"capacity: network {self.network}, selection group {self.group!r}"
        if self.verdict == UNKNOWN_VERDICT:
            return f"{where}: not known, so it is not assumed to fit: {'; '.join(self.unknown)}"
        leaving = ", ".join(f"{p.provider} {p.load}" for p in self.leaving)
        if not self.staying:
            return f"{where}: the drained providers carry load {self.load} ({leaving}) and no provider stays admitted"
        return (
            f"{where}: the drained providers carry load {self.load} ({leaving}), over the headroom "
            f"{self.headroom} of the {len(self.staying)} provider(s) that stay admitted (capacity {self.capacity}, "
            f"load {self.staying_load}, margin {self.margin})"
        )

    def summary(self) -> str:
        """One line for the progress output."""
        return (
            f"capacity: network {self.network}, group {self.group!r}: load leaving "
            f"{_text(self.load)}, headroom staying {_text(self.headroom)} (margin {self.margin}): {self.verdict}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "network": self.network,
            "group": self.group,
            "load": self.load,
            "capacity": self.capacity,
            "stayingLoad": self.staying_load,
            "margin": self.margin,
            "headroom": self.headroom,
            "verdict": self.verdict,
            "unknown": self.unknown,
            "leaving": [p.to_dict() for p in self.leaving],
            "staying": [p.to_dict() for p in self.staying],
        }


def _sum(values: Iterable[int | None]) -> int | None:
    total = 0
    for v in values:
        if v is None:
            return None
        total += v
    return total


def _text(value: int | None) -> str:
    return "unknown" if value is None else str(value)


def provider_load(obj: Mapping[str, Any], *, max_age: float, now: float, heartbeat: float | None) -> ProviderLoad:
    """One provider's load (``running + waiting``) and declared capacity, judged at ``now``.

    A reading the status still calls fresh (MetricsFresh True) counts as read at the probes
    heartbeat when that is later: the operator rewrites a published load whenever its counts
    change, so an unchanged one was still true then (:func:`agn.objects.with_heartbeat`)."""
    view = provider_view(obj)
    vouched = heartbeat if view.metrics_fresh_claimed else None
    reading = classify(view.name, obj, max_age=max_age, now=now, vouched_at=vouched)
    known = reading.state != UNKNOWN and reading.running is not None and reading.waiting is not None
    load = reading.running + reading.waiting if known else None  # type: ignore[operator]
    return ProviderLoad(view.name, load, view.max_concurrent, reading.why)


def capacity_groups(
    providers: Iterable[Mapping[str, Any]],
    networks: Iterable[Mapping[str, Any]],
    to_drain: Iterable[str],
    margin: Amount | None,
    *,
    heartbeat: float | None,
    now: float,
) -> list[CapacityGroup]:
    """One row per (network, selection group) that holds a provider of ``to_drain`` not drained
    yet and a provider declaring a capacity; sorted by network and group."""
    objs = list(providers)
    if not any(max_concurrent_of(o.get("spec") or {}) is not None for o in objs):
        return []  # a fleet that declares no capacity: nothing to weigh (and no view to build)
    views = [provider_view(o, heartbeat) for o in objs]
    draining = set(to_drain)
    rows = []
    for net_obj in sorted(networks, key=lambda n: n.get("metadata", {}).get("name", "")):
        net = network_view(net_obj)
        groups: dict[str, list[int]] = {}
        for i, v in enumerate(views):
            if selects(net, v.labels):
                groups.setdefault(v.selection_group, []).append(i)
        for group, members in sorted(groups.items()):
            leaving = [i for i in members if views[i].name in draining and not views[i].drain]
            if not leaving or not any(views[i].max_concurrent is not None for i in members):
                continue
            staying = [
                i
                for i in members
                if views[i].name not in draining and not views[i].drain and hard_failure(views[i], net, now=now) is None
            ]

            def read(i: int, max_age: float = net.metrics_max_age_seconds) -> ProviderLoad:
                return provider_load(objs[i], max_age=max_age, now=now, heartbeat=heartbeat)

            staying_loads = tuple(read(i) for i in sorted(staying, key=lambda i: views[i].name))
            total = _sum(p.capacity for p in staying_loads)
            held_back = 0 if margin is None else margin.of(total or 0)
            rows.append(
                CapacityGroup(
                    network=net.name,
                    group=group,
                    leaving=tuple(read(i) for i in sorted(leaving, key=lambda i: views[i].name)),
                    staying=staying_loads,
                    margin=held_back,
                )
            )
    return rows


def capacity_refusals(rows: Iterable[CapacityGroup]) -> list[str]:
    """The groups that refuse the drain (exceeds or unknown), each naming its numbers."""
    return [f"{r.describe()} (use --force to drain anyway)" for r in rows if r.verdict != FITS]
