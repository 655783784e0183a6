"""The last phase of a drain run whose writes all went through: read the stored state back
(patch-only), wait until the drained providers are idle (``--wait-idle``), and end by how the
wait ended (:func:`end_after_wait`: the journal's state and the exit code from the one table).
Also what an undrain says about providers other holders keep drained (:func:`note_still_held`).

Reads only; each returns what it read as a frozen :class:`~xtask.drain.results.Finished` for the
conductor to fold, and the journal's state goes through the run's
:class:`~xtask.drain.record.RunRecord`.
"""

from __future__ import annotations

from typing import Any

from agn.objects import drain_of, network_view
from xtask.drain.context import RunContext
from xtask.drain.core.defaults import DEFAULT_IDLE_TIMEOUT, DEFAULT_SESSIONS_TIMEOUT
from xtask.drain.core.guard import Targets
from xtask.drain.core.holds import holder_name, holds_of
from xtask.drain.core.progress import WaitBegun
from xtask.drain.core.states import IdleWaitState, RunState, WriteOutcome
from xtask.drain.record import RunRecord
from xtask.drain.render import idle_dict, idle_summary
from xtask.drain.report import Ending
from xtask.drain.results import Finished, RunResults
from xtask.drain.signals import SignalLatch
from xtask.drain.snapshot import read_candidates


def read_back(ctx: RunContext, results: RunResults, record: RunRecord) -> tuple[Ending, Finished]:
    """Patch-only: the selected providers' drain as stored now, against what was asked."""
    drain, names = ctx.req.drain, list(results.selection)
    found = {name: drain_of(obj) for name, obj in read_selected(ctx, names).items()}
    stored = {name: found.get(name) for name in names}
    # An undrain leaves drained what another holder still holds: that is as requested.
    held = results.still_held
    ok = all(v == drain or (not drain and n in held) for n, v in stored.items())
    read = Finished(stored={"ok": ok, "providers": stored})
    record.enter(RunState.COMPLETE if ok else RunState.NEEDS_INSPECTION)
    if not ok:
        return Ending(f"{results.request} not stored as requested: {stored}"), read
    if held:
        return Ending(
            f"stored: spec.trafficPolicy.drain=false on {len(names) - len(held)} provider(s); {len(held)} "
            "provider(s) stay drained, still held by others (see above; --release-all removes every hold)"
        ), read
    return Ending(
        f"stored: spec.trafficPolicy.drain={str(drain).lower()} on {len(names)} provider(s)"
        f"{_hold_words(results)} (read back from the API; pass --network/--consumer to wait until it is serving)"
    ), read


def _hold_words(results: RunResults) -> str:
    """What a re-run did to the caller's holds, for the last line: updated, or already as asked."""
    updated = sum(1 for o in results.outcomes if o.hold_update and o.outcome is WriteOutcome.CHANGED)
    same = sum(1 for p in results.plan if p.already and p.note)  # Planned.note: the hold already says this
    words = [f"your hold updated on {updated}"] if updated else []
    words += [f"your hold already as asked on {same} (nothing to update)"] if same else []
    return "; " + ", ".join(words) if words else ""


def read_selected(ctx: RunContext, names: list[str]) -> dict[str, dict[str, Any]]:
    """The providers ``names`` as stored now (as the selection read them: one GET for one provider,
    else one LIST)."""
    wanted = set(names)
    return {o["metadata"]["name"]: o for o in read_candidates(ctx, ctx.req.selector) if o["metadata"]["name"] in wanted}


def note_still_held(ctx: RunContext, names: list[str]) -> Finished:
    """After an undrain's writes: which of ``names`` other holders keep drained, said in the
    text and the report (``stillHeld``)."""
    held: dict[str, list[str]] = {}
    for name, obj in sorted(read_selected(ctx, names).items()):
        holds = holds_of(obj)
        if holds and drain_of(obj):
            held[name] = [holder_name(h) for h in holds]
            ctx.say(f"{name} stays drained: still held by {', '.join(held[name])}")
    return Finished(still_held=held)


def wait_idle(
    ctx: RunContext, selection: list[str], record: RunRecord, targets: Targets | None, latch: SignalLatch
) -> tuple[Ending, Finished]:
    """``--wait-idle``: after convergence, wait until every drained provider is idle."""
    req = ctx.req
    record.enter(RunState.WAITING_IDLE)
    assert targets is not None and targets.network is not None  # --wait-idle needs --network
    max_age = network_view(targets.network).metrics_max_age_seconds
    timeout = req.idle_timeout if req.idle_timeout is not None else DEFAULT_IDLE_TIMEOUT
    ctx.progress(
        WaitBegun(
            f"waiting for {', '.join(selection)} to be idle: running 0 and waiting 0 in two consecutive "
            f"fresh readings (metricsMaxAgeSeconds {max_age}; timeout {timeout:.0f}s)"
        )
    )
    from xtask.drain.edges.idle_waiter import IdleWaiter  # loads only for --wait-idle

    waiter = IdleWaiter(ctx.kube, ctx.namespace, providers=selection, max_age=max_age, progress=ctx.progress)
    result = waiter.wait(timeout=timeout, stop=latch.interrupted)
    read = Finished(
        idle=idle_dict(result, timeout=timeout, max_age=max_age),
        timings={"idleSeconds": result.seconds},
        interrupted=latch.name if result.state is IdleWaitState.INTERRUPTED else None,
    )
    ending = end_after_wait(
        record, idle_summary(result, req, timeout), run_state=RunState.after_idle_wait(result.state)
    )
    return ending, read


def wait_sessions(
    ctx: RunContext, selection: list[str], record: RunRecord, latch: SignalLatch
) -> tuple[Ending | None, Finished]:
    """``--wait-sessions QUIET``: after convergence, wait until no named consumer has routed a turn
    to a drained provider for QUIET seconds. None when they are quiet (the run goes on: to
    ``--wait-idle``, or done); else the run's end (exit 11 on timeout, 8 when interrupted)."""
    from xtask.drain.core.sessions import describe_not_quiet  # loads only for --wait-sessions
    from xtask.drain.edges.session_waiter import SessionsWaiter

    req = ctx.req
    assert req.wait_sessions is not None
    record.enter(RunState.WAITING_SESSIONS)
    timeout = req.sessions_timeout if req.sessions_timeout is not None else DEFAULT_SESSIONS_TIMEOUT
    ctx.progress(
        WaitBegun(
            f"waiting until {', '.join(req.consumers)} route no turn to {', '.join(selection)} for "
            f"{req.wait_sessions:g}s (status.sessions of each consumer; timeout {timeout:.0f}s)"
        )
    )
    waiter = SessionsWaiter(
        ctx.kube,
        ctx.namespace,
        consumers=list(req.consumers),
        providers=list(selection),
        quiet=req.wait_sessions,
        server_offset=ctx.server_offset,
        progress=ctx.progress,
    )
    result = waiter.wait(timeout=timeout, stop=latch.interrupted)
    talking = describe_not_quiet(result.verdicts)
    interrupted = result.state is IdleWaitState.INTERRUPTED
    read = Finished(
        sessions={
            "state": result.state,
            "quietSeconds": req.wait_sessions,
            "seconds": round(result.seconds, 3),
            "timeoutSeconds": timeout,
            "providers": [v.to_dict() for v in result.verdicts],
            "notQuiet": talking,
        },
        timings={"sessionsSeconds": result.seconds},
        interrupted=latch.name if interrupted else None,
    )
    if result.state is IdleWaitState.IDLE:
        ctx.say(f"sessions quiet: no turn to {', '.join(selection)} for {req.wait_sessions:g}s")
        return None, read
    if interrupted:
        summary = (
            f"interrupted while waiting for quiet sessions; the drain is kept; not quiet yet: {'; '.join(talking)}"
        )
        run_state = RunState.APPLIED_INTERRUPTED
    else:
        summary = (
            f"drained and serving, but sessions still talk after {timeout:.0f}s: {'; '.join(talking)}; "
            "the drain stays applied"
        )
        run_state = RunState.APPLIED_SESSIONS_TIMEOUT
    record.enter(run_state)
    return Ending(summary), read


def end_after_wait(record: RunRecord, summary: str, *, run_state: RunState) -> Ending:
    """The end of a run whose writes all went through, decided by how its wait ended (a wave's
    convergence, the single drain's, or the idle wait after it): the journal's state and the
    summary (the exit code is the report's: :func:`xtask.drain.report.exit_code`)."""
    record.enter(run_state)
    return Ending(summary)
