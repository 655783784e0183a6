"""The load-aware capacity guard as a step of a drain run: weigh the groups
(:mod:`xtask.drain.core.capacity` decides), put them in the report, say them, and return the
refusals — or, with ``--force``, record what was overridden (the report, the Events through
:attr:`~xtask.drain.edges.kube_events.DrainEvents.capacity_override`, and the journal's header).

Called before any write (:mod:`xtask.drain.prepare`, a first look) and again under the drain
lock before each wave's writes (:mod:`xtask.drain.locked`), on objects its caller read.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from xtask.drain.context import RunContext
from xtask.drain.core.capacity import CapacityGroup, capacity_groups, capacity_refusals
from xtask.drain.report import RunResults


def check_capacity(
    ctx: RunContext,
    results: RunResults,
    *,
    providers: Iterable[Mapping[str, Any]],
    networks: Iterable[Mapping[str, Any]],
    to_drain: Iterable[str],
    heartbeat: float | None,
    where: str,
) -> list[str]:
    """The guard's refusals for draining ``to_drain`` (empty: go ahead); a drain only."""
    req = ctx.req
    if not req.drain:
        return []
    started = time.monotonic()
    rows = capacity_groups(providers, networks, to_drain, req.capacity_margin, heartbeat=heartbeat, now=time.time())
    refusals = capacity_refusals(rows)
    previous: list[str] = (results.capacity or {}).get("overridden", [])
    overridden = previous + [r for r in refusals if req.force and r not in previous]
    results.capacity = {
        "margin": None if req.capacity_margin is None else str(req.capacity_margin),
        "checked": where,
        "forced": bool(overridden),
        "overridden": overridden,
        "groups": [r.to_dict() for r in rows],
    }
    for r in rows:
        ctx.say(r.summary())
    results.add_time("capacitySeconds", time.monotonic() - started)  # every check of the run, added up
    if req.force and refusals:
        ctx.events.capacity_override = override_note(rows)
        ctx.say(f"capacity guard overridden by --force: {'; '.join(refusals)}")
        return []
    return refusals


def override_note(rows: Iterable[CapacityGroup]) -> str:
    """What ``--force`` set aside, short enough for an Event's note."""
    return "; ".join(
        f"network {r.network}, group {r.group!r}: {r.verdict} (load {r.load}, headroom {r.headroom})"
        for r in rows
        if r.verdict != "fits"
    )
