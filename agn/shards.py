"""Sharded overlays: how one consumer's overlay is stored as a small index plus shards.

A consumer's overlay (:class:`agn.model.Overlay`: revision, digest, candidates) is what the
overlay semantics of docs/overlays.md define. At fleet size it does not fit one object (etcd refuses
requests over 1.5 MiB; 5,000 candidates are ~1.4 MiB), so the operator stores it as:

- **the index**, the ``RoutingOverlay`` named after the consumer: network, consumer, revision,
  the overlay digest, ``candidateCount``, ``admission`` (candidates per admission state),
  ``shardCount`` and ``shards`` — one entry ``{name, digest, candidates}`` per non-empty shard;
- **the shards**, ``RoutingOverlayShard`` objects named ``<consumer>-shard-NN``: the candidates
  whose id hashes to shard ``NN`` (of ``shardCount``), sorted by id, with the shard's digest.
  Each carries the label ``agn.dev/consumer: <consumer>`` (:func:`shard_labels`), so
  ``kubectl get routingoverlayshards -l agn.dev/consumer=<consumer>`` lists one consumer's.

Rules that keep the overlay contract across shards:

- a candidate's shard depends only on its id (stable) and the shard count, so a drain changes
  one shard, and the index;
- the operator writes every changed shard first and the index last; the index's revision and
  digest are the overlay's, and it changes exactly when the overlay does;
- a reader takes a revision only when every shard the index names is in hand with the digest
  the index gives it (:func:`assemble`); until then it keeps what it had, so no reader ever sees
  candidates of two revisions mixed.

An index that carries ``candidates`` itself (no ``shards``) is an inline overlay, the form
earlier operators wrote and hand-written test overlays use; :func:`assemble` returns it as is.
The operator now writes the network-shard form (:mod:`agn.netshards`: ``formatVersion: 2``, the
network's shards shared by its consumers, each index naming the ids it excludes); the readers
here (:func:`assemble`, :func:`pending_shards`, :func:`shards_holding`) read all three forms.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from agn import GROUP
from agn.model import ADMITTED, EXISTING_ONLY, Candidate, Overlay, group_admitted_counts, overlay_digest

DEFAULT_SHARD_COUNT = 16
MAX_SHARD_COUNT = 100  # two digits in a shard's name
SHARD_INFIX = "-shard-"
CONSUMER_LABEL = f"{GROUP}/consumer"
MAX_LABEL_VALUE = 63  # a label value's limit; an object name may be longer
# The network-shard form (:mod:`agn.netshards`): an index with ``formatVersion: 2`` names its
# network's shards ``<network>-netshard-NN`` and lists the candidate ids it ``excluded``.
FORMAT_VERSION = 2
NETWORK_INFIX = "-netshard-"


def shard_of(candidate_id: str, count: int) -> int:
    """The shard (0 ≤ n < count) a candidate lives in: a stable hash of its id alone."""
    return int.from_bytes(hashlib.sha256(candidate_id.encode()).digest()[:8], "big") % count


def shard_name(consumer: str, index: int) -> str:
    return f"{consumer}{SHARD_INFIX}{index:02d}"


def network_shard_name(network: str, index: int) -> str:
    return f"{network}{NETWORK_INFIX}{index:02d}"


def is_network_form(index: Mapping[str, Any]) -> bool:
    """Whether ``index`` is in the network-shard form (:mod:`agn.netshards`)."""
    return index.get("formatVersion") == FORMAT_VERSION


def index_shard_name(index: Mapping[str, Any], n: int) -> str:
    """The name of shard ``n`` of ``index``: its network's in the network form, else its consumer's."""
    if is_network_form(index):
        return network_shard_name(str(index.get("network", "")), n)
    return shard_name(str(index.get("consumer", "")), n)


def shard_belongs(index: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """Whether a shard spec is of the owner ``index`` names: its network (a network shard, which
    has no consumer), or its consumer."""
    if is_network_form(index):
        return spec.get("network") == index.get("network") and "consumer" not in spec
    return spec.get("consumer") == index.get("consumer")


def shard_names(consumer: str, count: int = DEFAULT_SHARD_COUNT) -> list[str]:
    """Every name a consumer's shards can have with ``count`` shards (RBAC resourceNames)."""
    return [shard_name(consumer, i) for i in range(count)]


def shard_labels(consumer: str) -> dict[str, str]:
    """The labels each of ``consumer``'s shards carries: :data:`CONSUMER_LABEL`, or none for a
    consumer whose name is too long to be a label value (a name may have 253 characters)."""
    return {CONSUMER_LABEL: consumer} if len(consumer) <= MAX_LABEL_VALUE else {}


def consumer_of_shard(name: str) -> str | None:
    """The consumer a shard name belongs to, or None if ``name`` is not a shard name."""
    head, sep, tail = name.rpartition(SHARD_INFIX)
    if not sep or not head or len(tail) != 2 or not tail.isdigit():
        return None
    return head


def check_shard_count(count: int) -> int:
    if not 1 <= count <= MAX_SHARD_COUNT:
        raise ValueError(f"shard count must be between 1 and {MAX_SHARD_COUNT}, got {count}")
    return count


@dataclasses.dataclass(frozen=True)
class Sharded:
    """An overlay split for storage: the index spec and each non-empty shard's spec, by name."""

    index: dict[str, Any]
    shards: dict[str, dict[str, Any]]


def shard_spec(
    network: str, consumer: str, n: int, count: int, digest: str, candidates: Iterable[Candidate]
) -> dict[str, Any]:
    """Shard ``n``'s spec (of ``count``): its candidates, sorted by (id, provider), and their digest."""
    return {
        "network": network,
        "consumer": consumer,
        "shard": n,
        "shardCount": count,
        "digest": digest,
        "candidates": [c.to_dict() for c in candidates],
    }


def index_spec(
    overlay: Overlay,
    *,
    count: int,
    entries: list[dict[str, Any]],
    admission: dict[str, int],
    admitted_by_group: Mapping[str, int],
) -> dict[str, Any]:
    """The index's spec: the overlay's revision and digest, its counts, and one
    ``{name, digest, candidates}`` entry per non-empty shard (by shard number)."""
    return {
        "network": overlay.network,
        "consumer": overlay.consumer,
        "revision": overlay.revision,
        "digest": overlay.digest,
        "candidateCount": len(overlay.candidates),
        "admission": admission,
        "admittedByGroup": dict(sorted(admitted_by_group.items())),
        "shardCount": count,
        "shards": entries,
    }


def split(overlay: Overlay, count: int = DEFAULT_SHARD_COUNT) -> Sharded:
    """The index and shard specs that store ``overlay`` with ``count`` shards."""
    check_shard_count(count)
    groups: dict[int, list[Candidate]] = {}
    for c in overlay.candidates:
        groups.setdefault(shard_of(c.id, count), []).append(c)
    shards: dict[str, dict[str, Any]] = {}
    entries = []
    for n in sorted(groups):
        cands = sorted(groups[n], key=lambda c: (c.id, c.provider))
        name = shard_name(overlay.consumer, n)
        digest = overlay_digest(cands)
        shards[name] = shard_spec(overlay.network, overlay.consumer, n, count, digest, cands)
        entries.append({"name": name, "digest": digest, "candidates": len(cands)})
    index = index_spec(
        overlay,
        count=count,
        entries=entries,
        admission=admission_counts(overlay.candidates),
        admitted_by_group=group_admitted_counts(overlay.candidates),
    )
    return Sharded(index, shards)


def admission_counts(candidates: Iterable[Candidate]) -> dict[str, int]:
    counts = {ADMITTED: 0, EXISTING_ONLY: 0}
    for c in candidates:
        counts[c.admission_state] = counts.get(c.admission_state, 0) + 1
    return counts


def is_sharded(index: Mapping[str, Any]) -> bool:
    return "shards" in index


class Incomplete(Exception):
    """Not every shard the index names is in hand with the digest the index gives it."""

    def __init__(self, revision: Any, missing: list[str], mismatched: list[str]) -> None:
        self.revision = revision
        self.missing = missing
        self.mismatched = mismatched
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if mismatched:
            parts.append(f"not yet at the index's digest: {', '.join(mismatched)}")
        super().__init__(f"overlay revision {revision}: shards {'; '.join(parts)}")


def pending_shards(
    index: Mapping[str, Any], shards: Mapping[str, Mapping[str, Any] | None]
) -> tuple[list[str], list[str]]:
    """(missing, mismatched): the index's shards that are absent, or present at another digest."""
    missing, mismatched = [], []
    for entry in index.get("shards") or ():
        name = str(entry.get("name", ""))
        spec = shards.get(name)
        if spec is None:
            missing.append(name)
        elif spec.get("digest") != entry.get("digest") or not shard_belongs(index, spec):
            mismatched.append(name)
    return missing, mismatched


def shards_holding(index: Mapping[str, Any], candidate_ids: Iterable[str]) -> list[str]:
    """The names of the shards of a sharded ``index`` that would hold these candidate ids, among
    the shards it lists (a shard it does not list is empty: none of the ids is in the overlay).
    Sorted. A reader that asks about a few providers reads only these shards, not the overlay."""
    listed = {str(e.get("name", "")) for e in index.get("shards") or ()}
    count = index.get("shardCount")
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_SHARD_COUNT:
        return sorted(listed)  # no usable count: every listed shard may hold them
    return sorted({name for i in candidate_ids if (name := index_shard_name(index, shard_of(i, count))) in listed})


def assemble(
    index: Mapping[str, Any],
    shards: Mapping[str, Mapping[str, Any] | None],
    *,
    only: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The whole overlay spec (``network, consumer, revision, digest, candidates``) from its index
    and shard specs (by name; extra shards are ignored). Raises :class:`Incomplete` unless every
    shard the index names is present at the index's digest for it. An inline index is returned
    as is. An index in the network form (:mod:`agn.netshards`) names its network's shards; its
    ``excluded`` candidate ids are left out.

    ``only``: assemble just these shards of the index (e.g. :func:`shards_holding` some
    providers); the spec's revision and digest are still the whole overlay's, its candidates
    those shards' — a *partial* overlay, for a reader that asks only about the candidates those
    shards hold. Only those shards must be in hand."""
    if not is_sharded(index):
        return dict(index)
    if only is not None:
        keep = set(only)
        index = {**index, "shards": [e for e in index.get("shards") or () if str(e.get("name", "")) in keep]}
    missing, mismatched = pending_shards(index, shards)
    if missing or mismatched:
        raise Incomplete(index.get("revision"), missing, mismatched)
    candidates: list[Any] = []
    excluded = set(index.get("excluded") or ()) if is_network_form(index) else set()
    for entry in index.get("shards") or ():
        shard = shards[str(entry["name"])]
        assert shard is not None  # checked by pending_shards
        candidates.extend(c for c in shard.get("candidates") or () if c.get("id") not in excluded)
    candidates.sort(key=lambda c: (str(c.get("id", "")), str(c.get("provider", ""))))
    return {
        "network": index.get("network"),
        "consumer": index.get("consumer"),
        "revision": index.get("revision"),
        "digest": index.get("digest"),
        "candidates": candidates,
    }


def changed_shards(new: Sharded, current: Mapping[str, str]) -> list[str]:
    """Names of ``new``'s shards to write, given the digests of the shards stored now."""
    return sorted(name for name, spec in new.shards.items() if current.get(name) != spec["digest"])


def surplus_shards(new: Sharded, stored: Iterable[str]) -> list[str]:
    """Stored shard names ``new`` does not use (to delete once the new index is written)."""
    return sorted(set(stored) - set(new.shards))
