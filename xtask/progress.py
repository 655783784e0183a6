"""How long work (a bring-up, an image build) says how far it got: one line at a time, through
a :data:`Progress` callable, so the caller decides where lines go. (A drain run's progress is
typed events instead: :mod:`xtask.drain.core.progress`.)

A bring-up's steps (:func:`xtask.runtime.steps.run_steps`) also say where each step starts and
ends, through a :class:`StepReporter`: by default as the same lines (a step's title when it
starts, ``TITLE: already done`` when its check passed), which scripts and tests read; a live
view on a terminal (``env up``'s spinner, ✓/✗ and times) is a subclass the CLI passes in.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

Progress = Callable[[str], None]


def to_stderr(prefix: str) -> Progress:
    """Lines on stderr, each after ``prefix: `` (a script's own name)."""

    def say(message: str) -> None:
        print(f"{prefix}: {message}", file=sys.stderr, flush=True)

    return say


class StepReporter:
    """Where a run of steps is, told to ``say`` as lines; also a :data:`Progress` itself (a
    runtime passes it on unchanged). Subclasses show steps otherwise and may ignore ``say``."""

    def __init__(self, say: Progress) -> None:
        self.say = say

    def __call__(self, message: str) -> None:
        """A line that belongs to no step's start or end (a rollback, an undo that failed)."""
        self.say(message)

    def skipped(self, title: str) -> None:
        """The step's check passed: nothing to do."""
        self.say(f"{title}: already done")

    def started(self, title: str) -> None:
        self.say(title)

    def finished(self, title: str, seconds: float) -> None:
        """The step ran to its end in ``seconds`` (the plain lines do not say so)."""

    def failed(self, title: str, seconds: float) -> None:
        """The step raised (or was interrupted) after ``seconds``; the error is reported by the caller."""

    def close(self) -> None:
        """The run is over: a live view stops."""


def step_reporter(progress: Progress) -> StepReporter:
    """``progress`` as a :class:`StepReporter`: itself if it is one, else its lines."""
    return progress if isinstance(progress, StepReporter) else StepReporter(progress)
