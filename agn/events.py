"""Kubernetes Events (``events.k8s.io/v1``) as plain dicts: the one place their shape is stated.

The xtask (drain, undrain, restoration) and the operator (overlay publications, providers
excluded by a hard failure) both record Events so that ``kubectl describe`` and ``kubectl
get events`` show what happened to an object, and why, next to the object itself.

Pure: no I/O, no clock (callers pass the time). The API server validates new-style Events
strictly, and a rejected Event is lost, so the limits it enforces are applied here: a
``reason``/``action`` of at most 128 characters, a ``note`` of at most 1 KiB, a
``reportingInstance`` of at most 128 characters, and an object name that is a DNS subdomain.
``regarding`` carries the object's uid because ``kubectl describe`` looks Events up by it.

"Event" in this module and in the two that send them (``agn/operator/events.py``,
``xtask/drain/edges/kube_events.py``) always means such an object. A watch's ``ADDED``/``MODIFIED``/
``DELETED`` is a *watch event* (:mod:`agn.watching`), and a drain's progress lines are
*progress kinds* (the ``notify`` callbacks of ``xtask/drain/``); neither is stored anywhere.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

from agn import GROUP, VERSION

API_VERSION = "events.k8s.io/v1"
NORMAL = "Normal"
WARNING = "Warning"
NOTE_LIMIT = 1024  # bytes, as the API server counts them
FIELD_LIMIT = 128  # reason, action, reportingInstance
NAME_LIMIT = 253

_NOT_IN_NAME = re.compile(r"[^a-z0-9.-]+")


@dataclasses.dataclass(frozen=True)
class Regarding:
    """The object an Event is about (an ``ObjectReference``)."""

    kind: str
    name: str
    namespace: str
    uid: str | None = None
    api_version: str = f"{GROUP}/{VERSION}"

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Regarding:
        meta = obj.get("metadata") or {}
        return cls(
            kind=str(obj.get("kind", "")),
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            uid=meta.get("uid") or None,
            api_version=str(obj.get("apiVersion") or f"{GROUP}/{VERSION}"),
        )

    def to_dict(self) -> dict[str, str]:
        out = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "namespace": self.namespace}
        if self.uid:
            out["uid"] = self.uid
        return out


@dataclasses.dataclass(frozen=True)
class Reporter:
    """Who records an Event: ``reportingController`` (``agn.dev/operator``, ...) and
    ``reportingInstance`` (which process or person of it; clipped to the API's limit)."""

    controller: str
    instance: str


def micro_time(ts: float) -> str:
    """``eventTime`` is a MicroTime: RFC 3339 with exactly six fractional digits."""
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` UTF-8 bytes (never inside a character), marked with an ellipsis when cut."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[: limit - len("…".encode())].decode(errors="ignore") + "…"


def event_name(regarding: str, *parts: str) -> str:
    """``<object>.<parts>``: a valid, deterministic Event name (lower case, at most 253 characters).

    Deterministic names make recording idempotent: the same fact recorded twice (a retried
    ``drain-restore`` that finds the same provider changed by another writer) is one Event.
    """
    cleaned = (_NOT_IN_NAME.sub("-", p.lower()).strip("-.") for p in parts)
    suffix = ".".join(p for p in cleaned if p)
    head = regarding[: NAME_LIMIT - len(suffix) - 1].rstrip("-.")
    return f"{head}.{suffix}" if suffix else head


def event_body(
    *,
    name: str,
    regarding: Regarding,
    reason: str,
    action: str,
    note: str,
    type_: str,
    reporter: Reporter,
    at: float,
) -> dict[str, Any]:
    """One ``events.k8s.io/v1`` Event in the namespace of the object it is about."""
    if type_ not in (NORMAL, WARNING):
        raise ValueError(f"event type must be {NORMAL} or {WARNING}, got {type_!r}")
    return {
        "apiVersion": API_VERSION,
        "kind": "Event",
        "metadata": {"name": name, "namespace": regarding.namespace},
        "eventTime": micro_time(at),
        "reportingController": reporter.controller,
        "reportingInstance": clip(reporter.instance, FIELD_LIMIT),
        "action": clip(action, FIELD_LIMIT),
        "reason": clip(reason, FIELD_LIMIT),
        "type": type_,
        "note": clip(note, NOTE_LIMIT),
        "regarding": regarding.to_dict(),
    }
