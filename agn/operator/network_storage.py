"""How the operator stores a network's shards, shared by the network's consumers (:mod:`agn.netshards`).

A publication writes the network shards whose content changed once, before any consumer's index
names them (the consumer's index is :mod:`.storage`'s); a network shard no current split uses is
deleted only once no index names it (an index not yet rewritten may still). Network shards carry
the label ``agn.dev/network`` and are owned by their InferenceNetwork, never by a consumer:
deleting one consumer leaves its network-mates' shards. A garbage collector removes them with the
network where one runs; the operator collects them itself (:meth:`NetworkShards.sweep`) once the
network is gone or no consumer belongs to it, and no index names them: the local runtime runs no
garbage collector.

Every write is conditional (a resourceVersion or uid precondition) and goes through
:class:`agn.operator.writes.LeaderWrites`; what is written is put into the shards cache at once.
The plan of a network's candidates is :func:`network_split`'s: the consumer planner
(:mod:`.reconcile`) run for the network with no exclusions, its shard specs renamed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agn import GROUP, VERSION
from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, SHARDS, Conflict, Kube, KubeError, NotFound
from agn.logs import JsonLog
from agn.model import ConsumerView
from agn.netshards import (
    FORMAT_VERSION,
    NetworkSplit,
    is_network_form,
    network_of_shard,
    network_shard_labels,
    network_shard_name,
    network_shard_names,
)
from agn.objects import Obj, name_of
from agn.operator.caches import Caches
from agn.operator.informer import Store
from agn.operator.reconcile import Planned, replan
from agn.operator.storage import PUBLISHED_BY, labels_current
from agn.operator.verdicts import NetworkVerdict
from agn.operator.writes import LeaderWrites, NotLeader
from agn.shards import MAX_SHARD_COUNT

# How many contents of each network shard are remembered, by digest: the stored indexes of a
# network's consumers name its shards at the digests of the last publication or two (the first
# consumer's reconcile rewrites a shared shard before the others' indexes follow), and the next
# publication's diff reads them there (agn.operator.diffing.network_diff).
RECENT_CONTENTS = 3
# The key a network's plan is kept under (a ':' is in no Kubernetes name, so no consumer's).
_PLAN_KEY = "{network}:network"
_COMPARED = ("formatVersion", "network", "shard", "shardCount", "digest")


def network_split(
    known: tuple[Planned, NetworkSplit] | None, network: str, judged: NetworkVerdict, count: int
) -> tuple[Planned, NetworkSplit]:
    """The network's plan (sized by the change, like a consumer's) and its split into network
    shards; ``known`` as it is while the plan did not move."""
    key = ConsumerView(_PLAN_KEY.format(network=network), network)
    planned = replan(known[0] if known else None, key, judged, None, count)
    if known is not None and planned is known[0]:
        return known
    plan = planned.plan
    shards: dict[str, dict[str, Any]] = {}
    entries = []
    for n in sorted(plan.entries):  # the non-empty shards
        spec = planned.sharded.shards[plan.entries[n]["name"]]
        name = network_shard_name(network, n)
        shards[name] = {
            "formatVersion": FORMAT_VERSION,
            "network": network,
            "shard": n,
            "shardCount": plan.shard_count,
            "digest": spec["digest"],
            "candidates": spec["candidates"],
        }
        entries.append({"name": name, "digest": spec["digest"], "candidates": plan.entries[n]["candidates"]})
    return planned, NetworkSplit(network, plan.shard_count, shards, entries, plan.by_provider)


def network_owner(network: Obj) -> dict[str, Any]:
    meta = network["metadata"]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceNetwork", "name": meta["name"], "uid": meta["uid"]}


class NetworkShards:
    """Writes and collects one namespace's network shards, keeping the shards cache up to date."""

    def __init__(self, kube: Kube, writes: LeaderWrites, namespace: str, *, shards: Store, identity: str) -> None:
        self.kube = kube
        self.writes = writes
        self.namespace = namespace
        self.shards = shards
        self.identity = identity
        self.lock = threading.Lock()  # consumers of one network may reconcile in parallel
        self._recent: dict[str, dict[str, Mapping[str, Any]]] = {}  # shard name -> digest -> spec

    def _remember(self, name: str, spec: Mapping[str, Any]) -> None:
        """Keep ``spec`` as shard ``name``'s content at its digest (the last few). Under the lock."""
        digest = spec.get("digest")
        if not isinstance(digest, str):
            return
        kept = self._recent.setdefault(name, {})
        kept.pop(digest, None)
        kept[digest] = spec
        while len(kept) > RECENT_CONTENTS:
            del kept[next(iter(kept))]

    def spec_at(self, name: str, digest: str) -> Mapping[str, Any] | None:
        """Network shard ``name``'s spec at ``digest``: as this operator planned or found it
        lately, or as the cache has it now; None if neither is at that digest."""
        with self.lock:
            spec = self._recent.get(name, {}).get(digest)
        if spec is None:
            cached = (self.shards.peek(name) or {}).get("spec") or {}
            spec = cached if cached.get("digest") == digest else None
        return spec

    def prepare(
        self, plans: dict[str, tuple[Planned, NetworkSplit]], network: Obj, judged: NetworkVerdict, count: int
    ) -> tuple[NetworkSplit, list[str]]:
        """The network's split (its plan and split kept in ``plans``, by network) and the shards to write."""
        name = network["metadata"]["name"]
        with self.lock:
            was = plans.get(name)
            plans[name] = known = network_split(was, name, judged, count)
            if was is None or was[1] is not known[1]:
                for shard, spec in known[1].shards.items():
                    stored = (self.shards.peek(shard) or {}).get("spec")
                    if stored:  # what the stored indexes may still name, before it is rewritten
                        self._remember(shard, stored)
                    self._remember(shard, spec)
            return known[1], self.work(known[1], network)

    def stored(self, network: str) -> dict[str, Obj]:
        """The network's shards in the cache, by name (every name a shard count allows)."""
        out = {}
        for name in network_shard_names(network, MAX_SHARD_COUNT):
            obj = self.shards.peek(name)
            if obj is not None:
                out[name] = obj
        return out

    def work(self, split: NetworkSplit, network: Obj) -> list[str]:
        """The shards of ``split`` to write: absent, or stored with other content, labels or owner."""
        stored = self.stored(split.network)
        labels = network_shard_labels(split.network)
        owner = [network_owner(network)]
        out = []
        for name, spec in split.shards.items():
            obj = stored.get(name)
            have = (obj or {}).get("spec") or {}
            if (
                obj is None
                or any(have.get(k) != spec[k] for k in _COMPARED)
                or not labels_current(obj, labels)
                or (obj["metadata"].get("ownerReferences") or []) != owner
            ):
                out.append(name)
        return out

    def write(self, split: NetworkSplit, names: Iterable[str], network: Obj, *, at_once: int = 1) -> bool:
        """Create or patch the named shards of ``split``, ``at_once`` at a time (:meth:`.burst.Burst.shard_writers`).
        False when the cache was behind (a conflict, or a shard deleted meanwhile): they are read
        again; the caller plans again. Every write has ended when this returns."""
        stored = self.stored(split.network)
        labels = network_shard_labels(split.network)
        owners = [network_owner(network)]
        names = list(names)
        with self.lock:
            return self._write(split, names, stored, labels, owners, at_once)

    def _write(
        self,
        split: NetworkSplit,
        names: list[str],
        stored: Mapping[str, Obj],
        labels: Mapping[str, str],
        owners: list,
        at_once: int,
    ) -> bool:
        tally = self.writes.open_tally()

        def one(name: str) -> None:
            with self.writes.counting_into(tally):
                self._write_one(name, split.shards[name], stored.get(name), labels, owners)

        try:
            if at_once <= 1 or len(names) <= 1:
                for name in names:
                    one(name)
            else:
                # Every write has ended (or failed) before this returns: the caller's next step
                # (an index naming these shards, or a re-plan after a conflict) follows all of them.
                with ThreadPoolExecutor(min(at_once, len(names)), thread_name_prefix="shard-write") as pool:
                    futures = [pool.submit(one, name) for name in names]
                for future in futures:
                    future.result()
        except (Conflict, NotFound):
            self.refresh(names)
            return False
        return True

    def _write_one(
        self, name: str, spec: Mapping[str, Any], old: Obj | None, labels: Mapping[str, str], owners: list
    ) -> None:
        """Create shard ``name`` or patch it from ``old`` (conditional on its resourceVersion)."""
        metadata: dict[str, Any] = {"ownerReferences": owners, "annotations": {PUBLISHED_BY: self.identity}}
        if labels:
            metadata["labels"] = dict(labels)
        if old is None:
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": SHARDS.kind, "metadata": {"name": name, **metadata}}
            written = self.writes.create(SHARDS, self.namespace, {**body, "spec": spec})
        else:
            metadata["resourceVersion"] = old["metadata"]["resourceVersion"]
            patch = {"metadata": metadata, "spec": {**spec, "consumer": None}}
            written = self.writes.merge_patch(SHARDS, self.namespace, name, patch)
        self.shards.upsert(written)

    def collect(self, split: NetworkSplit, indexes: Iterable[Obj]) -> list[str]:
        """Delete the network's stored shards ``split`` does not use and no index names (an index
        not rewritten yet may still); returns those deleted."""
        named = names_named(indexes, split.network)
        doomed = [o for n, o in sorted(self.stored(split.network).items()) if n not in split.shards and n not in named]
        with self.lock:
            return self._delete(doomed)

    def sweep(self, caches: Caches, log: JsonLog) -> dict[str, list[str]]:
        """Delete the shards of every network that is gone or that no consumer belongs to any
        more, less those an index names (:func:`unused_network_shards`); by network, those deleted.

        The caches say whether to look at all. Then, under the lock a publication's shard writes
        take, the consumers, indexes and networks are listed live (a cache can lag: a consumer
        just created, an index a previous leader wrote): a consumer created after that LIST is
        reconciled after the deletes, finds its network's shards gone from the cache and writes
        them again before its index names them. Each delete is conditional on the cached shard's
        uid and resourceVersion, so a shard re-created or rewritten meanwhile stays. A failure is
        logged, not raised: the next resync looks again."""
        cached = (caches.consumers.store.peek_all(), caches.overlays.store.peek_all(), caches.networks.store.names())
        if not unused_network_shards(self.shards.peek_all(), *cached):
            return {}
        try:
            with self.lock:
                live = {res: self.kube.list(res, self.namespace)[0] for res in (CONSUMERS, OVERLAYS, NETWORKS)}
                doomed = unused_network_shards(
                    self.shards.peek_all(), live[CONSUMERS], live[OVERLAYS], [name_of(n) for n in live[NETWORKS]]
                )
                deleted = {network: self._delete(objs) for network, objs in sorted(doomed.items())}
        except (KubeError, NotLeader) as exc:
            log.warning("network shards not collected; looking again at the next resync", error=str(exc))
            return {}
        for network, names in deleted.items():
            log.info("network shards deleted", network=network, shards=names, reason="network gone or unused")
        return {network: names for network, names in deleted.items() if names}

    def _delete(self, doomed: Iterable[Obj]) -> list[str]:
        """Delete each of ``doomed`` if it is still the object cached (its uid and resourceVersion:
        one re-created or rewritten meanwhile is read again instead); returns those gone. Under
        the lock (the contents remembered for the diff are forgotten with each)."""
        gone = []
        for obj in doomed:
            meta = obj["metadata"]
            try:
                self.writes.delete(
                    SHARDS,
                    self.namespace,
                    meta["name"],
                    uid=meta.get("uid"),
                    resource_version=meta.get("resourceVersion"),
                )
            except NotFound:
                pass  # gone already
            except Conflict:
                self.refresh([meta["name"]])
                continue
            self.shards.remove(meta["name"])
            self._recent.pop(meta["name"], None)  # no index names it: no diff reads it again
            gone.append(meta["name"])
        return gone

    def refresh(self, names: Iterable[str]) -> None:
        for name in sorted(set(names)):
            try:
                self.shards.upsert(self.kube.get(SHARDS, self.namespace, name))
            except NotFound:
                self.shards.remove(name)


def names_named(indexes: Iterable[Obj], network: str) -> set[str]:
    """The names of ``network``'s shards the network-form ``indexes`` name."""
    return {
        str(e.get("name", ""))
        for o in indexes
        if is_network_form(spec := o.get("spec") or {}) and spec.get("network") == network
        for e in spec.get("shards") or ()
    }


def unused_network_shards(
    shards: Iterable[Obj], consumers: Iterable[Obj], indexes: Iterable[Obj], networks: Iterable[str]
) -> dict[str, list[Obj]]:
    """By network: the stored network shards to collect, sorted by name. A network's shards are
    collected when the network is gone (not among ``networks``) or no consumer belongs to it,
    except those an index names (a consumer's, even of a consumer gone or moved to another
    network: its index is deleted or rewritten first, and the next look collects them).
    Where a garbage collector runs, it also removes a network's shards with the network (their
    owner), named or not."""
    kept = {str((c.get("spec") or {}).get("network", "")) for c in consumers} & set(networks)
    out: dict[str, list[Obj]] = {}
    for obj in shards:
        network = network_of_shard(name_of(obj))
        if network is not None and network not in kept and (obj.get("spec") or {}).get("network") == network:
            out.setdefault(network, []).append(obj)
    indexes = list(indexes)
    for network in list(out):
        named = names_named(indexes, network)
        out[network] = sorted((o for o in out[network] if name_of(o) not in named), key=name_of)
        if not out[network]:
            del out[network]
    return out


def indexes_behind(split: NetworkSplit, indexes: Mapping[str, Obj]) -> list[str]:
    """The consumers whose stored network-form index names ``split``'s network shards at other
    digests than the split's (a shared shard is ahead of them: their index must follow)."""
    want = {e["name"]: e["digest"] for e in split.entries}
    out = []
    for name, obj in indexes.items():
        spec = obj.get("spec") or {}
        if is_network_form(spec) and spec.get("network") == split.network:
            have = {str(e.get("name", "")): e.get("digest") for e in spec.get("shards") or ()}
            if have != want:
                out.append(name)
    return sorted(out)
