"""A drain in waves (``--wave-size``, ``--resume``): the words a breach ends with, and what
``--resume`` checks before it writes anything. Pure. The gates a wave soaks under are
:mod:`xtask.drain.gates`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xtask.drain.core.changes import OUR_ANNOTATIONS, RestoreDecision, raw_drain, restore_decision
from xtask.drain.core.journal_records import JournalReplay
from xtask.drain.core.states import RunState
from xtask.drain.gates.base import GateReading

# A journal in one of these states was restored, or needs a person: there is nothing to resume.
NOT_RESUMABLE = {
    RunState.RESTORING: "its run was restoring (finish it with drain-restore)",
    RunState.RESTORED: "its run was restored",
    RunState.NEEDS_INSPECTION: "its run needs inspection",
    RunState.COMPLETE: "its run is complete",
}


def describe_reading(r: GateReading) -> str:
    value = "none" if r.value is None else f"{r.value:g}"
    return f"gate {r.gate} = {value} (threshold {r.threshold}): {r.detail}"


def resume_problems(
    state: JournalReplay, selected: Sequence[Mapping[str, Any]], *, namespace: str, drain: bool
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
