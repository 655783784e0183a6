"""How the operator stores a consumer's overlay: the index and shard writes, and their removal.

A consumer's overlay is an index (the RoutingOverlay named after it: revision, digest, counts,
one digest per shard) plus RoutingOverlayShards (:mod:`agn.shards`), so no object grows past
etcd's request limit with the fleet; each shard is labelled with its consumer
(``agn.dev/consumer``). A publication writes the shards whose digest changed
first, then the index, then deletes shards the index no longer names — a reader that follows
the index always finds its shards. Whether to write is decided on the index spec and the
shards' digests (:func:`shard_work`), never on whole overlays (a sharded index has no
candidates); a drain of one provider rewrites one shard and the index. An inline index (an
earlier operator's whole overlay) is converted in place, its ``candidates`` removed, at the
same revision.

Every write is conditional (a resourceVersion or uid precondition) and goes through
:class:`agn.operator.writes.LeaderWrites`; what is written is put into the caches at once.

This module must not decide what an overlay holds (:mod:`agn.operator.reconcile`) or what a
publication changed (:mod:`agn.operator.diffing`), and it neither requeues work nor sends
Events: it reports whether a write went through and leaves the rest to the controller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agn import GROUP, VERSION
from agn.kube import CONSUMERS, OVERLAYS, SHARDS, Conflict, Kube, NotFound, Resource
from agn.logs import JsonLog
from agn.objects import Obj, name_of
from agn.operator.informer import Store
from agn.operator.ownership import Verdict, desired_owner_references, owner_references_current, verdict
from agn.operator.writes import LeaderWrites
from agn.shards import MAX_SHARD_COUNT, Sharded, changed_shards, shard_labels, shard_names, surplus_shards

# Which operator process (its lease identity) wrote the overlay last.
PUBLISHED_BY = f"{GROUP}/published-by"


@dataclasses.dataclass(frozen=True)
class ShardWork:
    """The writes one publication needs: shards to create or patch, whether the index is
    written, and stored shards the new index no longer names (deleted last)."""

    shards: list[str]
    index: bool
    surplus: list[str]
    network: tuple[str, ...] = ()  # network shards written before (agn.operator.network_storage), for the log


def object_body(
    res: Resource,
    name: str,
    spec: dict[str, Any],
    *,
    owner_references: list[dict[str, Any]],
    published_by: str,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A new index or shard: owned by the consumer (so a garbage collector removes it with it)."""
    metadata: dict[str, Any] = {
        "name": name,
        "ownerReferences": owner_references,
        "annotations": {PUBLISHED_BY: published_by},
    }
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": res.kind, "metadata": metadata, "spec": spec}


def conditional_patch(
    old: Obj,
    owners: list[dict[str, Any]],
    identity: str,
    spec: dict[str, Any],
    *,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A merge patch conditional on ``old``'s resourceVersion (409 if someone wrote since).
    ``labels`` are added to (or set in) the object's own; other labels are kept."""
    metadata: dict[str, Any] = {
        "resourceVersion": old["metadata"]["resourceVersion"],
        "ownerReferences": owners,
        "annotations": {PUBLISHED_BY: identity},
    }
    if labels:
        metadata["labels"] = dict(labels)
    return {"metadata": metadata, "spec": spec}


def labels_current(obj: Obj, labels: Mapping[str, str]) -> bool:
    """True when ``obj`` carries every one of ``labels`` with its value."""
    have = (obj.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items())


def shard_digests(new: Sharded, stored: dict[str, Obj]) -> dict[str, str]:
    """The digests of the stored shards that hold what ``new`` would put there but the candidates.

    A stored shard of another network, consumer, position or shard count is left out, so
    :func:`agn.shards.changed_shards` rewrites it even if its candidates' digest matches."""
    out: dict[str, str] = {}
    for name, obj in stored.items():
        spec, want = obj.get("spec") or {}, new.shards.get(name)
        if want is None:
            continue
        if all(spec.get(k) == want[k] for k in ("network", "consumer", "shard", "shardCount")):
            out[name] = str(spec.get("digest", ""))
    return out


def index_patch(current: dict[str, Any] | None, index: dict[str, Any]) -> dict[str, Any]:
    """A merge patch taking the stored index spec to ``index``: every field it no longer has is
    set to null (a legacy inline overlay's ``candidates`` goes, for one)."""
    patch: dict[str, Any] = dict(index)
    for key in current or {}:
        if key not in index:
            patch[key] = None
    return patch


def shard_work(current: Obj | None, stored: dict[str, Obj], sharded: Sharded, consumer: Obj) -> ShardWork | None:
    """What must be written to store ``sharded``, or None when the API already holds it.

    Compared are the index spec (network, revision, digest, counts and each shard's digest),
    each shard's digest, position and labels (:func:`agn.shards.shard_labels`: a shard an
    earlier operator wrote without them gets them), and every object's owner references
    (adoption)."""
    labels = shard_labels(consumer["metadata"]["name"])
    writes = set(changed_shards(sharded, shard_digests(sharded, stored)))
    writes |= {
        n
        for n in sharded.shards
        if n in stored and not (owner_references_current(stored[n], consumer) and labels_current(stored[n], labels))
    }
    surplus = surplus_shards(sharded, stored)
    index = (
        current is None
        or (current.get("spec") or {}) != sharded.index
        or not owner_references_current(current, consumer)
    )
    if not (writes or surplus or index):
        return None
    return ShardWork(shards=sorted(writes), index=index, surplus=surplus)


@dataclasses.dataclass(frozen=True)
class OverlayStores:
    """The caches' stores an :class:`OverlayStorage` reads and keeps up to date with what it
    wrote: the overlays (indexes) and shards it writes, and the consumers it reads back."""

    consumers: Store
    overlays: Store
    shards: Store


class OverlayStorage:
    """Writes and removes one namespace's overlays (index and shards), keeping the caches'
    ``overlays`` and ``shards`` stores up to date with what it wrote."""

    def __init__(
        self, kube: Kube, writes: LeaderWrites, namespace: str, *, stores: OverlayStores, identity: str, log: JsonLog
    ) -> None:
        self.kube = kube
        self.writes = writes
        self.namespace = namespace
        self.consumers = stores.consumers
        self.overlays = stores.overlays
        self.shards = stores.shards
        self.identity = identity
        self.log = log

    def stored_shards(self, consumer: str) -> dict[str, Obj]:
        """The consumer's shards in the cache, by name (every name a shard count allows); read
        only, like every object the store hands out without copying."""
        out = {}
        for shard in shard_names(consumer, MAX_SHARD_COUNT):
            obj = self.shards.peek(shard)
            if obj is not None:
                out[shard] = obj
        return out

    def write(
        self, sharded: Sharded, work: ShardWork, *, consumer: Obj, current: Obj | None, stored: dict[str, Obj]
    ) -> bool:
        """Write the changed shards, then the index, then delete the shards it no longer names.

        In this order a reader that follows the index finds every shard it names already at
        the index's digest; surplus shards go only once no index names them. False when the
        cache was behind (a conflict, or an object deleted meanwhile): the objects are read
        again and nothing more is written; the caller plans again."""
        name = consumer["metadata"]["name"]
        owners = desired_owner_references(current, consumer)
        labels = shard_labels(name)
        try:
            for shard in work.shards:
                spec = sharded.shards[shard]
                old = stored.get(shard)
                if old is None:
                    body = object_body(
                        SHARDS, shard, spec, owner_references=owners, published_by=self.identity, labels=labels
                    )
                    written = self.writes.create(SHARDS, self.namespace, body)
                else:
                    patch = conditional_patch(old, owners, self.identity, spec, labels=labels)
                    written = self.writes.merge_patch(SHARDS, self.namespace, shard, patch)
                self.shards.upsert(written)
            if work.index:
                if current is None:
                    body = object_body(
                        OVERLAYS, name, sharded.index, owner_references=owners, published_by=self.identity
                    )
                    written = self.writes.create(OVERLAYS, self.namespace, body)
                else:
                    patch = conditional_patch(
                        current, owners, self.identity, index_patch(current.get("spec"), sharded.index)
                    )
                    written = self.writes.merge_patch(OVERLAYS, self.namespace, name, patch)
                self.overlays.upsert(written)
            for shard in work.surplus:
                try:
                    self.writes.delete(SHARDS, self.namespace, shard, uid=stored[shard]["metadata"].get("uid"))
                except NotFound:
                    pass  # gone already
                self.shards.remove(shard)
        except (Conflict, NotFound) as exc:
            # Our cache was behind (or an object was deleted): refresh it and plan again.
            self.refresh(name, [*sharded.shards, *stored])
            self.log.info("overlay changed under us; re-planning", consumer=name, reason=type(exc).__name__)
            return False
        return True

    def remove(self, name: str, overlay: Obj | None, shards: dict[str, Obj]) -> bool:
        """Delete an overlay (index and shards) whose consumer is gone, or of an earlier consumer
        of the same name.

        The cache can lag behind the API (a new leader's consumer cache, say), so the consumer
        is read live first; each delete is conditional on the object's uid, so only the
        incarnation judged here is removed. The index goes first, so no reader follows an index
        to shards that are gone. True when all of them are gone; False when the consumer exists
        after all or an object was replaced meanwhile (the caller judges again).
        """
        try:
            live: Obj | None = self.kube.get(CONSUMERS, self.namespace, name)
        except NotFound:
            live = None
        if live is not None:
            self.consumers.upsert(live)
        doomed: list[tuple[Resource, Obj]] = [(OVERLAYS, overlay)] if overlay is not None else []
        doomed += [(SHARDS, shards[n]) for n in sorted(shards)]
        kept = [name_of(o) for _, o in doomed if verdict(o, live) not in (Verdict.ORPHAN, Verdict.STALE)]
        if kept:
            self.log.info("overlay's consumer exists after all; keeping the overlay", consumer=name, kept=kept)
            return False
        for res, obj in doomed:
            obj_name = name_of(obj)
            try:
                self.writes.delete(res, self.namespace, obj_name, uid=obj["metadata"].get("uid"))
            except NotFound:
                pass  # gone already (a garbage collector, or an earlier attempt)
            except Conflict:
                self.refresh(name, list(shards))  # replaced meanwhile: judge the new one
                return False
            (self.overlays if res is OVERLAYS else self.shards).remove(obj_name)
        judged = verdict(overlay if overlay is not None else doomed[0][1], live)
        self.log.info(
            "overlay deleted",
            consumer=name,
            reason=judged.value,
            revision=((overlay or {}).get("spec") or {}).get("revision"),
            shards=len(shards),
        )
        return True

    def refresh(self, name: str, shards: list[str]) -> None:
        """Read the consumer's index and the named shards again (the cache was behind)."""
        for res, obj_name in [(OVERLAYS, name), *((SHARDS, s) for s in sorted(set(shards)))]:
            store = self.overlays if res is OVERLAYS else self.shards
            try:
                store.upsert(self.kube.get(res, self.namespace, obj_name))
            except NotFound:
                store.remove(obj_name)
