"""The checks of a drain's targets before anything is written: the named network and
consumers exist and can serve the selected providers, and the capacity guard — draining must
not take a consumer's selection group's last admitted provider (unless ``--force``).

:func:`read_targets` and :class:`OverlayReader` read; :func:`target_refusals` decides, from
what they read, and returns the refusals (empty: go ahead). Nothing here writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, Kube, NotFound
from agn.model import Overlay
from agn.objects import consumer_view, name_of, network_view, provider_view
from agn.operator.heartbeat import read_heartbeat
from agn.overlays import ShardCache, read_overlay, read_partial_retrying
from agn.shards import Incomplete, is_sharded
from xtask.drain.converge import incomplete_reason, targets_problems
from xtask.drain.plan import Change, capacity_violations, group_capacity_violations
from xtask.drain.request import DrainRequest


@dataclasses.dataclass(frozen=True)
class Targets:
    """What the checks read of the targets, once, while the providers are listed."""

    network: dict | None
    consumers: dict[str, dict]
    indexes: dict[str, dict[str, Any]]  # overlay index specs (or inline overlays) by consumer name
    heartbeat: float | None = None  # the probes heartbeat (agn.operator.heartbeat), unix seconds


def read_targets(kube: Kube, namespace: str, req: DrainRequest) -> Targets:
    """The named network, and every consumer and overlay index of the namespace (two LISTs of
    small objects; the shards the capacity guard needs are read once the selection is known)."""
    assert req.network is not None
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


def target_refusals(
    targets: Targets,
    req: DrainRequest,
    selected: Sequence[Mapping[str, Any]],
    changes: list[Change],
    reader: OverlayReader,
) -> list[str]:
    """Why the drain must not start (empty: it may): a target that cannot serve the selection,
    or (draining, without ``--force``) a selection group that would lose its last admitted
    provider, or a consumer whose overlay cannot be read whole enough to tell."""
    assert req.network is not None  # targets are only read when a network is named
    network = network_view(targets.network) if targets.network else None
    consumers = {
        name: consumer_view(targets.consumers[name]) if name in targets.consumers else None for name in req.consumers
    }
    views = [provider_view(p, targets.heartbeat) for p in selected]
    problems = targets_problems(network=network, network_name=req.network, consumers=consumers, providers=views)
    if problems or not req.drain or req.force:
        return problems
    to_drain = [c.provider for c in changes if not c.already]
    draining = set(to_drain)
    ids = sorted({v.candidate_id for v in views if v.name in draining})
    pending: list[str] = []
    violations = []
    for name in sorted(set(req.consumers)):
        index = targets.indexes.get(name)
        if index is None or not to_drain:
            continue  # a consumer without an overlay has nothing to guard
        try:
            counts = index.get("admittedByGroup")
            if not is_sharded(index) or isinstance(counts, Mapping):
                spec = reader.partial(name, index, ids)
                if spec is None:
                    continue
                overlay = Overlay.from_spec(spec)
                if not is_sharded(index):
                    violations += capacity_violations({name: overlay}, to_drain)
                else:
                    assert isinstance(counts, Mapping)
                    violations += group_capacity_violations(name, counts, overlay.candidates, to_drain)
            else:
                whole = reader.whole(name)
                if whole is not None:
                    violations += capacity_violations({name: Overlay.from_spec(whole)}, to_drain)
        except Incomplete as found:
            # The shards that say where the providers stand never matched the index: refuse
            # rather than guard half an overlay or none.
            pending.append(
                f"capacity guard: consumer {name}: {incomplete_reason(found)}, so its capacity cannot be checked "
                "(retry, or use --force to drain anyway)"
            )
    if pending:
        return pending
    return [f"capacity guard: {v.describe()} (use --force to drain anyway)" for v in violations]
