"""Bring-up as an ordered list of steps, each with an undo (kind's ``create`` + ``--retain``).

If a step fails, its own undo (it may have done part of its work) and then the undos of the
steps that already ran are executed in reverse order (unless ``retain``); undo errors are
reported, never mask the original error, which is re-raised. Undos must therefore tolerate
work that was only partly done.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

Progress = Callable[[str], None]


@dataclasses.dataclass
class Step:
    title: str
    run: Callable[[], object]
    undo: Callable[[], object] | None = None


def run_steps(steps: list[Step], *, progress: Progress, retain: bool = False) -> list[str]:
    """Run ``steps`` in order; returns the titles of those that ran. Rolls back on failure."""
    done: list[Step] = []
    try:
        for step in steps:
            progress(step.title)
            done.append(step)
            step.run()
    except BaseException:
        if not retain:
            for step in reversed(done):
                if step.undo is None:
                    continue
                try:
                    step.undo()
                except Exception as exc:  # collected, never masks the original failure
                    progress(f"rollback of {step.title!r} failed: {exc}")
        raise
    return [s.title for s in done]
