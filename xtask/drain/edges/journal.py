"""The drain journal: a write-ahead log of one ``provider-drain`` run, as JSON Lines.

It exists so that after a crash, ``kill -9`` or a lost host an operator can see what a run
changed and undo it with ``python -m xtask env drain-restore JOURNAL``. One record per line:

``header``   first line, once: format, operation id, context, namespace, request, reason, and
             the plan (per provider: previous value and annotations, resourceVersion, generation)
``intent``   before each PATCH: the resourceVersion and generation the patch is conditional on
             (plus the re-read previous value when a 409 made the run plan that provider again)
``done``     after a PATCH succeeded: the generation it produced
``failed``   after a PATCH was answered with an error: the HTTP status
``restore``  one restoration outcome (by the run itself or by ``drain-restore``)
``state``    the run's state: applying, restoring, restored, waiting, complete, needs-inspection, …
``wave``     a drain in waves (``--wave-size``): one wave's progress (written, converged, soaked
             with the gates' readings, held or breached); the header then lists every wave's
             providers (``waves``: the providers to change, in selection order) and the whole
             selection (``selection``, already-in-state ones included)

Appends are O(1) and never block one another longer than one ``write(2)``. Durability: the
fan-out appends the intents of every request it is about to send and syncs once before
sending them (group commit), which also makes every earlier line durable; the run syncs again
before it reports any outcome. The folder is synced once when the file is created.

:func:`replay` folds the lines into one :class:`Entry` per provider. An intent without a
``done`` or a definite ``failed`` means "may have been written": restoration then decides from
the object itself (our ``agn.dev/drain-operation`` annotation, the generation our write would
have produced, and the value). A torn last line (a crash mid-append) is ignored; a bad line
anywhere else is an error.

This module owns the file (creating, appending, syncing, reading); the records and their replay
are :mod:`xtask.drain.core.journal_records`. It never talks to the API server.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agn.inputfile import JOURNAL_LIMIT, read_regular
from xtask.drain.core.changes import Change
from xtask.drain.core.journal_records import (
    JournalError,
    JournalHeader,
    JournalReplay,
    apply_record,
    intent_record,
    replay,
    state_from_header,
)
from xtask.drain.core.states import RestoreOutcome, RunState, WaveState
from xtask.drain.edges.journal_staging import staged_path, sweep_leftovers

__all__ = ["Journal", "JournalError", "JournalHeader", "JournalReplay", "journal_dir", "read_journal", "replay"]

SUFFIX = ".jsonl"
# What link(2) answers on a filesystem without hard links (vfat, some network and FUSE mounts):
# the journal is then created under its name exclusively (Journal.create).
NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.ENOSYS})


def journal_dir() -> Path:
    explicit = os.environ.get("AGN_XTASK_JOURNAL_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "agn-xtask" / "journal"


def now_text() -> str:
    """A record's time: UTC, ISO 8601 (this edge's clock; the core's records take it as ``now``)."""
    return dt.datetime.now(dt.UTC).isoformat()


def new_operation_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


# -- the file --------------------------------------------------------------------------------------
def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    """One run's journal file, appended to by the fan-out's workers concurrently."""

    def __init__(self, path: Path, state: JournalReplay, fd: int) -> None:
        self.path = path
        self.state = state
        self._fd: int | None = fd  # None once closed
        self._lock = threading.Lock()  # held for one state update + one write(2)
        self._sync_lock = threading.Lock()
        self.bytes_written = 0
        self.leftovers: list[str] = []  # what creating it did with staging files earlier runs left

    @classmethod
    def create(cls, header: JournalHeader, *, folder: Path | None = None) -> Journal:
        """A new journal in ``folder`` whose first line is ``header``, durable before it returns.

        The header is written to a hidden file first (:mod:`~xtask.drain.edges.journal_staging`,
        which also removes the stale ones earlier runs left: :attr:`leftovers` says what it did)
        and linked in under the journal's name once it is on disk, so a reader (another run
        listing journals, ``drain-restore``) never finds a journal without its header; the link
        fails as ``O_EXCL`` would if the name is taken. Where the filesystem has no hard links
        (:data:`NO_HARD_LINKS`), the journal's name is created exclusively and the header written
        and synced there: a reader may then briefly find it without a complete header, and
        refuses it as such."""
        folder = folder or journal_dir()
        path = folder / f"drain-{header.operation}{SUFFIX}"
        record = header.record(now=now_text())
        try:
            folder.mkdir(parents=True, exist_ok=True)
            leftovers = sweep_leftovers(folder)
            staged = staged_path(path)
            fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise _cannot_create(folder, exc) from exc
        journal = cls(path, state_from_header(record), fd)
        journal.leftovers = leftovers
        try:
            journal._write_line(record)
            journal.sync()
            try:
                os.link(staged, path)
            except OSError as exc:
                if exc.errno not in NO_HARD_LINKS:
                    raise
                journal._recreate_at(path, record)
        except OSError as exc:
            if journal._fd is not None:
                os.close(journal._fd)  # not synced: nothing in it is kept
                journal._fd = None
            raise _cannot_create(folder, exc) from exc
        finally:
            staged.unlink(missing_ok=True)
        _fsync_dir(folder)
        return journal

    def _recreate_at(self, path: Path, record: Mapping[str, Any]) -> None:
        """Write the header again to ``path``, created exclusively, and append there from now on
        (a filesystem without hard links). A failed write removes what it created."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self.bytes_written = fd, 0
        try:
            self._write_line(record)
            self.sync()
        except OSError:
            path.unlink(missing_ok=True)
            raise

    @classmethod
    def open(cls, path: Path) -> Journal:
        """An existing journal, replayed, ready for ``drain-restore`` to append its outcomes."""
        try:
            raw = read_regular(path, limit=JOURNAL_LIMIT)
        except OSError as exc:
            raise JournalError(f"{path}: cannot read the drain journal: {exc.strerror or exc}") from exc
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JournalError(f"{path}: not a drain journal: not UTF-8 text") from exc
        state = replay(text, source=str(path))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        except OSError as exc:
            raise JournalError(f"{path}: cannot append to the drain journal: {exc.strerror or exc}") from exc
        if state.torn_tail:
            # Drop the torn record so the next append starts on a line of its own.
            os.ftruncate(fd, text.rfind("\n") + 1 if "\n" in text else 0)
        return cls(path, state, fd)

    # -- appends ---------------------------------------------------------------------------------
    def _write_line(self, rec: Mapping[str, Any]) -> None:
        data = (json.dumps(rec, separators=(",", ":")) + "\n").encode()
        assert self._fd is not None, "appending to a closed journal"
        os.write(self._fd, data)
        self.bytes_written += len(data)

    def _append(self, rec: Mapping[str, Any]) -> None:
        with self._lock:
            apply_record(self.state, rec)
            self._write_line(rec)

    def intents(self, changes: list[Change], *, replanned: bool = False) -> None:
        """Record that PATCHes for ``changes`` are about to be sent, and make it durable."""
        for change in changes:
            self._append(intent_record(change, replanned=replanned))
        self.sync()

    def done(self, provider: str, *, generation: int) -> None:
        self._append({"type": "done", "provider": provider, "generation": generation})

    def failed(self, provider: str, *, status: int) -> None:
        self._append({"type": "failed", "provider": provider, "status": status})

    def restored(self, provider: str, outcome: RestoreOutcome) -> None:
        self._append({"type": "restore", "provider": provider, "outcome": outcome, "at": now_text()})

    def wave(self, number: int, state: WaveState, **details: Any) -> None:
        """Record how far wave ``number`` got (with e.g. the gates' readings) and make it durable."""
        self._append({"type": "wave", "wave": number, "state": state, **details, "at": now_text()})
        self.sync()

    def set_state(self, state: RunState) -> None:
        self._append({"type": "state", "state": state, "at": now_text()})
        self.sync()

    def sync(self) -> None:
        """Make every appended line durable (one fsync covers all of them)."""
        if self._fd is None:
            return
        with self._sync_lock:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            self.sync()
            os.close(self._fd)
            self._fd = None

    # -- reading -----------------------------------------------------------------------------------
    def to_restore(self) -> list[tuple[Change, int]]:
        with self._lock:
            return self.state.to_restore()

    def changed_names(self) -> list[str]:
        """Providers this run may have changed (for messages after a second signal)."""
        with self._lock:
            return sorted(n for n, e in self.state.entries.items() if e.maybe_written)


def _cannot_create(folder: Path, exc: OSError) -> JournalError:
    return JournalError(
        f"cannot create the drain journal in {folder}: {exc.strerror or exc}",
        hint="choose a writable folder with --journal-dir or AGN_XTASK_JOURNAL_DIR",
    )


def read_journal(path: Path) -> JournalReplay:
    """Replay a journal file without opening it for writing."""
    try:
        text = read_regular(path, limit=JOURNAL_LIMIT).decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise JournalError(f"{path}: cannot read the drain journal: {exc}") from exc
    return replay(text, source=str(path))
