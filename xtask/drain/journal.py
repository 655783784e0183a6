"""The operation journal: a JSON file recording what a drain run is about to change and has
changed, rewritten atomically after every write, so that after a crash or ``kill -9`` an
operator can see what happened and undo it with ``python -m xtask env drain-restore JOURNAL``.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import threading
import uuid
from pathlib import Path
from typing import Any

from xtask.drain.plan import Change


def journal_dir() -> Path:
    explicit = os.environ.get("AGN_XTASK_JOURNAL_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "agn-xtask" / "journal"


def new_operation_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


class Journal:
    """One run's journal file. Thread-safe: fan-out workers record their writes concurrently."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data
        self._lock = threading.Lock()

    @classmethod
    def create(
        cls, *, operation: str, context: str | None, namespace: str, requested: bool, changes: list[Change],
        reason: str | None, folder: Path | None = None,
    ) -> "Journal":
        folder = folder or journal_dir()
        folder.mkdir(parents=True, exist_ok=True)
        data = {
            "operation": operation,
            "context": context,
            "namespace": namespace,
            "request": "drain" if requested else "undrain",
            "reason": reason,
            "state": "applying",
            "startedAt": dt.datetime.now(dt.timezone.utc).isoformat(),
            "providers": {
                c.provider: {
                    "previous": c.previous,
                    "previousAnnotations": dict(c.previous_annotations),
                    "resourceVersion": c.resource_version,
                    "generation": c.generation,
                    "written": False,
                    "writtenGeneration": None,
                    "restored": None,
                }
                for c in changes
            },
        }
        journal = cls(folder / f"drain-{operation}.json", data)
        journal._flush()
        return journal

    @classmethod
    def load(cls, path: Path) -> "Journal":
        return cls(path, json.loads(path.read_text()))

    def _flush(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=2))
        os.replace(tmp, self.path)

    def record_write(self, provider: str, *, generation: int, change: Change | None = None) -> None:
        """Record a successful write; ``change`` updates the previous value if a re-read changed it."""
        with self._lock:
            entry = self.data["providers"][provider]
            entry["written"] = True
            if change is not None:
                entry["previous"] = change.previous
                entry["previousAnnotations"] = dict(change.previous_annotations)
                entry["resourceVersion"] = change.resource_version
            entry["writtenGeneration"] = generation
            self._flush()

    def record_restore(self, provider: str, outcome: str) -> None:
        with self._lock:
            self.data["providers"][provider]["restored"] = outcome
            self._flush()

    def set_state(self, state: str, **extra: Any) -> None:
        with self._lock:
            self.data["state"] = state
            self.data.update(extra)
            self._flush()

    def written(self) -> list[tuple[Change, int]]:
        """The changes this run actually made, with the generation each write produced."""
        out = []
        requested = self.data["request"] == "drain"
        for name, e in sorted(self.data["providers"].items()):
            if e["written"] and e.get("restored") not in ("restored", "already-at-previous-value"):
                out.append((Change(name, e["previous"], requested, e["resourceVersion"], e["generation"],
                                   e["previousAnnotations"]), int(e["writtenGeneration"] or 0)))
        return out
