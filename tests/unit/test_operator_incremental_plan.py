"""A consumer's plan moved by the verdict's delta equals the plan made from scratch, and the work
it does is sized by the change: one drained provider rebuilds one shard and nothing else."""

from __future__ import annotations

import dataclasses
import io
import threading

import hypothesis.strategies as st
from hypothesis import given, settings

from agn.logs import JsonLog
from agn.model import (
    ADMITTED,
    EXISTING_ONLY,
    Candidate,
    ConsumerView,
    NetworkView,
    Overlay,
    ProviderView,
    candidate_id,
    compute_candidates,
    digest_of_rows,
    overlay_digest,
)
from agn.operator.controller import Operator
from agn.operator.diffing import diff_candidates, publication_diff
from agn.operator.reconcile import Plan, Planned, advance, fresh_plan, plan_overlay
from agn.operator.settings import Settings
from agn.operator.verdicts import HISTORY, Verdicts, changed_since
from agn.shards import split

NOW = 1_000_000.0
NET = NetworkView("net", match_labels={"pool": "a"}, metrics_max_age_seconds=45)


def view(i: int, *, uid: str | None = None, **kw) -> ProviderView:
    base = dict(
        name=f"p{i:02d}",
        endpoint=f"http://127.0.0.1:9000/pool/p{i}/",
        candidate_id=candidate_id(uid or f"uid-{i}"),
        selection_group=f"g{i % 3}",
        rank=i % 2,
        labels={"pool": "a"},
        healthy=True,
        metrics_observed_at=NOW,
    )
    base.update(kw)
    return ProviderView(**base)  # type: ignore[arg-type]


def full(consumer: ConsumerView, verdicts_judged, previous: Overlay | None, count: int):
    overlay = plan_overlay(consumer, verdicts_judged, previous=previous)
    return overlay, split(overlay, count)


def from_plan(plan: Plan, previous: Overlay | None):
    overlay = plan.overlay(previous)
    return overlay, plan.sharded(overlay)


OPS = [
    "drain",
    "undrain",
    "fail",
    "heal",
    "refresh",
    "relabel",
    "endpoint",
    "rank",
    "group",
    "remove",
    "recreate",
    "exclude",
    "include",
    "wait",
    "skip",
    "publish",
    "shards",
]
steps = st.lists(st.tuples(st.integers(min_value=0, max_value=13), st.sampled_from(OPS)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(steps=steps, count=st.integers(min_value=1, max_value=5))
def test_the_plan_moved_by_deltas_is_the_plan_made_from_scratch(steps, count):
    verdicts = Verdicts()
    fleet = {i: view(i) for i in range(3)}  # the rest are added by the steps (shards fill, empty)
    consumer = ConsumerView("c1", "net", excluded_providers=frozenset({"p05"}))
    now = NOW
    plan: Plan | None = None
    previous: Overlay | None = None
    published_count = count
    recreated = 0
    for i, step in steps:
        p = fleet.get(i) or view(i)
        if step == "wait":
            now += 20
        elif step == "remove":
            fleet.pop(i, None)
        elif step == "recreate":  # same name, new uid: a new candidate id
            recreated += 1
            fleet[i] = view(i, uid=f"uid-{i}-again-{recreated}", drain=p.drain)
        elif step in ("exclude", "include"):
            names = set(consumer.excluded_providers)
            (names.add if step == "exclude" else names.discard)(p.name)
            consumer = dataclasses.replace(consumer, excluded_providers=frozenset(names))
        elif step == "shards":
            count = count % 5 + 1
        elif step not in ("skip", "publish"):
            changes = {
                "drain": {"drain": True},
                "undrain": {"drain": False},
                "fail": {"healthy": False},
                "heal": {"healthy": True},
                "refresh": {"metrics_observed_at": now},
                "relabel": {"labels": {"pool": "b" if p.labels.get("pool") == "a" else "a"}},
                "endpoint": {"endpoint": p.endpoint + "x/"},
                "rank": {"rank": p.rank + 1},
                "group": {"selection_group": p.selection_group + "h"},
            }[step]
            fleet[i] = dataclasses.replace(p, **changes)
        providers = tuple(fleet.values())
        judged = verdicts.evaluate(NET, providers, now=now)
        if step == "skip":
            continue  # this version is not planned: the next plan spans several deltas
        before = plan
        plan = advance(plan, consumer, judged, count)
        got = from_plan(plan, previous)
        want = full(consumer, judged, previous, count)
        assert got == want
        assert got[0].candidates == compute_candidates(providers, NET, consumer, now=now)
        if before is not None and (before.consumer, before.shard_count) == (consumer, count):
            assert plan is before or not plan.full  # within the history: kept, or moved by its delta
        if previous is not None:  # the one diff over changed shards is the diff of whole overlays
            current, shards = stored_objects(split(previous, published_count))
            change = publication_diff(Planned(plan, *got), current, shards, None)
            assert change.diff == diff_candidates(previous.candidates, got[0].candidates)
            assert (change.shards_compared is None) == (published_count != count)
        if step == "publish":
            previous, published_count = got[0], count


def test_a_one_provider_drain_rebuilds_one_shard_and_keeps_everything_else():
    verdicts = Verdicts()
    fleet = [view(i, name=f"p{i:04d}", uid=f"u{i}") for i in range(5000)]
    consumer = ConsumerView("c1", "net")
    first = verdicts.evaluate(NET, tuple(fleet), now=NOW)
    plan = fresh_plan(consumer, first, 16)
    assert plan.full and len(plan.rebuilt) == 16
    fleet[1234] = dataclasses.replace(fleet[1234], drain=True)
    drained = verdicts.evaluate(NET, tuple(fleet), now=NOW)
    assert changed_since(drained, first.version) == {"p1234"}
    moved = advance(plan, consumer, drained, 16)
    home = next(n for n, s in moved.specs.items() if any(c["provider"] == "p1234" for c in s["candidates"]))
    assert not moved.full and moved.rebuilt == {home}
    for name, spec in moved.specs.items():
        assert (spec is plan.specs[name]) == (name != home)
    # Unchanged providers keep their Candidate objects (and so their cached digest rows).
    same = sum(a is b for a, b in zip(plan.candidates, moved.candidates, strict=True))
    assert same == 4999
    assert from_plan(moved, plan.overlay(None)) == full(consumer, drained, plan.overlay(None), 16)
    assert moved.overlay(plan.overlay(None)).revision == 2
    assert moved.states == {ADMITTED: 4999, EXISTING_ONLY: 1}


def test_a_plan_older_than_the_history_or_of_another_network_is_made_afresh():
    verdicts = Verdicts()
    fleet = [view(i) for i in range(4)]
    consumer = ConsumerView("c1", "net")
    plan = fresh_plan(consumer, verdicts.evaluate(NET, tuple(fleet), now=NOW), 2)
    for k in range(HISTORY + 1):
        fleet[0] = dataclasses.replace(fleet[0], rank=k + 10)
        judged = verdicts.evaluate(NET, tuple(fleet), now=NOW)
    assert changed_since(judged, plan.version) is None
    again = advance(plan, consumer, judged, 2)
    assert again.full and from_plan(again, None) == full(consumer, judged, None, 2)
    # Within the history: by delta.
    fleet[1] = dataclasses.replace(fleet[1], drain=True)
    assert not advance(again, consumer, verdicts.evaluate(NET, tuple(fleet), now=NOW), 2).full
    wider = dataclasses.replace(NET, match_labels={})
    assert advance(again, consumer, verdicts.evaluate(wider, tuple(fleet), now=NOW), 2).full


def test_a_delta_of_most_of_the_fleet_is_planned_afresh():
    verdicts, consumer = Verdicts(), ConsumerView("c1", "net")
    fleet = [view(i) for i in range(400)]
    plan = fresh_plan(consumer, verdicts.evaluate(NET, tuple(fleet), now=NOW), 4)
    few = [dataclasses.replace(p, drain=i < 40) for i, p in enumerate(fleet)]
    assert not advance(plan, consumer, verdicts.evaluate(NET, tuple(few), now=NOW), 4).full
    most = [dataclasses.replace(p, drain=True) for p in fleet]
    judged = verdicts.evaluate(NET, tuple(most), now=NOW)
    again = advance(plan, consumer, judged, 4)
    assert again.full and from_plan(again, None) == full(consumer, judged, None, 4)


def test_a_consumer_without_exclusions_plans_from_the_networks_sorted_candidates():
    verdicts = Verdicts()
    judged = verdicts.evaluate(NET, tuple(view(i) for i in range(20)), now=NOW)
    assert fresh_plan(ConsumerView("c1", "net"), judged, 4).candidates is judged.candidates
    picky = fresh_plan(ConsumerView("c2", "net", excluded_providers=frozenset({"p03"})), judged, 4)
    assert [c.provider for c in picky.candidates] == [c.provider for c in judged.candidates if c.provider != "p03"]


text = st.text(max_size=6)
cands = st.lists(
    st.builds(Candidate, text, text, text, text, st.integers(-3, 3), st.sampled_from([ADMITTED, EXISTING_ONLY])),
    max_size=8,
    unique_by=lambda c: (c.id, c.provider),
)


@settings(max_examples=200, deadline=None)
@given(cands=cands)
def test_the_digest_from_cached_rows_is_overlay_digest(cands):
    ordered = sorted(cands, key=lambda c: (c.id, c.provider))
    assert digest_of_rows([c.row for c in ordered]) == overlay_digest(cands)


# -- the controller: no planning again after its own publication; one diff over changed shards -----
CONSUMER_OBJ = {"metadata": {"name": "c1", "uid": "u1"}, "spec": {"network": "net"}}


def operator(shards: int = 8) -> Operator:
    return Operator(
        None,  # type: ignore[arg-type]  # nothing here talks to an API server
        "ns",
        settings=Settings(overlay_shards=shards),
        log=JsonLog(component="test", stream=io.StringIO()),
        stop=threading.Event(),
        elector=None,
    )


def stored_objects(sharded) -> tuple[dict, dict]:
    index = {"metadata": {"name": "c1"}, "spec": sharded.index}
    shards = {n: {"metadata": {"name": n}, "spec": spec} for n, spec in sharded.shards.items()}
    return index, shards


def test_the_operator_takes_its_own_publication_as_planned():
    op, verdicts = operator(), Verdicts()
    consumer = ConsumerView("c1", "net")
    fleet = [view(i) for i in range(40)]
    first = op.consumers.plan(consumer, verdicts.evaluate(NET, tuple(fleet), now=NOW), None)
    fleet[3] = dataclasses.replace(fleet[3], drain=True)
    judged = verdicts.evaluate(NET, tuple(fleet), now=NOW)
    planned = op.consumers.plan(consumer, judged, first.overlay)
    assert planned.overlay.revision == 2 and not planned.plan.full
    # The next reconcile reads revision 2 back as the stored previous: the same plan, no work.
    assert op.consumers.plan(consumer, judged, planned.overlay) is planned
    # Someone else's revision (same digest, revision 7): the same plan, only the revision moves.
    other = dataclasses.replace(planned.overlay, revision=7)
    again = op.consumers.plan(consumer, judged, other)
    assert again.plan is planned.plan and again.overlay.revision == 7
    assert again.sharded.shards == planned.sharded.shards and again.sharded.index["revision"] == 7


def test_a_publication_diffs_only_the_shards_whose_digest_changed():
    op, verdicts = operator(), Verdicts()
    consumer = ConsumerView("c1", "net")
    fleet = [view(i) for i in range(60)]
    first = op.consumers.plan(consumer, verdicts.evaluate(NET, tuple(fleet), now=NOW), None)
    current, shards = stored_objects(first.sharded)
    fleet[7] = dataclasses.replace(fleet[7], drain=True)
    fleet[8] = dataclasses.replace(fleet[8], healthy=False)
    planned = op.consumers.plan(consumer, verdicts.evaluate(NET, tuple(fleet), now=NOW), first.overlay)
    change = publication_diff(planned, current, shards, None)
    homes = {
        n for n, s in first.sharded.shards.items() if any(c["provider"] in ("p07", "p08") for c in s["candidates"])
    }
    assert change.shards_compared == len(homes) and change.previous_revision == 1
    assert [(a.provider, a.admission_state, b.admission_state) for a, b in change.diff.changed] == [
        ("p07", ADMITTED, EXISTING_ONLY)
    ]
    assert [c.provider for c in change.diff.removed] == ["p08"] and change.diff.added == ()
    # A changed shard not in hand at the stored index's digest: the whole overlays, same answer.
    lagging = dict(shards)
    name = sorted(homes)[0]
    lagging[name] = {"metadata": {"name": name}, "spec": {**shards[name]["spec"], "digest": "sha256:other"}}
    whole = publication_diff(planned, current, lagging, first.overlay)
    assert whole.shards_compared is None and whole.diff == change.diff and whole.previous_revision == 1
