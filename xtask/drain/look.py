"""The one place a run asks its guards (:mod:`xtask.drain.guards`): every registered guard on
one :class:`~xtask.drain.snapshot.Snapshot`, what they say said, their verdicts folded into the
run's results (:meth:`~xtask.drain.report.RunResults.fold_verdicts`), their refusals returned.

The conductor calls it under the drain locks before each wave's writes
(:mod:`xtask.drain.locked`) and, for the runs that look before the lock (a dry run, a plan, an
undrain, a drain in waves: :func:`xtask.drain.prepare.looks_first`), once in
:mod:`xtask.drain.prepare`.
"""

from __future__ import annotations

from xtask.drain.context import RunContext
from xtask.drain.guards import check_all
from xtask.drain.guards.base import Look, Verdict, refusals_of
from xtask.drain.report import RunResults
from xtask.drain.snapshot import Snapshot


def run_guards(ctx: RunContext, results: RunResults, snapshot: Snapshot, look: Look) -> list[Verdict]:
    """Every guard's verdict on ``snapshot`` (their lines said, their verdicts in ``results``)."""
    verdicts = check_all(snapshot, look)
    for v in verdicts:
        for line in v.said:
            ctx.say(line)
    results.fold_verdicts(verdicts, where=look.where)
    return verdicts


__all__ = ["Look", "refusals_of", "run_guards"]
