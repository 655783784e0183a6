"""The one place a run asks its guards (:mod:`xtask.drain.guards`): every registered guard on
one :class:`~xtask.drain.snapshot.Snapshot`, what they say said, their verdicts returned as one
frozen :class:`~xtask.drain.results.Looked` (the conductor folds it into the run's results).

The conductor calls it under the drain locks before each wave's writes
(:mod:`xtask.drain.locked`) and, for the runs that look before the lock (a dry run, a plan, an
undrain, a drain in waves: :func:`xtask.drain.prepare.checked_once`), once in
:mod:`xtask.drain.prepare`.
"""

from __future__ import annotations

from xtask.drain.context import RunContext
from xtask.drain.guards import check_all
from xtask.drain.guards.base import Look, refusals_of
from xtask.drain.results import Looked
from xtask.drain.snapshot import Snapshot


def run_guards(ctx: RunContext, snapshot: Snapshot, look: Look) -> Looked:
    """Every guard's verdict on ``snapshot`` (their lines said)."""
    verdicts = check_all(snapshot, look)
    for v in verdicts:
        for line in v.said:
            ctx.say(line)
    return Looked(tuple(verdicts), look.where)


__all__ = ["Look", "Looked", "refusals_of", "run_guards"]
