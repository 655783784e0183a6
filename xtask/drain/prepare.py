"""The first phase of a drain run, everything before the first write: select, plan, check the
targets, the capacity guard and the budget (a real drain in one wave leaves them to the look
under the drain locks: :func:`checked_once`), plan the waves and their gates, and send every
patch as a server-side dry run. It ends the run early (an :class:`~xtask.drain.report.Ending`)
when something refuses, for ``--dry-run`` and for ``--plan-out``.

Reads only (the plan file of ``--plan-out`` is the one thing it writes). The decisions are
:mod:`xtask.drain.core`'s; this module asks them in order.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from agn.kube import NETWORKS, PROVIDERS, NotFound
from agn.operator.heartbeat import read_heartbeat
from xtask.drain.capacity_check import check_capacity
from xtask.drain.context import RunContext
from xtask.drain.core.amounts import Amount, split_waves
from xtask.drain.core.budget import GroupBudget, declares_budget, group_budgets, networks_of
from xtask.drain.core.changes import Change, GroupCount, plan_changes
from xtask.drain.core.guard import Targets, group_of, target_refusals
from xtask.drain.core.holds import holder_name, holds_of, undrain_refusal
from xtask.drain.core.plandoc import LoadedPlan, pacing_doc
from xtask.drain.core.progress import DryRunChecked, Planned
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.selection import Selector, select
from xtask.drain.core.states import WriteOutcome
from xtask.drain.core.waves import resume_problems
from xtask.drain.edges import fanout
from xtask.drain.edges.lock import look_at_locks
from xtask.drain.edges.members import read_members
from xtask.drain.edges.targets import OverlayReader, read_targets
from xtask.drain.gates import wave_gates
from xtask.drain.gates.base import Gate, GateSetup
from xtask.drain.report import Ending, RunResults, WaveResult
from xtask.errors import RefusedError

# The budget row's fields a plan file records (schemas/provider-drain-plan.schema.json).
_PLAN_BUDGET = frozenset(
    ("network", "group", "size", "budget", "unavailableNow", "unavailableAfter", "drained", "failed", "byThisRun")
) | {"exceeded"}


@dataclasses.dataclass
class Prepared:
    """What the writes need: the changes, the waves (empty: one wave of every change, no
    gates), the gates each wave soaks under, the targets read; or how the run already ended."""

    changes: list[Change] = dataclasses.field(default_factory=list)
    waves: list[list[str]] = dataclasses.field(default_factory=list)
    gates: list[Gate] = dataclasses.field(default_factory=list)
    targets: Targets | None = None
    ending: Ending | None = None
    networks: list[str] = dataclasses.field(default_factory=list)  # whose drain locks the writes take
    # The selection's groups (provider -> selection group) when the guards read only those groups'
    # members (a --provider run: xtask.drain.edges.members); None: they read every provider.
    scope: dict[str, str] | None = None
    # A real drain in one wave checks its guards once, under the drain locks (checked_once).
    checked_under_lock: bool = False


def prepare(ctx: RunContext, results: RunResults) -> Prepared:
    """Select, plan and check; the selection, plan, refusals and dry-run outcomes go to ``results``."""
    req = ctx.req
    once = checked_once(req)
    # The targets and networks are read while the providers are listed: round trips side by side.
    targets_read = ctx.pool.submit(read_targets, ctx.kube, ctx.namespace, req) if req.network and not once else None
    networks_read = ctx.pool.submit(ctx.kube.list, NETWORKS, ctx.namespace)
    if req.plan is not None:
        _applying(ctx, results, req.plan)
    candidates = _read_candidates(ctx, req.selector)
    selected, ending = _select(ctx, results, candidates)
    if ending is not None:
        return Prepared(ending=ending)
    changes = _plan(ctx, results, selected)
    prepared = Prepared(changes=changes, targets=targets_read.result() if targets_read else None)
    if req.selector.provider is not None:
        prepared.scope = {p["metadata"]["name"]: group_of(p) for p in candidates}
    counts: list[GroupCount] | None = [] if req.plan_out is not None else None
    networks = networks_read.result()[0]
    changing = {c.provider for c in changes if not c.already}
    prepared.networks = networks_of([p for p in candidates if p["metadata"]["name"] in changing], networks)
    if once and prepared.networks and changing:
        # Its guards run once, on a fresh read under the drain locks, before the journal and any
        # write (xtask.drain.locked): a first look here would read the same objects twice.
        prepared.checked_under_lock = True
        refusal: list[str] = []
    else:
        if req.network and prepared.targets is None:
            prepared.targets = read_targets(ctx.kube, ctx.namespace, req, networks=networks)
        refusal = _hold_refusals(ctx, selected) + _target_refusals(ctx, prepared, selected, counts)
        refusal += _budget(ctx, results, candidates, prepared, networks)
    if not refusal and req.in_waves:
        refusal = _plan_waves(ctx, results, selected, prepared)
    if refusal:
        results.refused = refusal
        prepared.ending = Ending("refused before writing: " + "; ".join(refusal))
        return prepared
    results.operation = ctx.operation
    prepared.ending = _dry_run(ctx, results, changes)
    if prepared.ending is None and (req.dry_run or req.plan_out is not None):
        _look_at_locks(ctx, results, prepared.networks)
    if prepared.ending is None and req.plan_out is not None:
        prepared.ending = _write_plan(ctx, results, req.plan_out, selected, changes, counts or [])
    elif prepared.ending is None and req.dry_run:
        todo = sum(1 for c in changes if not c.already)
        prepared.ending = Ending(f"dry run: {todo} change(s) accepted by the API server; nothing written")
    return prepared


def _applying(ctx: RunContext, results: RunResults, plan: LoadedPlan) -> None:
    """The plan applied, in the report with the pacing it applies; a plan made before plans
    recorded the pacing applies the defaults, and the run says which (stderr and the report)."""
    missing = plan.not_recorded()
    results.plan_file = {
        "path": str(plan.path),
        "digest": plan.digest,
        "action": "applied",
        "pacing": pacing_doc(ctx.req),
        "notRecorded": missing,
    }
    if missing:
        ctx.say(
            f"plan {plan.path} does not record {', '.join(missing)} (made before plans recorded them): "
            "applying their defaults; make a new plan with --plan-out to fix them"
        )


def checked_once(req: DrainRequest) -> bool:
    """Whether a run's guards (targets, budget, capacity) are checked only under the drain locks:
    a real drain in one wave. A dry run and a plan take no lock, an undrain is not guarded under
    it, and waves check each wave under the locks after a first look at all of them."""
    return req.drain and not req.dry_run and req.plan_out is None and not req.in_waves


def _look_at_locks(ctx: RunContext, results: RunResults, networks: list[str]) -> None:
    """A dry run or a plan takes no lock; it says who holds one a real run would wait for."""
    if not networks:
        return
    seen = look_at_locks(ctx.kube, ctx.namespace, networks)
    results.lock = {"networks": sorted(networks), "seen": seen}
    for lock in seen:
        if lock["holder"]:
            ctx.say(
                f"the drain lock {lock['lease']} is held by {lock['holder']} (renewed {lock['renewTime']}, "
                f"TTL {lock['leaseDurationSeconds']}s): a real run waits for it up to --lock-timeout "
                f"{ctx.req.lock_timeout:g}s"
            )


def _read_candidates(ctx: RunContext, selector: Selector) -> list[dict[str, Any]]:
    """The providers the selector chooses among: a named one is read by name (one small GET
    however large the fleet); a gateway needs every provider (its field is in the spec)."""
    if selector.provider is not None:
        try:
            return [ctx.kube.get(PROVIDERS, ctx.namespace, selector.provider)]
        except NotFound:
            return []
    return ctx.kube.list(PROVIDERS, ctx.namespace)[0]


def _select(ctx: RunContext, results: RunResults, candidates: list[dict[str, Any]]) -> tuple[list[Any], Ending | None]:
    req = ctx.req
    try:
        selected = select(candidates, req.selector, namespace=ctx.namespace)
    except RefusedError as exc:
        if req.plan is None:
            # A report like any other refusal (``--output json`` prints it), exit 3.
            results.refused = [str(exc) + (f" ({exc.hint})" if exc.hint else "")]
            return [], Ending("refused before writing: " + results.refused[0])
        selected = []  # every planned provider left the selection: named below
    if req.plan is not None:
        from xtask.drain.edges.planfile import DEFAULT_MAX_AGE, plan_differences  # plans load when used

        differences = plan_differences(
            req.plan,
            selected,
            cluster=ctx.kube.host,
            namespace=ctx.namespace,
            now=time.time(),
            max_age=req.max_plan_age or DEFAULT_MAX_AGE,
        )
        if differences:
            results.refused = differences
            return [], Ending(
                f"refused before writing: the plan {req.plan.path} no longer describes the cluster: "
                + "; ".join(differences)
            )
    return selected, None


def _plan(ctx: RunContext, results: RunResults, selected: list[Any]) -> list[Change]:
    req = ctx.req
    ctx.events.know(selected)
    results.selection = [p["metadata"]["name"] for p in selected]
    ctx.say(f"selection ({req.selector.describe()}, namespace {ctx.namespace}): {', '.join(results.selection)}")
    changes = plan_changes(
        selected,
        requested=req.drain,
        hold_key=ctx.hold_key,
        release_all=req.release_all,
        slow_start=req.slow_start,
        session_deadline=req.session_deadline,
    )
    holders = {p["metadata"]["name"]: tuple(holder_name(h) for h in holds_of(p)) for p in selected}
    for c in changes:
        planned = Planned(c.provider, c.current, c.requested, c.already, c.target, holders[c.provider])
        results.plan.append(planned)
        ctx.progress(planned)
    return changes


def _hold_refusals(ctx: RunContext, selected: list[Any]) -> list[str]:
    """An undrain of a provider the caller holds nothing on while others hold it: refused, per
    provider, naming the holds' owners (the API server's policy would refuse the write too)."""
    if ctx.req.drain or ctx.req.release_all:
        return []
    found = (undrain_refusal(p, key=ctx.hold_key, name=p["metadata"]["name"]) for p in selected)
    return [r for r in found if r]


def _target_refusals(
    ctx: RunContext, prepared: Prepared, selected: list[Any], counts: list[GroupCount] | None
) -> list[str]:
    if prepared.targets is None:
        return []
    reader = OverlayReader(ctx.kube, ctx.namespace)
    return target_refusals(prepared.targets, ctx.req, selected, prepared.changes, reader, counts=counts)


def _budget(
    ctx: RunContext, results: RunResults, candidates: list[dict[str, Any]], prepared: Prepared, networks: list[Any]
) -> list[str]:
    """For a drain, the budget's rows and the capacity guard's groups (in the report) and their
    refusals — a first look, without the lock: the writes of each wave check again under it
    (:mod:`xtask.drain.locked`). The providers of the selection's groups (one LIST of that group
    when one provider was read by name: :mod:`xtask.drain.edges.members`), read once for both."""
    kube, namespace, req = ctx.kube, ctx.namespace, ctx.req
    changing = {c.provider for c in prepared.changes if not c.already}
    budgeted = req.max_unavailable is not None or req.override_budget is not None or declares_budget(networks)
    if not req.drain or not (budgeted or changing):
        return []
    providers = candidates if prepared.scope is None else read_members(kube, namespace, prepared.scope)
    heartbeat = prepared.targets.heartbeat if prepared.targets else read_heartbeat(kube, namespace)
    refusals = check_capacity(
        ctx,
        results,
        providers=providers,
        networks=networks,
        to_drain=changing,
        heartbeat=heartbeat,
        where="before writing",
    )
    if not budgeted:
        return refusals
    rows = group_budgets(
        providers,
        networks,
        sorted(changing),
        req.max_unavailable,
        heartbeat=heartbeat,
        now=time.time(),
        override=req.override_budget is not None,
    )
    return budget_report(ctx, results, rows) + refusals


def budget_report(ctx: RunContext, results: RunResults, rows: list[GroupBudget]) -> list[str]:
    """Put the budget's rows in the report and say them; the refusals."""
    req = ctx.req
    amount = req.max_unavailable
    results.budget = {
        "maxUnavailable": None if amount is None else str(amount),
        "override": req.override_budget,
        "groups": [r.to_dict() for r in rows],
    }
    for r in rows:
        bound = "no bound" if r.budget is None else f"at most {r.budget}"
        overridden = f"; declared {r.declared} overridden: {req.override_budget}" if r.overridden else ""
        ctx.say(
            f"budget: network {r.network}, group {r.group!r}: {r.unavailable_now} -> {r.unavailable_after} "
            f"of {r.size} unavailable ({bound}{overridden})"
        )
    return [r.describe(amount) for r in rows if r.exceeded]


def _plan_waves(ctx: RunContext, results: RunResults, selected: list[Any], prepared: Prepared) -> list[str]:
    """The waves and their gates; the refusals that stop the run before any write."""
    req = ctx.req
    if ctx.resumed is not None:
        problems = resume_problems(ctx.resumed, selected, namespace=ctx.namespace, drain=req.drain)
        if problems:
            return [f"cannot resume {req.resume}: {p}" for p in problems]
        prepared.waves = ctx.resumed.waves
    else:
        assert req.wave_size is not None
        # The providers to change, in selection order (as a plan's waves: --plan-out).
        prepared.waves = split_waves([c.provider for c in prepared.changes if not c.already], req.wave_size)
    results.waves = [WaveResult(k, names) for k, names in enumerate(prepared.waves, start=1)]
    consumers = prepared.targets.consumers if prepared.targets else {}
    setup = GateSetup(
        options=req.gate_options,
        consumers={c: consumers.get(c) for c in req.consumers},
        soak_seconds=req.soak_seconds,
    )
    prepared.gates, problems = wave_gates(setup)
    return problems


def _dry_run(ctx: RunContext, results: RunResults, changes: list[Change]) -> Ending | None:
    dry = fanout.server_dry_run(ctx.kube, ctx.namespace, changes, ctx.patch_for, pool=ctx.pool)
    results.dry_run_outcomes = dry
    for o in dry:
        ctx.progress(DryRunChecked(o))
    rejected = [o for o in dry if o.outcome == WriteOutcome.DRY_RUN_REJECTED]
    if not rejected:
        return None
    results.refused = [f"{o.provider}: {o.error}" for o in rejected]
    return Ending(f"server-side dry run rejected {len(rejected)} change(s); nothing written")


def _write_plan(
    ctx: RunContext,
    results: RunResults,
    path: Path,
    selected: list[Any],
    changes: list[Change],
    counts: list[GroupCount],
) -> Ending:
    from xtask.drain.edges.planfile import PlanInputs, build_plan, write_plan  # plans load when used

    req = ctx.req
    todo = [c.provider for c in changes if not c.already]
    doc = build_plan(
        PlanInputs(
            created_at=time.time(),
            created_by=ctx.actor,
            context=ctx.kube.context,
            cluster=ctx.kube.host,
            namespace=ctx.namespace,
            request=req,
            selected=selected,
            to_change=todo,
            groups=[c.to_dict() for c in counts],
            budget=[
                {k: v for k, v in g.items() if k in _PLAN_BUDGET} for g in (results.budget or {}).get("groups", [])
            ],
            capacity=(results.capacity or {}).get("groups") if req.drain else None,
            waves=split_waves(todo, req.wave_size or Amount(100, percent=True)),
        )
    )
    write_plan(path, doc)
    digest = doc["metadata"]["digest"]
    results.plan_file = {"path": str(path), "digest": digest, "action": "written", "pacing": doc["spec"]["pacing"]}
    ctx.say(f"plan: {path} ({digest})")
    return Ending(
        f"plan written to {path}: {len(todo)} change(s) in {len(doc['spec']['waves']['waves'])} wave(s); "
        f"nothing changed (apply it with --plan {path})"
    )
