"""Drain holders: who holds a provider drained, and why. Pure: no I/O.

Each identity's hold is two annotations on the InferenceProvider (:mod:`agn.holds`):
``holds.drain.agn.dev/<id>``, whose value is compact JSON: ``{"holder", "reason", "ticket",
"since", "expiresAt", "operation"}`` (and ``"budgetOverride"`` when the drain set the network's
budget aside: ``--override-budget``), and ``owners.drain.agn.dev/<id>``, the Kubernetes
username that wrote it (its owner; ``<id>`` is derived from it). ``holder`` is a display name
(``--holder``); release authority comes only from the owner, and the API server enforces it
(``manifests/policy/drain-holds.yaml``). The holds are a set: each owner adds and removes only
its own entry, so owners never overwrite one another. The operator reads only the flag to route,
and the holds' expiry to report it.

A drain sets the flag and adds the caller's hold; a re-run by the same identity updates that
hold with the values it was given (:func:`updated_hold`); an undrain removes the caller's hold and
clears the flag only when no hold remains (:func:`hold_change`). Expired holds are reported
(:func:`expired`), never removed on their own: they still hold the provider.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterable, Mapping
from typing import Any

from agn.holds import HOLD_PREFIX, OWNER_PREFIX, RELEASE_VERB, hold_body, is_hold_key, owner_key, parse_time
from agn.holds import hold_key as hold_key
from agn.holds import text_or_none as _text_or_none
from xtask.record import Record

__all__ = ["HOLD_PREFIX", "OWNER_PREFIX", "RELEASE_VERB", "hold_key", "owner_key", "parse_time"]
# The annotations a drain writes beside the holds: why, who and when, and the operation id.
REASON = "agn.dev/drain-reason"
BY = "agn.dev/drain-by"
AT = "agn.dev/drain-at"
OPERATION = "agn.dev/drain-operation"
MAX_HOLDER = 128  # characters of --holder
MAX_TICKET = 128  # characters of --ticket
MAX_OVERRIDE = 256  # characters of --override-budget
MAX_EXPIRES_SECONDS = 366 * 24 * 3600  # --expires-in: at most a year (and a day)


def holder_problem(value: str) -> str | None:
    """Why ``value`` cannot be a holder (None when it can): printable, not blank, bounded."""
    if not value.strip():
        return "is empty"
    if not value.isprintable():
        return "has characters that are not printable"
    if len(value) > MAX_HOLDER:
        return f"is longer than {MAX_HOLDER} characters ({len(value)})"
    if value != value.strip():
        return "starts or ends with a space"
    return None


def ticket_problem(value: str) -> str | None:
    """Why ``value`` cannot be a ticket reference (None when it can)."""
    if not value.strip():
        return "is empty"
    if not value.isprintable():
        return "has characters that are not printable"
    if len(value) > MAX_TICKET:
        return f"is longer than {MAX_TICKET} characters ({len(value)})"
    return None


def override_problem(value: str) -> str | None:
    """Why ``value`` cannot be the reason of ``--override-budget`` (None when it can)."""
    if not value.strip():
        return "is empty: say why the budget is overridden"
    if not value.isprintable():
        return "has characters that are not printable"
    if len(value) > MAX_OVERRIDE:
        return f"is longer than {MAX_OVERRIDE} characters ({len(value)})"
    return None


def rfc3339(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def hold_value(
    *,
    holder: str,
    reason: str | None,
    ticket: str | None,
    since: dt.datetime,
    expires_in: int | None,
    operation: str,
    budget_override: str | None = None,
) -> str:
    """The annotation value of one hold: compact JSON, keys in a fixed order."""
    expires = rfc3339(since + dt.timedelta(seconds=expires_in)) if expires_in else None
    body = {
        "holder": holder,
        "reason": reason,
        "ticket": ticket,
        "since": rfc3339(since),
        "expiresAt": expires,
        "operation": operation,
    }
    if budget_override is not None:
        body["budgetOverride"] = budget_override
    return json.dumps(body, separators=(",", ":"))


def parse_hold(key: str, value: Any, owner: Any = None) -> dict[str, Any]:
    """One hold annotation as data, with its owner (the owner annotation's value; None: unknown,
    written before holds had owners); ``{"holder": None, "key": key, "owner": ..., "invalid":
    True}`` when its value is not a hold (not JSON, not an object, no holder string)."""
    data = hold_body(value)
    owner = _text_or_none(owner)
    if data is None:
        return {"holder": None, "key": key, "owner": owner, "invalid": True}
    out: dict[str, Any] = {
        "holder": data["holder"],
        "reason": _text_or_none(data.get("reason")),
        "ticket": _text_or_none(data.get("ticket")),
        "since": _text_or_none(data.get("since")),
        "expiresAt": _text_or_none(data.get("expiresAt")),
        "operation": _text_or_none(data.get("operation")),
        "budgetOverride": _text_or_none(data.get("budgetOverride")),
        "key": key,
        "owner": owner,
    }
    return out


def hold_annotations(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The hold annotations of a provider object: key -> raw value."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in annotations.items() if is_hold_key(k)}


def holds_of(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every hold on a provider object, parsed, sorted by holder (then key; invalid ones last)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    holds = [parse_hold(k, v, annotations.get(owner_key(k))) for k, v in hold_annotations(obj).items()]
    return sorted(holds, key=lambda h: (h["holder"] is None, h["holder"] or "", h["key"]))


def holder_name(hold: Mapping[str, Any]) -> str:
    """How a hold is named to people: its owner (and its holder when that says something else),
    ``<holder> (owner unknown)`` for a hold written before holds had owners, or the key of an
    unreadable one."""
    owner, holder = hold.get("owner"), hold.get("holder")
    if holder is None:
        return f"unreadable hold {hold['key']}" + (f" of {owner}" if owner else "")
    if owner is None:
        return f"{holder} (owner unknown)"
    return owner if holder == owner else f"{owner} (holder {holder})"


def undrain_refusal(obj: Mapping[str, Any], *, key: str, name: str) -> str | None:
    """Why the caller (hold ``key``) may not undrain provider ``name`` (None: it may): it holds
    no hold there while others do. Only their owners, or a user allowed the release verb with
    ``--release-all``, may release them."""
    holds = holds_of(obj)
    if not holds or any(h["key"] == key for h in holds):
        return None
    return (
        f"{name}: held by {', '.join(holder_name(h) for h in holds)}, not by you; only a hold's owner may "
        f"release it, or a user allowed the verb {RELEASE_VERB!r} on inferenceproviders with --release-all"
    )


def expired(hold: Mapping[str, Any], now: dt.datetime) -> bool:
    """Whether a hold's ``expiresAt`` has passed (a hold without one, or unreadable, never expires)."""
    at = parse_time(hold.get("expiresAt"))
    return at is not None and at <= now


def is_ours(value: Any, operation: str) -> bool:
    """Whether a hold annotation's value was written by ``operation``."""
    return isinstance(value, str) and parse_hold("", value).get("operation") == operation


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class HoldAsk(Record):
    """What a drain's flags ask of the caller's hold when it is already there (a re-run): each
    field None when its flag was not given, so the earlier value stays. ``operation``: the run's
    id, stamped on the hold it writes (its restoration knows the hold by it)."""

    operation: str
    holder: str | None = None
    reason: str | None = None
    ticket: str | None = None
    expires_at: str | None = None  # RFC 3339: the run's start (server clock) plus --expires-in


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class FieldChange(Record):
    """One field of a hold a re-run changed (``before``/``after``: None when there was none)."""

    field: str
    before: str | None
    after: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "from": self.before, "to": self.after}


# The fields of a hold a re-run may change, in the order they are told; the JSON key each is.
UPDATABLE = ("reason", "holder", "ticket", "expiresAt")


def describe_update(changes: Iterable[FieldChange], *, lead: str = "updated hold") -> str:
    """``updated hold: reason 'kernel' -> 'rack move', ticket none -> 'CHG-2'``."""
    told = ", ".join(f"{c.field} {_told(c.before)} -> {_told(c.after)}" for c in changes)
    return f"{lead}: {told}"


def _told(value: str | None) -> str:
    return "none" if value is None else repr(value)


def updated_hold(value: Any, ask: HoldAsk) -> tuple[str, tuple[FieldChange, ...]] | None:
    """The caller's hold ``value`` with the fields ``ask`` gives, and the fields that changed;
    None when none would (a re-run with the same values writes nothing) or the hold is
    unreadable (left as it is). ``since`` and ``budgetOverride`` stay; ``operation`` becomes the
    run's."""
    data = hold_body(value)
    if data is None:
        return None
    asked = {"reason": ask.reason, "holder": ask.holder, "ticket": ask.ticket, "expiresAt": ask.expires_at}
    changes = tuple(
        FieldChange(field, _text_or_none(data.get(field)), new)
        for field in UPDATABLE
        if (new := asked[field]) is not None and new != _text_or_none(data.get(field))
    )
    if not changes:
        return None
    body: dict[str, Any] = {k: data.get(k) for k in ("holder", "reason", "ticket", "since", "expiresAt")}
    body.update({c.field: c.after for c in changes})
    body["operation"] = ask.operation
    if data.get("budgetOverride") is not None:
        body["budgetOverride"] = data["budgetOverride"]
    return json.dumps(body, separators=(",", ":")), changes


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class HoldChange(Record):
    """What one provider's hold annotations and flag become.

    ``writes``: hold key -> True (write the caller's hold) or False (remove it).
    ``keep_drain``: an undrain leaves ``spec.trafficPolicy.drain`` as it is, because other
    holds remain (``others``, their keys). ``value`` and ``update``: a re-run updating the
    caller's hold writes ``value`` (None: the run's new hold), changing the fields ``update``."""

    writes: Mapping[str, bool]
    keep_drain: bool
    others: tuple[str, ...]
    value: str | None = None
    update: tuple[FieldChange, ...] = ()


def hold_change(
    annotations: Mapping[str, Any],
    *,
    drained: bool,
    drain: bool,
    key: str,
    release_all: bool = False,
    ask: HoldAsk | None = None,
) -> HoldChange:
    """The hold change of one provider for the caller (hold ``key``).

    Drain: add the caller's hold; when it is there and the provider is drained (a re-run),
    update it with what ``ask`` gives (nothing to write when that changes nothing, or without
    ``ask``). Undrain: remove the caller's hold; the flag is cleared only when no other hold
    remains (expired and unreadable holds still hold). ``release_all`` removes every hold and
    clears the flag.
    """
    present = sorted(k for k in annotations if is_hold_key(k))
    others = tuple(k for k in present if k != key)
    if drain:
        if key in present and drained:
            update = updated_hold(annotations[key], ask) if ask is not None else None
            if update is None:
                return HoldChange({}, False, others)
            return HoldChange({key: True}, False, others, value=update[0], update=update[1])
        return HoldChange({key: True}, False, others)
    if release_all:
        return HoldChange(dict.fromkeys(present, False), False, ())
    writes = {key: False} if key in present else {}
    return HoldChange(writes, bool(others), others)


def drain_entries(objs: Iterable[Mapping[str, Any]], *, now: dt.datetime, expired_only: bool = False) -> list[dict]:
    """``env drains``: every provider that is drained or carries a hold, sorted by name, with
    its holds (each marked expired or not). A drained provider without holds is held by nobody
    known (drained by an older xtask, kubectl or a hand edit): its ``agn.dev/drain-*``
    annotations say what is known. ``expired_only``: only providers with an expired hold."""
    out = []
    for obj in objs:
        meta = obj.get("metadata") or {}
        drained = bool(((obj.get("spec") or {}).get("trafficPolicy") or {}).get("drain"))
        holds = [{**h, "expired": expired(h, now), "invalid": bool(h.get("invalid"))} for h in holds_of(obj)]
        if not drained and not holds:
            continue
        if expired_only and not any(h["expired"] for h in holds):
            continue
        annotations = meta.get("annotations") or {}
        out.append(
            {
                "provider": meta.get("name"),
                "providerGateway": (obj.get("spec") or {}).get("providerGateway"),
                "drain": drained,
                "holds": [_full_hold(h) for h in holds],
                "drainReason": _text_or_none(annotations.get(REASON)),
                "drainedBy": _text_or_none(annotations.get(BY)),
                "drainedAt": _text_or_none(annotations.get(AT)),
            }
        )
    return sorted(out, key=lambda p: str(p["provider"]))


_HOLD_FIELDS = ("holder", "owner", "reason", "ticket", "since", "expiresAt", "operation", "key", "expired", "invalid")


def _full_hold(hold: Mapping[str, Any]) -> dict[str, Any]:
    """Every field present (null when unknown), so the report's schema can require them."""
    return {k: hold.get(k) for k in _HOLD_FIELDS}
