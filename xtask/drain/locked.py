"""The writes of a run under the drain locks of its networks (:mod:`xtask.drain.core.lock`).

Before each wave's writes (a drain without ``--wave-size`` is one wave) the run takes the locks
of every network that selects a provider it changes, in sorted order, waiting up to
``--lock-timeout`` (exit 3 naming the holder when another run keeps one). Under the locks a
drain reads the providers and networks afresh and checks the budget (the networks' declared
``disruptionBudget`` and ``--max-unavailable``), the capacity guard and its targets again (a real
drain in one wave checks them only here: :func:`xtask.drain.prepare.checked_once`); only then does it
write, and it releases the locks once the wave's writes (and any restoration) are done. Waits
and soaks run without the locks: a drained provider is counted by every later check from the
moment its write lands, so holding the lock from check to write is what keeps two runs from
together exceeding a budget.

An undrain needs no budget; it takes the locks only to be ordered with the drains, so it waits
at most ``--lock-timeout`` as a drain does. A dry run and ``--plan-out`` never take them
(they report who holds them: :func:`xtask.drain.edges.lock.look_at_locks`).
"""

from __future__ import annotations

import os
import time
from typing import Any

from agn.kube import NETWORKS, PROVIDERS
from agn.objects import drain_of
from agn.operator.heartbeat import read_heartbeat
from xtask.drain.capacity_check import check_capacity
from xtask.drain.context import RunContext
from xtask.drain.core.budget import declares_budget, group_budgets
from xtask.drain.core.changes import Change
from xtask.drain.core.guard import Targets, target_refusals
from xtask.drain.core.lock import DEFAULT_TTL, run_identity
from xtask.drain.core.states import RunState
from xtask.drain.edges.lock import DrainLocks
from xtask.drain.edges.members import read_members
from xtask.drain.edges.targets import OverlayReader, read_targets
from xtask.drain.prepare import budget_report
from xtask.drain.record import RunRecord
from xtask.drain.report import Ending, RunResults
from xtask.drain.signals import SignalLatch
from xtask.errors import ExitCode

LOST = "the loss of the drain lock"  # how a run interrupted by a failed renewal says it


class LockedWrites:
    """Take the locks and check again before a wave's writes (:meth:`enter`), release after (:meth:`leave`)."""

    def __init__(
        self,
        ctx: RunContext,
        results: RunResults,
        networks: list[str],
        latch: SignalLatch,
        *,
        scope: dict[str, str] | None = None,
    ) -> None:
        self.ctx, self.results, self.networks, self.latch = ctx, results, networks, latch
        self.scope = scope  # the selection's groups when only their members are read (Prepared.scope)
        self.targets: Targets | None = None  # as the last check under the locks read them
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
        results.lock = self.report

    def _lost(self, why: str) -> None:
        self.report["lost"] = why
        self.ctx.say(f"{why}; stopping the writes")
        self.latch.trip(LOST)

    def enter(self, changes: list[Change], record: RunRecord, *, where: str) -> Ending | None:
        """Take the locks and check the wave ``where`` names under them; an Ending when the run
        must stop before writing (refused: exit 3, the locks given back; interrupted: exit 8)."""
        if not self.networks or not any(not c.already for c in changes):
            return None
        got = self.locks.acquire(self.networks, timeout=self.ctx.req.lock_timeout, stop=self.latch.interrupted)
        if isinstance(got, str):
            if not got:
                self.results.interrupted = self.latch.name
                return self._stop(record, f"interrupted by {self.latch.name} while waiting for the drain lock {where}")
            self.results.refused.append(got)
            return self._stop(record, f"refused {where}: {got}", ExitCode.REFUSED)
        self.report["acquisitions"] += [a.to_dict() for a in got]
        for a in got:
            taken = f" (taken over from {a.previous_holder}, last renewed {a.previous_renew_time})"
            self.ctx.say(f"drain lock: network {a.network} ({a.lease}){taken if a.previous_holder else ''}")
        refusals = self._recheck(changes, where) if self.ctx.req.drain else []
        if refusals:
            self.leave()
            self.results.refused += refusals
            return self._stop(record, f"refused {where}: " + "; ".join(refusals), ExitCode.REFUSED)
        return None

    def _stop(self, record: RunRecord, summary: str, code: ExitCode = ExitCode.INTERRUPTED) -> Ending:
        if record.journal is not None:
            record.enter(RunState.APPLIED_REFUSED if code is ExitCode.REFUSED else RunState.APPLIED_INTERRUPTED)
        return Ending(summary, code)

    def _recheck(self, changes: list[Change], where: str) -> list[str]:
        """The budget, the load-aware capacity guard and the last-provider guard on a fresh read,
        under the locks (``where``: before which wave)."""
        ctx, req = self.ctx, self.ctx.req
        # Read side by side (no write of this run is in flight under the locks yet).
        providers_read = ctx.pool.submit(self._read_providers)
        networks = ctx.kube.list(NETWORKS, ctx.namespace)[0]
        to_drain = [c.provider for c in changes if not c.already]
        targets = read_targets(ctx.kube, ctx.namespace, req, networks=networks) if req.network else None
        self.targets = targets
        providers = providers_read.result()
        heartbeat = targets.heartbeat if targets else read_heartbeat(ctx.kube, ctx.namespace)
        override = req.override_budget is not None
        rows = group_budgets(
            providers, networks, to_drain, req.max_unavailable, heartbeat=heartbeat, now=time.time(), override=override
        )
        budgeted = req.max_unavailable is not None or override or declares_budget(networks)
        refusals = budget_report(ctx, self.results, rows) if budgeted else []
        refusals += check_capacity(
            ctx,
            self.results,
            providers=providers,
            networks=networks,
            to_drain=to_drain,
            heartbeat=heartbeat,
            where=where,
        )
        if targets is not None:
            names = {c.provider for c in changes}
            selected = [p for p in providers if p["metadata"]["name"] in names]
            reader = OverlayReader(ctx.kube, ctx.namespace)
            elsewhere = [p for p in providers if drain_of(p) and p["metadata"]["name"] not in names]
            refusals += target_refusals(targets, req, selected, changes, reader, drained_elsewhere=elsewhere)
        return refusals

    def _read_providers(self) -> list[Any]:
        """The providers the checks weigh: the selection's groups when the run read only those
        (unless a selected provider left its group meanwhile), else every provider."""
        kube, namespace = self.ctx.kube, self.ctx.namespace
        if self.scope is not None:
            return read_members(kube, namespace, self.scope)
        return kube.list(PROVIDERS, namespace)[0]

    def leave(self) -> None:
        """Release the locks (the writes of the wave are done, or the run ends)."""
        problems = self.locks.release()
        for p in problems:
            self.ctx.say(f"warning: {p}")
        self.report["releaseProblems"] += problems
