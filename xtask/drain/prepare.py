"""The first phase of a drain run, everything before the first write: select, plan, look
(every guard of :mod:`xtask.drain.guards` on one snapshot, :mod:`xtask.drain.look`; a real
drain in one wave looks only under the drain locks: :func:`checked_once`), plan the waves and
their gates, and send every patch as a server-side dry run. It ends the run early (an
:class:`~xtask.drain.report.Ending`) when something refuses, for ``--dry-run`` and for
``--plan-out``.

Reads only (the plan file of ``--plan-out`` is the one thing it writes). The decisions are
:mod:`xtask.drain.core`'s and the guards'; this module asks them in order.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from agn.kube import NETWORKS
from xtask.drain.context import RunContext
from xtask.drain.core.amounts import Amount, split_waves
from xtask.drain.core.budget import networks_of
from xtask.drain.core.changes import Change, GroupCount, change_note, plan_changes
from xtask.drain.core.guard import Targets, group_of
from xtask.drain.core.holds import holder_name, holds_of
from xtask.drain.core.plandoc import LoadedPlan, pacing_doc
from xtask.drain.core.progress import DryRunChecked, Planned
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.selection import select
from xtask.drain.core.states import WriteOutcome
from xtask.drain.core.waves import resume_problems
from xtask.drain.edges import fanout
from xtask.drain.edges.lock import look_at_locks
from xtask.drain.gates import wave_gates
from xtask.drain.gates.base import Gate, GateSetup
from xtask.drain.look import Look, refusals_of, run_guards
from xtask.drain.report import Ending, RunResults, WaveResult
from xtask.drain.snapshot import Snapshot, read_candidates
from xtask.errors import RefusedError

# The budget row's fields a plan file records (schemas/provider-drain-plan.schema.json).
_PLAN_BUDGET = frozenset(
    ("network", "group", "size", "budget", "unavailableNow", "unavailableAfter", "drained", "failed", "byThisRun")
) | {"exceeded"}


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What the writes need: the changes, the waves (empty: one wave of every change, no
    gates), the gates each wave soaks under, the targets a first look read; or how the run
    already ended."""

    changes: list[Change] = dataclasses.field(default_factory=list)
    selected: list[Any] = dataclasses.field(default_factory=list)
    waves: list[list[str]] = dataclasses.field(default_factory=list)
    gates: list[Gate] = dataclasses.field(default_factory=list)
    targets: Targets | None = None
    ending: Ending | None = None
    networks: list[str] = dataclasses.field(default_factory=list)  # whose drain locks the writes take
    # The networks as read to find those locks, moments before the first is taken: the first
    # look under the locks reuses them (a network's budget is not what the lock orders).
    network_objs: list[Any] = dataclasses.field(default_factory=list)
    # The selection's groups (provider -> selection group) when the guards read only those groups'
    # members (a --provider run: xtask.drain.edges.members); None: they read every provider.
    scope: dict[str, str] | None = None
    # Whether the guards had a first look here; if not (a real drain in one wave: checked_once),
    # they look only under the drain locks, and the journal is created once they pass.
    looked: bool = False


def prepare(ctx: RunContext, results: RunResults) -> Prepared:
    """Select, plan and check; the selection, plan, refusals and dry-run outcomes go to ``results``."""
    req = ctx.req
    networks_read = ctx.pool.submit(ctx.kube.list, NETWORKS, ctx.namespace)  # beside the providers' read
    if req.plan is not None:
        _applying(ctx, results, req.plan)
    candidates = read_candidates(ctx, req.selector)
    selected, ending = _select(ctx, results, candidates)
    if ending is not None:
        return Prepared(ending=ending)
    changes = _plan(ctx, results, selected)
    scope = {p["metadata"]["name"]: group_of(p) for p in candidates} if req.selector.provider is not None else None
    networks = networks_read.result()[0]
    changing = {c.provider for c in changes if not c.already}
    locks = networks_of([p for p in candidates if p["metadata"]["name"] in changing], networks)
    refusal: list[str] = []
    counts: list[GroupCount] = []
    targets = None
    looked = not (checked_once(req) and locks and changing)
    if looked:
        # A first look without the lock; a real drain in one wave looks only under the drain
        # locks, before its journal and any write (xtask.drain.locked): one read, not two.
        snapshot = Snapshot(
            ctx.kube, ctx.namespace, req, scope=scope, selection=selected, providers=candidates, networks=networks
        )
        look = Look(req, tuple(changes), ctx.hold_key, "before writing", under_lock=False, counting=bool(req.plan_out))
        verdicts = run_guards(ctx, results, snapshot, look)
        refusal = refusals_of(verdicts)
        counts = [c for v in verdicts for c in v.extra.get("counts", [])]
        targets = snapshot.targets
    waves: list[list[str]] = []
    gates: list[Gate] = []
    if not refusal and req.in_waves:
        waves, gates, refusal = _plan_waves(ctx, results, selected, changes, targets)
    prepared = Prepared(
        changes, selected, waves, gates, targets, networks=locks, network_objs=networks, scope=scope, looked=looked
    )
    if refusal:
        results.refused = refusal
        return dataclasses.replace(prepared, ending=Ending("refused before writing: " + "; ".join(refusal)))
    results.operation = ctx.operation
    ending = _dry_run(ctx, results, changes)
    if ending is None and (req.dry_run or req.plan_out is not None):
        _look_at_locks(ctx, results, locks)
    if ending is None and req.plan_out is not None:
        ending = _write_plan(ctx, results, req.plan_out, selected, changes, counts)
    elif ending is None and req.dry_run:
        todo = sum(1 for c in changes if not c.already)
        ending = Ending(f"dry run: {todo} change(s) accepted by the API server; nothing written")
    return dataclasses.replace(prepared, ending=ending)


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
    """Whether a run's guards are checked only under the drain locks: a real drain in one wave.
    A dry run and a plan take no lock, an undrain is not guarded under it, and waves check each
    wave under the locks after a first look at all of them."""
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
    results.selection = [p["metadata"]["name"] for p in selected]
    ctx.say(f"selection ({req.selector.describe()}, namespace {ctx.namespace}): {', '.join(results.selection)}")
    changes = plan_changes(
        selected,
        requested=req.drain,
        hold_key=ctx.hold_key,
        release_all=req.release_all,
        slow_start=req.slow_start,
        session_deadline=req.session_deadline,
        hold_ask=ctx.hold_ask,
    )
    holders = {p["metadata"]["name"]: tuple(holder_name(h) for h in holds_of(p)) for p in selected}
    for c in changes:
        update = tuple(u.to_dict() for u in c.hold_update)
        planned = Planned(
            c.provider,
            c.current,
            c.requested,
            c.already,
            c.target,
            holders[c.provider],
            change_note(c, planned=True),
            update,
        )
        results.plan.append(planned)
        ctx.progress(planned)
    return changes


def _plan_waves(
    ctx: RunContext, results: RunResults, selected: list[Any], changes: list[Change], targets: Targets | None
) -> tuple[list[list[str]], list[Gate], list[str]]:
    """The waves and their gates; the refusals that stop the run before any write."""
    req = ctx.req
    if ctx.resumed is not None:
        problems = resume_problems(ctx.resumed, selected, namespace=ctx.namespace, drain=req.drain)
        if problems:
            return [], [], [f"cannot resume {req.resume}: {p}" for p in problems]
        waves = ctx.resumed.waves
    else:
        assert req.wave_size is not None
        # The providers to change, in selection order (as a plan's waves: --plan-out).
        waves = split_waves([c.provider for c in changes if not c.already], req.wave_size)
    results.waves = [WaveResult(k, names) for k, names in enumerate(waves, start=1)]
    consumers = targets.consumers if targets else {}
    setup = GateSetup(
        options=req.gate_options,
        consumers={c: consumers.get(c) for c in req.consumers},
        soak_seconds=req.soak_seconds,
    )
    gates, problems = wave_gates(setup)
    return waves, gates, problems


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
