"""Drain holds as the API server, the operator and the tool all read them. Pure: no I/O, no clock.

A hold is two annotations on an InferenceProvider with the same ``<id>``:

- ``holds.drain.agn.dev/<id>``: compact JSON ``{holder, reason, ticket, since, expiresAt,
  operation}`` (``holder`` is a display name; it grants nothing);
- ``owners.drain.agn.dev/<id>``: the Kubernetes username of the identity that wrote it, as a
  ``SelfSubjectReview`` named it. This is the hold's owner: the admission policy
  (``manifests/policy/drain-holds.yaml``) compares it with ``request.userInfo.username``, since
  CEL cannot read JSON.

``<id>`` is derived from the owner (:func:`hold_id`), so each identity has exactly one hold per
provider. A hold without an owner annotation was written before holds had owners: its owner is
unknown, and only a user allowed the ``release-holds`` verb may remove it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

HOLD_PREFIX = "holds.drain.agn.dev/"
OWNER_PREFIX = "owners.drain.agn.dev/"
# The custom verb (RBAC, on inferenceproviders in agn.dev) that lets a user remove any hold.
RELEASE_VERB = "release-holds"
_ID_LIMIT = 63  # the name part of an annotation key
_HASH = 8


def hold_id(owner: str) -> str:
    """The ``<id>`` of ``owner``'s hold: a DNS label ending in 8 hex digits of a SHA-256 of the
    owner, so that owners whose readable part is alike never share one. The hash input is
    prefixed (``user:``), so an id never equals one written before holds had owners."""
    digest = hashlib.sha256(f"user:{owner}".encode()).hexdigest()[:_HASH]
    slug = re.sub(r"[^a-z0-9]+", "-", owner.lower()).strip("-")
    slug = slug[: _ID_LIMIT - _HASH - 1].rstrip("-") or "u"
    return f"{slug}-{digest}"


def hold_key(owner: str) -> str:
    """The hold annotation key of ``owner`` (a Kubernetes username)."""
    return HOLD_PREFIX + hold_id(owner)


def owner_key(key: str) -> str:
    """The owner annotation key beside hold annotation ``key``."""
    return OWNER_PREFIX + key.removeprefix(HOLD_PREFIX)


def is_hold_key(key: str) -> bool:
    return key.startswith(HOLD_PREFIX)


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def parse_time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        at = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


def hold_body(value: Any) -> dict[str, Any] | None:
    """A hold annotation's value as an object, or None when it is not a hold (not JSON, not an
    object, no holder string)."""
    try:
        data = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("holder"), str):
        return None
    return data


def text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def expired_holds(obj: Mapping[str, Any], now: dt.datetime) -> list[dict[str, Any]]:
    """The holds on a provider whose ``expiresAt`` is at or before ``now`` (the API server's
    time), each as ``{key, owner, holder, ticket, expiresAt}``, sorted by key."""
    annotations = annotations_of(obj)
    out = []
    for key in sorted(k for k in annotations if is_hold_key(k)):
        body = hold_body(annotations[key])
        at = parse_time(body.get("expiresAt")) if body else None
        if body is None or at is None or at > now:
            continue
        out.append(
            {
                "key": key,
                "owner": text_or_none(annotations.get(owner_key(key))),
                "holder": body["holder"],
                "ticket": text_or_none(body.get("ticket")),
                "expiresAt": body["expiresAt"],
            }
        )
    return out
