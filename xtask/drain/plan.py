"""Planning a drain: per-provider changes, the capacity guard, patch bodies, and the
restoration plan. Pure: plain data in, plain data out.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import Any

from agn.model import ADMITTED, Candidate, Overlay, group_admitted_counts
from agn.objects import drain_of
from xtask.drain.states import RestoreOutcome

REASON = "agn.dev/drain-reason"
BY = "agn.dev/drain-by"
AT = "agn.dev/drain-at"
OPERATION = "agn.dev/drain-operation"
OUR_ANNOTATIONS = (REASON, BY, AT, OPERATION)


@dataclasses.dataclass(frozen=True)
class Change:
    """One provider's planned change. ``previous`` is the raw field value (None = omitted)."""

    provider: str
    previous: bool | None
    requested: bool
    resource_version: str
    generation: int
    previous_annotations: Mapping[str, str | None]

    @property
    def current(self) -> bool:
        return bool(self.previous)

    @property
    def already(self) -> bool:
        return self.current == self.requested


def raw_drain(obj: Mapping[str, Any]) -> bool | None:
    policy = (obj.get("spec") or {}).get("trafficPolicy") or {}
    value = policy.get("drain")
    return None if value is None else bool(value)


def plan_changes(selected: Iterable[Mapping[str, Any]], *, requested: bool) -> list[Change]:
    out = []
    for obj in selected:
        meta = obj.get("metadata", {})
        annotations = meta.get("annotations") or {}
        out.append(
            Change(
                provider=meta["name"],
                previous=raw_drain(obj),
                requested=requested,
                resource_version=meta.get("resourceVersion", ""),
                generation=int(meta.get("generation") or 0),
                previous_annotations={k: annotations.get(k) for k in OUR_ANNOTATIONS},
            )
        )
    return out


def drain_patch(change: Change, *, operation: str, actor: str, at: str, reason: str | None) -> dict:
    """Merge patch touching only ``spec.trafficPolicy.drain`` and our annotations.

    ``metadata.resourceVersion`` makes it conditional: if anything changed the object since
    we read it, the API server answers 409 and we re-read instead of acting on stale data.
    """
    if change.requested:
        annotations: dict[str, str | None] = {REASON: reason, BY: actor, AT: at, OPERATION: operation}
    else:
        # Undrain clears the drain's reason; the operation id stays so restoration can tell
        # whether the provider was changed again after this run.
        annotations = {REASON: None, BY: None, AT: None, OPERATION: operation}
    return {
        "metadata": {"resourceVersion": change.resource_version, "annotations": annotations},
        "spec": {"trafficPolicy": {"drain": change.requested}},
    }


def restore_patch(change: Change, *, resource_version: str) -> dict:
    """Merge patch putting the field and our annotations back exactly as they were."""
    return {
        "metadata": {"resourceVersion": resource_version, "annotations": dict(change.previous_annotations)},
        "spec": {"trafficPolicy": {"drain": change.previous}},
    }


class RestoreDecision(str, enum.Enum):
    """Put the provider back, or leave it: then the decision's value is the restoration's outcome."""

    RESTORE = "restore"
    ALREADY = RestoreOutcome.ALREADY.value
    OTHER_WRITER = RestoreOutcome.OTHER_WRITER.value
    GONE = RestoreOutcome.GONE.value


def restore_decision(
    change: Change,
    *,
    operation: str,
    written_generation: int,
    current: Mapping[str, Any] | None,
) -> RestoreDecision:
    """Whether a provider this run (``operation``) changed, or may have changed, may be put back.

    Only when nobody changed its spec since our write: spec writes bump
    ``metadata.generation`` (status writes by the operator do not), so the generation our
    write produced, our value still in place and our operation id still stamped on it mean
    the provider is as we left it. For a write whose answer was never recorded (a crash
    between PATCH and journal), ``written_generation`` is the one such a write would have
    produced, and the operation annotation tells whether it landed at all.
    """
    if current is None:
        return RestoreDecision.GONE
    if raw_drain(current) == change.previous:
        return RestoreDecision.ALREADY
    meta = current.get("metadata", {})
    gen = int(meta.get("generation") or 0)
    ours = (meta.get("annotations") or {}).get(OPERATION) == operation
    if gen != written_generation or drain_of(current) != change.requested or not ours:
        return RestoreDecision.OTHER_WRITER
    return RestoreDecision.RESTORE


@dataclasses.dataclass(frozen=True)
class CapacityViolation:
    consumer: str
    group: str
    admitted_now: int

    def describe(self) -> str:
        return (
            f"consumer {self.consumer}: selection group {self.group!r} would have no admitted provider "
            f"(has {self.admitted_now} now)"
        )


@dataclasses.dataclass(frozen=True)
class GroupCount:
    """A consumer's admitted providers in one selection group, before and after the run."""

    consumer: str
    group: str
    admitted_before: int
    admitted_after: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "consumer": self.consumer,
            "group": self.group,
            "admittedBefore": self.admitted_before,
            "admittedAfter": self.admitted_after,
        }


def capacity_violations(overlays: Mapping[str, Overlay], selected: Iterable[str]) -> list[CapacityViolation]:
    """Groups that have an admitted candidate now and would have none after draining ``selected``."""
    out = []
    for consumer, overlay in sorted(overlays.items()):
        counts = group_admitted_counts(overlay.candidates)
        out += group_capacity_violations(consumer, counts, overlay.candidates, selected)
    return out


def group_counts(
    consumer: str,
    admitted_by_group: Mapping[str, int],
    candidates: Iterable[Candidate],
    selected: Iterable[str],
    *,
    requested: bool,
) -> list[GroupCount]:
    """The admitted count before and after, per selection group of a selected provider, from the
    group's admitted count now (a sharded index's ``admittedByGroup``, or counted from the whole
    overlay) and the candidates of at least the selected providers (other candidates are ignored).

    Only the selected providers' candidates change: a drain (``requested`` true) takes one
    admitted candidate per selected admitted member, an undrain adds one per selected
    ``existing_only`` member. A selected provider with no candidate (kept out) changes nothing."""
    chosen = set(selected)
    delta: dict[str, int] = {}
    for c in candidates:
        if c.provider not in chosen:
            continue
        delta.setdefault(c.selection_group, 0)
        if requested and c.admission_state == ADMITTED:
            delta[c.selection_group] -= 1
        elif not requested and c.admission_state != ADMITTED:
            delta[c.selection_group] += 1
    out = []
    for group, d in sorted(delta.items()):
        now = int(admitted_by_group.get(group, 0))
        out.append(GroupCount(consumer, group, now, max(0, now + d)))
    return out


def group_capacity_violations(
    consumer: str, admitted_by_group: Mapping[str, int], candidates: Iterable[Candidate], selected: Iterable[str]
) -> list[CapacityViolation]:
    """:func:`capacity_violations` for one consumer, from its admitted candidates per selection
    group (a sharded index's ``admittedByGroup``) and the candidates of at least the selected
    providers (the shards holding them; other candidates are ignored).

    Draining changes only the selected providers' candidates, so only their groups can lose
    their last admitted one: a group loses one admitted candidate per selected admitted member."""
    return violations_of(group_counts(consumer, admitted_by_group, candidates, selected, requested=True))


def violations_of(counts: Iterable[GroupCount]) -> list[CapacityViolation]:
    """The drained groups that have an admitted provider now and would have none after."""
    return [
        CapacityViolation(c.consumer, c.group, c.admitted_before)
        for c in counts
        if c.admitted_before > 0 and c.admitted_after <= 0
    ]
