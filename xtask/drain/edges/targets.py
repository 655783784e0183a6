"""What a drain reads of its targets before anything is written: the named network, every
consumer and overlay index of the namespace and the probes heartbeat (:func:`read_targets`),
and the overlays the capacity guard asks about (:class:`OverlayReader`). Reads only; the
decisions are :func:`xtask.drain.core.guard.target_refusals`.
"""

from __future__ import annotations

from typing import Any

from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, Kube, NotFound
from agn.objects import Obj, name_of
from agn.operator.heartbeat import read_heartbeat
from agn.overlays import ShardCache, read_overlay, read_partial_retrying
from xtask.drain.core.guard import Targets
from xtask.drain.core.request import DrainRequest


def read_targets(kube: Kube, namespace: str, req: DrainRequest, *, networks: list[Obj] | None = None) -> Targets:
    """The named network (taken from ``networks`` when the caller has just listed them), and every
    consumer and overlay index of the namespace (two LISTs of small objects; the shards the
    capacity guard needs are read once the selection is known)."""
    assert req.network is not None
    if networks is not None:
        network = next((n for n in networks if name_of(n) == req.network), None)
    else:
        try:
            network = kube.get(NETWORKS, namespace, req.network)
        except NotFound:
            network = None
    consumers = {name_of(o): o for o in kube.list(CONSUMERS, namespace)[0]}
    indexes = {name_of(o): o["spec"] for o in kube.list(OVERLAYS, namespace)[0] if o.get("spec")}
    return Targets(network, consumers, indexes, read_heartbeat(kube, namespace))


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
