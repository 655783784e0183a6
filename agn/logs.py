"""Structured logs for the AGN processes (operator, gateway): one JSON object per line on stderr.

Every line has ``ts`` (RFC 3339, UTC), ``level``, ``component``, ``msg`` and then the
caller's fields, flat. This module only formats and writes lines; it must not decide
anything, and it never raises into its callers because a log line could not be encoded.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO

from agn.objects import rfc3339

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
_RESERVED = ("ts", "level", "component", "msg")


class JsonLog:
    """A thread-safe writer of JSON log lines, with fields bound at construction."""

    def __init__(
        self,
        *,
        component: str,
        level: str = "info",
        fields: dict[str, Any] | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.component = component
        self.threshold = LEVELS[level]
        self.fields = dict(fields or {})
        self._stream = stream
        self._lock = threading.Lock()

    def _emit(self, level: str, msg: str, fields: dict[str, Any]) -> None:
        if LEVELS[level] < self.threshold:
            return
        record: dict[str, Any] = {"ts": rfc3339(time.time()), "level": level, "component": self.component, "msg": msg}
        for key, value in {**self.fields, **fields}.items():
            # A field must never overwrite the envelope; keep it under a distinct name instead.
            record[f"field_{key}" if key in _RESERVED else key] = value
        line = json.dumps(record, default=str, separators=(",", ":"))
        stream = self._stream or sys.stderr
        with self._lock:
            try:
                stream.write(line + "\n")
                stream.flush()
            except (OSError, ValueError):
                pass  # a closed or broken stderr must not take the process down

    def debug(self, msg: str, **fields: Any) -> None:
        self._emit("debug", msg, fields)

    def info(self, msg: str, **fields: Any) -> None:
        self._emit("info", msg, fields)

    def warning(self, msg: str, **fields: Any) -> None:
        self._emit("warning", msg, fields)

    def error(self, msg: str, **fields: Any) -> None:
        self._emit("error", msg, fields)
