"""A drain in waves (``--wave-size``, ``--resume``): the gates a wave soaks under, the words a
breach ends with, and what ``--resume`` checks before it writes anything. Pure, except that
:func:`wave_gates` scrapes each gateway once to know it answers (a refusal before any write).

Adding a gate is one line in :func:`wave_gates`: anything with the
:class:`~xtask.drain.gates.base.Gate` shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xtask.drain.core.changes import OUR_ANNOTATIONS, RestoreDecision, raw_drain, restore_decision
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.states import RunState, WaveState
from xtask.drain.edges.journal import JournalState
from xtask.drain.gates.base import Gate, GateReading
from xtask.drain.gates.error_ratio import ErrorRatioGate, ScrapeError, gateway_metrics_urls, parse_overrides, scrape
from xtask.drain.gates.promql import PrometheusUnavailable, PromQLGate

# A journal in one of these states was restored, or needs a person: there is nothing to resume.
NOT_RESUMABLE = {
    RunState.RESTORING: "its run was restoring (finish it with drain-restore)",
    RunState.RESTORED: "its run was restored",
    RunState.NEEDS_INSPECTION: "its run needs inspection",
    RunState.COMPLETE: "its run is complete",
}


def wave_gates(req: DrainRequest, consumers: Mapping[str, Mapping | None]) -> tuple[list[Gate], list[str]]:
    """The gates each wave soaks under, and the problems that refuse the run before any write
    (a gateway whose ``/metrics`` is unknown or does not answer). No gates with ``--soak 0``."""
    if req.soak_seconds <= 0:
        return [], []
    overrides = parse_overrides(req.gateway_metrics)  # checked by DrainRequest already
    urls, problems = gateway_metrics_urls({c: consumers.get(c) for c in req.consumers}, overrides)
    for consumer, url in urls.items():
        try:
            scrape(url)
        except ScrapeError as exc:
            problems.append(f"consumer {consumer}: its gateway's metrics {url} {exc}")
    if problems:
        return [], [p + " (name it with --gateway-metrics CONSUMER=URL)" for p in problems]
    gates: list[Gate] = [ErrorRatioGate(urls, max_ratio=req.error_ratio_limit)]
    if req.gate_promql is not None and req.prometheus is not None:
        promql = PromQLGate(req.prometheus, req.gate_promql)
        try:
            promql.validate()  # a bad expression is a usage error (PromQLError), before any write
        except PrometheusUnavailable as exc:
            return [], [f"--prometheus {req.prometheus}: {exc}"]
        gates.append(promql)
    return gates, []


def wave_entry(number: int, providers: Sequence[str]) -> dict[str, Any]:
    """A wave as the report shows it before it starts."""
    return {"wave": number, "providers": list(providers), "state": WaveState.PENDING, "gates": []}


def describe_reading(r: GateReading) -> str:
    value = "none" if r.value is None else f"{r.value:g}"
    return f"gate {r.gate} = {value} (threshold {r.threshold}): {r.detail}"


def resume_problems(
    state: JournalState, selected: Sequence[Mapping[str, Any]], *, namespace: str, drain: bool
) -> list[str]:
    """Why the drain in waves of ``state`` cannot be continued on ``selected`` (the providers the
    selector chooses now, as read), each difference named; empty when it can.

    - the journal is of a drain in waves, of this request and namespace, and not restored or complete;
    - the selection is the journal's (no provider joined or left);
    - each provider the journal shows as written (or maybe written) is still as that run wrote
      it (:func:`~xtask.drain.core.changes.restore_decision`: our generation, value and operation id);
    - each other provider is unchanged since the journal recorded it: the same resourceVersion,
      or else (the operator's status writes move resourceVersion) the same generation, drain
      value and drain annotations.
    """
    if not state.waves:
        return ["the journal is not of a drain in waves (undo it with drain-restore instead)"]
    problems = []
    if state.requested != drain:
        problems.append(f"the journal is of a{'' if state.requested else 'n'} {state.request}; this run is not")
    if state.namespace != namespace:
        problems.append(f"the journal is of namespace {state.namespace}; this run is in {namespace}")
    why = next((text for word, text in NOT_RESUMABLE.items() if word == state.state), None)
    if why:
        problems.append(f"nothing to resume: {why}")
    if problems:
        return problems
    recorded = state.selection or [n for wave in state.waves for n in wave]
    now = {str(o["metadata"]["name"]): o for o in selected}
    left, joined = sorted(set(recorded) - set(now)), sorted(set(now) - set(recorded))
    if left:
        problems.append(f"left the selection since the journal: {', '.join(left)}")
    if joined:
        problems.append(f"joined the selection since the journal: {', '.join(joined)}")
    for name in recorded:
        obj = now.get(name)
        if obj is None:
            continue
        entry = state.entries.get(name)
        if entry is None:  # was already in the requested state: nothing was planned for it
            if (raw_drain(obj) is True) != drain:
                problems.append(f"{name}: was already drain={str(drain).lower()}, now it is not")
            continue
        if entry.maybe_written and not entry.restored:
            decision = restore_decision(
                entry.change, operation=state.operation, written_generation=entry.expected_generation, current=obj
            )
            if decision is RestoreDecision.RESTORE:
                continue  # as this run wrote it
            if decision is not RestoreDecision.ALREADY or entry.write == "written":
                problems.append(f"{name}: changed by another writer since this run wrote it ({_state_of(obj)})")
                continue
            # ALREADY for a write never answered: it did not land; then it must be unchanged.
        change = _unchanged_problem(entry.change, obj)
        if change:
            problems.append(f"{name}: changed since the journal recorded it ({change})")
    return problems


def _state_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata", {})
    return f"drain={str(raw_drain(obj)).lower()}, generation {meta.get('generation')}"


def _unchanged_problem(change: Any, obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata", {})
    if str(meta.get("resourceVersion") or "") == change.resource_version:
        return ""
    annotations = meta.get("annotations") or {}
    diffs = []
    if int(meta.get("generation") or 0) != change.generation:
        diffs.append(f"generation {change.generation} -> {meta.get('generation')}")
    if raw_drain(obj) != change.previous:
        diffs.append(f"drain {change.previous} -> {raw_drain(obj)}")
    for key in OUR_ANNOTATIONS:
        if annotations.get(key) != change.previous_annotations.get(key):
            diffs.append(f"annotation {key} changed")
    if diffs:
        diffs.append(f"resourceVersion {change.resource_version} -> {meta.get('resourceVersion')}")
    return ", ".join(diffs)
