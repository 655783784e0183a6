"""Planning a drain: per-provider changes, the capacity guard, patch bodies, and the
restoration plan. Pure: plain data in, plain data out.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import Any

from agn.model import ADMITTED, Candidate, rfc3339
from agn.objects import drain_of, parse_time
from xtask.drain.core.holds import (
    AT,
    BY,
    OPERATION,
    REASON,
    FieldChange,
    HoldAsk,
    describe_update,
    hold_change,
    is_hold_key,
    is_ours,
    owner_key,
)
from xtask.drain.core.states import RestoreOutcome
from xtask.record import Record

OUR_ANNOTATIONS = (REASON, BY, AT, OPERATION)


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Change(Record):
    """One provider's planned change. ``previous`` is the raw field value (None = omitted)."""

    provider: str
    previous: bool | None
    requested: bool
    resource_version: str
    generation: int
    previous_annotations: Mapping[str, str | None]
    # Drain holders (xtask.drain.core.holds): hold key -> True (this run writes the caller's hold) or
    # False (removes it); whether an undrain leaves the flag because other holds remain; the
    # other holds' keys when planned; and what the caller asked, to plan again after a 409.
    hold_writes: Mapping[str, bool] = dataclasses.field(default_factory=dict)
    keep_drain: bool = False
    other_holds: tuple[str, ...] = ()
    hold_key: str | None = None
    release_all: bool = False
    # A re-run's update of the caller's hold (xtask.drain.core.holds.updated_hold): what the run's
    # flags ask of it (kept to plan again after a 409), the value written (None: the run's new
    # hold) and the fields it changes (empty: no update).
    hold_ask: HoldAsk | None = None
    hold_text: str | None = None
    hold_update: tuple[FieldChange, ...] = ()
    # Slow start (--undrain --slow-start): the window's seconds this undrain writes beside the flag
    # (None: none), and spec.trafficPolicy.slowStart as it was (raw; None: omitted), restored with it.
    slow_start: int | None = None
    previous_slow_start: Mapping[str, Any] | None = None
    # Session deadline (--session-deadline): the seconds after the write at which the drained
    # provider's sessions are moved (None: none), and spec.trafficPolicy.sessionDeadline as it was.
    session_deadline: int | None = None
    previous_session_deadline: str | None = None

    @property
    def current(self) -> bool:
        return bool(self.previous)

    @property
    def target(self) -> bool:
        """``spec.trafficPolicy.drain`` after this change."""
        return self.current if self.keep_drain else self.requested

    @property
    def flag_changes(self) -> bool:
        return self.target != self.current

    @property
    def already(self) -> bool:
        return not self.flag_changes and not self.hold_writes

    @property
    def held_as_asked(self) -> bool:
        """A drain re-run whose hold already says what it was asked: nothing to write."""
        return self.already and self.requested and self.hold_ask is not None and self.hold_key is not None


def change_note(change: Change, *, planned: bool = False) -> str | None:
    """What a provider's plan (``planned``) or outcome says beside it: a re-run's hold update,
    or that the caller's hold already says what was asked (nothing is written); None for the rest."""
    if change.hold_update:
        return describe_update(change.hold_update, lead="will update hold" if planned else "updated hold")
    if change.held_as_asked:
        return "already drained and your hold already says this: nothing to update"
    return None


def raw_drain(obj: Mapping[str, Any]) -> bool | None:
    policy = (obj.get("spec") or {}).get("trafficPolicy") or {}
    value = policy.get("drain")
    return None if value is None else bool(value)


def raw_slow_start(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``spec.trafficPolicy.slowStart`` as written (None: omitted)."""
    value = ((obj.get("spec") or {}).get("trafficPolicy") or {}).get("slowStart")
    return dict(value) if isinstance(value, Mapping) else None


def raw_session_deadline(obj: Mapping[str, Any]) -> str | None:
    """``spec.trafficPolicy.sessionDeadline`` as written (None: omitted)."""
    value = ((obj.get("spec") or {}).get("trafficPolicy") or {}).get("sessionDeadline")
    return value if isinstance(value, str) else None


def plan_changes(
    selected: Iterable[Mapping[str, Any]],
    *,
    requested: bool,
    hold_key: str | None = None,
    release_all: bool = False,
    slow_start: int | None = None,
    session_deadline: int | None = None,
    hold_ask: HoldAsk | None = None,
) -> list[Change]:
    """One change per provider. With ``hold_key`` (the caller's hold) a drain adds that hold and
    an undrain removes it, clearing the flag only when no other hold remains (``release_all``:
    removing every hold); without it only the flag is planned. ``slow_start``: an undrain's window
    (seconds), written with the flag when the flag clears; ``session_deadline``: a drain's
    (seconds after the write), written with the flag when the flag is set. ``hold_ask``: what a
    drain's flags ask of a hold the caller already has there (a re-run updates it)."""
    return [
        plan_change(
            obj,
            requested=requested,
            hold_key=hold_key,
            release_all=release_all,
            slow_start=slow_start,
            session_deadline=session_deadline,
            hold_ask=hold_ask,
        )
        for obj in selected
    ]


def plan_change(
    obj: Mapping[str, Any],
    *,
    requested: bool,
    hold_key: str | None = None,
    release_all: bool = False,
    slow_start: int | None = None,
    session_deadline: int | None = None,
    hold_ask: HoldAsk | None = None,
) -> Change:
    meta = obj.get("metadata", {})
    annotations = meta.get("annotations") or {}
    previous = raw_drain(obj)
    writes: dict[str, bool] = {}
    keep = False
    others: tuple[str, ...] = ()
    hold = None
    if hold_key is not None:
        hold = hold_change(
            annotations, drained=bool(previous), drain=requested, key=hold_key, release_all=release_all, ask=hold_ask
        )
        writes, keep, others = dict(hold.writes), hold.keep_drain, hold.others
    return Change(
        provider=meta["name"],
        previous=previous,
        requested=requested,
        resource_version=meta.get("resourceVersion", ""),
        generation=int(meta.get("generation") or 0),
        previous_annotations={k: annotations.get(k) for k in (*OUR_ANNOTATIONS, *with_owners(writes))},
        hold_writes=writes,
        keep_drain=keep,
        other_holds=others,
        hold_key=hold_key,
        release_all=release_all,
        hold_ask=hold_ask if requested else None,
        hold_text=hold.value if hold is not None else None,
        hold_update=hold.update if hold is not None else (),
        slow_start=None if requested else slow_start,
        previous_slow_start=raw_slow_start(obj),
        session_deadline=session_deadline if requested else None,
        previous_session_deadline=raw_session_deadline(obj),
    )


def with_owners(hold_keys: Iterable[str]) -> list[str]:
    """Hold keys, each followed by the key of its owner annotation (written and restored together)."""
    return [k for key in hold_keys for k in (key, owner_key(key))]


def replan(change: Change, obj: Mapping[str, Any]) -> Change:
    """``change`` planned again from the object as it is now (after a 409)."""
    return plan_change(
        obj,
        requested=change.requested,
        hold_key=change.hold_key,
        release_all=change.release_all,
        slow_start=change.slow_start,
        session_deadline=change.session_deadline,
        hold_ask=change.hold_ask,
    )


def drain_patch(
    change: Change,
    *,
    operation: str,
    actor: str,
    at: str,
    reason: str | None,
    hold: str | None = None,
    owner: str | None = None,
    now: str | None = None,
) -> dict:
    """Merge patch touching only ``spec.trafficPolicy.drain`` (and ``slowStart``), our annotations
    and the holds this change writes (``hold``: the caller's hold value, for the keys it adds;
    ``owner``: the caller's username, written beside it as the hold's owner annotation; a removed
    hold loses its owner annotation too).

    When the flag changes, ``slowStart`` goes with it: a drain clears one that is there
    (cancelling a window in progress); an undrain with :attr:`Change.slow_start` writes ``{startTime: now,
    durationSeconds}`` (``now``: the API server's time at this write, RFC 3339), else leaves it.
    ``sessionDeadline`` too: a drain with :attr:`Change.session_deadline` writes ``now`` plus those
    seconds; any other flag change clears one that is there (a deadline belongs to the drain it
    was written with).

    ``metadata.resourceVersion`` makes it conditional: if anything changed the object since
    we read it, the API server answers 409 and we re-read instead of acting on stale data; so
    two holders writing at once never lose a hold. The flag and the ``agn.dev/drain-*``
    annotations are written only when the flag changes (a second holder adds just its hold; a
    re-run writes just its updated hold, :attr:`Change.hold_text`).
    """
    annotations = _run_annotations(change, operation=operation, actor=actor, at=at, reason=reason)
    annotations.update(_hold_annotations(change, hold=hold, owner=owner))
    patch: dict[str, Any] = {"metadata": {"resourceVersion": change.resource_version, "annotations": annotations}}
    if change.flag_changes:
        patch["spec"] = {"trafficPolicy": _policy_patch(change, now=now)}
    return patch


def _run_annotations(
    change: Change, *, operation: str, actor: str, at: str, reason: str | None
) -> dict[str, str | None]:
    """The ``agn.dev/drain-*`` annotations, written only when the flag changes: a drain's reason,
    who and when; an undrain clears those, and the operation id stays so restoration can tell
    whether the provider was changed again after this run."""
    if not change.flag_changes:
        return {}
    if change.target:
        return {REASON: reason, BY: actor, AT: at, OPERATION: operation}
    return {REASON: None, BY: None, AT: None, OPERATION: operation}


def _policy_patch(change: Change, *, now: str | None) -> dict[str, Any]:
    """``spec.trafficPolicy`` of a change of the flag: the flag, and the ``slowStart`` and
    ``sessionDeadline`` that go with it (``now``: the API server's time of the write)."""
    policy: dict[str, Any] = {"drain": change.target}
    if change.target:
        if change.previous_slow_start is not None:
            policy["slowStart"] = None
    elif change.slow_start is not None:
        if now is None:
            raise ValueError("an undrain with a slow start needs the server's time of the write")
        policy["slowStart"] = {"startTime": now, "durationSeconds": change.slow_start}
    if change.target and change.session_deadline is not None:
        written = parse_time(now)
        if written is None:
            raise ValueError("a drain with a session deadline needs the server's time of the write")
        policy["sessionDeadline"] = rfc3339(written + change.session_deadline)
    elif change.previous_session_deadline is not None:
        policy["sessionDeadline"] = None
    return policy


def _hold_annotations(change: Change, *, hold: str | None, owner: str | None) -> dict[str, str | None]:
    """The hold annotations ``change`` writes: each hold it adds (a re-run's updated value, else
    ``hold``) with its owner, and each it removes (null, its owner too)."""
    out: dict[str, str | None] = {}
    for key, adds in change.hold_writes.items():
        value = change.hold_text if change.hold_text is not None else hold
        if adds and (value is None or owner is None):
            raise ValueError("a change that adds a hold needs the hold's value and its owner")
        out[key] = value if adds else None
        out[owner_key(key)] = owner if adds else None
    return out


def restore_patch(change: Change, *, resource_version: str, flag: bool = True) -> dict:
    """Merge patch putting back exactly what ``change`` wrote: the holds it touched and, with
    ``flag`` (when the change moved it), the field and our annotations as they were."""
    touched = dict(change.hold_writes)
    if flag and change.flag_changes:
        annotations = dict(change.previous_annotations)
        policy: dict[str, Any] = {"drain": change.previous}
        if change.previous_slow_start is not None or change.slow_start is not None:
            policy["slowStart"] = change.previous_slow_start  # the window as it was (None: removed)
        if change.previous_session_deadline is not None or change.session_deadline is not None:
            policy["sessionDeadline"] = change.previous_session_deadline
        patch: dict[str, Any] = {"spec": {"trafficPolicy": policy}}
    else:
        annotations = {k: change.previous_annotations.get(k) for k in with_owners(touched)}
        patch = {}
    return {"metadata": {"resourceVersion": resource_version, "annotations": annotations}, **patch}


class RestoreDecision(str, enum.Enum):
    """Put the provider back, or leave it: then the decision's value is the restoration's outcome."""

    RESTORE = "restore"
    RESTORE_HOLDS = "restore-holds"  # put back only the holds; the flag stays (another holder holds it now)
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

    The holds this run wrote are put back only while they are as it left them (its own hold, its
    operation in it; a hold it removed still absent). A flag this run set is left set, and only
    the holds put back, when a hold it did not know of has appeared since: another holder holds
    the provider drained now.
    """
    if current is None:
        return RestoreDecision.GONE
    annotations = (current.get("metadata") or {}).get("annotations") or {}
    holds_back = all(annotations.get(k) == change.previous_annotations.get(k) for k in change.hold_writes)
    flag_back = not change.flag_changes or raw_drain(current) == change.previous
    if holds_back and flag_back:
        return RestoreDecision.ALREADY
    for key, adds in change.hold_writes.items():
        now = annotations.get(key)
        if now == change.previous_annotations.get(key):
            continue
        if (adds and not is_ours(now, operation)) or (not adds and now is not None):
            return RestoreDecision.OTHER_WRITER
    if not change.flag_changes:
        # Only holds were written: they fit only while the flag is as this run found it.
        if raw_drain(current) != change.previous:
            return RestoreDecision.OTHER_WRITER
        return RestoreDecision.RESTORE_HOLDS
    if flag_back:
        return RestoreDecision.RESTORE_HOLDS
    meta = current.get("metadata", {})
    gen = int(meta.get("generation") or 0)
    ours = annotations.get(OPERATION) == operation
    if gen != written_generation or drain_of(current) != change.target or not ours:
        return RestoreDecision.OTHER_WRITER
    known = set(change.hold_writes) | set(change.other_holds)
    if not change.previous and change.hold_writes and any(is_hold_key(k) and k not in known for k in annotations):
        return RestoreDecision.RESTORE_HOLDS
    return RestoreDecision.RESTORE


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class CapacityViolation(Record):
    consumer: str
    group: str
    admitted_now: int

    def describe(self) -> str:
        return (
            f"consumer {self.consumer}: selection group {self.group!r} would have no admitted provider "
            f"(has {self.admitted_now} now)"
        )


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class GroupCount(Record):
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


def violations_of(counts: Iterable[GroupCount]) -> list[CapacityViolation]:
    """The drained groups that have an admitted provider now and would have none after."""
    return [
        CapacityViolation(c.consumer, c.group, c.admitted_before)
        for c in counts
        if c.admitted_before > 0 and c.admitted_after <= 0
    ]
