"""Unit tests for the drain's pure core: selection, planning, capacity guard, restoration
decisions, the convergence predicate and exit-code mapping."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agn.model import (
    ADMITTED,
    EXISTING_ONLY,
    Candidate,
    ConsumerView,
    NetworkView,
    Overlay,
    ProviderView,
    group_admitted_counts,
)
from xtask.drain.core.changes import (
    OPERATION,
    REASON,
    RestoreDecision,
    drain_patch,
    group_counts,
    plan_changes,
    restore_decision,
    restore_patch,
    violations_of,
)
from xtask.drain.core.converge import Agreement, Convergence, Observation, evaluate, targets_problems
from xtask.drain.core.selection import Selector, select
from xtask.drain.core.states import WaitState
from xtask.drain.edges.waiter import WaitResult
from xtask.drain.render import convergence_dict
from xtask.drain.report import Report, exit_code
from xtask.errors import ExitCode, RefusedError, UsageError


def prov(name, gateway=None, drain=None, rv="1", gen=1, annotations=None):
    spec = {"endpoint": f"http://127.0.0.1/{name}"}
    if gateway:
        spec["providerGateway"] = gateway
    if drain is not None:
        spec["trafficPolicy"] = {"drain": drain}
    return {
        "metadata": {"name": name, "resourceVersion": rv, "generation": gen, "annotations": annotations or {}},
        "spec": spec,
    }


PROVIDERS = [prov("p-c", "gw-a"), prov("p-a", "gw-a"), prov("p-b", "gw-b"), prov("p-d", "gw-a-extra")]


class TestSelection:
    def test_gateway_selects_exact_field_sorted(self):
        got = [p["metadata"]["name"] for p in select(PROVIDERS, Selector(gateway="gw-a"), namespace="ns")]
        assert got == ["p-a", "p-c"]  # not p-d, whose gateway merely starts with gw-a

    def test_gateway_never_inferred_from_endpoint(self):
        items = [{"metadata": {"name": "x"}, "spec": {"endpoint": "http://gw-a.example/"}}]
        with pytest.raises(RefusedError):
            select(items, Selector(gateway="gw-a"), namespace="ns")

    def test_single_provider(self):
        assert [p["metadata"]["name"] for p in select(PROVIDERS, Selector(provider="p-b"), namespace="ns")] == ["p-b"]

    def test_missing_provider_is_refused(self):
        with pytest.raises(RefusedError, match="not found"):
            select(PROVIDERS, Selector(provider="nope"), namespace="ns")

    def test_empty_gateway_names_known_gateways(self):
        with pytest.raises(RefusedError) as exc:
            select(PROVIDERS, Selector(gateway="gw-z"), namespace="ns")
        assert "gw-a" in exc.value.hint

    @pytest.mark.parametrize("kwargs", [{}, {"provider": "a", "gateway": "b"}, {"provider": ""}])
    def test_exactly_one_selector(self, kwargs):
        with pytest.raises(UsageError):
            Selector(**kwargs)


class TestPlan:
    def test_plan_marks_already_in_state(self):
        changes = plan_changes([prov("a", drain=True), prov("b"), prov("c", drain=False)], requested=True)
        assert [(c.provider, c.previous, c.already) for c in changes] == [
            ("a", True, True),
            ("b", None, False),
            ("c", False, False),
        ]

    def test_drain_patch_touches_only_the_field_and_our_annotations(self):
        (change,) = plan_changes([prov("a", rv="42")], requested=True)
        patch = drain_patch(change, operation="op1", actor="me@host", at="t", reason="kernel upgrade")
        assert patch["spec"] == {"trafficPolicy": {"drain": True}}
        assert patch["metadata"]["resourceVersion"] == "42"
        assert patch["metadata"]["annotations"][REASON] == "kernel upgrade"
        assert set(patch) == {"metadata", "spec"}

    def test_undrain_clears_reason(self):
        (change,) = plan_changes([prov("a", drain=True, annotations={REASON: "x"})], requested=False)
        patch = drain_patch(change, operation="op2", actor="me", at="t", reason=None)
        assert patch["metadata"]["annotations"][REASON] is None
        assert patch["metadata"]["annotations"][OPERATION] == "op2"

    def test_restore_patch_puts_back_omitted_field_as_omitted(self):
        (change,) = plan_changes([prov("a")], requested=True)
        patch = restore_patch(change, resource_version="9")
        assert patch["spec"]["trafficPolicy"]["drain"] is None  # merge-patch null removes the field
        assert patch["metadata"]["annotations"][REASON] is None


OURS = {OPERATION: "op-1"}


class TestRestoreDecision:
    def setup_method(self):
        (self.change,) = plan_changes([prov("a", drain=False, gen=3)], requested=True)

    def decide(self, current):
        return restore_decision(self.change, operation="op-1", written_generation=4, current=current)

    def test_restore_when_untouched_since_our_write(self):
        assert self.decide(prov("a", drain=True, gen=4, annotations=OURS)) is RestoreDecision.RESTORE

    def test_other_writer_changed_spec(self):
        # Someone else toggled the field and back: the generation moved past ours.
        assert self.decide(prov("a", drain=True, gen=6, annotations=OURS)) is RestoreDecision.OTHER_WRITER

    def test_another_operation_stamped_it(self):
        # Same value and generation, but another drain run's write: not ours to undo.
        assert (
            self.decide(prov("a", drain=True, gen=4, annotations={OPERATION: "op-2"})) is RestoreDecision.OTHER_WRITER
        )

    def test_already_back(self):
        assert self.decide(prov("a", drain=False, gen=5)) is RestoreDecision.ALREADY

    def test_a_write_that_never_landed_is_already_at_the_previous_value(self):
        assert self.decide(prov("a", drain=False, gen=3)) is RestoreDecision.ALREADY

    def test_deleted(self):
        assert self.decide(None) is RestoreDecision.GONE


def cand(cid, provider, group, state=ADMITTED, rank=0):
    return Candidate(cid, provider, f"http://{provider}", group, rank, state)


class TestCapacityGuard:
    overlay = Overlay(
        "net",
        "c1",
        3,
        "d",
        (
            cand("1", "one", "chat"),
            cand("2", "two", "embed"),
            cand("3", "three", "chat"),
            cand("4", "four", "embed"),
        ),
    )

    @staticmethod
    def violations(overlays, drained):
        """The capacity guard's reading of whole overlays (xtask/drain/core/guard.py's path)."""
        return [
            v
            for consumer, overlay in sorted(overlays.items())
            for v in violations_of(
                group_counts(
                    consumer, group_admitted_counts(overlay.candidates), overlay.candidates, drained, requested=True
                )
            )
        ]

    def test_mixed_gateway_drain_is_allowed(self):
        assert self.violations({"c1": self.overlay}, ["one", "two"]) == []

    def test_emptying_a_group_is_refused_naming_group_and_consumer(self):
        (v,) = self.violations({"c1": self.overlay}, ["one", "three"])
        assert (v.consumer, v.group, v.admitted_now) == ("c1", "chat", 2)
        assert "c1" in v.describe() and "chat" in v.describe()

    def test_group_already_without_admitted_is_not_a_new_violation(self):
        overlay = Overlay("net", "c1", 3, "d", (cand("1", "one", "chat", EXISTING_ONLY),))
        assert self.violations({"c1": overlay}, ["one"]) == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["chat", "embed", "code"]), st.sampled_from([ADMITTED, EXISTING_ONLY])),
        min_size=1,
        max_size=12,
    ),
    st.data(),
)
def test_the_guard_from_group_counts_and_the_drained_candidates_equals_the_whole_overlay_guard(rows, data):
    """The capacity guard of a sharded overlay reads the index's admittedByGroup and only the
    shards holding the providers to drain; it must refuse exactly what the whole-overlay guard does."""
    cands = tuple(cand(str(i), f"p{i}", group, state) for i, (group, state) in enumerate(rows))
    overlay = Overlay("net", "c1", 3, "d", cands)
    drained = data.draw(st.lists(st.sampled_from([c.provider for c in cands] + ["gone"]), unique=True))
    counts = group_admitted_counts(cands)
    only_drained = [c for c in cands if c.provider in drained]
    # the shards holding the drained providers' candidates judge as the whole overlay does
    partial = violations_of(group_counts("c1", counts, only_drained, drained, requested=True))
    assert partial == violations_of(group_counts("c1", counts, overlay.candidates, drained, requested=True))


def pview(name, drain, healthy=True):
    return ProviderView(
        name=name,
        endpoint="http://127.0.0.1:1",
        candidate_id=f"id-{name}",
        selection_group="g",
        drain=drain,
        healthy=healthy,
        metrics_observed_at=1000.0,
    )


def observation(*, drain=True, state=EXISTING_ONLY, revision=5, accepted=5, serving=5, healthy=True, present=True):
    cands = (cand("id-p", "p", "g", state),) if present else ()
    return Observation(
        providers={"p": pview("p", drain, healthy)},
        network=NetworkView("net"),
        consumers={"c": ConsumerView("c", "net")},
        revisions={"c": (accepted, serving)},
        overlays={"c": Overlay("net", "c", revision, f"d{revision}", cands)},
        now=1001.0,
    )


class TestConvergence:
    def test_drain_converged(self):
        assert evaluate(observation(), drain=True).state is Convergence.CONVERGED

    def test_serving_older_revision_is_lagging_and_named(self):
        v = evaluate(observation(serving=4), drain=True)
        assert v.state is Convergence.WAITING
        assert any("consumer c" in lag and "serving 4" in lag for lag in v.lagging)

    def test_passed_revision_counts(self):
        assert evaluate(observation(accepted=7, serving=6), drain=True).state is Convergence.CONVERGED

    def test_still_admitted_is_waiting(self):
        v = evaluate(observation(state=ADMITTED), drain=True)
        assert v.state is Convergence.WAITING and "want existing_only" in v.lagging[-1]

    def test_spec_not_yet_stored_is_waiting(self):
        assert evaluate(observation(drain=False), drain=True).state is Convergence.WAITING

    def test_drained_and_excluded_is_fine(self):
        v = evaluate(observation(healthy=False, present=False), drain=True)
        assert v.state is Convergence.CONVERGED
        assert v.providers[0].detail == "excluded: unavailable"

    def test_undrain_of_unhealthy_is_not_eligible_never_converged(self):
        v = evaluate(observation(drain=False, healthy=False, present=False), drain=False)
        assert v.state is Convergence.NOT_ELIGIBLE
        assert "not eligible until healthy" in v.not_eligible[0]

    def test_undrain_absent_without_hard_failure_is_waiting(self):
        assert evaluate(observation(drain=False, present=False), drain=False).state is Convergence.WAITING

    def test_two_agreeing_observations_required(self):
        agreement = Agreement()
        assert not agreement.add(evaluate(observation(), drain=True))
        assert agreement.add(evaluate(observation(), drain=True))

    def test_disagreeing_observations_restart_the_count(self):
        agreement = Agreement()
        assert not agreement.add(evaluate(observation(revision=5), drain=True))
        assert not agreement.add(evaluate(observation(revision=6, accepted=6, serving=6), drain=True))
        assert agreement.add(evaluate(observation(revision=6, accepted=6, serving=6), drain=True))

    def test_waiting_observations_never_agree(self):
        agreement = Agreement()
        agreement.add(evaluate(observation(serving=4), drain=True))
        assert not agreement.add(evaluate(observation(serving=4), drain=True))

    def test_target_problems(self):
        probs = targets_problems(
            network=NetworkView("net", match_labels={"x": "y"}),
            network_name="net",
            consumers={"a": ConsumerView("a", "other"), "b": None},
            providers=[pview("p", True)],
        )
        assert any("belongs to network 'other'" in p for p in probs)
        assert any("consumer 'b' not found" in p for p in probs)
        assert any("not selected by network" in p for p in probs)


def test_the_convergence_section_lists_consumers_only_whatever_the_number_of_providers():
    """The verdict's signature ends with the providers' (name, drain) pairs; five selected
    providers make that a 5-tuple too, which is not a consumer's entry."""
    names = [f"p{i}" for i in range(5)]
    cands = tuple(cand(f"id-{n}", n, "g", EXISTING_ONLY) for n in names)
    obs = Observation(
        providers={n: pview(n, True) for n in names},
        network=NetworkView("net"),
        consumers={"c": ConsumerView("c", "net")},
        revisions={"c": (5, 5)},
        overlays={"c": Overlay("net", "c", 5, "d5", cands)},
        now=1001.0,
    )
    verdict = evaluate(obs, drain=True)
    section = convergence_dict(WaitResult(WaitState.CONVERGED, verdict, 2, 0.1))
    assert section["consumers"] == [
        {"consumer": "c", "overlayRevision": 5, "acceptedRevision": 5, "servingRevision": 5}
    ]


def code_of(**fields) -> ExitCode:
    """The exit code of a report with ``fields`` (the rest as a run that wrote nothing)."""
    return exit_code(
        Report(context=None, namespace="ns", request="drain", selector="provider p", dry_run=False, **fields)
    )


FAILED = {"provider": "p", "outcome": "failed", "status": 500}


class TestExitCodes:
    def base(self, **kw):
        return code_of(**kw)

    def test_codes_are_distinct(self):
        assert len({c.value for c in ExitCode}) == len(ExitCode)

    def test_mapping(self):
        assert self.base() is ExitCode.OK
        assert self.base(refused=["no"]) is ExitCode.REFUSED
        assert self.base(outcomes=[FAILED], restorations=[{"outcome": "restored"}]) is ExitCode.PARTIAL_RESTORED
        bad = [{"outcome": "changed-by-another-writer"}]
        assert self.base(outcomes=[FAILED], restorations=bad) is ExitCode.NEEDS_INSPECTION
        assert self.base(interrupted="SIGINT", restorations=[{"outcome": "restored"}]) is ExitCode.INTERRUPTED
        assert self.base(convergence={"state": "timeout"}) is ExitCode.TIMEOUT
        assert self.base(convergence={"state": "not-eligible"}) is ExitCode.NOT_ELIGIBLE
        assert self.base(convergence={"state": "interrupted"}, interrupted="SIGINT") is ExitCode.INTERRUPTED
        assert self.base(convergence={"state": "converged"}) is ExitCode.OK
        assert self.base(stored={"ok": False, "providers": {}}) is ExitCode.NEEDS_INSPECTION

    def test_writes_the_api_server_refused_on_their_merits_are_a_refusal(self):
        denied = {"provider": "p", "outcome": "failed", "status": 403}
        restored = [{"outcome": "restored"}]
        assert self.base(outcomes=[denied], restorations=restored) is ExitCode.REFUSED
        assert self.base(outcomes=[denied, FAILED], restorations=restored) is ExitCode.PARTIAL_RESTORED
