"""The writes of a run under the drain locks of its networks (:mod:`xtask.drain.core.lock`).

Before each wave's writes (a drain without ``--wave-size`` is one wave) the run takes the locks
of every network that selects a provider it changes, in sorted order, waiting up to
``--lock-timeout`` (exit 3 naming the holder when another run keeps one). Under the locks a
drain reads one snapshot (:class:`~xtask.drain.snapshot.Snapshot`: the selection's groups, the
networks, the targets) and runs every guard of :mod:`xtask.drain.guards` on it
(:func:`xtask.drain.look.run_guards`; a real drain in one wave looks only here:
:func:`xtask.drain.prepare.checked_once`); the same snapshot serves the writes and the wait
that follow (:attr:`LockedWrites.snapshot`). Only then does it write, and it releases the locks once the wave's writes (and any restoration) are done. Waits
and soaks run without the locks: a drained provider is counted by every later check from the
moment its write lands, so holding the lock from check to write is what keeps two runs from
together exceeding a budget.

An undrain needs no budget; it takes the locks only to be ordered with the drains, so it waits
at most ``--lock-timeout`` as a drain does. A dry run and ``--plan-out`` never take them
(they report who holds them: :func:`xtask.drain.edges.lock.look_at_locks`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from xtask.drain.context import RunContext
from xtask.drain.core.changes import Change
from xtask.drain.core.lock import DEFAULT_TTL, run_identity
from xtask.drain.core.states import RunState
from xtask.drain.edges.lock import DrainLocks
from xtask.drain.look import Look, Looked, refusals_of, run_guards
from xtask.drain.record import RunRecord
from xtask.drain.report import Ending
from xtask.drain.results import Interrupted, LocksSeen, Refused, Step
from xtask.drain.signals import SignalLatch
from xtask.drain.snapshot import Snapshot
from xtask.record import Record

LOST = "the loss of the drain lock"  # how a run interrupted by a failed renewal says it


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Entered(Record):
    """What taking the locks and the look under them decided: the run's end when it must stop
    before writing (None: write), and what it found (the look, a refusal, an interruption)."""

    ending: Ending | None = None
    steps: tuple[Step, ...] = ()


class LockedWrites:
    """Take the locks and check again before a wave's writes (:meth:`enter`), release after (:meth:`leave`)."""

    def __init__(
        self,
        ctx: RunContext,
        networks: list[str],
        latch: SignalLatch,
        *,
        scope: dict[str, str] | None = None,
        network_objs: list[Any] | None = None,
    ) -> None:
        self.ctx, self.networks, self.latch = ctx, networks, latch
        self._network_objs = network_objs  # read just before the first lock: its look reuses them
        self.scope = scope  # the selection's groups when only their members are read (Prepared.scope)
        self.snapshot: Snapshot | None = None  # the last look under the locks
        identity = run_identity(actor=ctx.actor, pid=os.getpid(), operation=ctx.operation)
        self.locks = DrainLocks(
            ctx.kube, ctx.namespace, identity=identity, ttl=DEFAULT_TTL, progress=ctx.progress, on_lost=self._lost
        )
        self.report: dict[str, Any] = {
            "identity": identity,
            "networks": networks,
            "ttlSeconds": DEFAULT_TTL,
            "timeoutSeconds": ctx.req.lock_timeout,
            "acquisitions": [],
            "lost": None,
            "releaseProblems": [],
        }

    def seen(self) -> LocksSeen:
        """The report's ``lock`` as it stands (each acquisition, a loss, release problems)."""
        return LocksSeen({**self.report, "acquisitions": list(self.report["acquisitions"])})

    def _lost(self, why: str) -> None:
        self.report["lost"] = why
        self.ctx.say(f"{why}; stopping the writes")
        self.latch.trip(LOST)

    def enter(
        self,
        changes: list[Change],
        record: RunRecord,
        *,
        where: str,
        earlier: Mapping[str, Any] | None = None,
        written: bool = False,
    ) -> Entered:
        """Take the locks and check the wave ``where`` names under them (``earlier``: the report
        sections of the looks before; ``written``: this run wrote before); the run's end when it
        must stop before writing (refused: exit 3, the locks given back; interrupted: exit 8)."""
        self.snapshot = None  # this wave's look, if it takes one
        if not self.networks or not any(not c.already for c in changes):
            return Entered()
        got = self.locks.acquire(self.networks, timeout=self.ctx.req.lock_timeout, stop=self.latch.interrupted)
        if isinstance(got, str):
            if not got:
                why = f"interrupted by {self.latch.name} while waiting for the drain lock {where}"
                return Entered(self._stop(record, why), (Interrupted(self.latch.name),))
            return Entered(self._stop(record, f"refused {where}: {got}", refused=True), (Refused((got,)),))
        self.report["acquisitions"] = [*self.report["acquisitions"], *(a.to_dict() for a in got)]
        for a in got:
            taken = f" (taken over from {a.previous_holder}, last renewed {a.previous_renew_time})"
            self.ctx.say(f"drain lock: network {a.network} ({a.lease}){taken if a.previous_holder else ''}")
        if not self.ctx.req.drain:
            return Entered()
        looked = self._recheck(changes, where, earlier or {}, written=written)
        refusals = refusals_of(looked.verdicts)
        if refusals:
            self.leave()
            ending = self._stop(record, f"refused {where}: " + "; ".join(refusals), refused=True)
            return Entered(ending, (looked, Refused(tuple(refusals))))
        return Entered(None, (looked,))

    def _stop(self, record: RunRecord, summary: str, *, refused: bool = False) -> Ending:
        if record.journal is not None:
            record.enter(RunState.APPLIED_REFUSED if refused else RunState.APPLIED_INTERRUPTED)
        return Ending(summary)

    def _recheck(self, changes: list[Change], where: str, earlier: Mapping[str, Any], *, written: bool) -> Looked:
        """Every guard on one snapshot read under the locks (``where``: before which wave)."""
        ctx = self.ctx
        snapshot = Snapshot(ctx.kube, ctx.namespace, ctx.req, scope=self.scope, networks=self._network_objs)
        self._network_objs = None  # a later wave reads them afresh
        snapshot.read_ahead(ctx.pool, drain=True)  # no write of this run is in flight under the locks yet
        self.snapshot = snapshot
        look = Look(ctx.req, tuple(changes), ctx.hold_key, where, under_lock=True, earlier=earlier, written=written)
        return run_guards(ctx, snapshot, look)

    def leave(self) -> None:
        """Release the locks (the writes of the wave are done, or the run ends)."""
        problems = self.locks.release()
        for p in problems:
            self.ctx.say(f"warning: {p}")
        self.report["releaseProblems"] = [*self.report["releaseProblems"], *problems]
