"""One look at what a drain's guards weigh (:mod:`xtask.drain.guards`): the providers of the
selection's groups, the networks, the targets (the named network, every consumer and overlay
index, the probes heartbeat) and the overlays' shards. Each part is read once, when a guard
first asks for it (an undrain never reads the groups; a drain without ``--network`` never the
consumers), and then kept: the same read serves every guard and, under the drain locks, the
writes and the waiter that follow: the parts read as a LIST (the group's providers, the
consumers, the overlay indexes, the heartbeat Lease by name) are kept with their
resourceVersions (:meth:`Snapshot.listed`), and the waiter starts its watches there, with the
shards the guards read (:meth:`Snapshot.shards`), instead of reading them again. Reads only.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from agn.kube import NETWORKS, PROVIDERS, Kube, NotFound, Resource
from agn.objects import Obj
from agn.operator.heartbeat import read_heartbeat
from agn.overlays import ShardCache
from xtask.drain.core.changes import Change
from xtask.drain.core.guard import Targets
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.selection import Selector, select
from xtask.drain.edges.members import read_members_listed
from xtask.drain.edges.targets import Listed, OverlayReader, read_targets
from xtask.errors import RefusedError

if TYPE_CHECKING:
    from xtask.drain.context import RunContext


def read_candidates(ctx: RunContext, selector: Selector) -> list[Obj]:
    """The providers the selector chooses among: a named one is read by name (one small GET
    however large the fleet); a gateway needs every provider (its field is in the spec)."""
    if selector.provider is not None:
        try:
            return [ctx.kube.get(PROVIDERS, ctx.namespace, selector.provider)]
        except NotFound:
            return []
    return ctx.kube.list(PROVIDERS, ctx.namespace)[0]


class Snapshot:
    """What the guards read, each part once (``cached``); ``now`` is the moment of the look."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        req: DrainRequest,
        *,
        scope: Mapping[str, str] | None,
        selection: Sequence[Obj] | None = None,
        providers: Sequence[Obj] | None = None,
        networks: Sequence[Obj] | None = None,
    ) -> None:
        """``scope``: the selected providers' groups when only those groups are read (a
        ``--provider`` run), else every provider is. ``selection``, ``providers``, ``networks``:
        what the caller has just read itself (a first look before the lock reuses them)."""
        self.kube, self.namespace, self.req, self.scope = kube, namespace, req, scope
        self._selection = list(selection) if selection is not None else None
        self._listed: dict[Resource, Listed] = {}  # the parts read as one LIST, with its resourceVersion
        if providers is not None and scope is None:
            self.__dict__["members"] = list(providers)
        if networks is not None:
            self.__dict__["networks"] = list(networks)
        self.now = time.time()

    @functools.cached_property
    def members(self) -> list[Obj]:
        """The providers the guards weigh: the selection's groups, or every provider."""
        if self.scope is not None:
            items, version = read_members_listed(self.kube, self.namespace, self.scope)
        else:
            items, version = self.kube.list(PROVIDERS, self.namespace)
        if version:  # one LIST (not one per group)
            self._listed[PROVIDERS] = (items, version)
        return items

    @functools.cached_property
    def selection(self) -> list[Obj]:
        """The providers the request selects, as this look read them: the caller's own read on a
        first look, else chosen from :attr:`members` (empty when none is left). Reads nothing more."""
        if self._selection is not None:
            return self._selection
        try:
            return [dict(p) for p in select(self.members, self.req.selector, namespace=self.namespace)]
        except RefusedError:
            return []

    @functools.cached_property
    def networks(self) -> list[Obj]:
        return self.kube.list(NETWORKS, self.namespace)[0]

    @functools.cached_property
    def targets(self) -> Targets | None:
        """The named network, consumers, overlay indexes and heartbeat; None without ``--network``."""
        if not self.req.network:
            return None
        read = read_targets(self.kube, self.namespace, self.req, networks=self.networks)
        self._listed.update(read.listed)
        return read.targets

    @functools.cached_property
    def heartbeat(self) -> float | None:
        return self.targets.heartbeat if self.targets is not None else read_heartbeat(self.kube, self.namespace)

    @functools.cached_property
    def overlays(self) -> OverlayReader:
        """The consumers' overlays, shard by shard as the last-provider guard asks (each read once)."""
        return OverlayReader(self.kube, self.namespace)

    def listed(self) -> dict[Resource, Listed]:
        """The parts this snapshot has read as one LIST each, with its resourceVersion (providers,
        consumers, overlay indexes, the heartbeat Lease): a watch may start from them. Reads nothing."""
        return dict(self._listed)

    def shards(self) -> ShardCache | None:
        """The cache the guards read the overlays' shards through, if they read any; its new
        owner (the waiter) takes it over. Reads nothing."""
        reader = self.__dict__.get("overlays")
        return reader.cache if isinstance(reader, OverlayReader) else None

    def selected(self, changes: Iterable[Change]) -> list[Obj]:
        """The providers of ``changes`` (to change or kept as they are), as this snapshot read them."""
        names = {c.provider for c in changes}
        source = self._selection if self._selection is not None else self.members
        return [p for p in source if p["metadata"]["name"] in names]

    def read_ahead(self, pool: cf.Executor, *, drain: bool) -> None:
        """Read the parts a drain's guards need side by side (the groups beside the networks and
        targets): under the drain locks nothing else is in flight."""
        members = pool.submit(lambda: self.members) if drain else None
        _ = self.targets if self.req.network else self.networks
        if members is not None:
            members.result()
