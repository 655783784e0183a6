"""What a drain reads of its targets before anything is written: the named network, every
consumer and overlay index of the namespace and the probes heartbeat (:func:`read_targets`),
and the overlays the capacity guard asks about (:class:`OverlayReader`). Reads only; the
decisions are :func:`xtask.drain.core.guard.target_refusals`.

The consumers, the overlay indexes and the heartbeat Lease are each read as a LIST (the Lease by
name), kept with its resourceVersion in :attr:`TargetReads.listed`: the convergence waiter
follows exactly these kinds and starts its watches from those lists instead of listing again
(:meth:`xtask.drain.edges.waiter.ConvergenceWaiter.start`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agn.kube import CONSUMERS, LEASES, NETWORKS, OVERLAYS, Kube, NotFound, Resource
from agn.objects import Obj, name_of
from agn.operator.heartbeat import HEARTBEAT_LEASE, heartbeat_time
from agn.overlays import ShardCache, read_overlay, read_partial_retrying
from xtask.drain.core.guard import Targets
from xtask.drain.core.request import DrainRequest
from xtask.record import Record

# A list as read: its items and its resourceVersion (:meth:`agn.kube.Kube.list`), the
# convergence waiter's start point (its ``Listed``).
Listed = tuple[list[Obj], str]


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class TargetReads(Record):
    """:class:`Targets` and the lists they were read from, by resource (consumers, overlay
    indexes, the heartbeat Lease): what a watch of them may start from."""

    targets: Targets
    listed: dict[Resource, Listed]


def read_targets(kube: Kube, namespace: str, req: DrainRequest, *, networks: list[Obj] | None = None) -> TargetReads:
    """The named network (taken from ``networks`` when the caller has just listed them), every
    consumer and overlay index of the namespace and the heartbeat (three LISTs of small objects;
    the shards the capacity guard needs are read once the selection is known)."""
    assert req.network is not None
    if networks is not None:
        network = next((n for n in networks if name_of(n) == req.network), None)
    else:
        try:
            network = kube.get(NETWORKS, namespace, req.network)
        except NotFound:
            network = None
    listed = {
        CONSUMERS: kube.list(CONSUMERS, namespace),
        OVERLAYS: kube.list(OVERLAYS, namespace),
        # By name, as a LIST: its resourceVersion is the collection's, a watch may start there.
        LEASES: kube.list(LEASES, namespace, field_selector=f"metadata.name={HEARTBEAT_LEASE}"),
    }
    consumers = {name_of(o): o for o in listed[CONSUMERS][0]}
    indexes = {name_of(o): o["spec"] for o in listed[OVERLAYS][0] if o.get("spec")}
    lease = next((o for o in listed[LEASES][0] if name_of(o) == HEARTBEAT_LEASE), None)
    return TargetReads(Targets(network, consumers, indexes, heartbeat_time(lease)), listed)


class OverlayReader:
    """What the capacity guard reads of a consumer's overlay: the shards holding the providers
    to drain (their candidates), or, for an index without ``admittedByGroup`` (an operator
    before it), the whole overlay."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.cache = ShardCache(kube, namespace)

    def partial(self, consumer: str, index: dict[str, Any], candidate_ids: list[str]) -> dict[str, Any] | None:
        return read_partial_retrying(self.kube, self.cache, self.namespace, consumer, index, candidate_ids)

    def whole(self, consumer: str) -> dict[str, Any] | None:
        return read_overlay(self.kube, self.namespace, consumer)
