"""Drain holds as they are stored: one annotation per holder on an InferenceProvider, key
``holds.drain.agn.dev/<id>``, value compact JSON (``holder``, ``reason``, ``ticket``, ``since``,
``expiresAt``, ``operation``). This module only reads them. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

HOLD_PREFIX = "holds.drain.agn.dev/"


def holds_of(obj: Mapping[str, Any]) -> list[dict]:
    """The holds recorded on ``obj``, sorted by holder; a value that is not a JSON object with a
    string ``holder`` is reported as ``{"holder": None, "key": key, "invalid": True}``."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    out: list[dict] = []
    for key, value in annotations.items():
        if not key.startswith(HOLD_PREFIX):
            continue
        try:
            hold = json.loads(value)
        except (TypeError, ValueError):
            hold = None
        if isinstance(hold, dict) and isinstance(hold.get("holder"), str):
            out.append(hold)
        else:
            out.append({"holder": None, "key": key, "invalid": True})
    return sorted(out, key=lambda h: (h["holder"] is None, h["holder"] or "", h.get("key", "")))
