"""Getting the shards a sharded overlay index names: each one GET by name, validated and
parsed when it is at the digest the index gives it, and what is still not in hand.

A GET by name stays within RBAC that lets the gateway read only its own consumer's shard names
(and, for an index in the network form, its network's: :mod:`agn.netshards`).
:class:`~agn.gateway.follower.OverlayFollower` calls these outside its lock (a GET or a parse
must never hold up a newer index) and keeps what they return. This module must not decide what
is served, keep anything between tries, or write to the API.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Any

from agn.gateway.validation import InvalidOverlay, ShardedIndex, ShardEntry, parse_shard
from agn.kube import SHARDS, Kube, KubeError, NotFound
from agn.model import Candidate
from agn.shards import Incomplete

SHARD_GET_TIMEOUT = 10.0  # one shard GET; a dead connection must not stall the retries


@dataclasses.dataclass(frozen=True)
class HeldShard:
    """A shard in hand: validated and parsed once, for its digest under ``shard_count``."""

    digest: str
    shard_count: int
    candidates: tuple[Candidate, ...]


@dataclasses.dataclass
class Fetched:
    """What one try's shard GETs found, by shard name (gathered outside the lock)."""

    entries: list[ShardEntry]  # the shards fetched
    parsed: dict[str, HeldShard | None] = dataclasses.field(default_factory=dict)  # None: not found
    mismatched: set[str] = dataclasses.field(default_factory=set)  # found at another digest or consumer
    invalid: dict[str, InvalidOverlay] = dataclasses.field(default_factory=dict)
    errors: dict[str, KubeError] = dataclasses.field(default_factory=dict)


def holds(shard: HeldShard | None, entry: ShardEntry, shard_count: int) -> bool:
    """Whether ``shard`` is ``entry``'s shard at the digest the index gives it, parsed for
    the index's shard count (placement depends on it)."""
    return shard is not None and shard.digest == entry.digest and shard.shard_count == shard_count


def fetch_shards(
    kube: Kube,
    namespace: str,
    *,
    index: ShardedIndex,
    entries: list[ShardEntry],
    stop: threading.Event,
    held: Mapping[str, HeldShard] | None = None,
) -> Fetched | None:
    """GET each of ``entries`` (of ``index``) by name, and validate and parse each one found at
    the digest the index gives it (shards the index can own only: its consumer's, or in the
    network form its network's). None when ``stop`` is set meanwhile. ``held``: the shards in
    hand, whose candidates a new content of the same shard reuses where they are unchanged
    (:func:`~agn.gateway.validation.parse_shard`'s ``known``)."""
    shard_count = index.shard_count
    held = held or {}
    fetched = Fetched(entries)
    for entry in entries:
        if stop.is_set():
            return None
        try:
            spec = kube.get(SHARDS, namespace, entry.name, timeout=SHARD_GET_TIMEOUT).get("spec")
        except NotFound:
            fetched.parsed[entry.name] = None
            continue
        except KubeError as exc:
            fetched.errors[entry.name] = exc
            continue
        if not _at_index_digest(spec, entry, index):
            fetched.mismatched.add(entry.name)  # not yet (or no longer) what the index names
            continue
        try:
            cands = parse_shard(
                spec, entry=entry, shard_count=shard_count, known=_known(held.get(entry.name), shard_count)
            )
        except InvalidOverlay as exc:
            fetched.invalid[entry.name] = exc
            continue
        fetched.parsed[entry.name] = HeldShard(entry.digest, shard_count, cands)
    return fetched


def _known(shard: HeldShard | None, shard_count: int) -> dict[str, Candidate] | None:
    """A held shard's candidates by id, if parsed for ``shard_count`` (placement depends on it)."""
    if shard is None or shard.shard_count != shard_count:
        return None
    return {c.id: c for c in shard.candidates}


def _at_index_digest(spec: Any, entry: ShardEntry, index: ShardedIndex) -> bool:
    """Whether a fetched shard spec is one of ``index``'s shards at the digest it gives it."""
    return isinstance(spec, Mapping) and spec.get("digest") == entry.digest and index.owns(spec)


def not_in_hand(index: ShardedIndex, fetched: Fetched, held: Mapping[str, HeldShard]) -> Incomplete | None:
    """What keeps ``index`` pending: its shards not held at its digest (missing, or held or
    fetched at another digest) or unreadable this try; None when every one is in hand.
    ``held``: the shards in hand after this try (read under the follower's lock)."""
    missing: list[str] = []
    stale: list[str] = []
    for e in index.shards:
        if e.name in fetched.errors or holds(held.get(e.name), e, index.shard_count):
            continue
        (stale if e.name in fetched.mismatched or e.name in held else missing).append(e.name)
    if fetched.errors or missing or stale:
        return Incomplete(index.revision, missing, stale)
    return None
