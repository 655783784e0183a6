"""Structured logs for the gateway: one JSON object per line on stderr.

This module only formats and writes log lines; it must not decide anything or swallow
errors for its callers.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


class JsonLog:
    """Writes ``{"ts", "level", "component", "event", ...}`` lines; thread-safe."""

    def __init__(self, *, component: str = "gateway", fields: dict[str, Any] | None = None,
                 level: str = "info", stream: TextIO | None = None) -> None:
        self.component = component
        self.fields = dict(fields or {})
        self.threshold = LEVELS[level]
        self._stream = stream
        self._lock = threading.Lock()

    def _emit(self, level: str, event: str, fields: dict[str, Any]) -> None:
        if LEVELS[level] < self.threshold:
            return
        record = {"ts": round(time.time(), 3), "level": level, "component": self.component, "event": event,
                  **self.fields, **fields}
        line = json.dumps(record, default=str, separators=(",", ":"))
        stream = self._stream or sys.stderr
        with self._lock:
            stream.write(line + "\n")
            stream.flush()

    def debug(self, event: str, **fields: Any) -> None:
        self._emit("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit("error", event, fields)
