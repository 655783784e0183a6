"""The overlay plan for one consumer, and what changed between two overlays, for the log.

Pure: a network's verdict (:mod:`agn.operator.verdicts`) and the previous overlay in, the
overlay out. The semantics themselves live in :mod:`agn.model` — this module only applies
them and must not restate them.
"""

from __future__ import annotations

from typing import Any

from agn.model import Candidate, ConsumerView, Overlay, next_overlay
from agn.operator.verdicts import NetworkVerdict, candidates_of


def plan_overlay(consumer: ConsumerView, judged: NetworkVerdict, *, previous: Overlay | None) -> Overlay:
    """The consumer's overlay under its network's verdict (the consumer's exclusions applied).

    ``next_overlay`` keeps the revision when the digest is unchanged, so an unchanged effective
    admission yields the same revision and digest — the controller then has nothing to write.
    When a reading goes stale is the verdict's ``recheck_at``."""
    return next_overlay(previous, candidates_of(judged, consumer), network=judged.network.name, consumer=consumer.name)


# Per section of an overlay change, at most this many providers are named in the log line; the
# counts are always exact. A fleet's first publication adds thousands of candidates, and one log
# line must not carry them all.
CHANGE_LOG_LIMIT = 50
_COMPARED = ("admission_state", "endpoint", "selection_group", "rank")


def _capped(items: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"count": len(items)}
    if items:
        out["providers"] = items[:CHANGE_LOG_LIMIT]
    if len(items) > CHANGE_LOG_LIMIT:
        out["more"] = len(items) - CHANGE_LOG_LIMIT
    return out


def overlay_changes(previous: Overlay | None, overlay: Overlay) -> dict[str, Any]:
    """What changed from ``previous`` to ``overlay``, sized by the change, not by the overlay.

    Candidates are matched by id (stable across renames of nothing else). ``added`` and
    ``removed`` name providers with their admission state; ``changed`` names each provider with
    the fields that differ as ``[old, new]``; ``states`` counts the new overlay's candidates per
    admission state. Each list names at most :data:`CHANGE_LOG_LIMIT` providers (sorted), with
    ``more`` saying how many were left out.
    """
    before: dict[str, Candidate] = {c.id: c for c in (previous.candidates if previous else ())}
    after: dict[str, Candidate] = {c.id: c for c in overlay.candidates}
    added = sorted((c.provider, c.admission_state) for i, c in after.items() if i not in before)
    removed = sorted((c.provider, c.admission_state) for i, c in before.items() if i not in after)
    changed = []
    for i in sorted(set(before) & set(after), key=lambda i: after[i].provider):
        old, new = before[i], after[i]
        diff = {f: [getattr(old, f), getattr(new, f)] for f in _COMPARED if getattr(old, f) != getattr(new, f)}
        if diff:
            changed.append({new.provider: diff})
    states: dict[str, int] = {}
    for c in overlay.candidates:
        states[c.admission_state] = states.get(c.admission_state, 0) + 1
    return {
        "added": _capped([{p: st} for p, st in added]),
        "removed": _capped([{p: st} for p, st in removed]),
        "changed": _capped(changed),
        "states": dict(sorted(states.items())),
    }
