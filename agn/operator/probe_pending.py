"""Provider statuses the prober has decided to write and the API has not taken yet.

A probe whose status calls for a write hands the write here and gives its slot back at once:
at fleet size the API server is the slow part, and a slot held across a status write is a
probe not running (docs/operator.md, "Transport"). The writes run on the prober's small thread
pool, at most one per provider at a time and in the order they were decided: a status decided
while an earlier write of the same provider is still running is written after it (only the
latest such one: it carries every change since, as a merge patch from the status then written).

Until its write is done, the decided status is the leader's truth about the provider: its
reconcile judges the provider by it (:meth:`agn.operator.prober.Prober.decided`) instead of
waiting for the write to come back, and the next probe of the provider is compared with it. A
write that failed keeps its status here (the probe did see it) but no longer counts as under
way, so the next probe writes it again. Only this process's own decisions are kept, for its
own term: a new term, or a provider deleted, forgets them.

No I/O here: the writes are the caller's functions, run on the caller's executor.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Executor

from agn.objects import Obj

Write = Callable[[], bool]  # writes one status; whether it was written


@dataclasses.dataclass(eq=False)
class _Entry:
    uid: str
    status: Obj  # the latest status decided for the provider
    running: bool  # a write of this entry is under way
    waiting: Write | None = None  # the write to run after it


class PendingStatuses:
    """Per provider, the last status decided and not yet written, and its writes. Thread-safe."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def submit(self, name: str, uid: str, status: Obj, write: Write) -> None:
        """``status`` is now provider ``name``'s decided status; ``write`` writes it, after any
        write of the same provider still running."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is not None and entry.uid == uid and entry.running:
                entry.status, entry.waiting = status, write
                return
            entry = self._entries[name] = _Entry(uid, status, running=True)
        self._executor.submit(self._run, name, entry, write)

    def _run(self, name: str, entry: _Entry, write: Write) -> None:
        written = False
        try:
            written = write()
        finally:
            with self._lock:
                follow = None
                if self._entries.get(name) is entry:  # not forgotten meanwhile
                    follow, entry.waiting = entry.waiting, None
                    if follow is None:
                        entry.running = False
                        if written:
                            del self._entries[name]  # the API holds it now
            if follow is not None:
                self._executor.submit(self._run, name, entry, follow)

    def basis(self, name: str, uid: str) -> Obj | None:
        """The status a write under way (or waiting) for ``name`` will leave in the API; None
        when none is under way."""
        with self._lock:
            entry = self._entries.get(name)
            return entry.status if entry is not None and entry.uid == uid and entry.running else None

    def busy(self, name: str) -> bool:
        """Whether a write of ``name``'s status is under way or waiting."""
        with self._lock:
            entry = self._entries.get(name)
            return entry is not None and entry.running

    def decided(self) -> dict[str, tuple[str, Obj]]:
        """Every provider's decided status not yet written: name -> (uid, status)."""
        with self._lock:
            return {name: (e.uid, e.status) for name, e in self._entries.items()}

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget the providers not in ``names`` (deleted ones; none: a new term). A write
        already running ends on its own; what it leaves is no longer kept here."""
        keep = set(names)
        with self._lock:
            for name in [n for n in self._entries if n not in keep]:
                del self._entries[name]
