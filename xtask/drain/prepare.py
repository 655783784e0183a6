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
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agn.kube import NETWORKS
from xtask.drain.context import RunContext
from xtask.drain.core.amounts import Amount, split_waves
from xtask.drain.core.budget import networks_of
from xtask.drain.core.changes import Change, GroupCount, change_note, plan_changes
from xtask.drain.core.guard import Targets, group_of
from xtask.drain.core.holds import holder_name, holds_of
from xtask.drain.core.progress import DryRunChecked, Planned
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.selection import select
from xtask.drain.core.states import WriteOutcome
from xtask.drain.edges import fanout
from xtask.drain.edges.lock import look_at_locks
from xtask.drain.gates import wave_gates
from xtask.drain.gates.base import Gate, GateSetup
from xtask.drain.look import Look, Looked, refusals_of, run_guards
from xtask.drain.report import Ending
from xtask.drain.results import DryRun, LocksSeen, PlanFile, Refused, Selected, Step, WaveResult
from xtask.drain.snapshot import Snapshot, read_candidates
from xtask.errors import RefusedError
from xtask.record import Record

if TYPE_CHECKING:
    from xtask.drain.core.plandoc import LoadedPlan

# The budget row's fields a plan file records (schemas/provider-drain-plan.schema.json).
_PLAN_BUDGET = frozenset(
    ("network", "group", "size", "budget", "unavailableNow", "unavailableAfter", "drained", "failed", "byThisRun")
) | {"exceeded"}


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Prepared(Record):
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
    steps: tuple[Step, ...] = ()  # what it found, in order, for the conductor to fold (results.fold)


def prepare(ctx: RunContext) -> Prepared:
    """Select, plan and check; what it found (the selection, plan, refusals, dry-run outcomes)
    is in ``Prepared.steps``, for the conductor to fold into the run's results."""
    req = ctx.req
    networks_read = ctx.pool.submit(ctx.kube.list, NETWORKS, ctx.namespace)  # beside the providers' read
    applying = Selected(plan_file=_applying(ctx, req.plan)) if req.plan is not None else None
    steps: tuple[Step, ...] = (applying,) if applying else ()
    candidates = read_candidates(ctx, req.selector)
    selected, refused, ending = _select(ctx, candidates)
    if ending is not None:
        return Prepared(ending=ending, steps=(*steps, Refused(refused)))
    changes, planned = _plan(ctx, selected)
    steps += (planned,)
    scope = {p["metadata"]["name"]: group_of(p) for p in candidates} if req.selector.provider is not None else None
    networks = networks_read.result()[0]
    changing = {c.provider for c in changes if not c.already}
    locks = networks_of([p for p in candidates if p["metadata"]["name"] in changing], networks)
    under_lock = checked_once(req) and bool(locks) and bool(changing)
    looked: Looked | None = None
    targets = None
    if not under_lock:
        # A first look without the lock; a real drain in one wave looks only under the drain
        # locks, before its dry run, its journal and any write (xtask.drain.locked): one read, not two.
        snapshot = Snapshot(
            ctx.kube, ctx.namespace, req, scope=scope, selection=selected, providers=candidates, networks=networks
        )
        look = Look(req, tuple(changes), ctx.hold_key, "before writing", under_lock=False, counting=bool(req.plan_out))
        looked = run_guards(ctx, snapshot, look)
        steps += (looked,)
        targets = snapshot.targets
    refusal = refusals_of(looked.verdicts) if looked is not None else []
    waves: list[list[str]] = []
    gates: list[Gate] = []
    if not refusal and req.in_waves:
        waves, gates, refusal, planned_waves = _plan_waves(ctx, selected, changes, targets)
        steps += (planned_waves,) if planned_waves is not None else ()
    prepared = Prepared(
        changes,
        selected,
        waves,
        gates,
        targets,
        networks=locks,
        network_objs=networks,
        scope=scope,
        looked=not under_lock,
    )
    if refusal:
        ending = Ending("refused before writing: " + "; ".join(refusal))
        return dataclasses.replace(prepared, ending=ending, steps=(*steps, Refused(tuple(refusal))))
    if under_lock:  # its dry run, too, is sent under the drain locks, after the look there
        return dataclasses.replace(prepared, steps=steps)
    checked, ending = _after_the_look(ctx, prepared, looked)
    return dataclasses.replace(prepared, ending=ending, steps=steps + checked)


def _after_the_look(
    ctx: RunContext, prepared: Prepared, looked: Looked | None
) -> tuple[tuple[Step, ...], Ending | None]:
    """The checks after the guards' look: the dry run, then, for a dry run or a plan, who holds
    the drain locks, and the plan file; the run's end for those."""
    req, changes = ctx.req, prepared.changes
    steps, ending = dry_run(ctx, changes)
    if ending is None and (req.dry_run or req.plan_out is not None) and prepared.networks:
        steps += (_look_at_locks(ctx, prepared.networks),)
    if ending is None and req.plan_out is not None:
        written, ending = _write_plan(ctx, req.plan_out, prepared.selected, changes, looked)
        steps += (written,)
    elif ending is None and req.dry_run:
        todo = sum(1 for c in changes if not c.already)
        ending = Ending(f"dry run: {todo} change(s) accepted by the API server; nothing written")
    return steps, ending


def _applying(ctx: RunContext, plan: LoadedPlan) -> Mapping[str, Any]:
    """The plan applied, in the report with the pacing it applies; a plan made before plans
    recorded the pacing applies the defaults, and the run says which (stderr and the report)."""
    from xtask.drain.core.plandoc import pacing_doc  # plans load when a flag names one

    missing = plan.not_recorded()
    if missing:
        ctx.say(
            f"plan {plan.path} does not record {', '.join(missing)} (made before plans recorded them): "
            "applying their defaults; make a new plan with --plan-out to fix them"
        )
    return {
        "path": str(plan.path),
        "digest": plan.digest,
        "action": "applied",
        "pacing": pacing_doc(ctx.req),
        "notRecorded": missing,
    }


def checked_once(req: DrainRequest) -> bool:
    """Whether a run's guards are checked only under the drain locks: a real drain in one wave.
    A dry run and a plan take no lock, an undrain is not guarded under it, and waves check each
    wave under the locks after a first look at all of them."""
    return req.drain and not req.dry_run and req.plan_out is None and not req.in_waves


def _look_at_locks(ctx: RunContext, networks: list[str]) -> LocksSeen:
    """A dry run or a plan takes no lock; it says who holds one a real run would wait for."""
    seen = look_at_locks(ctx.kube, ctx.namespace, networks)
    for lock in seen:
        if lock["holder"]:
            ctx.say(
                f"the drain lock {lock['lease']} is held by {lock['holder']} (renewed {lock['renewTime']}, "
                f"TTL {lock['leaseDurationSeconds']}s): a real run waits for it up to --lock-timeout "
                f"{ctx.req.lock_timeout:g}s"
            )
    return LocksSeen({"networks": sorted(networks), "seen": seen})


def _select(ctx: RunContext, candidates: list[dict[str, Any]]) -> tuple[list[Any], tuple[str, ...], Ending | None]:
    """The selected providers; or the refusal and the run's end."""
    req = ctx.req
    try:
        selected = select(candidates, req.selector, namespace=ctx.namespace)
    except RefusedError as exc:
        if req.plan is None:
            # A report like any other refusal (``--output json`` prints it), exit 3.
            refused = str(exc) + (f" ({exc.hint})" if exc.hint else "")
            return [], (refused,), Ending("refused before writing: " + refused)
        selected = []  # every planned provider left the selection: the plan guard names them
    return selected, (), None


def _plan(ctx: RunContext, selected: list[Any]) -> tuple[list[Change], Selected]:
    req = ctx.req
    selection = tuple(p["metadata"]["name"] for p in selected)
    ctx.say(f"selection ({req.selector.describe()}, namespace {ctx.namespace}): {', '.join(selection)}")
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
    rows = []
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
        rows.append(planned)
        ctx.progress(planned)
    return changes, Selected(selection=selection, plan=tuple(rows))


def _plan_waves(
    ctx: RunContext, selected: list[Any], changes: list[Change], targets: Targets | None
) -> tuple[list[list[str]], list[Gate], list[str], Selected | None]:
    """The waves and their gates; the refusals that stop the run before any write; the report's waves."""
    req = ctx.req
    if ctx.resumed is not None:
        from xtask.drain.core.waves import resume_problems  # only --resume loads it

        problems = resume_problems(ctx.resumed, selected, namespace=ctx.namespace, drain=req.drain)
        if problems:
            return [], [], [f"cannot resume {req.resume}: {p}" for p in problems], None
        waves = ctx.resumed.waves
    else:
        assert req.wave_size is not None
        # The providers to change, in selection order (as a plan's waves: --plan-out).
        waves = split_waves([c.provider for c in changes if not c.already], req.wave_size)
    consumers = targets.consumers if targets else {}
    setup = GateSetup(
        options=req.gate_options,
        consumers={c: consumers.get(c) for c in req.consumers},
        soak_seconds=req.soak_seconds,
    )
    gates, problems = wave_gates(setup)
    planned = Selected(waves=tuple(WaveResult(k, tuple(w)) for k, w in enumerate(waves, start=1)))
    return waves, gates, problems, planned


def dry_run_before_writing(ctx: RunContext, changes: list[Change]) -> tuple[tuple[Step, ...], Ending | None]:
    """The server-side dry run of a real drain in one wave, under the drain locks: sent for a
    fan-out, so its writes are all-or-nothing (one of them refused refuses the run before any
    lands); one write is its own dry run. A single PATCH is applied whole or not at all, and a
    refusal of it changes nothing: it is reported per provider (``outcomes``, ``refused``), the
    run exits 3 and its journal, opened before the write as always, ends ``restored`` with
    nothing to restore. ``--dry-run`` and ``--plan-out`` always send it (:func:`dry_run`)."""
    if sum(1 for c in changes if not c.already) <= 1:
        return (DryRun((), operation=ctx.operation),), None
    return dry_run(ctx, changes)


def dry_run(ctx: RunContext, changes: list[Change]) -> tuple[tuple[Step, ...], Ending | None]:
    """Every patch sent as a server-side dry run: its outcomes, and a refusal if one is rejected
    (here for a run that looked before the lock; under the drain locks for a real drain in one
    wave: :mod:`xtask.drain.run`)."""
    dry = fanout.server_dry_run(ctx.kube, ctx.namespace, changes, ctx.patch_for, pool=ctx.pool)
    for o in dry:
        ctx.progress(DryRunChecked(o))
    rejected = [o for o in dry if o.outcome == WriteOutcome.DRY_RUN_REJECTED]
    found = DryRun(tuple(dry), operation=ctx.operation)
    if not rejected:
        return (found,), None
    refused = tuple(f"{o.provider}: {o.error}" for o in rejected)
    return (found, Refused(refused)), Ending(f"server-side dry run rejected {len(rejected)} change(s); nothing written")


def _write_plan(
    ctx: RunContext, path: Path, selected: list[Any], changes: list[Change], looked: Looked | None
) -> tuple[PlanFile, Ending]:
    from xtask.drain.edges.planfile import PlanInputs, build_plan, write_plan  # plans load when used

    req = ctx.req
    todo = [c.provider for c in changes if not c.already]
    verdicts = looked.verdicts if looked is not None else ()
    counts: list[GroupCount] = [c for v in verdicts for c in v.extra.get("counts", [])]
    budget = (looked.section("budget") if looked is not None else None) or {}
    capacity = (looked.section("capacity") if looked is not None else None) or {}
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
            budget=[{k: v for k, v in g.items() if k in _PLAN_BUDGET} for g in budget.get("groups", [])],
            capacity=capacity.get("groups") if req.drain else None,
            waves=split_waves(todo, req.wave_size or Amount(100, percent=True)),
        )
    )
    write_plan(path, doc)
    digest = doc["metadata"]["digest"]
    written = PlanFile({"path": str(path), "digest": digest, "action": "written", "pacing": doc["spec"]["pacing"]})
    ctx.say(f"plan: {path} ({digest})")
    return written, Ending(
        f"plan written to {path}: {len(todo)} change(s) in {len(doc['spec']['waves']['waves'])} wave(s); "
        f"nothing changed (apply it with --plan {path})"
    )
