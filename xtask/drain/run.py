"""One ``provider-drain`` run, in order: select, plan, check targets and the capacity guard
(:mod:`xtask.drain.core.guard`), server-side dry run, journal, fan-out (on failure or interrupt:
the one restore path, :mod:`xtask.drain.restore`), then read back (patch-only) or wait for
convergence (with targets), and with ``--wait-idle`` for idle. In waves (``--wave-size``,
``--resume``; :mod:`xtask.drain.core.waves`) the fan-out and the wait run once per wave, each wave
then soaking while its gates are read; a breach stops the run before the next wave. Returns a :class:`Report`
whose summaries and sections :mod:`xtask.drain.render` writes; only usage and connection
problems raise. This module conducts; it decides nothing the modules it calls decide.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import datetime as dt
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from agn.kube import CONNECT_TIMEOUT, NETWORKS, PROVIDERS, READ_TIMEOUT, Kube, NotFound
from agn.names import label_problem
from agn.objects import network_view
from agn.operator.heartbeat import read_heartbeat
from agn.yamltext import show
from xtask.drain.core.amounts import Amount, split_waves
from xtask.drain.core.budget import group_budgets
from xtask.drain.core.changes import Change, GroupCount, drain_patch, plan_changes
from xtask.drain.core.guard import target_refusals
from xtask.drain.core.holds import hold_key, hold_value, holder_name, holds_of
from xtask.drain.core.request import DEFAULT_IDLE_TIMEOUT, FIELD_MANAGER, DrainRequest, actor
from xtask.drain.core.selection import Selector, select
from xtask.drain.core.states import IdleWaitState, RunState, WaitState, WaveState, WriteOutcome
from xtask.drain.core.waves import describe_reading, resume_problems, wave_entry, wave_gates
from xtask.drain.edges import fanout
from xtask.drain.edges.idle_waiter import IdleWaiter
from xtask.drain.edges.journal import Journal, JournalState, new_operation_id, read_journal
from xtask.drain.edges.kube_events import DRAINED, UNDRAINED, DrainEvents, Fact, outcome_facts
from xtask.drain.edges.planfile import DEFAULT_MAX_AGE, build_plan, plan_differences, write_plan
from xtask.drain.edges.targets import OverlayReader, Targets, read_targets
from xtask.drain.edges.waiter import ConvergenceWaiter
from xtask.drain.gates.base import Gate, GateReading
from xtask.drain.render import convergence_dict, idle_dict, idle_summary, restoration_summary, wait_summary
from xtask.drain.report import Report, exit_code_for
from xtask.drain.restore import Restored, restore_written
from xtask.drain.signals import SignalLatch
from xtask.errors import ExitCode, RefusedError, XtaskError

SOAK_PROGRESS_SECONDS = 5.0  # a soak says how far it got this often


class Reporter(Protocol):
    def line(self, text: str) -> None: ...
    def event(self, kind: str, provider: str, details: dict) -> None: ...


def run_drain(req: DrainRequest, *, reporter: Reporter) -> Report:
    """Run one drain or undrain from start to finish; the report carries the exit code."""
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
        namespace = req.namespace or kube.namespace
        problem = label_problem(namespace)
        if problem:  # --namespace is checked by the CLI; this one comes from the kubeconfig's context
            raise XtaskError(
                f"the namespace {show(namespace)} of context {kube.context!r} is not a namespace name: it {problem}",
                hint="fix the context's namespace, or pass --namespace",
            )
        # One pool for the dry run, the writes and any restoration, sized like the HTTP pool.
        with cf.ThreadPoolExecutor(max_workers=req.concurrency, thread_name_prefix="drain") as pool:
            run = _DrainRun(req, kube, namespace, reporter, pool)
            with SignalLatch(on_second=run.on_second_signal, second_exit_code=int(ExitCode.NEEDS_INSPECTION)) as latch:
                try:
                    report = run.execute(latch)
                finally:
                    not_recorded = run.events.close()
                    if run.journal is not None:
                        run.journal.close()
                report.events = {"recorded": run.events.recorded, "notRecorded": not_recorded}
                return report
    finally:
        kube.close()


class _DrainRun:
    """The phases of one run, in order; each returns a finished :class:`Report` to stop early."""

    def __init__(self, req: DrainRequest, kube: Kube, namespace: str, reporter: Reporter, pool: cf.Executor) -> None:
        self.req = req
        self.pool = pool
        self.kube = kube
        self.namespace = namespace
        self.reporter = reporter
        self.started = time.monotonic()
        self.report = Report(
            req.context, namespace, "drain" if req.drain else "undrain", req.selector.describe(), req.dry_run
        )
        self.journal: Journal | None = None
        self.waiter: ConvergenceWaiter | None = None
        self.targets: Targets | None = None
        self.operation = new_operation_id()
        now = dt.datetime.now(dt.UTC)
        self._at = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        # --resume: the journal of the drain in waves to continue; its operation id is this run's.
        self.resumed: JournalState | None = read_journal(req.resume) if req.resume else None
        if self.resumed is not None:
            self.operation = self.resumed.operation
        self.waves: list[list[str]] = []
        self.gates: list[Gate] = []
        self._actor = actor()
        self.holder = req.hold_holder
        self.report.holder = self.holder
        self.hold_key = hold_key(self.holder)
        self._hold = hold_value(
            holder=self.holder,
            reason=req.reason,
            ticket=req.ticket,
            since=now,
            expires_in=req.expires_in,
            operation=self.operation,
        )
        self.events = DrainEvents(
            kube,
            namespace,
            operation=self.operation,
            actor=self._actor,
            reason=req.reason,
            warn=reporter.line,
            workers=req.concurrency,
        )

    def patch_for(self, change: Change) -> dict:
        return drain_patch(
            change, operation=self.operation, actor=self._actor, at=self._at, reason=self.req.reason, hold=self._hold
        )

    def finish(self, summary: str, *, code: ExitCode | None = None) -> Report:
        return _finish(self.report, self.started, summary=summary, code=code)

    def on_second_signal(self, signum: int) -> None:
        journal = self.journal
        changed = journal.changed_names() if journal else []
        sys.stderr.write(
            "\nsecond signal: stopping at once. Providers changed by this run may need inspection: "
            f"{', '.join(changed) or 'none recorded'}\n"
            + (
                f"journal: {journal.path}\nrestore with: python -m xtask env drain-restore {journal.path}\n"
                if journal
                else ""
            )
        )
        sys.stderr.flush()

    def execute(self, latch: SignalLatch) -> Report:
        changes, done = self.prepare()
        if done is not None:
            return done
        if latch.interrupted.is_set():
            self.report.interrupted = latch.name
            return self.finish(f"interrupted by {latch.name} before any write", code=ExitCode.INTERRUPTED)
        # An undrain leaves a provider another holder still holds drained: nothing to wait for there.
        awaited = [c.provider for c in changes if not c.keep_drain]
        if self.req.in_waves and self.waves:  # no waves: nothing to change; converge as without waves
            return self.run_waves(changes, latch)
        if self.req.network and awaited:
            # Watch before writing: the followers list and sync while the writes go out.
            self.waiter = ConvergenceWaiter(
                self.kube,
                self.namespace,
                providers=awaited,
                network=self.req.network,
                consumers=list(self.req.consumers),
                drain=self.req.drain,
                notify=self.reporter.event,
                network_obj=self.targets.network if self.targets else None,
            )
            self.waiter.start()
        try:
            done = self.write(changes, latch)
            if done is not None:
                return done
            if not self.req.drain:
                self.note_still_held()
            if self.waiter is None:
                return self.read_back()
            return self.wait(self.waiter, latch)
        finally:
            if self.waiter is not None:
                self.waiter.close()

    # -- 1. select, plan, check targets and capacity, server-side dry run --------------------
    def _read_candidates(self, selector: Selector) -> list[dict[str, Any]]:
        """The providers the selector chooses among: a named one is read by name (one small GET
        however large the fleet); a gateway needs every provider (its field is in the spec)."""
        if selector.provider is not None:
            try:
                return [self.kube.get(PROVIDERS, self.namespace, selector.provider)]
            except NotFound:
                return []
        return self.kube.list(PROVIDERS, self.namespace)[0]

    def prepare(self) -> tuple[list[Change], Report | None]:
        req, report = self.req, self.report
        # The targets are read while the providers are listed: two round trips become one.
        targets = self.pool.submit(read_targets, self.kube, self.namespace, req) if req.network else None
        if req.plan is not None:
            report.plan_file = {"path": str(req.plan.path), "digest": req.plan.digest, "action": "applied"}
        candidates = self._read_candidates(req.selector)
        try:
            selected = select(candidates, req.selector, namespace=self.namespace)
        except RefusedError as exc:
            if req.plan is None:
                # A report like any other refusal (``--output json`` prints it), exit 3.
                report.refused = [str(exc) + (f" ({exc.hint})" if exc.hint else "")]
                return [], self.finish("refused before writing: " + report.refused[0])
            selected = []  # every planned provider left the selection: named below
        if req.plan is not None:
            differences = plan_differences(
                req.plan,
                selected,
                cluster=self.kube.host,
                namespace=self.namespace,
                now=time.time(),
                max_age=req.max_plan_age or DEFAULT_MAX_AGE,
            )
            if differences:
                report.refused = differences
                return [], self.finish(
                    f"refused before writing: the plan {req.plan.path} no longer describes the cluster: "
                    + "; ".join(differences)
                )
        self.events.know(selected)
        report.selection = [p["metadata"]["name"] for p in selected]
        self.reporter.line(
            f"selection ({req.selector.describe()}, namespace {self.namespace}): {', '.join(report.selection)}"
        )
        changes = plan_changes(selected, requested=req.drain, hold_key=self.hold_key, release_all=req.release_all)
        holders = {p["metadata"]["name"]: [holder_name(h) for h in holds_of(p)] for p in selected}
        for c in changes:
            entry = {
                "provider": c.provider,
                "current": c.current,
                "requested": c.requested,
                "alreadyInState": c.already,
                "drainAfter": c.target,
                "holders": holders[c.provider],
            }
            report.plan.append(entry)
            self.reporter.event("plan", c.provider, entry)

        self.targets = targets.result() if targets else None
        counts: list[GroupCount] | None = [] if req.plan_out is not None else None
        refusal = (
            target_refusals(
                self.targets, req, selected, changes, OverlayReader(self.kube, self.namespace), counts=counts
            )
            if self.targets
            else []
        )
        budget_rows: list[dict] = []
        if req.max_unavailable is not None:
            budget_rows, over = self.budget(req.max_unavailable, candidates, changes)
            refusal += over
        if refusal:
            report.refused = refusal
            return changes, self.finish("refused before writing: " + "; ".join(refusal))
        if req.in_waves:
            refusal = self.plan_waves(selected, changes)
            if refusal:
                report.refused = refusal
                return changes, self.finish("refused before writing: " + "; ".join(refusal))

        report.operation = self.operation
        dry = fanout.server_dry_run(self.kube, self.namespace, changes, self.patch_for, pool=self.pool)
        report.dry_run_outcomes = [o.to_dict() for o in dry]
        for o in dry:
            self.reporter.event("dry-run", o.provider, o.to_dict())
        rejected = [o for o in dry if o.outcome == WriteOutcome.DRY_RUN_REJECTED]
        if rejected:
            report.refused = [f"{o.provider}: {o.error}" for o in rejected]
            return changes, self.finish(f"server-side dry run rejected {len(rejected)} change(s); nothing written")
        if req.plan_out is not None:
            return changes, self.write_plan(req.plan_out, selected, changes, counts or [], budget_rows)
        if req.dry_run:
            todo = sum(1 for c in changes if not c.already)
            return changes, self.finish(f"dry run: {todo} change(s) accepted by the API server; nothing written")
        return changes, None

    def budget(
        self, amount: Amount, candidates: list[dict[str, Any]], changes: list[Change]
    ) -> tuple[list[dict], list[str]]:
        """The fleet budget's rows (also in the report) and its refusals: every network of the
        namespace, every provider (one more LIST when one provider was read by name)."""
        providers = candidates if self.req.selector.provider is None else self.kube.list(PROVIDERS, self.namespace)[0]
        networks = self.kube.list(NETWORKS, self.namespace)[0]
        heartbeat = self.targets.heartbeat if self.targets else read_heartbeat(self.kube, self.namespace)
        to_drain = [c.provider for c in changes if not c.already]
        rows = group_budgets(providers, networks, to_drain, amount, heartbeat=heartbeat, now=time.time())
        self.report.budget = {"maxUnavailable": str(amount), "groups": [r.to_dict() for r in rows]}
        for r in rows:
            self.reporter.line(
                f"budget: network {r.network}, group {r.group!r}: {r.unavailable_now} -> {r.unavailable_after} "
                f"of {r.size} unavailable (at most {r.budget})"
            )
        return self.report.budget["groups"], [r.describe(amount) for r in rows if r.exceeded]

    def write_plan(
        self,
        path: Path,
        selected: list[Any],
        changes: list[Change],
        counts: list[GroupCount],
        budget_rows: list[dict],
    ) -> Report:
        req = self.req
        todo = [c.provider for c in changes if not c.already]
        doc = build_plan(
            created_at=time.time(),
            created_by=self._actor,
            context=self.kube.context,
            cluster=self.kube.host,
            namespace=self.namespace,
            arguments=req.shaping_arguments(),
            selector={"provider": req.selector.provider, "gateway": req.selector.gateway},
            drain=req.drain,
            reason=req.reason,
            force=req.force,
            selected=selected,
            to_change=todo,
            network=req.network,
            consumers=list(req.consumers),
            groups=[c.to_dict() for c in counts],
            max_unavailable=req.max_unavailable,
            budget=budget_rows,
            wave_size=req.wave_size,
            waves=split_waves(todo, req.wave_size or Amount(100, percent=True)),
        )
        write_plan(path, doc)
        digest = doc["metadata"]["digest"]
        self.report.plan_file = {"path": str(path), "digest": digest, "action": "written"}
        self.reporter.line(f"plan: {path} ({digest})")
        return self.finish(
            f"plan written to {path}: {len(todo)} change(s) in {len(doc['spec']['waves']['waves'])} wave(s); "
            f"nothing changed (apply it with --plan {path})"
        )

    # -- 2. journal, fan-out, restoration on failure or interrupt ------------------------------
    def write(self, changes: list[Change], latch: SignalLatch) -> Report | None:
        req, report = self.req, self.report
        todo = [c for c in changes if not c.already]
        t_apply = time.monotonic()
        if todo and self.journal is None:
            self.journal = Journal.create(
                operation=self.operation,
                context=req.context,
                namespace=self.namespace,
                requested=req.drain,
                changes=todo,
                reason=req.reason,
                folder=req.journal_dir,
                plan_digest=req.plan.digest if req.plan is not None else None,
            )
            report.journal = str(self.journal.path)
            self.reporter.line(f"journal: {self.journal.path}")
        else:
            self.reporter.line("every selected provider is already in the requested state; nothing to write")
        outcomes = fanout.fan_out(
            self.kube,
            self.namespace,
            changes,
            self.patch_for,
            pool=self.pool,
            concurrency=req.concurrency,
            qps=req.qps,
            stop=latch.interrupted,
            journal=self.journal,
            notify=self.reporter.event,
            # A plan is applied exactly: a provider written by someone else since is a failure
            # (everything this run changed is then restored), never planned again.
            replan=req.plan is None,
        )
        report.outcomes += [o.to_dict() for o in outcomes]  # in waves: every wave's
        report.timings["applySeconds"] = round(report.timings.get("applySeconds", 0.0) + time.monotonic() - t_apply, 3)
        facts = self._hold_details(outcome_facts([o.to_dict() for o in outcomes], drain=req.drain), changes)
        written_at = time.time()
        failed = [o for o in outcomes if o.outcome == WriteOutcome.FAILED]
        # A signal that lands while this run has written anything counts as "during the fan-out".
        interrupted = latch.interrupted.is_set() and (
            self.journal is not None or any(o.outcome == WriteOutcome.NOT_ATTEMPTED for o in outcomes)
        )
        if not (failed or interrupted):
            self.events.record(facts)
            return None
        if interrupted:
            report.interrupted = latch.name
        why = f"interrupted by {latch.name}" if interrupted else f"{len(failed)} write(s) failed"
        restored = self.restore_this_run(why)
        # After the restoration, so Events never compete with writes for the pool's connections.
        self.events.record(facts, at=written_at)
        self.events.record(restored.facts)
        code = exit_code_for(
            refused=False,
            failed=len(failed),
            interrupted_during_writes=interrupted,
            restorations=report.restorations,
            wait_state=None,
            stored_ok=None,
        )
        return self.finish(f"{why}; restoration: " + restoration_summary(report.restorations), code=code)

    def _hold_details(self, facts: list[Fact], changes: list[Change]) -> list[Fact]:
        """Say in the Events when a write changed only the caller's hold, not the flag."""
        planned = {c.provider: c for c in changes}
        out = []
        for fact in facts:
            change = planned.get(fact.provider)
            if fact.reason in (DRAINED, UNDRAINED) and change is not None and not change.flag_changes:
                verb = "added" if change.requested else "released"
                held = "already drained" if change.requested else "still drained, held by others"
                fact = dataclasses.replace(fact, detail=f"hold of {self.holder} {verb}; {held}")
            out.append(fact)
        return out

    # -- waves: plan them (or check the journal to resume), then one wave after another ----------
    def plan_waves(self, selected: Sequence[Mapping[str, Any]], changes: list[Change]) -> list[str]:
        """The waves and their gates; the refusals that stop the run before any write."""
        req, report = self.req, self.report
        if self.resumed is not None:
            problems = resume_problems(self.resumed, selected, namespace=self.namespace, drain=req.drain)
            if problems:
                return [f"cannot resume {req.resume}: {p}" for p in problems]
            self.waves = self.resumed.waves
        else:
            assert req.wave_size is not None
            # The providers to change, in selection order (as a plan's waves: --plan-out).
            self.waves = split_waves([c.provider for c in changes if not c.already], req.wave_size)
        report.waves = [wave_entry(k, names) for k, names in enumerate(self.waves, start=1)]
        self.gates, problems = wave_gates(req, self.targets.consumers if self.targets else {})
        return problems

    def run_waves(self, changes: list[Change], latch: SignalLatch) -> Report:
        req, report = self.req, self.report
        todo = [c for c in changes if not c.already]
        first = 1
        if self.resumed is not None:
            assert req.resume is not None
            self.journal = Journal.open(req.resume)
            report.journal = str(self.journal.path)
            first = self.resumed.first_unfinished_wave()
            self.reporter.line(f"resuming {self.journal.path} at wave {first} of {len(self.waves)}")
        elif todo:
            self.journal = Journal.create(
                operation=self.operation,
                context=req.context,
                namespace=self.namespace,
                requested=req.drain,
                changes=todo,
                reason=req.reason,
                folder=req.journal_dir,
                plan_digest=req.plan.digest if req.plan is not None else None,
                waves=self.waves,
                selection=report.selection,
            )
            report.journal = str(self.journal.path)
            self.reporter.line(f"journal: {self.journal.path}")
        by_name = {c.provider: c for c in changes}
        assert report.waves is not None
        for number, names in enumerate(self.waves, start=1):
            if number < first:
                report.waves[number - 1].update(state=WaveState.HELD, earlier=True)
                continue
            if latch.interrupted.is_set():  # between two waves: the finished ones stay
                return self.stopped_between_waves(number, latch)
            done = self.one_wave(number, names, [by_name[n] for n in names], latch)
            if done is not None:
                return done
        if req.wait_idle:
            return self.wait_idle(latch)
        if self.journal:
            self.journal.set_state(RunState.COMPLETE)
        gated = f", each soaked {req.soak_seconds:g}s with every gate held" if self.gates else ""
        return self.finish(f"{len(self.waves)} wave(s) converged on {', '.join(req.consumers)}{gated}")

    def mark(self, number: int, state: WaveState, **details: Any) -> None:
        assert self.report.waves is not None
        self.report.waves[number - 1]["state"] = state
        if self.journal is not None:
            self.journal.wave(number, state, **details)
        self.reporter.event("wave", "", {"wave": number, "of": len(self.waves), "state": state, **details})

    def one_wave(self, number: int, names: list[str], changes: list[Change], latch: SignalLatch) -> Report | None:
        """Write wave ``number``, wait until it converges, soak it; a Report ends the run."""
        req, report = self.req, self.report
        total, entry = len(self.waves), (report.waves or [])[number - 1]
        self.reporter.line(f"wave {number} of {total}: {', '.join(names)}")
        # An undrain leaves a provider another holder still holds drained: nothing to wait for there.
        awaited = [c.provider for c in changes if not c.keep_drain]
        if not awaited:
            if self.journal:
                self.journal.set_state(RunState.APPLYING)
            done = self.write(changes, latch)
            if done is not None:
                return done
            self.mark(number, WaveState.WRITTEN)
            self.mark(number, WaveState.CONVERGED)
            return self.gate_wave(number, latch)
        # Watch before writing, as a run without waves does.
        waiter = ConvergenceWaiter(
            self.kube,
            self.namespace,
            providers=awaited,
            network=str(req.network),
            consumers=list(req.consumers),
            drain=req.drain,
            notify=self.reporter.event,
            network_obj=self.targets.network if self.targets else None,
        )
        waiter.start()
        try:
            if self.journal:
                self.journal.set_state(RunState.APPLYING)
            done = self.write(changes, latch)
            if done is not None:
                return done
            self.mark(number, WaveState.WRITTEN)
            if self.journal:
                self.journal.set_state(RunState.WAITING)
            result = waiter.wait(timeout=req.timeout, stop=latch.interrupted)
        finally:
            waiter.close()
        entry["convergenceSeconds"] = round(result.seconds, 3)
        report.timings["waitSeconds"] = round(report.timings.get("waitSeconds", 0.0) + result.seconds, 3)
        report.convergence = convergence_dict(result)
        if result.state not in (WaitState.CONVERGED, WaitState.NOT_ELIGIBLE):
            if result.state is WaitState.INTERRUPTED:
                report.interrupted = latch.name
            return self.end_after_wait(
                f"wave {number} of {total}: {wait_summary(result, req)}{self._resumable()}",
                run_state=RunState.after_wait(result.state),
                wait_state=result.state,
            )
        self.mark(number, WaveState.CONVERGED)
        return self.gate_wave(number, latch)

    def gate_wave(self, number: int, latch: SignalLatch) -> Report | None:
        """Soak converged wave ``number`` and read its gates; a Report ends the run (breach, signal)."""
        report, total, entry = self.report, len(self.waves), (self.report.waves or [])[number - 1]
        if not self.gates:  # --soak 0: paced by convergence alone
            self.mark(number, WaveState.HELD)
            return None
        readings = self.soak(number, latch)
        if readings is None:
            report.interrupted = latch.name
            if self.journal:
                self.journal.set_state(RunState.APPLIED_INTERRUPTED)
            return self.finish(
                f"interrupted by {latch.name} during the soak of wave {number} of {total}; "
                f"the waves written so far are kept{self._resumable()}",
                code=ExitCode.INTERRUPTED,
            )
        entry["gates"] = [r.to_json() for r in readings]
        self.mark(number, WaveState.SOAKED, gates=entry["gates"])
        if all(r.held for r in readings):
            self.mark(number, WaveState.HELD)
            return None
        self.mark(number, WaveState.BREACHED)
        return self.breach(number, readings)

    def soak(self, number: int, latch: SignalLatch) -> list[GateReading] | None:
        """Soak wave ``number`` for ``--soak`` seconds between each gate's begin and read; None
        when a signal ends it early (nothing is read then)."""
        seconds = self.req.soak_seconds
        if self.journal:
            self.journal.set_state(RunState.SOAKING)
        self.reporter.line(f"wave {number}: soaking {seconds:g}s; gates: {', '.join(g.name for g in self.gates)}")
        assert self.report.waves is not None
        for gate in self.gates:
            gate.begin()
        start = time.monotonic()
        while (remaining := start + seconds - time.monotonic()) > 0:
            if latch.interrupted.wait(min(remaining, SOAK_PROGRESS_SECONDS)):
                return None
            elapsed = time.monotonic() - start
            self.reporter.event(
                "soak", "", {"wave": number, "elapsed": round(min(elapsed, seconds), 1), "seconds": seconds}
            )
        window = time.monotonic() - start
        self.report.waves[number - 1]["soakSeconds"] = round(window, 3)
        readings = [gate.read(window) for gate in self.gates]
        for r in readings:
            self.reporter.event("gate", "", {"wave": number, **r.to_json()})
        return readings

    def restore_this_run(self, why: str) -> Restored:
        """Restore every provider this run changed (the one restore path), saying why first."""
        written = self.journal.to_restore() if self.journal else []
        self.reporter.line(f"{why}; restoring {len(written)} provider(s) this run changed")
        if self.journal:
            self.journal.set_state(RunState.RESTORING)
        restored = restore_written(
            self.kube,
            self.namespace,
            written,
            operation=self.operation,
            pool=self.pool,
            journal=self.journal,
            notify=self.reporter.event,
        )
        self.report.restorations = restored.to_dicts()
        return restored

    def breach(self, number: int, readings: list[GateReading]) -> Report:
        """Stop before the next wave: keep what is written, or restore it (``--on-breach``)."""
        req, report = self.req, self.report
        total = len(self.waves)
        what = "; ".join(describe_reading(r) for r in readings if not r.held)
        after = f"stopped before wave {number + 1} of {total}" if number < total else "it was the last wave"
        if req.on_breach == "restore":
            restored = self.restore_this_run(f"wave {number} breached")
            self.events.record(restored.facts)
            kept = "restoration (--on-breach restore): " + restoration_summary(report.restorations)
        else:
            if self.journal:
                self.journal.set_state(RunState.APPLIED_BREACHED)
            kept = f"waves 1-{number} are kept (--on-breach hold){self._resumable()}"
        code = exit_code_for(
            refused=False,
            failed=0,
            interrupted_during_writes=False,
            restorations=report.restorations,
            wait_state=None,
            stored_ok=None,
            breached=True,
        )
        return self.finish(f"wave {number} of {total} breached: {what}; {after}; {kept}", code=code)

    def stopped_between_waves(self, number: int, latch: SignalLatch) -> Report:
        self.report.interrupted = latch.name
        if self.journal:
            self.journal.set_state(RunState.APPLIED_INTERRUPTED)
        return self.finish(
            f"interrupted by {latch.name} before wave {number} of {len(self.waves)}; "
            f"the waves written so far are kept{self._resumable()}",
            code=ExitCode.INTERRUPTED,
        )

    def _resumable(self) -> str:
        if self.journal is None:
            return ""
        return (
            f"; undo with: python -m xtask env drain-restore {self.journal.path}; "
            f"or continue with the same flags and --resume {self.journal.path}"
        )

    # -- 3a. patch-only: read the stored state back -----------------------------------------------
    def read_back(self) -> Report:
        req, names = self.req, self.report.selection
        found = {name: _drain_of(obj) for name, obj in self._read_selected().items()}
        stored = {name: found.get(name) for name in names}
        # An undrain leaves drained what another holder still holds: that is as requested.
        ok = all(v == req.drain or (not req.drain and n in self.report.still_held) for n, v in stored.items())
        self.report.stored = {"ok": ok, "providers": stored}
        if self.journal:
            self.journal.set_state(RunState.COMPLETE if ok else RunState.NEEDS_INSPECTION)
        if not ok:
            return self.finish(
                f"{self.report.request} not stored as requested: {stored}", code=ExitCode.NEEDS_INSPECTION
            )
        held = len(self.report.still_held)
        if held:
            return self.finish(
                f"stored: spec.trafficPolicy.drain=false on {len(names) - held} provider(s); {held} provider(s) stay "
                "drained, still held by others (see above; --release-all removes every hold)"
            )
        return self.finish(
            f"stored: spec.trafficPolicy.drain={str(req.drain).lower()} on {len(names)} provider(s) "
            "(read back from the API; pass --network/--consumer to wait until it is serving)"
        )

    def _read_selected(self) -> dict[str, dict[str, Any]]:
        """The selected providers as stored now (one GET for one provider, else one LIST)."""
        names = set(self.report.selection)
        if self.req.selector.provider is not None:
            try:
                objs = [self.kube.get(PROVIDERS, self.namespace, self.req.selector.provider)]
            except NotFound:
                objs = []
        else:
            objs = self.kube.list(PROVIDERS, self.namespace)[0]
        return {o["metadata"]["name"]: o for o in objs if o["metadata"]["name"] in names}

    def note_still_held(self) -> None:
        """After an undrain's writes: which selected providers other holders keep drained, said
        in the text and the report (``stillHeld``)."""
        for name, obj in sorted(self._read_selected().items()):
            holds = holds_of(obj)
            if holds and _drain_of(obj):
                self.report.still_held[name] = [holder_name(h) for h in holds]
                self.reporter.line(f"{name} stays drained: still held by {', '.join(self.report.still_held[name])}")

    # -- 3b. with targets: wait until every consumer serves it ----------------------------------
    def wait(self, waiter: ConvergenceWaiter, latch: SignalLatch) -> Report:
        req, report = self.req, self.report
        if self.journal:
            self.journal.set_state(RunState.WAITING)
        self.reporter.line(f"waiting for {', '.join(req.consumers)} to serve the change (timeout {req.timeout:.0f}s)")
        result = waiter.wait(timeout=req.timeout, stop=latch.interrupted)
        report.timings["waitSeconds"] = round(result.seconds, 3)
        report.convergence = convergence_dict(result)
        if result.state is WaitState.INTERRUPTED:
            report.interrupted = latch.name
        if result.state is WaitState.CONVERGED and req.wait_idle:
            return self.wait_idle(latch)
        return self.end_after_wait(
            wait_summary(result, req), run_state=RunState.after_wait(result.state), wait_state=result.state
        )

    # -- 3c. --wait-idle: after convergence, wait until every drained provider is idle ------------
    def wait_idle(self, latch: SignalLatch) -> Report:
        req, report = self.req, self.report
        if self.journal:
            self.journal.set_state(RunState.WAITING_IDLE)
        assert self.targets is not None and self.targets.network is not None  # --wait-idle needs --network
        max_age = network_view(self.targets.network).metrics_max_age_seconds
        timeout = req.idle_timeout if req.idle_timeout is not None else DEFAULT_IDLE_TIMEOUT
        self.reporter.line(
            f"waiting for {', '.join(report.selection)} to be idle: running 0 and waiting 0 in two consecutive "
            f"fresh readings (metricsMaxAgeSeconds {max_age}; timeout {timeout:.0f}s)"
        )
        waiter = IdleWaiter(
            self.kube, self.namespace, providers=report.selection, max_age=max_age, notify=self.reporter.event
        )
        result = waiter.wait(timeout=timeout, stop=latch.interrupted)
        report.timings["idleSeconds"] = round(result.seconds, 3)
        report.idle = idle_dict(result, timeout=timeout, max_age=max_age)
        if result.state is IdleWaitState.INTERRUPTED:
            report.interrupted = latch.name
        return self.end_after_wait(
            idle_summary(result, req, timeout),
            run_state=RunState.after_idle_wait(result.state),
            wait_state=WaitState.CONVERGED,
            idle_state=result.state,
        )

    def end_after_wait(
        self,
        summary: str,
        *,
        run_state: RunState,
        wait_state: WaitState,
        idle_state: IdleWaitState | None = None,
    ) -> Report:
        """The end of a run whose writes all went through, decided by how its wait ended (a wave's
        convergence, the single drain's, or the idle wait after it): the journal's state, the
        exit code from the one table, the summary."""
        if self.journal:
            self.journal.set_state(run_state)
        code = exit_code_for(
            refused=False,
            failed=0,
            interrupted_during_writes=False,
            restorations=[],
            wait_state=wait_state,
            stored_ok=None,
            idle_state=idle_state,
        )
        return self.finish(summary, code=code)


def _drain_of(obj: dict[str, Any]) -> bool:
    return bool(((obj.get("spec") or {}).get("trafficPolicy") or {}).get("drain"))


def _finish(report: Report, started: float, *, summary: str, code: ExitCode | None = None) -> Report:
    report.summary = summary
    if code is None:
        code = ExitCode.REFUSED if report.refused else ExitCode.OK
    report.exit_code = code
    report.timings["totalSeconds"] = round(time.monotonic() - started, 3)
    return report
