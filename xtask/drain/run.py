"""One ``provider-drain`` run as one pipeline of phases over one :class:`RunContext`:

1. **prepare** (:mod:`xtask.drain.prepare`): select, plan, look (every guard of
   :mod:`xtask.drain.guards` on one snapshot; a real drain in one wave looks only under the
   drain locks, :mod:`xtask.drain.locked`, and creates its journal once they pass), plan the
   waves and their gates, server-side dry run;
2. per wave — a drain without ``--wave-size`` is *one wave without gates* — **write** (the
   fan-out; on a failed write or a signal: **restore**, the one restore path in
   :mod:`xtask.drain.restore`), **wait** until every named consumer serves it, and **soak**
   while its gates are read (a breach stops the run before the next wave);
3. the end: read back the stored state (no targets), or wait for idle (``--wait-idle``).

Each phase returns frozen results (:mod:`xtask.drain.results`) and, when it ends the run, an
:class:`~xtask.drain.report.Ending` (the run's last line); the conductor folds each result into
one :class:`~xtask.drain.results.RunResults` in one place (:meth:`_DrainRun.keep`, through
:func:`xtask.drain.results.fold`), the report is built from it once, and its exit code is
:func:`xtask.drain.report.exit_code`'s reading of it. The
journal's transitions go through one :class:`~xtask.drain.record.RunRecord`. This module
conducts; it decides nothing the modules it calls decide, and it prints nothing: it emits
:mod:`progress events <xtask.drain.core.progress>`. Only usage and connection problems raise.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import sys
import time
from typing import TYPE_CHECKING, Any

from agn.kube import CONNECT_TIMEOUT, READ_TIMEOUT, Kube
from xtask.drain.context import RunContext, namespace_of, open_context
from xtask.drain.core.changes import Change
from xtask.drain.core.guard import Targets
from xtask.drain.core.holds import describe_update
from xtask.drain.core.journal_records import JournalHeader
from xtask.drain.core.progress import Progress
from xtask.drain.core.request import FIELD_MANAGER, DrainRequest
from xtask.drain.core.states import RunState, WaitState, WaveState, WriteOutcome
from xtask.drain.edges.fanout import FanOut
from xtask.drain.edges.journal import Journal
from xtask.drain.edges.kube_events import DRAINED, UNDRAINED, Fact, outcome_facts
from xtask.drain.edges.waiter import ConvergenceWaiter, WaitResult
from xtask.drain.finish import end_after_wait, note_still_held, read_back, wait_idle, wait_sessions
from xtask.drain.gates.base import GateReading
from xtask.drain.locked import LockedWrites
from xtask.drain.prepare import Prepared, dry_run_before_writing, prepare
from xtask.drain.record import RunRecord
from xtask.drain.render import convergence_dict, not_eligible_summary, restoration_summary, wait_summary
from xtask.drain.report import Ending, Report, build_report
from xtask.drain.results import (
    Interrupted,
    Journaled,
    Refused,
    RestoredAll,
    RunResults,
    Step,
    Waited,
    WaveResult,
    WaveStep,
    Written,
    fold,
)
from xtask.drain.signals import SignalLatch
from xtask.drain.waveplan import WavePlan
from xtask.errors import ExitCode

if TYPE_CHECKING:
    from xtask.drain.restore import Restored


def run_drain(req: DrainRequest, *, progress: Progress) -> Report:
    """Run one drain or undrain from start to finish; the report carries the exit code."""
    started = time.monotonic()
    kube = Kube.from_kubeconfig(
        kubeconfig=req.kubeconfig,
        context=req.context,
        field_manager=FIELD_MANAGER,
        # --concurrency writes (later: as many Events), the waiters' four watches, and two spare:
        # a request beyond the pool would open a connection that urllib3 discards with a warning.
        pool_size=req.concurrency + 6,
        # --timeout bounds the whole command: no single request may wait longer than it.
        request_timeout=(CONNECT_TIMEOUT, min(READ_TIMEOUT, req.timeout)),
    )
    try:
        namespace = namespace_of(req, kube)
        # One pool for the dry run, the writes and any restoration, sized like the HTTP pool.
        with cf.ThreadPoolExecutor(max_workers=req.concurrency, thread_name_prefix="drain") as pool:
            ctx = open_context(req, kube, namespace, pool, progress)
            run = _DrainRun(ctx)
            with SignalLatch(on_second=run.on_second_signal, second_exit_code=int(ExitCode.NEEDS_INSPECTION)) as latch:
                try:
                    ending = run.execute(latch)
                finally:
                    not_recorded = ctx.events.close()
                    run.record.close()
                events = {"recorded": ctx.events.recorded, "notRecorded": not_recorded}
                return build_report(run.results, ending, events=events, total_seconds=time.monotonic() - started)
    finally:
        kube.close()


class _DrainRun:
    """The phases of one run, in order; a phase that ends the run returns an :class:`Ending`."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.req = ctx.req
        self.record = RunRecord()
        self.results = RunResults(
            context=ctx.req.context,
            namespace=ctx.namespace,
            request="drain" if ctx.req.drain else "undrain",
            selector=ctx.req.selector.describe(),
            dry_run=ctx.req.dry_run,
            holder=ctx.holder,
        )  # changed only by keep
        self.plan = WavePlan((), ())  # the waves run (one without --wave-size): set by begin
        self.last_wait: WaitResult | None = None
        self.targets: Targets | None = None
        self.locked: LockedWrites | None = None
        self.journal_todo: list[Change] | None = None  # a journal to create under the locks

    def keep(self, *steps: Step | None) -> None:
        """Fold what a phase returned into the run's results: the one place they change."""
        for step in steps:
            if step is not None:
                self.results = fold(self.results, step)

    def on_second_signal(self, signum: int) -> None:
        changed = self.record.changed_names()
        path = self.record.path
        sys.stderr.write(
            "\nsecond signal: stopping at once. Providers changed by this run may need inspection: "
            f"{', '.join(changed) or 'none recorded'}\n"
            + (f"journal: {path}\nrestore with: python -m xtask env drain-restore {path}\n" if path else "")
        )
        sys.stderr.flush()
        if self.locked is not None:  # best effort: otherwise the next run waits for the lock to expire
            self.locked.leave()

    # -- the pipeline ------------------------------------------------------------------------------
    def execute(self, latch: SignalLatch) -> Ending:
        prepared = prepare(self.ctx)
        self.keep(*prepared.steps)
        if prepared.ending is not None:
            return prepared.ending
        self.ctx.events.know(prepared.selected)  # their uids: no Event needs a GET
        if latch.interrupted.is_set():
            self.keep(Interrupted(latch.name))
            return Ending(f"interrupted by {latch.name} before any write")
        first = self.begin(prepared)
        self.locked = LockedWrites(
            self.ctx, prepared.networks, latch, scope=prepared.scope, network_objs=prepared.network_objs
        )
        self.keep(self.locked.seen())
        try:
            return self.waves_and_end(first, latch)
        finally:
            self.leave()  # every exit path (an exception, a signal) gives the locks back

    def waves_and_end(self, first: int, latch: SignalLatch) -> Ending:
        for wave, changes in zip(self.plan.waves, self.plan.changes, strict=True):
            if wave.number < first:
                self.keep(WaveStep(wave.number, state=WaveState.PASSED, earlier=True))
                continue
            if wave.number > first and latch.interrupted.is_set():  # between two waves: the finished ones stay
                return self.stopped_between_waves(wave.number, latch)
            ending = self.one_wave(wave, list(changes), latch)
            if ending is not None:
                return ending
        return self.end(latch)

    def begin(self, prepared: Prepared) -> int:
        """The waves to run (one of every change without --wave-size), the first one to run, and
        the journal."""
        self.targets = prepared.targets
        changes = prepared.changes
        self.plan = WavePlan.of(changes, waves=self.results.waves, gates=prepared.gates, req=self.req)
        todo = [c for c in changes if not c.already]
        if not prepared.looked:  # never in waves (checked_once)
            self.journal_todo = todo  # created once the checks under the lock pass (locked_write)
            return 1
        return self.open_journal(todo)

    def open_journal(self, todo: list[Change]) -> int:
        """Create the journal (or reopen the one resumed); the number of the first wave to run."""
        req, ctx = self.req, self.ctx
        if ctx.resumed is not None:  # --resume: a drain in waves
            assert req.resume is not None
            self.record = RunRecord(Journal.open(req.resume))
            first = ctx.resumed.first_unfinished_wave()
            ctx.say(f"resuming {self.record.path} at wave {first} of {self.plan.total}")
        elif todo:
            header = JournalHeader(
                operation=ctx.operation,
                context=req.context,
                namespace=ctx.namespace,
                requested=req.drain,
                changes=todo,
                reason=req.reason,
                plan_digest=req.plan.digest if req.plan is not None else None,
                **self.plan.journal_fields(self.results.selection),
                budget_override=req.override_budget,
                capacity_override=(self.results.capacity or {}).get("overridden"),
            )
            journal = Journal.create(header, folder=req.journal_dir)
            for line in journal.leftovers:  # stale staging files of runs killed while creating theirs
                ctx.say(line)
            self.record = RunRecord(journal)
            ctx.say(f"journal: {self.record.path}")
            first = 1
        else:
            ctx.say("every selected provider is already in the requested state; nothing to write")
            first = 1
        self.keep(Journaled(str(self.record.path) if self.record.path else None))
        return first

    def one_wave(self, wave: WaveResult, changes: list[Change], latch: SignalLatch) -> Ending | None:
        """Write one wave, wait until it converges, soak it; an Ending stops the run."""
        self.plan.begin(wave, self.record, self.ctx.progress)
        # An undrain leaves a provider another holder still holds drained: nothing to wait for there.
        awaited = [c.provider for c in changes if not c.keep_drain]
        waiter = self.new_waiter(awaited) if self.req.network and awaited else None
        try:
            ending = self.locked_write(wave, changes, latch, waiter)
            if ending is not None:
                return ending
            if waiter is not None and self.targets is not None:
                waiter.know_network(self.targets.network)
            if not self.req.drain:
                self.keep(note_still_held(self.ctx, list(wave.providers)))
            self.mark(wave, WaveState.WRITTEN)
            if waiter is not None:
                ending = self.wait(wave, waiter, latch)
                if ending is not None:
                    return ending
        finally:
            if waiter is not None:
                waiter.close()
        self.mark(wave, WaveState.CONVERGED)
        return self.gate(wave, latch)

    def new_waiter(self, awaited: list[str]) -> ConvergenceWaiter:
        """The wave's waiter, started before the writes (:meth:`start_waiter`)."""
        req = self.req
        return ConvergenceWaiter(
            self.ctx.kube,
            self.ctx.namespace,
            providers=awaited,
            network=str(req.network),
            consumers=list(req.consumers),
            drain=req.drain,
            progress=self.ctx.progress,
            network_obj=self.targets.network if self.targets else None,
        )

    def start_waiter(self, waiter: ConvergenceWaiter) -> None:
        """Watch before writing. After a look under the locks, the watches start from the lists
        it read (the group's providers, consumers, overlay indexes, heartbeat: their
        resourceVersions, so no change since that look is missed) with the shards the guards
        read; any kind it did not list (an undrain looks at none) is listed by the waiter."""
        snapshot = self.locked.snapshot if self.locked is not None else None
        if snapshot is None:
            waiter.start()
        else:
            waiter.start(seen=snapshot.listed(), shards=snapshot.shards())

    def mark(self, wave: WaveResult, state: WaveState, **details: Any) -> None:
        """Wave ``wave`` reached ``state`` (shown for a drain in waves: :meth:`WavePlan.mark`)."""
        self.keep(self.plan.mark(wave, state, self.record, self.ctx.progress, **details))

    # -- write: journal, fan-out, restoration on failure or interrupt -------------------------------
    def locked_write(
        self, wave: WaveResult, changes: list[Change], latch: SignalLatch, waiter: ConvergenceWaiter | None
    ) -> Ending | None:
        """Write one wave under the drain locks, checked again under them (:mod:`xtask.drain.locked`);
        ``waiter`` starts between that look and the writes."""
        assert self.locked is not None
        earlier = {"capacity": self.results.capacity} if self.results.capacity else {}
        written = bool(self.results.outcomes)  # a later wave: this run's writes are in its look
        entered = self.locked.enter(changes, self.record, where=self.plan.where(wave), earlier=earlier, written=written)
        self.keep(*entered.steps, self.locked.seen())
        ending = entered.ending
        if ending is not None:
            if wave.number > 1:
                ending = dataclasses.replace(ending, summary=ending.summary + "; the waves written so far are kept")
            return ending
        if self.targets is None and self.locked.snapshot is not None:
            self.targets = self.locked.snapshot.targets  # read under the locks (a drain checked once)
        try:
            if self.journal_todo is not None:  # a real drain in one wave: its dry run under the locks too
                checked, ending = dry_run_before_writing(self.ctx, changes)
                self.keep(*checked)
                if ending is not None:
                    return ending
            if waiter is not None:
                self.start_waiter(waiter)
            if self.journal_todo is not None:
                self.open_journal(self.journal_todo)
                self.journal_todo = None
            return self.write(changes, latch)
        finally:
            self.leave()

    def leave(self) -> None:
        """Give the drain locks back; what they did is in the report's ``lock``."""
        if self.locked is not None:
            self.locked.leave()
            self.keep(self.locked.seen())

    def write(self, changes: list[Change], latch: SignalLatch) -> Ending | None:
        req, ctx = self.req, self.ctx
        started = time.monotonic()
        outcomes = FanOut(
            kube=ctx.kube,
            namespace=ctx.namespace,
            patch_for=ctx.patch_for,
            pool=ctx.pool,
            concurrency=req.concurrency,
            qps=req.qps,
            journal=self.record.journal,
            progress=ctx.progress,
            # A plan is applied exactly: a provider written by someone else since is a failure
            # (everything this run changed is then restored), never planned again.
            replan=req.plan is None,
        ).write(changes, stop=latch.interrupted)
        applied = {"applySeconds": time.monotonic() - started}
        facts = self._hold_details(outcome_facts(outcomes, drain=req.drain), changes)
        written_at = time.time()
        failed = [o for o in outcomes if o.outcome == WriteOutcome.FAILED]
        # A signal that lands while this run has written anything counts as "during the fan-out".
        interrupted = latch.interrupted.is_set() and (
            self.record.journal is not None or any(o.outcome == WriteOutcome.NOT_ATTEMPTED for o in outcomes)
        )
        self.keep(Written(tuple(outcomes), applied, interrupted=latch.name if interrupted else None))
        override = self.results.capacity_override
        if not (failed or interrupted):
            ctx.events.record(facts, capacity_override=override)
            return None
        why = f"interrupted by {latch.name}" if interrupted else f"{len(failed)} write(s) failed"
        restored = self.restore(why)
        # After the restoration, so Events never compete with writes for the pool's connections.
        ctx.events.record(facts, at=written_at, capacity_override=override)
        ctx.events.record(restored.facts)
        if not interrupted and restored.ok and all(o.denied for o in failed):
            # The API server refused the writes on their merits (its RBAC or an admission policy
            # changed after the dry run) and the rest was put back: a refusal, as at the dry run.
            self.keep(Refused(tuple(f"{o.provider}: {o.error}" for o in failed)))
            why = f"the API server refused {len(failed)} write(s)"
        return Ending(f"{why}; restoration: " + restoration_summary(self.results.restorations))

    def _hold_details(self, facts: list[Fact], changes: list[Change]) -> list[Fact]:
        """Say in the Events when a write changed only the caller's hold, not the flag (added,
        updated by a re-run, or released)."""
        planned = {c.provider: c for c in changes}
        out = []
        for fact in facts:
            change = planned.get(fact.provider)
            if fact.reason == DRAINED and change is not None and change.hold_update:  # a re-run updated its hold
                fact = dataclasses.replace(fact, detail=f"{describe_update(change.hold_update)}; already drained")
            elif fact.reason in (DRAINED, UNDRAINED) and change is not None and not change.flag_changes:
                verb = "added" if change.requested else "released"
                held = "already drained" if change.requested else "still drained, held by others"
                fact = dataclasses.replace(fact, detail=f"hold of {self.ctx.holder} {verb}; {held}")
            out.append(fact)
        return out

    def restore(self, why: str) -> Restored:
        """Restore every provider this run changed (the one restore path), saying why first."""
        from xtask.drain.restore import restore_written  # only a run that restores loads it

        written = self.record.to_restore()
        self.ctx.say(f"{why}; restoring {len(written)} provider(s) this run changed")
        self.record.enter(RunState.RESTORING)
        restored = restore_written(
            self.ctx.kube,
            self.ctx.namespace,
            written,
            operation=self.ctx.operation,
            pool=self.ctx.pool,
            record=self.record,
            progress=self.ctx.progress,
        )
        self.keep(RestoredAll(tuple(restored.to_dicts())))
        return restored

    # -- wait: until every named consumer serves the wave ------------------------------------------
    def wait(self, wave: WaveResult, waiter: ConvergenceWaiter, latch: SignalLatch) -> Ending | None:
        req = self.req
        self.record.enter(RunState.WAITING)
        self.plan.waiting(req, self.ctx.progress)
        result = waiter.wait(timeout=req.timeout, stop=latch.interrupted, written=self.results.outcomes)
        self.last_wait = result
        interrupted = latch.name if result.state is WaitState.INTERRUPTED else None
        self.keep(
            WaveStep(wave.number, convergence_seconds=result.seconds),
            Waited(convergence_dict(result), {"waitSeconds": result.seconds}, interrupted=interrupted),
        )
        if result.state not in (WaitState.CONVERGED, WaitState.NOT_ELIGIBLE):
            summary = f"{self.plan.label(wave)}{wait_summary(result, req)}{self._resumable()}"
            return end_after_wait(self.record, summary, run_state=RunState.after_wait(result.state))
        return None

    # -- soak: read the gates over a converged wave ------------------------------------------------
    def gate(self, wave: WaveResult, latch: SignalLatch) -> Ending | None:
        """Soak a converged wave and read its gates; an Ending stops the run (breach, signal)."""
        if not self.plan.gates:  # one wave without gates, or --soak 0: paced by convergence alone
            self.mark(wave, WaveState.PASSED)
            return None
        readings = self.soak(wave, latch)
        if readings is None:
            self.keep(Interrupted(latch.name))
            self.record.enter(RunState.APPLIED_INTERRUPTED)
            return Ending(
                f"interrupted by {latch.name} during the soak of wave {wave.number} of {self.plan.total}; "
                f"the waves written so far are kept{self._resumable()}"
            )
        gates = [r.to_json() for r in readings]
        self.keep(WaveStep(wave.number, gates=tuple(gates)))
        self.mark(wave, WaveState.SOAKED, gates=gates)
        if all(r.held for r in readings):
            self.mark(wave, WaveState.PASSED)
            return None
        self.mark(wave, WaveState.BREACHED)
        return self.breach(wave.number, readings)

    def soak(self, wave: WaveResult, latch: SignalLatch) -> list[GateReading] | None:
        """Soak ``wave`` for ``--soak`` seconds (:func:`.gates.soak.soak`); None when a signal
        ends it early (nothing is read then)."""
        from xtask.drain.gates.soak import soak  # only a drain with gates soaks

        seconds, gates = self.req.soak_seconds, self.plan.gates
        self.record.enter(RunState.SOAKING)
        self.ctx.say(f"wave {wave.number}: soaking {seconds:g}s; gates: {', '.join(g.name for g in gates)}")
        soaked = soak(wave.number, gates, seconds, interrupted=latch.interrupted, progress=self.ctx.progress)
        if soaked is None:
            return None
        window, readings = soaked
        self.keep(WaveStep(wave.number, soak_seconds=window))
        return readings

    def breach(self, number: int, readings: list[GateReading]) -> Ending:
        """Stop before the next wave: keep what is written, or restore it (``--on-breach``)."""
        from xtask.drain.core.waves import describe_reading  # only a drain with gates is breached

        total = self.plan.total
        what = "; ".join(describe_reading(r) for r in readings if not r.held)
        after = f"stopped before wave {number + 1} of {total}" if number < total else "it was the last wave"
        if self.req.on_breach == "restore":
            restored = self.restore(f"wave {number} breached")
            self.ctx.events.record(restored.facts)
            kept = "restoration (--on-breach restore): " + restoration_summary(self.results.restorations)
        else:
            self.record.enter(RunState.APPLIED_BREACHED)
            kept = f"waves 1-{number} are kept (--on-breach hold){self._resumable()}"
        return Ending(f"wave {number} of {total} breached: {what}; {after}; {kept}")

    def stopped_between_waves(self, number: int, latch: SignalLatch) -> Ending:
        self.keep(Interrupted(latch.name))
        self.record.enter(RunState.APPLIED_INTERRUPTED)
        return Ending(
            f"interrupted by {latch.name} before wave {number} of {self.plan.total}; "
            f"the waves written so far are kept{self._resumable()}"
        )

    def _resumable(self) -> str:
        return self.plan.resumable(self.record.path)

    # -- the end: read back, or wait for quiet sessions and idle ----------------------------------
    def end(self, latch: SignalLatch) -> Ending:
        """Every wave written and converged (or not eligible): read back what nothing waited for,
        or go on to ``--wait-sessions`` and ``--wait-idle``. A drain in waves has targets: it waited for
        nothing when the run it resumes saw every wave converge, or other holders keep all drained."""
        req, result = self.req, self.last_wait
        if result is None and not self.plan.shown:  # nothing waited for (no targets): the stored state, read back
            ending, found = read_back(self.ctx, self.results, self.record)
            self.keep(found)
            return ending
        folded = self.results.convergence  # every wave's wait: one not eligible is not hidden by a later one
        if folded is not None and folded["state"] == WaitState.NOT_ELIGIBLE:  # served, a hard failure keeps it out
            summary = not_eligible_summary(folded["notEligible"])
            return end_after_wait(self.record, summary, run_state=RunState.after_wait(WaitState.NOT_ELIGIBLE))
        selection = list(self.results.selection)
        if req.wait_sessions is not None:
            quiet, found = wait_sessions(self.ctx, selection, self.record, latch)
            self.keep(found)
            if quiet is not None:
                return quiet
        if req.wait_idle:
            ending, found = wait_idle(self.ctx, selection, self.record, self.targets, latch)
            self.keep(found)
            return ending
        self.record.enter(RunState.COMPLETE)
        return Ending(self.plan.done(req, converged_line=wait_summary(result, req) if result is not None else ""))
