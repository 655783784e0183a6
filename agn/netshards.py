"""Network shards: the overlay form whose shards every consumer of a network shares.

A consumer's overlay differs from its network-mates' only by the consumer's own
``excludedProviders`` (:func:`agn.model.candidate_for`): hard failures, drains, slow-start
windows and session deadlines are per provider. So the candidates are stored once per network
and each consumer's index carries only what differs for it (docs/overlays.md, "Network shards"):

- **network shards**, ``RoutingOverlayShard`` objects named ``<network>-netshard-NN``
  (:func:`network_shard_name`), labelled ``agn.dev/network: <network>``: the network's
  candidates (every selected provider that is not hard-failed, with its admission state) whose
  id hashes to shard ``NN``, sorted by id, with their digest. No consumer field: a network shard
  reveals nothing consumer-specific, so every gateway of the network may read it.
- **the index**, the ``RoutingOverlay`` named after the consumer, ``formatVersion: 2``: the
  consumer's revision, digest, counts and ``admittedByGroup`` exactly as the per-consumer form
  has them, ``shards`` (the network shards it was built from, each ``{name, digest,
  candidates}``) and ``excluded``: the candidate ids of those shards this consumer does not get.

The consumer's candidates are the shards' minus ``excluded`` (:func:`agn.shards.assemble`). The
infix ``-netshard-`` is not ``-shard-``, so no network shard name is ever a consumer's shard
name (a network and a consumer may share a name), and a gateway that knows only the
per-consumer form rejects such an index (its shards are "not a shard of consumer").

Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agn import GROUP
from agn.model import Candidate, Overlay, group_admitted_counts, overlay_digest
from agn.shards import (
    FORMAT_VERSION,
    MAX_LABEL_VALUE,
    NETWORK_INFIX,
    admission_counts,
    check_shard_count,
    index_spec,
    is_network_form,
    network_shard_name,
    shard_of,
)

__all__ = ["FORMAT_VERSION", "is_network_form", "network_shard_name"]

NETWORK_LABEL = f"{GROUP}/network"


def network_shard_names(network: str, count: int) -> list[str]:
    """Every name a network's shards can have with ``count`` shards (a gateway Role's resourceNames)."""
    return [network_shard_name(network, i) for i in range(check_shard_count(count))]


def network_of_shard(name: str) -> str | None:
    """The network a network shard name belongs to, or None if ``name`` is not one."""
    head, sep, tail = name.rpartition(NETWORK_INFIX)
    if not sep or not head or len(tail) != 2 or not tail.isdigit():
        return None
    return head


def network_shard_labels(network: str) -> dict[str, str]:
    """The labels each of ``network``'s shards carries (none for a name too long for a label)."""
    return {NETWORK_LABEL: network} if len(network) <= MAX_LABEL_VALUE else {}


@dataclasses.dataclass(frozen=True)
class NetworkSplit:
    """A network's candidates split for storage: each non-empty shard's spec, by name, and
    the index entries (``{name, digest, candidates}``, by shard number) that name them."""

    network: str
    count: int
    shards: dict[str, dict[str, Any]]
    entries: list[dict[str, Any]]
    by_provider: Mapping[str, Candidate]


def split_network(network: str, candidates: Iterable[Candidate], count: int) -> NetworkSplit:
    """The network shards that store ``candidates`` (the network's, with no consumer's
    exclusions applied) with ``count`` shards."""
    check_shard_count(count)
    groups: dict[int, list[Candidate]] = {}
    for c in candidates:
        groups.setdefault(shard_of(c.id, count), []).append(c)
    shards: dict[str, dict[str, Any]] = {}
    entries = []
    for n in sorted(groups):
        cands = sorted(groups[n], key=lambda c: (c.id, c.provider))
        name, digest = network_shard_name(network, n), overlay_digest(cands)
        shards[name] = network_shard_spec(network, n, count, digest, cands)
        entries.append({"name": name, "digest": digest, "candidates": len(cands)})
    by_provider = {c.provider: c for cands in groups.values() for c in cands}
    return NetworkSplit(network, count, shards, entries, by_provider)


def network_shard_spec(
    network: str, n: int, count: int, digest: str, candidates: Sequence[Candidate]
) -> dict[str, Any]:
    return {
        "formatVersion": FORMAT_VERSION,
        "network": network,
        "shard": n,
        "shardCount": count,
        "digest": digest,
        "candidates": [c.to_dict() for c in candidates],
    }


def consumer_index(overlay: Overlay, split: NetworkSplit) -> dict[str, Any]:
    """The consumer's index over ``split``: its overlay's revision, digest and counts, the
    network shards, and the ids of the shards' candidates it does not get.

    ``overlay`` must be the split's candidates minus some of them (its own exclusions): a
    candidate of the overlay that is not in the split is a ValueError (the two were computed
    from different provider states, and a reader would assemble something else)."""
    by_id = {c.id: c for c in split.by_provider.values()}
    stray = [c.id for c in overlay.candidates if by_id.get(c.id) != c]
    if stray or overlay.network != split.network:
        raise ValueError(f"overlay of {overlay.consumer!r} is not a part of network {split.network!r}: {stray[:5]}")
    mine = {c.id for c in overlay.candidates}
    index = index_spec(
        overlay,
        count=split.count,
        entries=list(split.entries),
        admission=admission_counts(overlay.candidates),
        admitted_by_group=group_admitted_counts(overlay.candidates),
    )
    return {"formatVersion": FORMAT_VERSION, **index, "excluded": sorted(by_id.keys() - mine)}


def index_over(index: Mapping[str, Any], split: NetworkSplit, excluded_providers: Iterable[str]) -> dict[str, Any]:
    """:func:`consumer_index` from the consumer's per-consumer index spec (its revision, digest and
    counts, :func:`agn.shards.index_spec`) and its ``excludedProviders``, in O(shards + exclusions):
    what the operator writes, whose consumer and network plans come from one verdict (so the
    consumer's candidates are the split's less its exclusions, and a gateway checks the digest)."""
    excluded = sorted(c.id for p in excluded_providers if (c := split.by_provider.get(p)) is not None)
    spec = {**index, "shardCount": split.count, "shards": [dict(e) for e in split.entries]}
    return {"formatVersion": FORMAT_VERSION, **spec, "excluded": excluded}
