"""The overlay plan for one consumer: what its overlay holds and how it is stored.

Pure: a network's verdict (:mod:`agn.operator.verdicts`) and the previous overlay in, the
overlay out. The semantics themselves live in :mod:`agn.model` — this module only applies
them and must not restate them.

**Sized by the change.** :func:`plan_overlay` + :func:`agn.shards.split` plan a consumer from
scratch: every candidate sorted, serialised, digested and written into a shard spec — O(fleet)
for a drain of one provider. :class:`Plan` is the same result kept between verdict versions:
the consumer's candidates (sorted), each one's shard, the shard specs and the counts. On a new
version, :func:`advance` asks the verdict which providers' candidates changed since the plan's
version (:func:`agn.operator.verdicts.changed_since`) and moves only those: the touched shards
get new sorted candidates, digest and spec; every other shard spec is the same object as
before. The whole digest is the cached rows of all candidates joined and hashed once
(:func:`agn.model.digest_of_rows`; O(fleet), but in C). The revision comes last, from the
previous overlay (:func:`publish`), so a plan stays valid across its own publication.
Whatever path it took, a plan equals :func:`plan_overlay` + :func:`agn.shards.split` exactly
(tests/unit/test_operator_incremental_plan.py checks it over random change sequences).

What a publication changed (the log line and the Event) is :mod:`agn.operator.diffing`'s.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from agn.model import (
    ADMITTED,
    EXISTING_ONLY,
    Candidate,
    ConsumerView,
    Overlay,
    digest_of_rows,
    next_overlay,
    next_revision,
)
from agn.operator.verdicts import NetworkVerdict, candidates_of, changed_since
from agn.shards import Sharded, check_shard_count, index_spec, shard_name, shard_of, shard_spec


def plan_overlay(consumer: ConsumerView, judged: NetworkVerdict, *, previous: Overlay | None) -> Overlay:
    """The consumer's overlay under its network's verdict (the consumer's exclusions applied).

    ``next_overlay`` keeps the revision when the digest is unchanged, so an unchanged effective
    admission yields the same revision and digest — the controller then has nothing to write.
    When a reading goes stale is the verdict's ``recheck_at``."""
    return next_overlay(previous, candidates_of(judged, consumer), network=judged.network.name, consumer=consumer.name)


# A candidate id's shard never changes for a shard count: hashed once per (id, count).
_shard = functools.lru_cache(maxsize=1 << 17)(shard_of)


# A delta of more than 1/8 of the candidates (plus a few) is applied by planning afresh: by then
# every shard is rebuilt either way, and moving candidates one by one costs more than planning
# once (measured at 5,000: even at 600 changed, ~5x more with all 5,000 changed).
_FRESH_FRACTION = 8
_FRESH_FLOOR = 32


def _key(c: Candidate) -> tuple[str, str]:
    return (c.id, c.provider)


@dataclasses.dataclass(frozen=True)
class Plan:
    """One consumer's planned overlay, but its revision, with what it is made of, kept so the
    next verdict version can be applied as a delta. Never changed in place: :func:`advance`
    returns a new plan that shares every unchanged part with this one."""

    consumer: ConsumerView
    network: str
    version: int  # the verdict version planned from
    shard_count: int
    candidates: tuple[Candidate, ...]  # sorted by (id, provider)
    digest: str
    by_provider: Mapping[str, Candidate]
    members: Mapping[int, tuple[Candidate, ...]]  # shard number -> its candidates, sorted
    specs: Mapping[str, dict[str, Any]]  # shard name -> spec, by shard number (split's shards)
    entries: Mapping[int, dict[str, Any]]  # shard number -> the index's {name, digest, candidates}
    states: Mapping[str, int]  # candidates per admission state
    groups: Mapping[str, tuple[int, int]]  # selection group -> (candidates, admitted)
    rebuilt: frozenset[str]  # shard specs built by the step that made this plan (all, if afresh)
    full: bool  # made afresh, not by a delta

    def overlay(self, previous: Overlay | None) -> Overlay:
        """The overlay itself: the revision follows from ``previous`` (:func:`agn.model.next_revision`)."""
        revision = next_revision(previous, self.digest, network=self.network)
        return Overlay(self.network, self.consumer.name, revision, self.digest, self.candidates)

    def sharded(self, overlay: Overlay) -> Sharded:
        """What :func:`agn.shards.split` gives for ``overlay`` (which is :meth:`overlay`'s), from
        the kept shard specs and counts."""
        index = index_spec(
            overlay,
            count=self.shard_count,
            entries=[dict(self.entries[n]) for n in sorted(self.entries)],
            admission=dict(self.states),
            admitted_by_group={g: admitted for g, (_, admitted) in self.groups.items()},
        )
        return Sharded(index, dict(self.specs))


def _counts(candidates: Iterable[Candidate]) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    states = {ADMITTED: 0, EXISTING_ONLY: 0}
    groups: dict[str, tuple[int, int]] = {}
    for c in candidates:
        states[c.admission_state] = states.get(c.admission_state, 0) + 1
        total, admitted = groups.get(c.selection_group, (0, 0))
        groups[c.selection_group] = (total + 1, admitted + (c.admission_state == ADMITTED))
    return states, groups


def _shard_spec(
    consumer: ConsumerView, network: str, n: int, count: int, members: tuple[Candidate, ...]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Shard ``n``'s spec and its entry in the index, as :func:`agn.shards.split` writes them (the
    digest from the members' cached rows)."""
    digest = digest_of_rows([c.row for c in members])
    spec = shard_spec(network, consumer.name, n, count, digest, members)
    return spec, {"name": shard_name(consumer.name, n), "digest": digest, "candidates": len(members)}


def fresh_plan(consumer: ConsumerView, judged: NetworkVerdict, shard_count: int) -> Plan:
    """The consumer's plan made from scratch under ``judged``."""
    check_shard_count(shard_count)
    candidates = candidates_of(judged, consumer)
    groups: dict[int, list[Candidate]] = {}
    for c in candidates:  # sorted already, so each shard's list is too
        groups.setdefault(_shard(c.id, shard_count), []).append(c)
    members = {n: tuple(groups[n]) for n in sorted(groups)}
    network = judged.network.name
    specs, entries = {}, {}
    for n, cands in members.items():
        spec, entry = _shard_spec(consumer, network, n, shard_count, cands)
        specs[entry["name"]], entries[n] = spec, entry
    states, group_counts = _counts(candidates)
    return Plan(
        consumer=consumer,
        network=network,
        version=judged.version,
        shard_count=shard_count,
        candidates=candidates,
        digest=digest_of_rows([c.row for c in candidates]) if consumer.excluded_providers else judged.digest,
        by_provider={c.provider: c for c in candidates} if consumer.excluded_providers else judged.by_provider,
        members=members,
        specs=specs,
        entries=entries,
        states=states,
        groups=group_counts,
        rebuilt=frozenset(specs),
        full=True,
    )


def advance(plan: Plan | None, consumer: ConsumerView, judged: NetworkVerdict, shard_count: int) -> Plan:
    """The consumer's plan under ``judged``: ``plan`` itself when it was made from this verdict
    version; ``plan`` moved by the providers that changed since its version when that is known
    and the consumer, network and shard count are the plan's; else a :func:`fresh_plan`."""
    if (
        plan is None
        or plan.consumer != consumer
        or plan.network != judged.network.name
        or plan.shard_count != shard_count
    ):
        return fresh_plan(consumer, judged, shard_count)
    if plan.version == judged.version:
        return plan
    changed = changed_since(judged, plan.version)
    if changed is None or len(changed) > len(plan.candidates) // _FRESH_FRACTION + _FRESH_FLOOR:
        return fresh_plan(consumer, judged, shard_count)  # unknown, or so large that afresh is cheaper
    return _moved(plan, consumer, judged, changed)


@dataclasses.dataclass
class _Delta:
    """What :func:`_moved` changes of a plan, gathered per changed provider: the shards touched
    (their members, sorted), the counts, and for a consumer that excludes providers its own
    sorted candidates and map (None: it has the network's)."""

    plan: Plan
    own: dict[str, Candidate] | None
    ordered: list[Candidate] | None
    states: dict[str, int]
    groups: dict[str, tuple[int, int]]
    touched: dict[int, list[Candidate]] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, plan: Plan, *, excludes: bool) -> _Delta:
        own = dict(plan.by_provider) if excludes else None
        ordered = list(plan.candidates) if excludes else None
        return cls(plan, own, ordered, dict(plan.states), dict(plan.groups))

    def shard(self, n: int) -> list[Candidate]:
        if n not in self.touched:
            self.touched[n] = list(self.plan.members.get(n, ()))
        return self.touched[n]

    def tally(self, c: Candidate, sign: int) -> None:
        states, groups = self.states, self.groups
        states[c.admission_state] = states.get(c.admission_state, 0) + sign
        total, admitted = groups.get(c.selection_group, (0, 0))
        total, admitted = total + sign, admitted + sign * (c.admission_state == ADMITTED)
        if total:
            groups[c.selection_group] = (total, admitted)
        else:
            groups.pop(c.selection_group, None)
        if not states[c.admission_state] and c.admission_state not in (ADMITTED, EXISTING_ONLY):
            del states[c.admission_state]  # as agn.shards.admission_counts counts them

    def replace(self, name: str, old: Candidate | None, new: Candidate | None) -> None:
        """Provider ``name``'s candidate ``old`` (None: it had none) becomes ``new`` (None: gone)."""
        count = self.plan.shard_count
        if old is not None:
            members = self.shard(_shard(old.id, count))
            del members[bisect.bisect_left(members, _key(old), key=_key)]
            if self.ordered is not None and self.own is not None:
                del self.ordered[bisect.bisect_left(self.ordered, _key(old), key=_key)]
                del self.own[name]
            self.tally(old, -1)
        if new is not None:
            bisect.insort(self.shard(_shard(new.id, count)), new, key=_key)
            if self.ordered is not None and self.own is not None:
                bisect.insort(self.ordered, new, key=_key)
                self.own[name] = new
            self.tally(new, +1)

    def candidates(self, judged: NetworkVerdict) -> tuple[tuple[Candidate, ...], str]:
        """The consumer's sorted candidates and their digest after the change."""
        if self.ordered is None:
            return judged.candidates, judged.digest
        if self.touched:
            candidates = tuple(self.ordered)
            return candidates, digest_of_rows([c.row for c in candidates])
        return self.plan.candidates, self.plan.digest

    def reshard(
        self, consumer: ConsumerView
    ) -> tuple[dict[int, tuple[Candidate, ...]], dict[str, dict[str, Any]], dict[int, dict[str, Any]]]:
        """The plan's members, shard specs and index entries with the touched shards rebuilt."""
        plan = self.plan
        members, specs, entries = dict(plan.members), dict(plan.specs), dict(plan.entries)
        for n, cands in self.touched.items():
            name = shard_name(consumer.name, n)
            if cands:
                members[n] = tuple(cands)
                specs[name], entries[n] = _shard_spec(consumer, plan.network, n, plan.shard_count, members[n])
            else:
                members.pop(n, None)
                specs.pop(name, None)
                entries.pop(n, None)
        return members, specs, entries


def _moved(plan: Plan, consumer: ConsumerView, judged: NetworkVerdict, changed: Iterable[str]) -> Plan:
    """``plan`` with each provider in ``changed`` given its candidate under ``judged``.

    A consumer that excludes nothing has the network's candidates, so it takes the verdict's
    sorted tuple, map and digest as they are; only its shards are its own."""
    excluded = consumer.excluded_providers
    delta = _Delta.of(plan, excludes=bool(excluded))
    for name in sorted(changed):
        old = plan.by_provider.get(name)
        new = None if name in excluded else judged.by_provider.get(name)
        if old != new:
            delta.replace(name, old, new)
    members, specs, entries = delta.reshard(consumer)
    candidates, digest = delta.candidates(judged)
    return Plan(
        consumer=consumer,
        network=plan.network,
        version=judged.version,
        shard_count=plan.shard_count,
        candidates=candidates,
        digest=digest,
        by_provider=judged.by_provider if delta.own is None else delta.own,
        members={n: members[n] for n in sorted(members)},
        specs={name: specs[name] for name in sorted(specs)},
        entries=entries,
        states=delta.states,
        groups=delta.groups,
        rebuilt=frozenset(shard_name(consumer.name, n) for n, cands in delta.touched.items() if cands),
        full=False,
    )


@dataclasses.dataclass(frozen=True)
class Planned:
    """A consumer's :class:`Plan` and the overlay and storage it gave for the last revision asked
    of it."""

    plan: Plan
    overlay: Overlay
    sharded: Sharded


def replan(
    known: Planned | None, consumer: ConsumerView, judged: NetworkVerdict, previous: Overlay | None, shard_count: int
) -> Planned:
    """The consumer's overlay and its storage, sized by the change.

    The plan is moved only when the network's verdict version changed, by the providers that
    changed since (or made afresh for a changed consumer or shard count, or a version too
    old); a batch woken by probes that only refreshed readings costs no planning. The
    revision is asked of the stored ``previous`` last, so the plan this operator has just
    published (``previous`` is then its own overlay) is taken as it is (``known`` is returned),
    not planned again."""
    plan = advance(known.plan if known is not None else None, consumer, judged, shard_count)
    if (
        known is not None
        and known.plan is plan
        and next_revision(previous, plan.digest, network=plan.network) == known.overlay.revision
    ):
        return known
    overlay = plan.overlay(previous)
    return Planned(plan, overlay, plan.sharded(overlay))
