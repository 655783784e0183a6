"""Reading whole overlays from the API: an index (``RoutingOverlay``) plus its shards.

For readers that look at overlays now and then (``env status``, readiness, tests):
:func:`read_overlay`, :func:`list_overlays`. Readers that ask only about a few providers (the
drain's capacity guard and convergence waiter) read the small indexes and, through a
:class:`ShardCache`, only the shards that hold those providers (:func:`read_partial`): at
5,000 providers × 10 consumers that is ten ~90 KiB shards instead of every shard (~14 MB).

An index and its shards are separate objects, written shards first and index last, so a read
of both can fall between two of the operator's writes; the read is then repeated (a few
times, promptly). A reader that still cannot assemble gets :class:`agn.shards.Incomplete`.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterable
from typing import Any

from agn.kube import OVERLAYS, SHARDS, Kube, NotFound
from agn.shards import Incomplete, assemble, is_sharded, shards_holding

ATTEMPTS = 5

Spec = dict[str, Any]


def read_overlay(kube: Kube, namespace: str, consumer: str, *, attempts: int = ATTEMPTS) -> Spec | None:
    """The consumer's whole overlay spec (candidates included), or None when it has no overlay.

    Raises :class:`Incomplete` when its shards do not match its index after ``attempts`` reads."""
    return read_partial_retrying(kube, ShardCache(kube, namespace), namespace, consumer, None, None, attempts=attempts)


def list_overlays(kube: Kube, namespace: str, *, attempts: int = ATTEMPTS) -> dict[str, Spec | Incomplete]:
    """Every overlay in ``namespace`` by consumer name: its whole spec, or :class:`Incomplete`
    for one whose shards did not match its index in any of ``attempts`` reads (two LISTs each)."""
    out: dict[str, Spec | Incomplete] = {}
    for _ in range(attempts):
        indexes: dict[str, Spec] = {
            o["metadata"]["name"]: o["spec"] for o in kube.list(OVERLAYS, namespace)[0] if o.get("spec")
        }
        shards = {}
        if any(is_sharded(i) for i in indexes.values()):
            shards = {o["metadata"]["name"]: o.get("spec") for o in kube.list(SHARDS, namespace)[0]}
        out = {}
        for name, index in indexes.items():
            try:
                out[name] = assemble(index, shards)  # it looks up only the shards its index names
            except Incomplete as exc:
                out[name] = exc
        if not any(isinstance(v, Incomplete) for v in out.values()):
            break
    return out


# Digests held per shard name: a network's shard is named by the index of every consumer of the
# network, and while the operator publishes a change those indexes move to its new digest one
# after another; holding the old and the new one serves both without reading the shard again.
KEEP_DIGESTS = 2


class ShardCache:
    """Shards read by name (GET) and kept by digest (the :data:`KEEP_DIGESTS` last read of each name).

    A shard's digest is its content's (:func:`agn.model.overlay_digest` of its candidates), so a
    shard held at the digest an index gives it is that shard, whenever it was read: it is read
    again only when an index wants a digest not held. Not thread-safe: one reader owns it."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self._kube = kube
        self._namespace = namespace
        self._held: dict[str, dict[Any, Spec]] = {}  # name -> digest -> spec, the latest read last
        self.gets = 0  # shards read from the API (a drain's wait should cost one per consumer)

    def specs(self, index: Spec, names: Iterable[str]) -> dict[str, Spec | None]:
        """The specs of the named shards of ``index`` (None: not found): each at the digest the
        index gives it when held (read when not), else as last read."""
        names = list(names)
        self.prefetch([(index, names)])
        wanted = _digests(index)
        out: dict[str, Spec | None] = {}
        for name in names:
            versions = self._held.get(name) or {}
            out[name] = versions.get(wanted.get(name)) or next(reversed(versions.values()), None)
        return out

    def prefetch(self, wants: Iterable[tuple[Spec, Iterable[str]]], *, parallel: int = 1) -> None:
        """Read every named shard not held at the digest its index gives it: ``(index, names)``
        per index (several consumers' at once), up to ``parallel`` GETs at a time. The GETs run
        in worker threads; only the calling thread changes what is held."""
        stale: list[str] = []
        for index, names in wants:
            wanted = _digests(index)
            for name in names:
                if wanted.get(name) not in self._held.get(name, {}) and name not in stale:
                    stale.append(name)
        if not stale:
            return
        self.gets += len(stale)
        if parallel > 1 and len(stale) > 1:
            with concurrent.futures.ThreadPoolExecutor(min(parallel, len(stale)), thread_name_prefix="shard-get") as ex:
                read = list(ex.map(self._read, stale))
        else:
            read = [self._read(name) for name in stale]
        for name, spec in zip(stale, read, strict=True):
            if spec is None:
                self._held.pop(name, None)
                continue
            versions = self._held.setdefault(name, {})
            versions.pop(spec.get("digest"), None)
            versions[spec.get("digest")] = spec  # the latest read last
            while len(versions) > KEEP_DIGESTS:
                del versions[next(iter(versions))]

    def _read(self, name: str) -> Spec | None:
        try:
            return self._kube.get(SHARDS, self._namespace, name).get("spec") or None
        except NotFound:  # also when the RoutingOverlayShard CRD is not installed
            return None


def _digests(index: Spec) -> dict[str, Any]:
    """The digest ``index`` gives each of its shards, by name."""
    return {str(e.get("name", "")): e.get("digest") for e in index.get("shards") or ()}


def read_partial(cache: ShardCache, index: Spec, candidate_ids: Iterable[str] | None) -> Spec:
    """The overlay spec of ``index`` with only the candidates of the shards that would hold
    ``candidate_ids`` (revision and digest are the whole overlay's; an inline index is returned
    whole; None: every shard, the whole overlay). Raises :class:`Incomplete` when one of those
    shards is missing or not at the index's digest — the other shards are not read, so they
    cannot hold it up."""
    if not is_sharded(index):
        return dict(index)
    if candidate_ids is None:
        names = [str(e.get("name", "")) for e in index.get("shards") or ()]
    else:
        names = shards_holding(index, candidate_ids)
    return assemble(index, cache.specs(index, names), only=names)


def read_partial_retrying(
    kube: Kube,
    cache: ShardCache,
    namespace: str,
    consumer: str,
    index: Spec | None,
    candidate_ids: Iterable[str] | None,
    *,
    attempts: int = ATTEMPTS,
) -> Spec | None:
    """:func:`read_partial`, reading the index again (a few times, promptly) while its shards are
    not at its digests: a read of both can fall between two of the operator's writes. ``index``
    None: read it first. None when the consumer has no overlay (or it is gone meanwhile);
    :class:`Incomplete` when it never matched."""
    ids = None if candidate_ids is None else list(candidate_ids)
    failure: Incomplete | None = None
    for attempt in range(attempts):
        if attempt or index is None:
            try:
                index = kube.get(OVERLAYS, namespace, consumer).get("spec") or {}
            except NotFound:
                return None
        if not index:
            return None
        try:
            return read_partial(cache, index, ids)
        except Incomplete as exc:
            failure = exc
    assert failure is not None
    raise failure
