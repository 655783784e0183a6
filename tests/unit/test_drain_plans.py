"""The pure parts of plans and budgets: the plan document, its digest and shape, the checks of a
plan against what is read now (with an injected clock), the budget rows, the admitted counts
before and after, and the duration flag."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import stat

import click
import pytest
import yaml
from jsonschema import Draft202012Validator

from agn.model import Candidate
from reportschema import SCHEMAS
from xtask.drain.core.amounts import Amount
from xtask.drain.core.budget import group_budgets
from xtask.drain.core.changes import GroupCount, group_counts, violations_of
from xtask.drain.core.holds import HOLD_PREFIX, holds_of
from xtask.drain.core.plandoc import LoadedPlan
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.selection import Selector
from xtask.drain.edges.planfile import (
    PlanError,
    PlanInputs,
    build_plan,
    load_plan,
    plan_differences,
    plan_digest,
    plan_problems,
    write_plan,
)
from xtask.errors import UsageError
from xtask.params import DurationType

T0 = 1_800_000_000.0  # the plans' clock: a fixed instant, so no test reads the wall clock
CLUSTER = "https://127.0.0.1:6443"
PLAN_SCHEMA = Draft202012Validator(json.loads((SCHEMAS / "provider-drain-plan.schema.json").read_text()))


def provider(name: str, *, rv: str = "1", gen: int = 1, drain=None, group: str = "chat", labels=None, **status):
    obj = {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "generation": gen,
            "labels": {"net": "yes", **(labels or {})},
        },
        "spec": {"endpoint": f"http://127.0.0.1:9/{name}", "selectionGroup": group, "providerGateway": "gw"},
        "status": status or {"probe": {"healthy": True, "metricsObservedAt": "2027-01-15T08:00:00Z"}},
    }
    if drain is not None:
        obj["spec"]["trafficPolicy"] = {"drain": drain}
    return obj


def a_plan(selected=None, *, created_at: float = T0, **changes) -> dict:
    selected = selected if selected is not None else [provider("p-one"), provider("p-two", rv="7")]
    request = DrainRequest(
        selector=Selector(gateway="gw"),
        drain=True,
        reason="kernel",
        network="net",
        consumers=("c-a",),
        max_unavailable=Amount(50, percent=True),
        wave_size=Amount(1),
    )
    inputs = PlanInputs(
        created_at=created_at,
        created_by="me@here",
        context="local-tests",
        cluster=CLUSTER,
        namespace="ns",
        request=request,
        selected=selected,
        to_change=[p["metadata"]["name"] for p in selected],
        groups=[GroupCount("c-a", "chat", 2, 0).to_dict()],
        budget=[],
        waves=[["p-one"], ["p-two"]],
    )
    return build_plan(dataclasses.replace(inputs, **changes))


def loaded(doc: dict) -> LoadedPlan:
    return LoadedPlan(None, doc)  # type: ignore[arg-type]


# -- the document --------------------------------------------------------------------------------
def test_a_plan_matches_its_schema_and_its_own_shape_check():
    doc = a_plan([provider("p-one", drain=False)])
    assert list(PLAN_SCHEMA.iter_errors(doc)) == []
    assert plan_problems(doc) == []
    assert doc["spec"]["selection"][0] == {
        "name": "p-one",
        "uid": "uid-p-one",
        "resourceVersion": "1",
        "generation": 1,
        "drain": False,
        "holders": [],
        "labels": {"net": "yes"},
    }
    assert doc["metadata"]["createdAt"].startswith("2027-01-15T08:00:00")


def test_the_digest_covers_everything_but_itself():
    doc = a_plan()
    assert doc["metadata"]["digest"] == plan_digest(doc)
    for path in (("metadata", "createdAt"), ("spec", "operation", "request"), ("spec", "changes")):
        edited = copy.deepcopy(doc)
        node = edited
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = "2020-01-01T00:00:00Z" if path[-1] == "createdAt" else "undrain"
        assert plan_digest(edited) != doc["metadata"]["digest"], path
    assert plan_digest({**doc, "metadata": {**doc["metadata"], "digest": "x"}}) == doc["metadata"]["digest"]


BROKEN = {
    "no-kind": (lambda d: d.pop("kind"), "kind is required"),
    "wrong-kind": (lambda d: d.update(kind="Pod"), "kind must be one of ProviderDrainPlan"),
    "rv-number": (lambda d: d["spec"]["selection"][0].update(resourceVersion=7), "resourceVersion must be a string"),
    "extra-field": (lambda d: d["spec"].update(extra=1), "spec.extra: unknown field"),
    "bad-request": (lambda d: d["spec"]["operation"].update(request="stop"), "must be one of drain, undrain"),
    "bad-time": (lambda d: d["metadata"].update(createdAt="yesterday"), "must be an RFC 3339 time"),
    "bad-amount": (lambda d: d["spec"]["waves"].update(size="-1"), "spec.waves.size"),
    "generation-bool": (lambda d: d["spec"]["selection"][0].update(generation=True), "generation must be an integer"),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_plan_is_refused_by_the_check_and_the_schema_alike(name):
    change, message = BROKEN[name]
    doc = a_plan()
    change(doc)
    problems = plan_problems(doc)
    assert any(message in p for p in problems), problems
    assert list(PLAN_SCHEMA.iter_errors(doc)), "the JSON Schema accepts what the check refuses"


def test_a_plan_naming_both_or_no_selector_is_refused():
    doc = a_plan()
    doc["spec"]["selector"] = {"provider": "p-one", "gateway": "gw"}
    assert plan_problems(doc) == ["spec.selector must name exactly one of provider and gateway"]


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".json"])
def test_write_then_load_round_trips_in_both_formats(tmp_path, suffix):
    doc = a_plan()
    path = tmp_path / f"plan{suffix}"
    write_plan(path, doc)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    text = path.read_text()
    assert (json.loads(text) if suffix == ".json" else yaml.safe_load(text)) == doc
    assert load_plan(path).doc == doc
    assert load_plan(path).request_fields()["wave_size"] == Amount(1)


def test_a_plan_records_the_hold_it_writes_and_gives_it_back_to_the_run_applying_it(tmp_path):
    request = DrainRequest(
        selector=Selector(provider="p-one"), drain=True, holder="alice", ticket="CHG-7", expires_in=600
    )
    doc = a_plan(request=request)
    assert doc["spec"]["hold"] == {"holder": "alice", "ticket": "CHG-7", "expiresIn": 600, "releaseAll": False}
    assert doc["metadata"]["arguments"] == [
        "--provider",
        "p-one",
        "--holder",
        "alice",
        "--ticket",
        "CHG-7",
        "--expires-in",
        "600",
    ]
    assert list(PLAN_SCHEMA.iter_errors(doc)) == [] and plan_problems(doc) == []
    path = tmp_path / "plan.yaml"
    write_plan(path, doc)
    fields = load_plan(path).request_fields()
    assert (fields["holder"], fields["ticket"], fields["expires_in"], fields["release_all"]) == (
        "alice",
        "CHG-7",
        600,
        False,
    )
    # Without --holder the plan names who made it, so the hold applied is the one reviewed.
    unnamed = a_plan(request=DrainRequest(selector=Selector(provider="p-one"), drain=True))
    assert unnamed["spec"]["hold"]["holder"] and "--holder" not in unnamed["metadata"]["arguments"]


def test_writing_replaces_a_symlink_and_never_writes_through_it(tmp_path):
    mine = tmp_path / "mine.txt"
    mine.write_text("keep me")
    link = tmp_path / "plan.yaml"
    link.symlink_to(mine)
    write_plan(link, a_plan())
    assert mine.read_text() == "keep me"
    assert not link.is_symlink() and load_plan(link).digest


def test_an_unknown_extension_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="name a .yaml, .yml or .json file"):
        write_plan(tmp_path / "plan.txt", a_plan())


def test_an_edited_or_malformed_file_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "plan.yaml"
    write_plan(path, a_plan())
    path.write_text(path.read_text().replace("reason: kernel", "reason: other"))
    with pytest.raises(PlanError, match=r"plan .*plan.yaml: its digest does not match its content"):
        load_plan(path)
    path.write_text("apiVersion: [\n")
    with pytest.raises(PlanError, match="not a plan: not valid YAML"):
        load_plan(path)
    path.write_text("- 1\n")
    with pytest.raises(PlanError, match=r"not a valid ProviderDrainPlan: \(top level\) must be a mapping"):
        load_plan(path)


# -- the plan against what is read now -------------------------------------------------------------
def check(doc, selected, *, now=T0 + 60, max_age=3600.0, cluster=CLUSTER, namespace="ns"):
    return plan_differences(loaded(doc), selected, cluster=cluster, namespace=namespace, now=now, max_age=max_age)


def test_an_unchanged_selection_within_the_age_applies():
    assert check(a_plan(), [provider("p-one"), provider("p-two", rv="7")]) == []


def test_each_difference_is_named():
    doc = a_plan()
    now = [provider("p-two", rv="9", gen=2), provider("p-three")]
    assert check(doc, now, cluster="https://elsewhere:6443", namespace="other") == [
        f"the plan is for cluster {CLUSTER}, this context's is https://elsewhere:6443",
        "the plan is for namespace ns, not other",
        "provider p-three joined the selection since the plan was made",
        "provider p-one left the selection since the plan was made",
        "provider p-two changed since the plan was made (its spec: resourceVersion 7 -> 9)",
    ]


def test_a_recreated_provider_and_its_holds_or_labels_changing_are_changes():
    doc = a_plan()
    recreated = provider("p-one")
    recreated["metadata"]["uid"] = "uid-new"
    relabelled = provider("p-two", rv="8", labels={"rack": "r7"})
    assert check(doc, [recreated, relabelled]) == [
        "provider p-one was deleted and created again since the plan was made (uid uid-p-one)",
        "provider p-two changed since the plan was made (its labels: resourceVersion 7 -> 8)",
    ]
    held = provider("p-two", rv="8")
    held["metadata"]["annotations"] = {
        HOLD_PREFIX
        + "bob": '{"holder":"bob","reason":null,"ticket":null,"since":"2027-01-15T08:00:00Z","expiresAt":null,"operation":"op"}'
    }
    assert check(doc, [provider("p-one"), held]) == [
        "provider p-two changed since the plan was made (its drain holds: resourceVersion 7 -> 8)"
    ]


def test_a_status_only_change_never_makes_a_plan_stale():
    """The operator rewrites a drained provider's status with each load reading: an undrain plan
    must still apply seconds later. Only the resourceVersion moved."""
    doc = a_plan()
    reread = provider("p-two", rv="8", load={"running": 0, "waiting": 0, "observedAt": "2027-01-15T08:00:05Z"})
    assert check(doc, [provider("p-one"), reread]) == []


def test_the_age_is_measured_on_the_given_clock():
    doc = a_plan(created_at=T0)
    selected = [provider("p-one"), provider("p-two", rv="7")]
    assert check(doc, selected, now=T0 + 3600) == []
    (too_old,) = check(doc, selected, now=T0 + 3601)
    assert too_old.startswith("the plan is 1h old") or "older than --max-plan-age 1h" in too_old
    (too_old,) = check(doc, selected, now=T0 + 2, max_age=1.0)
    assert too_old.endswith("older than --max-plan-age 1.0s")


# -- the budget -----------------------------------------------------------------------------------
NETWORKS = [
    {"metadata": {"name": "net"}, "spec": {"providerSelector": {"matchLabels": {"net": "yes"}}}},
    {"metadata": {"name": "other"}, "spec": {"providerSelector": {"matchLabels": {"other": "yes"}}}},
]
NOW = 1_800_000_010.0  # ten seconds after the providers' readings: fresh


def test_budget_counts_drained_and_hard_failures_per_network_and_group():
    providers = [
        provider("a1"),
        provider("a2", drain=True),
        provider("a3", probe={"healthy": False}),
        provider("a4"),
        provider("b1", group="embed"),
    ]
    (row,) = group_budgets(providers, NETWORKS, ["a1"], Amount(2), heartbeat=None, now=NOW)
    assert (row.network, row.group, row.size, row.budget) == ("net", "chat", 4, 2)
    assert (row.drained, row.failed, row.by_this_run) == (("a2",), ("a3",), ("a1",))
    assert (row.unavailable_now, row.unavailable_after, row.exceeded) == (2, 3, True)
    assert row.describe(Amount(2)).startswith(
        "budget: network net, selection group 'chat': 3 of 4 provider(s) would be unavailable (1 drained, "
        "1 out for a hard failure, 1 drained by this run: a1)"
    )
    (row,) = group_budgets(providers, NETWORKS, ["a1"], Amount(75, percent=True), heartbeat=None, now=NOW)
    assert (row.budget, row.exceeded) == (3, False)


def test_budget_checks_only_groups_the_run_adds_to_in_every_network_selecting_them():
    providers = [provider("a1", labels={"other": "yes"}), provider("a2", probe={"healthy": False})]
    rows = group_budgets(providers, NETWORKS, ["a1"], Amount(0), heartbeat=None, now=NOW)
    assert [(r.network, r.group, r.exceeded) for r in rows] == [("net", "chat", True), ("other", "chat", True)]
    # Draining a provider already out (failed) adds nothing: not refused even over the budget.
    (row,) = group_budgets(providers, NETWORKS[:1], ["a2"], Amount(0), heartbeat=None, now=NOW)
    assert (row.unavailable_after, row.exceeded) == (1, False)
    # A stale reading is a hard failure as the model says (metricsMaxAgeSeconds, default 45 s).
    (row,) = group_budgets(providers[:1], NETWORKS[:1], ["a1"], Amount(1), heartbeat=None, now=NOW + 3600)
    assert (row.failed, row.by_this_run) == (("a1",), ())


# -- the admitted counts the guard computes and a plan records ----------------------------------------
def cand(provider: str, group: str, state: str = "admitted") -> Candidate:
    return Candidate(f"c-{provider}", provider, "http://x", group, 0, state)


def test_group_counts_before_and_after_for_a_drain_and_an_undrain():
    cands = [cand("a", "chat"), cand("b", "chat"), cand("c", "embed", "existing_only"), cand("d", "embed")]
    drained = group_counts("c-a", {"chat": 2, "embed": 1}, cands, ["a", "c"], requested=True)
    assert drained == [GroupCount("c-a", "chat", 2, 1), GroupCount("c-a", "embed", 1, 1)]
    assert violations_of(group_counts("c-a", {"chat": 2}, cands, ["a", "b"], requested=True))[0].group == "chat"
    undrained = group_counts("c-a", {"chat": 2, "embed": 1}, cands, ["c"], requested=False)
    assert undrained == [GroupCount("c-a", "embed", 1, 2)]


# -- holds and durations ---------------------------------------------------------------------------
def test_holds_are_read_sorted_and_bad_ones_reported():
    obj = {
        "metadata": {
            "annotations": {
                HOLD_PREFIX + "b": json.dumps({"holder": "bob", "reason": "x"}),
                HOLD_PREFIX + "a": json.dumps({"holder": "alice", "reason": "y"}),
                HOLD_PREFIX + "z": "not json",
                "other": "ignored",
            }
        }
    }
    assert [h["holder"] for h in holds_of(obj)] == ["alice", "bob", None]
    assert holds_of(obj)[2] == {"holder": None, "key": HOLD_PREFIX + "z", "owner": None, "invalid": True}


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("1h", 3600), ("1h30m", 5400), ("1d", 86400)]
)
def test_durations(text, seconds):
    assert DurationType(whole=True).convert(text, None, None) == seconds  # --max-plan-age's type


@pytest.mark.parametrize("text", ["", "0", "-1h", "0s", "h", "1h 30m", "2w", "nan"])
def test_bad_durations_are_usage_errors(text):
    with pytest.raises(click.BadParameter, match="duration"):
        DurationType().convert(text, None, None)
