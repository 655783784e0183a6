"""Drain holders: who holds a provider drained, and why. Pure: no I/O.

Each holder's hold is one annotation on the InferenceProvider, ``holds.drain.agn.dev/<id>``
(``<id>``: a DNS-label form of the holder, made unique with a short hash of it), whose value is
compact JSON: ``{"holder", "reason", "ticket", "since", "expiresAt", "operation"}`` (and
``"budgetOverride"`` when the drain set the network's budget aside: ``--override-budget``). The
holds are a set: each holder adds and removes only its own entry, so holders never overwrite
one another. The operator never reads them; it reads only ``spec.trafficPolicy.drain``.

A drain sets the flag and adds the caller's hold; an undrain removes the caller's hold and
clears the flag only when no hold remains (:func:`plan_hold`). Expired holds are reported
(:func:`expired`), never removed on their own: they still hold the provider.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

HOLD_PREFIX = "holds.drain.agn.dev/"
# The annotations a drain writes beside the holds: why, who and when, and the operation id.
REASON = "agn.dev/drain-reason"
BY = "agn.dev/drain-by"
AT = "agn.dev/drain-at"
OPERATION = "agn.dev/drain-operation"
MAX_HOLDER = 128  # characters of --holder
MAX_TICKET = 128  # characters of --ticket
MAX_OVERRIDE = 256  # characters of --override-budget
MAX_EXPIRES_SECONDS = 366 * 24 * 3600  # --expires-in: at most a year (and a day)
_ID_LIMIT = 63  # the name part of an annotation key
_HASH = 8


def hold_key(holder: str) -> str:
    """The annotation key of ``holder``'s hold: a DNS label (lowercase letters, digits, '-'), at
    most 63 characters, ending in 8 hex digits of the holder's SHA-256 so that holders whose
    readable part is alike (``Ann@x``, ``ann@x``) never share a key."""
    digest = hashlib.sha256(holder.encode()).hexdigest()[:_HASH]
    slug = re.sub(r"[^a-z0-9]+", "-", holder.lower()).strip("-")
    slug = slug[: _ID_LIMIT - _HASH - 1].rstrip("-") or "h"
    return f"{HOLD_PREFIX}{slug}-{digest}"


def is_hold_key(key: str) -> bool:
    return key.startswith(HOLD_PREFIX)


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


def parse_hold(key: str, value: Any) -> dict[str, Any]:
    """One hold annotation as data; ``{"holder": None, "key": key, "invalid": True}`` when its
    value is not a hold (not JSON, not an object, no holder string)."""
    try:
        data = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("holder"), str):
        return {"holder": None, "key": key, "invalid": True}
    out: dict[str, Any] = {
        "holder": data["holder"],
        "reason": _text_or_none(data.get("reason")),
        "ticket": _text_or_none(data.get("ticket")),
        "since": _text_or_none(data.get("since")),
        "expiresAt": _text_or_none(data.get("expiresAt")),
        "operation": _text_or_none(data.get("operation")),
        "budgetOverride": _text_or_none(data.get("budgetOverride")),
        "key": key,
    }
    return out


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def hold_annotations(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The hold annotations of a provider object: key -> raw value."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in annotations.items() if is_hold_key(k)}


def holds_of(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every hold on a provider object, parsed, sorted by holder (then key; invalid ones last)."""
    holds = [parse_hold(k, v) for k, v in hold_annotations(obj).items()]
    return sorted(holds, key=lambda h: (h["holder"] is None, h["holder"] or "", h["key"]))


def holder_name(hold: Mapping[str, Any]) -> str:
    """How a hold is named to people: its holder, or the key of an unreadable one."""
    return hold["holder"] if hold.get("holder") is not None else f"unreadable hold {hold['key']}"


def expired(hold: Mapping[str, Any], now: dt.datetime) -> bool:
    """Whether a hold's ``expiresAt`` has passed (a hold without one, or unreadable, never expires)."""
    at = parse_time(hold.get("expiresAt"))
    return at is not None and at <= now


def parse_time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        at = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


def is_ours(value: Any, operation: str) -> bool:
    """Whether a hold annotation's value was written by ``operation``."""
    return isinstance(value, str) and parse_hold("", value).get("operation") == operation


@dataclasses.dataclass(frozen=True)
class HoldPlan:
    """What one provider's hold annotations and flag become.

    ``writes``: hold key -> True (write the caller's hold) or False (remove it).
    ``keep_drain``: an undrain leaves ``spec.trafficPolicy.drain`` as it is, because other
    holds remain (``others``, their keys)."""

    writes: Mapping[str, bool]
    keep_drain: bool
    others: tuple[str, ...]


def plan_hold(
    annotations: Mapping[str, Any], *, drained: bool, drain: bool, key: str, release_all: bool = False
) -> HoldPlan:
    """The hold change of one provider for the caller (hold ``key``).

    Drain: add the caller's hold, unless it is there and the provider is drained (a re-run
    changes nothing). Undrain: remove the caller's hold; the flag is cleared only when no other
    hold remains (expired and unreadable holds still hold). ``release_all`` removes every hold
    and clears the flag.
    """
    present = sorted(k for k in annotations if is_hold_key(k))
    others = tuple(k for k in present if k != key)
    if drain:
        if key in present and drained:
            return HoldPlan({}, False, others)
        return HoldPlan({key: True}, False, others)
    if release_all:
        return HoldPlan(dict.fromkeys(present, False), False, ())
    writes = {key: False} if key in present else {}
    return HoldPlan(writes, bool(others), others)


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


_HOLD_FIELDS = ("holder", "reason", "ticket", "since", "expiresAt", "operation", "key", "expired", "invalid")


def _full_hold(hold: Mapping[str, Any]) -> dict[str, Any]:
    """Every field present (null when unknown), so the report's schema can require them."""
    return {k: hold.get(k) for k in _HOLD_FIELDS}
