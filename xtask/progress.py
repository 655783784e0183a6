"""How long work (a bring-up, an image build) says how far it got: one line at a time, through
a :data:`Progress` callable, so the caller decides where lines go. (A drain run's progress is
typed events instead: :mod:`xtask.drain.core.progress`.)
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
