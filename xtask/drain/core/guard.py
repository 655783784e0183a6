"""The checks of a drain's targets before anything is written: the named network and
consumers exist and can serve the selected providers, and the capacity guard — draining must
not take a consumer's selection group's last admitted provider (unless ``--force``).

:func:`target_refusals` decides from what :mod:`xtask.drain.edges.targets` read and returns the
refusals (empty: go ahead). The overlays it needs come through an :class:`OverlaySource`, so
the decision is tested with plain data; nothing here talks to the cluster itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from agn.model import Overlay, group_admitted_counts
from agn.objects import consumer_view, network_view, provider_view
from agn.shards import Incomplete, is_sharded
from xtask.drain.core.changes import Change, GroupCount, group_counts, violations_of
from xtask.drain.core.converge import incomplete_reason, targets_problems
from xtask.drain.core.request import DrainRequest
from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Targets(Record):
    """What the checks read of the targets, once, while the providers are listed."""

    network: dict | None
    consumers: dict[str, dict]
    indexes: dict[str, dict[str, Any]]  # overlay index specs (or inline overlays) by consumer name
    heartbeat: float | None = None  # the probes heartbeat (agn.operator.heartbeat), unix seconds


class OverlaySource(Protocol):
    """Where the guard gets a consumer's overlay: the shards holding some candidates, or whole."""

    def partial(self, consumer: str, index: dict[str, Any], candidate_ids: list[str]) -> dict[str, Any] | None: ...
    def whole(self, consumer: str) -> dict[str, Any] | None: ...


def target_refusals(
    targets: Targets,
    req: DrainRequest,
    selected: Sequence[Mapping[str, Any]],
    changes: list[Change],
    reader: OverlaySource,
    *,
    counts: list[GroupCount] | None = None,
    drained_elsewhere: Sequence[Mapping[str, Any]] = (),
) -> list[str]:
    """Why the drain must not start (empty: it may): a target that cannot serve the selection,
    or (draining, without ``--force``) a selection group that would lose its last admitted
    provider, or a consumer whose overlay cannot be read whole enough to tell.

    ``drained_elsewhere``: providers whose spec asks to drain (earlier runs' writes, read under
    the lock). An overlay that lags and shows one admitted in a group this run drains counts it
    as leaving.

    ``counts``, when given, receives each named consumer's admitted count per selection group
    of a provider to change, before and after (what a plan records); the overlays are then read
    for an undrain or a ``--force`` drain too, which are otherwise not guarded."""
    assert req.network is not None  # targets are only read when a network is named
    network = network_view(targets.network) if targets.network else None
    consumers = {name: consumer_view(c) if (c := targets.consumers.get(name)) else None for name in req.consumers}
    views = [provider_view(p, targets.heartbeat) for p in selected]
    problems = targets_problems(network=network, network_name=req.network, consumers=consumers, providers=views)
    guarded = req.drain and not req.force
    if problems or not (guarded or counts is not None):
        return problems
    to_change = [c.provider for c in changes if not c.already]
    changing = set(to_change)
    lagging = _lagging(selected, changing, drained_elsewhere) if req.drain else []
    leaving = to_change + [p["metadata"]["name"] for p in lagging]
    views += [provider_view(p, targets.heartbeat) for p in lagging]
    ids = sorted({v.candidate_id for v in views if v.name in set(leaving) and v.candidate_id})
    pending: list[str] = []
    found: list[GroupCount] = []
    for name in sorted(set(req.consumers)):
        index = targets.indexes.get(name)
        if index is None or not to_change:
            continue  # a consumer without an overlay has nothing to guard
        try:
            read = _admitted(reader, name, index, ids, leaving)
            if read is None:
                continue
            admitted, overlay = read
            found += group_counts(name, admitted, overlay.candidates, leaving, requested=req.drain)
        except Incomplete as incomplete:
            # The shards that say where the providers stand never matched the index: refuse
            # rather than guard half an overlay or none.
            pending.append(_unreadable(name, incomplete))
    if counts is not None:
        counts.extend(found)
    if not guarded:
        return []  # counted for a plan only: an unreadable overlay leaves its counts out
    if pending:
        return pending
    return [f"capacity guard: {v.describe()} (use --force to drain anyway)" for v in violations_of(found)]


def _unreadable(consumer: str, incomplete: Incomplete) -> str:
    return (
        f"capacity guard: consumer {consumer}: {incomplete_reason(incomplete)}, so its capacity cannot be checked "
        "(retry, or use --force to drain anyway)"
    )


def _admitted(
    reader: OverlaySource, consumer: str, index: dict[str, Any], ids: list[str], leaving: Sequence[str]
) -> tuple[Mapping[str, Any], Overlay] | None:
    """A consumer's admitted count per selection group and the overlay holding the candidates
    ``ids``: the shards that hold them (the index counts per group), or for an index without
    ``admittedByGroup`` (an operator before it) the whole overlay. None: no overlay yet.

    Where the index counts the groups, the overlay returned holds only the candidates of the
    providers ``leaving`` (all :func:`group_counts` weighs): a shard holds a share of the whole
    fleet, and every named consumer's would otherwise be parsed whole."""
    admitted = index.get("admittedByGroup")
    if not is_sharded(index) or isinstance(admitted, Mapping):
        spec = reader.partial(consumer, index, ids)
        if spec is None:
            return None
        if not is_sharded(index):
            overlay = Overlay.from_spec(spec)
            return group_admitted_counts(overlay.candidates), overlay
        assert isinstance(admitted, Mapping)
        names = set(leaving)
        kept = [c for c in spec.get("candidates") or () if c.get("provider") in names]
        return admitted, Overlay.from_spec({**spec, "candidates": kept})
    whole = reader.whole(consumer)
    if whole is None:
        return None
    overlay = Overlay.from_spec(whole)
    return group_admitted_counts(overlay.candidates), overlay


def _lagging(
    selected: Sequence[Mapping[str, Any]], changing: set[str], drained_elsewhere: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The providers drained elsewhere in a selection group this run drains."""
    groups = {group_of(p) for p in selected if p["metadata"]["name"] in changing}
    return [p for p in drained_elsewhere if p["metadata"]["name"] not in changing and group_of(p) in groups]


def group_of(provider: Mapping[str, Any]) -> str:
    """A provider's selection group as the guards count it (absent: ``""``)."""
    return str((provider.get("spec") or {}).get("selectionGroup") or "")
