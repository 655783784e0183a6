"""The record of one run: its journal, and the one place that moves the run's state.

Every ``state`` and ``wave`` record a run appends goes through :class:`RunRecord` (the fan-out
and the restorations append their per-provider records to the same journal). A run without a
journal (nothing to write, a dry run, a plan) has a record whose transitions do nothing, so the
conductor never asks whether there is one.

Must not: decide a state (the conductor and :class:`~xtask.drain.core.states.RunState` do), or
talk to the API server.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from xtask.drain.core.changes import Change
from xtask.drain.core.states import RunState, WaveState
from xtask.drain.edges.journal import Journal


class RunRecord:
    """A run's journal (once it has one) and its transitions."""

    def __init__(self, journal: Journal | None = None) -> None:
        self.journal = journal

    @property
    def path(self) -> Path | None:
        return self.journal.path if self.journal is not None else None

    def enter(self, state: RunState) -> None:
        """The run is now in ``state`` (durable before this returns)."""
        if self.journal is not None:
            self.journal.set_state(state)

    def wave(self, number: int, state: WaveState, **details: Any) -> None:
        """Wave ``number`` reached ``state`` (durable before this returns)."""
        if self.journal is not None:
            self.journal.wave(number, state, **details)

    def restored(self, outcomes: Iterable[str]) -> None:
        """The restorations are done: restored, or needs inspection when one did not go as it should."""
        self.enter(RunState.after_restoring(list(outcomes)))

    def to_restore(self) -> list[tuple[Change, int]]:
        return self.journal.to_restore() if self.journal is not None else []

    def changed_names(self) -> list[str]:
        return self.journal.changed_names() if self.journal is not None else []

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
