"""What a publication changed: the candidate diff, the log line's ``changes`` and the Event's note.

The controller diffs a publication once (:func:`publication_diff`) and reads both texts from
that one :class:`PublicationDiff`: the "overlay published" log line's ``changes``
(:func:`change_log`) and the ``OverlayPublished`` Event's note (:func:`note_for`).

**Sized by the change.** Only the shards whose digest differs between the stored index and the
new one are compared: shards at equal digests hold equal candidates. When that is not possible
(an inline or differently sharded stored index, or a changed shard not in hand at the stored
index's digest) the whole previous overlay is compared instead (:func:`previous_overlay`). In
the network form (:mod:`agn.netshards`) the shards compared are the network's
(:func:`network_diff`), read at the digests the stored index names them.

Pure: cached objects and plans in, diffs and text out. It must not write, log or send Events,
and it never decides what an overlay holds (that is :mod:`agn.operator.reconcile`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agn.model import ADMITTED, EXISTING_ONLY, Candidate, Overlay
from agn.netshards import NetworkSplit
from agn.objects import Obj
from agn.operator.reconcile import Planned
from agn.shards import Incomplete, assemble, is_network_form, is_sharded, network_shard_name, shard_of

# Per section of an overlay change, at most this many providers are named in the log line; the
# counts are always exact. A fleet's first publication adds thousands of candidates, and one log
# line must not carry them all.
CHANGE_LOG_LIMIT = 50
_COMPARED = ("admission_state", "endpoint", "selection_group", "rank")


@dataclasses.dataclass(frozen=True)
class OverlayDiff:
    """Candidates matched by id between two overlays (or the same shards of two overlays):
    ``added`` and ``removed`` sorted by (provider, state); ``changed`` holds ``(old, new)`` for
    each id whose :data:`_COMPARED` fields differ, sorted by the new provider."""

    added: tuple[Candidate, ...]
    removed: tuple[Candidate, ...]
    changed: tuple[tuple[Candidate, Candidate], ...]


@dataclasses.dataclass(frozen=True)
class PublicationDiff:
    """What one publication changed, diffed once for the log line and the Event."""

    previous_revision: int | None  # None: a first revision (or the previous one is not known)
    diff: OverlayDiff
    shards_compared: int | None  # the shards diffed; None: whole overlays were


def diff_candidates(before: Iterable[Candidate], after: Iterable[Candidate]) -> OverlayDiff:
    """What changed from ``before`` to ``after``; the work is sized by what is passed in."""
    old: dict[str, Candidate] = {c.id: c for c in before}
    new: dict[str, Candidate] = {c.id: c for c in after}
    added = sorted((c for i, c in new.items() if i not in old), key=lambda c: (c.provider, c.admission_state))
    removed = sorted((c for i, c in old.items() if i not in new), key=lambda c: (c.provider, c.admission_state))
    changed = []
    for i in sorted(old.keys() & new.keys(), key=lambda i: new[i].provider):
        a, b = old[i], new[i]
        if a != b and any(getattr(a, f) != getattr(b, f) for f in _COMPARED):
            changed.append((a, b))
    return OverlayDiff(tuple(added), tuple(removed), tuple(changed))


# -- one publication, diffed over the shards that changed ---------------------------------------
def publication_diff(
    planned: Planned, current: Obj | None, stored: Mapping[str, Obj], remembered: Overlay | None
) -> PublicationDiff:
    """What publishing ``planned`` changes against the stored index ``current`` and the cached
    shards ``stored`` (by name); ``remembered``: what this term published last, if known.

    The stored shards whose digest differs (at the digests the stored index gives them) are
    compared against the plan's; otherwise the whole previous overlay is."""
    plan = planned.plan
    spec = (current or {}).get("spec") or {}
    if current is not None and is_sharded(spec) and spec.get("shardCount") == plan.shard_count:
        old = {str(e.get("name", "")): e.get("digest") for e in spec.get("shards") or ()}
        new = {e["name"]: e["digest"] for e in planned.sharded.index["shards"]}
        differing = sorted(n for n in old.keys() | new.keys() if old.get(n) != new.get(n))
        before = _stored_candidates(spec, stored, [n for n in differing if n in old], old)
        if before is not None:
            after = {  # candidate id -> (the planned candidate, its spec form)
                c.id: (c, d)
                for n in differing
                if n in new
                for c, d in zip(
                    plan.members[planned.sharded.shards[n]["shard"]],
                    planned.sharded.shards[n]["candidates"],
                    strict=True,
                )
            }
            # Only candidates whose stored form is not the new one's are parsed and compared.
            gone = [Candidate.from_dict(d) for i, d in before.items() if i not in after or d != after[i][1]]
            came = [c for i, (c, d) in after.items() if i not in before or before[i] != d]
            revision = Overlay.from_spec(spec).revision
            return PublicationDiff(revision, diff_candidates(gone, came), len(differing))
    previous = previous_overlay(current, stored, remembered)
    diff = diff_candidates(previous.candidates if previous else (), planned.overlay.candidates)
    return PublicationDiff(previous.revision if previous else None, diff, None)


def network_diff(
    index: Mapping[str, Any],
    split: NetworkSplit,
    current: Obj | None,
    spec_at: Callable[[str, str], Mapping[str, Any] | None],
) -> PublicationDiff | None:
    """What publishing the network-form ``index`` over ``split`` changes against the stored
    index ``current``, from the network shards that differ between the two alone (those at
    another digest, and those holding an id excluded on one side only); None when that cannot
    be told this way (the stored index is not this network's form with the same shard count, or
    a compared shard's content at the stored digest is not in hand): the caller then compares
    whole overlays (:func:`publication_diff`).

    ``spec_at(name, digest)``: a network shard's spec at that digest, if known. The result is
    what comparing the whole overlays gives, at a cost sized by the change: a drain of one
    provider among 5,000 reads one shard, not every candidate of every consumer."""
    spec = (current or {}).get("spec") or {}
    count = split.count
    if not is_network_form(spec) or spec.get("network") != split.network or spec.get("shardCount") != count:
        return None
    was_excluded, excluded = set(spec.get("excluded") or ()), set(index.get("excluded") or ())
    old = {str(e.get("name", "")): e.get("digest") for e in spec.get("shards") or ()}
    new = {str(e["name"]): e["digest"] for e in split.entries}
    compared = {n for n in old.keys() | new.keys() if old.get(n) != new.get(n)}
    compared |= {network_shard_name(split.network, shard_of(i, count)) for i in was_excluded ^ excluded}
    before: dict[str, Any] = {}
    for name in sorted(compared & old.keys()):
        shard = spec_at(name, str(old[name]))
        if shard is None:
            return None
        before.update((i, c) for c in shard.get("candidates") or () if (i := str(c.get("id", ""))) not in was_excluded)
    after = {
        i: c for n in compared & new.keys() for c in split.shards[n]["candidates"] if (i := c["id"]) not in excluded
    }
    gone = [Candidate.from_dict(d) for i, d in before.items() if i not in after or d != after[i]]
    came = [Candidate.from_dict(d) for i, d in after.items() if i not in before or before[i] != d]
    return PublicationDiff(Overlay.from_spec(spec).revision, diff_candidates(gone, came), len(compared))


def publication_change(
    planned: Planned,
    index: Mapping[str, Any],
    split: NetworkSplit,
    held: tuple[Obj | None, Mapping[str, Obj]],
    spec_at: Callable[[str, str], Mapping[str, Any] | None],
    remembered: Overlay | None,
) -> PublicationDiff:
    """What publishing ``planned`` as the network-form ``index`` over ``split`` changes: from the
    network shards that differ (:func:`network_diff`), else as :func:`publication_diff` tells it.
    ``held``: the stored index and the cached shards (the consumer's and the network's)."""
    current, stored = held
    change = network_diff(index, split, current, spec_at)
    return change if change is not None else publication_diff(planned, current, stored, remembered)


def _stored_candidates(
    index: Mapping[str, Any], stored: Mapping[str, Obj], names: Iterable[str], digests: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Candidate id -> stored candidate of the named shards, or None when one of them is not in
    hand at the digest the stored index gives it (then whole overlays are compared)."""
    out: dict[str, Any] = {}
    for name in names:
        shard = (stored.get(name) or {}).get("spec") or {}
        if shard.get("digest") != digests[name] or shard.get("consumer") != index.get("consumer"):
            return None
        out.update((str(c.get("id", "")), c) for c in shard.get("candidates") or ())
    return out


def previous_overlay(current: Obj | None, stored: Mapping[str, Obj], remembered: Overlay | None) -> Overlay | None:
    """The overlay the consumer had, candidates included, for the change log and the Event:
    the stored index assembled with the cached shards, else what this term published last
    (if it is that revision), else None."""
    if current is None:
        return remembered
    spec = current.get("spec") or {}
    try:
        return Overlay.from_spec(assemble(spec, {n: o.get("spec") for n, o in stored.items()}))
    except Incomplete:
        pass
    if remembered is not None and (remembered.revision, remembered.digest) == (
        spec.get("revision"),
        spec.get("digest"),
    ):
        return remembered
    return None


# -- the log line's ``changes`` ----------------------------------------------------------------
def _capped(items: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"count": len(items)}
    if items:
        out["providers"] = items[:CHANGE_LOG_LIMIT]
    if len(items) > CHANGE_LOG_LIMIT:
        out["more"] = len(items) - CHANGE_LOG_LIMIT
    return out


def change_log(diff: OverlayDiff, states: Mapping[str, int]) -> dict[str, Any]:
    """The ``changes`` of the "overlay published" log line: ``added`` and ``removed`` name
    providers with their admission state; ``changed`` names each provider with the fields that
    differ as ``[old, new]``; ``states`` counts the new overlay's candidates per admission state
    (states with none are left out). Each list names at most :data:`CHANGE_LOG_LIMIT` providers
    (sorted), with ``more`` saying how many were left out."""
    changed = []
    for old, new in diff.changed:
        fields = {f: [getattr(old, f), getattr(new, f)] for f in _COMPARED if getattr(old, f) != getattr(new, f)}
        changed.append({new.provider: fields})
    return {
        "added": _capped([{c.provider: c.admission_state} for c in diff.added]),
        "removed": _capped([{c.provider: c.admission_state} for c in diff.removed]),
        "changed": _capped(changed),
        "states": {k: v for k, v in sorted(states.items()) if v},
    }


def stored_fields(overlay: Overlay, work: Any) -> dict[str, Any]:
    """The "overlay stored again" log line's fields (``work``: the :class:`.storage.ShardWork` done)."""
    return {
        "consumer": overlay.consumer,
        "revision": overlay.revision,
        "shards_written": len(work.shards) + len(work.network),
        "index_written": work.index,
        "shards_deleted": len(work.surplus),
    }


def published_fields(overlay: Overlay, work: Any, change: PublicationDiff, states: Mapping[str, int]) -> dict[str, Any]:
    """The "overlay published" log line's fields: the revision, what was written, what changed."""
    return {
        "consumer": overlay.consumer,
        "network": overlay.network,
        "revision": overlay.revision,
        "previous_revision": change.previous_revision,
        "digest": overlay.digest,
        "shards_written": len(work.shards) + len(work.network),
        "network_shards_written": list(work.network),
        "shards_deleted": len(work.surplus),
        "shards_compared": change.shards_compared,
        "changes": change_log(change.diff, states),
    }


def state_counts(candidates: Iterable[Candidate]) -> dict[str, int]:
    states: dict[str, int] = {}
    for c in candidates:
        states[c.admission_state] = states.get(c.admission_state, 0) + 1
    return states


def overlay_changes(previous: Overlay | None, overlay: Overlay) -> dict[str, Any]:
    """What changed from ``previous`` to ``overlay`` as :func:`change_log` tells it, diffing the
    whole overlays (the controller diffs only the shards that changed).

    Candidates are matched by id (stable across renames of nothing else)."""
    diff = diff_candidates(previous.candidates if previous else (), overlay.candidates)
    return change_log(diff, state_counts(overlay.candidates))


# -- the Event's note --------------------------------------------------------------------------
def state_changes(diff: OverlayDiff) -> list[str]:
    """Per provider, how its place in the overlay changed: ``p: admitted -> existing_only``,
    ``p: added (admitted)``, ``p: removed``. Sorted by provider. Read from the id-matched diff,
    by provider name: a provider recreated (new id) in the same state did not change."""
    before = {c.provider: c.admission_state for c in diff.removed}
    after = {c.provider: c.admission_state for c in diff.added}
    for old, new in diff.changed:
        before[old.provider] = old.admission_state
        after[new.provider] = new.admission_state
    out = []
    for name in sorted(before.keys() | after.keys()):
        was, now = before.get(name), after.get(name)
        if was == now:
            continue
        if was is None:
            out.append(f"{name}: added ({now})")
        elif now is None:
            out.append(f"{name}: removed")
        else:
            out.append(f"{name}: {was} -> {now}")
    return out


def note_for(
    diff: OverlayDiff, *, network: str, revision: int, states: Mapping[str, int], previous_revision: int | None
) -> str:
    """The ``OverlayPublished`` note: the new revision, its admission counts, and what changed
    since ``previous_revision`` (None: a first revision, or none known)."""
    head = (
        f"published overlay revision {revision} of network {network}: "
        f"{states.get(ADMITTED, 0)} admitted, {states.get(EXISTING_ONLY, 0)} existing_only"
    )
    if previous_revision is None:
        return head + " (first revision)"
    changes = state_changes(diff)
    return head + f" (was revision {previous_revision}" + ("; " + ", ".join(changes) if changes else "") + ")"


def published_note(previous: Overlay | None, overlay: Overlay) -> str:
    """:func:`note_for` between two whole overlays."""
    diff = diff_candidates(previous.candidates if previous else (), overlay.candidates)
    return note_for(
        diff,
        network=overlay.network,
        revision=overlay.revision,
        states=state_counts(overlay.candidates),
        previous_revision=previous.revision if previous is not None else None,
    )
