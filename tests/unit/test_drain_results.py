"""The one fold of a drain run's results (xtask.drain.results): what each phase returns, kept in
order, read by the report and its exit code."""

from __future__ import annotations

import dataclasses

import pytest

from reportschema import check_report
from xtask.drain.core.states import Outcome, WaitState, WaveState, WriteOutcome
from xtask.drain.guards.base import Verdict
from xtask.drain.report import Ending, build_report
from xtask.drain.results import (
    Finished,
    Interrupted,
    Looked,
    Refused,
    RunResults,
    Selected,
    Waited,
    WaveResult,
    WaveStep,
    Written,
    fold,
)
from xtask.errors import ExitCode


def fresh() -> RunResults:
    return RunResults(context="ctx", namespace="ns", request="drain", selector="gateway gw", dry_run=False, holder="me")


def folded(*steps) -> RunResults:
    results = fresh()
    for step in steps:
        results = fold(results, step)
    return results


def test_results_are_frozen_and_a_fold_makes_new_ones():
    before = fresh()
    after = fold(before, Refused(("no",)))
    assert before.refused == () and after.refused == ("no",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.refused = ()  # type: ignore[misc]


def test_every_wave_adds_its_outcomes_and_times():
    one = Outcome("p-a", WriteOutcome.CHANGED)
    two = Outcome("p-b", WriteOutcome.CHANGED)
    results = folded(
        Written((one,), {"applySeconds": 0.5}),
        Waited({"state": "converged"}, {"waitSeconds": 1.25}),
        Written((two,), {"applySeconds": 0.25}),
    )
    assert results.outcomes == (one, two)
    assert results.timings == {"applySeconds": 0.75, "waitSeconds": 1.25}
    assert results.convergence == {"state": "converged"}


def test_a_step_says_only_what_it_carries():
    results = folded(Interrupted("SIGTERM"), Finished(stored={"ok": True, "providers": {}}))
    assert results.interrupted == "SIGTERM"  # Finished had no interruption to say: kept
    assert results.stored == {"ok": True, "providers": {}}


def test_a_look_fills_its_guards_sections_and_keeps_what_force_set_aside():
    budget = Verdict("budget", refusals=("over",), section={"groups": []})
    capacity = Verdict(
        "capacity", section={"forced": True}, forced=("tight",), forced_note="tight", timings={"capacitySeconds": 0.1}
    )
    results = folded(Looked((budget, capacity), "before writing"))
    assert results.budget == {"groups": []} and results.capacity == {"forced": True}
    assert results.capacity_override == "tight"
    assert results.guards["budget"] == {
        "guard": "budget",
        "checked": "before writing",
        "refused": ["over"],
        "forced": [],
    }
    assert results.timings == {"capacitySeconds": 0.1}
    later = fold(results, Looked((dataclasses.replace(budget, refusals=()),), "before wave 2 of 2"))
    assert later.guards["budget"]["checked"] == "before wave 2 of 2" and later.guards["capacity"]["forced"] == ["tight"]


def test_a_wave_step_changes_only_its_wave_and_nothing_without_waves():
    waves = (WaveResult(1, ("p-a",)), WaveResult(2, ("p-b",)))
    results = folded(
        Selected(waves=waves),
        WaveStep(1, state=WaveState.PASSED, convergence_seconds=2.0),
        WaveStep(2, state=WaveState.BREACHED, gates=({"gate": "error-ratio", "held": False},)),
    )
    assert results.waves is not None
    assert [(w.number, w.state, w.convergence_seconds) for w in results.waves] == [
        (1, WaveState.PASSED, 2.0),
        (2, WaveState.BREACHED, None),
    ]
    assert waves[0].state is WaveState.PENDING  # the plan's waves are not changed by the fold
    assert folded(WaveStep(1, state=WaveState.PASSED)).waves is None  # a single drain shows no waves


def test_the_report_and_its_exit_code_come_from_the_folded_results():
    results = folded(
        Written((Outcome("p-a", WriteOutcome.CHANGED),), {"applySeconds": 0.1}),
        Waited({"state": WaitState.TIMEOUT}, {"waitSeconds": 3.0}),
    )
    report = build_report(results, Ending("timed out"), events={"recorded": 1, "notRecorded": 0}, total_seconds=4.0)
    assert report.exit_code is ExitCode.TIMEOUT
    assert report.timings == {"applySeconds": 0.1, "waitSeconds": 3.0, "totalSeconds": 4.0}
    assert report.to_dict()["outcomes"][0]["provider"] == "p-a"


def _wait(state: str, providers: dict[str, bool], not_eligible: tuple[str, ...] = ()) -> Waited:
    rows = [{"consumer": "c-a", "provider": p, "state": "admitted", "ok": ok} for p, ok in providers.items()]
    section = {"state": state, "observations": 2, "seconds": 1.0, "notEligible": list(not_eligible)}
    return Waited({**section, "lagging": [], "providers": rows}, {"waitSeconds": 1.0})


def test_a_wave_not_eligible_is_not_hidden_by_a_later_wave_that_converged():
    first = _wait("not-eligible", {"p-a": False, "p-b": True}, ("p-a for c-a: stored, not eligible (x)",))
    results = folded(first, _wait("converged", {"p-c": True}))
    assert results.convergence is not None
    assert results.convergence["state"] == "not-eligible"
    assert results.convergence["notEligible"] == ["p-a for c-a: stored, not eligible (x)"]
    assert [(p["provider"], p["ok"]) for p in results.convergence["providers"]] == [
        ("p-a", False),
        ("p-b", True),
        ("p-c", True),
    ]
    report = build_report(results, Ending("not eligible"), events={"recorded": 0, "notRecorded": []}, total_seconds=2.0)
    assert report.exit_code is ExitCode.NOT_ELIGIBLE
    check_report(report.to_dict(), "ProviderDrainReport")  # the folded section keeps its schema
    assert report.timings["waitSeconds"] == 2.0


def test_every_waves_not_eligible_providers_are_named_and_the_worst_state_kept():
    results = folded(
        _wait("not-eligible", {"p-a": False}, ("p-a for c-a: a",)),
        _wait("converged", {"p-b": True}),
        _wait("not-eligible", {"p-c": False}, ("p-c for c-a: c",)),
    )
    assert results.convergence is not None
    assert results.convergence["state"] == "not-eligible"
    assert results.convergence["notEligible"] == ["p-a for c-a: a", "p-c for c-a: c"]
    after_timeout = folded(_wait("not-eligible", {"p-a": False}, ("p-a for c-a: a",)), _wait("timeout", {}))
    assert after_timeout.convergence is not None and after_timeout.convergence["state"] == "timeout"
    assert folded(_wait("converged", {"p-a": True})).convergence == _wait("converged", {"p-a": True}).convergence
