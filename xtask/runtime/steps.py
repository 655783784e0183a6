"""Bring-up as an ordered list of steps, each with an undo (kind's ``create`` + ``--retain``).

If a step fails, the undos of the steps that already ran are executed in reverse order
(unless ``retain``), every undo error is collected, and the original error is re-raised.
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
            step.run()
            done.append(step)
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
