"""The gateway's pure routing decision, overlay validation (inline and per shard) and routing table."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agn.gateway.routing import AFFINITY, NEW_SESSION, NO_ADMITTED_CANDIDATE, REHOMED, best_admitted, choose
from agn.gateway.table import Routes, RoutingTable
from agn.gateway.validation import (
    InvalidOverlay,
    assemble_overlay,
    digest_matches,
    parse_shard,
    validate_index,
    validate_overlay,
)
from agn.model import ADMITTED, EXISTING_ONLY, Candidate, Overlay, candidate_id, overlay_digest
from agn.shards import assemble, split


def cand(provider: str, *, state: str = ADMITTED, rank: int = 0, group: str = "g", cid: str | None = None) -> Candidate:
    return Candidate(cid or f"c-{provider}", provider, f"http://127.0.0.1/{provider}", group, rank, state)


# -- choose ------------------------------------------------------------------------------------


def test_new_session_gets_lowest_rank_admitted():
    cands = [cand("a", rank=2), cand("b", rank=1), cand("c", rank=3)]
    decision = choose(cands, {}, "s1")
    assert decision.candidate.provider == "b"
    assert decision.reason == NEW_SESSION


def test_rank_tie_broken_by_candidate_id():
    cands = [cand("a", rank=1, cid="c-9"), cand("b", rank=1, cid="c-1")]
    assert choose(cands, {}, "s1").candidate.provider == "b"
    assert choose(list(reversed(cands)), {}, None).candidate.provider == "b"


def test_sticky_session_stays_on_existing_only():
    cands = [cand("a", state=EXISTING_ONLY, rank=0), cand("b", rank=5)]
    decision = choose(cands, {"s1": "a"}, "s1")
    assert decision.candidate.provider == "a"
    assert decision.candidate.admission_state == EXISTING_ONLY
    assert decision.reason == AFFINITY


def test_sticky_session_stays_on_worse_ranked_admitted():
    cands = [cand("a", rank=0), cand("b", rank=5)]
    assert choose(cands, {"s1": "b"}, "s1").candidate.provider == "b"


def test_new_sessions_never_land_on_existing_only():
    cands = [cand("a", state=EXISTING_ONLY, rank=0), cand("b", rank=9)]
    assert choose(cands, {"other": "a"}, "s-new").candidate.provider == "b"
    assert choose(cands, {}, None).candidate.provider == "b"


def test_session_rehomed_when_provider_left_overlay():
    cands = [cand("b", rank=1), cand("c", rank=0)]
    decision = choose(cands, {"s1": "a"}, "s1")
    assert decision.candidate.provider == "c"
    assert decision.reason == REHOMED
    assert decision.previous_provider == "a"


def test_rehome_never_lands_on_existing_only():
    cands = [cand("b", state=EXISTING_ONLY, rank=0), cand("c", rank=3)]
    assert choose(cands, {"s1": "a"}, "s1").candidate.provider == "c"


def test_no_admitted_candidate_is_no_route():
    cands = [cand("a", state=EXISTING_ONLY)]
    decision = choose(cands, {}, "s1")
    assert decision.candidate is None and decision.reason == NO_ADMITTED_CANDIDATE
    assert not decision.routed
    assert choose([], {}, None).candidate is None


def test_sticky_session_still_served_when_none_admitted():
    cands = [cand("a", state=EXISTING_ONLY)]
    assert choose(cands, {"s1": "a"}, "s1").candidate.provider == "a"


def test_selection_group_restricts_new_sessions():
    cands = [cand("a", rank=0, group="east"), cand("b", rank=3, group="west")]
    assert choose(cands, {}, "s1", selection_group="west").candidate.provider == "b"
    assert choose(cands, {}, "s1", selection_group="north").candidate is None


def test_selection_group_overrides_affinity_in_other_group():
    cands = [cand("a", rank=0, group="east"), cand("b", rank=3, group="west")]
    decision = choose(cands, {"s1": "a"}, "s1", selection_group="west")
    assert decision.candidate.provider == "b" and decision.reason == REHOMED
    assert choose(cands, {"s1": "a"}, "s1", selection_group="east").reason == AFFINITY


states = st.sampled_from([ADMITTED, EXISTING_ONLY])
candidate_lists = st.lists(
    st.builds(
        lambda p, s, r: cand(p, state=s, rank=r), st.text("abcdef", min_size=1, max_size=3), states, st.integers(0, 5)
    ),
    max_size=8,
    unique_by=lambda c: c.provider,
)


@given(
    candidate_lists,
    st.dictionaries(st.sampled_from(["s1", "s2"]), st.text("abcdef", min_size=1, max_size=3)),
    st.sampled_from(["s1", "s2", "s3", None]),
)
def test_choice_invariants(cands, affinities, session):
    decision = choose(cands, affinities, session)
    best = best_admitted(cands)
    if decision.reason == AFFINITY:
        assert decision.candidate.provider == affinities[session]
    elif decision.candidate is not None:
        # Anything but an affinity goes to the best admitted candidate.
        assert decision.candidate == best and decision.candidate.admission_state == ADMITTED
    else:
        assert best is None


# -- validation --------------------------------------------------------------------------------


def spec_for(consumer: str, revision: int, cands: list[Candidate]) -> dict:
    return Overlay("net", consumer, revision, overlay_digest(cands), tuple(cands)).to_spec()


def test_valid_overlay_accepted():
    spec = spec_for("c1", 3, [cand("a"), cand("b", state=EXISTING_ONLY)])
    overlay = validate_overlay(spec, consumer="c1")
    assert overlay.revision == 3 and len(overlay.candidates) == 2
    assert digest_matches(overlay)


@pytest.mark.parametrize(
    "mutate, problem",
    [
        (lambda s: s.update(consumer="someone-else"), "spec.consumer"),
        (lambda s: s.update(revision=0), "spec.revision"),
        (lambda s: s.update(revision="7"), "spec.revision"),
        (lambda s: s.update(revision=True), "spec.revision"),
        (lambda s: s.update(digest=""), "spec.digest"),
        (lambda s: s.update(candidates="nope"), "spec.candidates"),
        (lambda s: s["candidates"][0].update(admission_state="maybe"), "admission_state"),
        (lambda s: s["candidates"][0].update(endpoint="not a url"), "endpoint"),
        (lambda s: s["candidates"][0].pop("provider"), "provider"),
        (lambda s: s["candidates"][0].update(rank=-1), "rank"),
        (lambda s: s["candidates"][1].update(provider="a"), "duplicate candidate provider"),
        (lambda s: s["candidates"][1].update(id="c-a"), "duplicate candidate id"),
    ],
)
def test_invalid_overlay_rejected(mutate, problem):
    spec = spec_for("c1", 3, [cand("a"), cand("b")])
    mutate(spec)
    with pytest.raises(InvalidOverlay) as info:
        validate_overlay(spec, consumer="c1")
    assert any(problem in p for p in info.value.problems), info.value.problems


def test_missing_spec_rejected():
    with pytest.raises(InvalidOverlay):
        validate_overlay(None, consumer="c1")


# -- routing table -------------------------------------------------------------------------------


def overlay_of(revision: int, cands: list[Candidate]) -> Overlay:
    return Overlay("net", "c1", revision, overlay_digest(cands), tuple(cands))


def test_table_without_overlay_has_no_route():
    assert RoutingTable().route("s1").candidate is None


def test_table_records_affinity_and_follows_swaps():
    table = RoutingTable()
    table.swap(overlay_of(1, [cand("a", rank=0), cand("b", rank=1)]))
    assert table.route("s1").candidate.provider == "a"
    table.swap(overlay_of(2, [cand("a", rank=0, state=EXISTING_ONLY), cand("b", rank=1)]))
    assert table.route("s1").candidate.provider == "a"
    assert table.route("s2").candidate.provider == "b"
    table.swap(overlay_of(3, [cand("b", rank=1)]))
    decision = table.route("s1")
    assert decision.candidate.provider == "b" and decision.reason == REHOMED
    snap = table.snapshot()
    assert snap["servingRevision"] == 3
    assert snap["affinities"] == {"s1": "b", "s2": "b"}


def test_table_requests_without_session_record_nothing():
    table = RoutingTable()
    table.swap(overlay_of(1, [cand("a")]))
    table.route(None)
    assert table.snapshot()["affinities"] == {}


def test_table_forgets_least_recently_used_sessions():
    table = RoutingTable(max_sessions=2)
    table.swap(overlay_of(1, [cand("a")]))
    for session in ("s1", "s2", "s1", "s3"):
        table.route(session)
    assert set(table.snapshot()["affinities"]) == {"s1", "s3"}


def test_table_swap_is_atomic_for_concurrent_routes():
    table = RoutingTable()
    first = overlay_of(1, [cand("a")])
    second = overlay_of(2, [cand("b")])
    table.swap(first)
    seen: set[str] = set()
    done = threading.Event()

    def router() -> None:
        while not done.is_set():
            decision = table.route(None)
            seen.add(decision.candidate.provider)  # never None: some overlay is always whole

    thread = threading.Thread(target=router)
    thread.start()
    for i in range(200):
        table.swap(second if i % 2 else first)
    done.set()
    thread.join()
    assert seen <= {"a", "b"}


def test_table_names_the_revision_each_decision_was_made_from_under_concurrent_swaps():
    """The gateway's x-agn-overlay-revision header comes from here: the candidate chosen must be in
    the revision named, even when a swap lands between the decision and any later read."""
    table = RoutingTable()
    overlays = {1: overlay_of(1, [cand("a")]), 2: overlay_of(2, [cand("b")])}
    table.swap(overlays[1])
    mixed: list[tuple[int | None, str]] = []
    done = threading.Event()

    def router() -> None:
        while not done.is_set():
            decision, revision = table.route_by(None)
            if revision is None or decision.candidate not in overlays[revision].candidates:
                mixed.append((revision, decision.candidate.provider))

    thread = threading.Thread(target=router)
    thread.start()
    for i in range(2000):
        table.swap(overlays[2 if i % 2 else 1])
    done.set()
    thread.join()
    assert mixed == []
    assert table.route_by(None) == (table.route(None), 2)  # route is route_by without the revision


# -- the table's precomputed routes decide exactly as choose -------------------------------------

any_candidates = st.lists(
    st.builds(
        lambda cid, p, g, r, s: Candidate(cid, p, f"http://127.0.0.1/{p}", g, r, s),
        st.sampled_from(["c-1", "c-2", "c-3", "c-4"]),  # duplicates too: ties must break as in choose
        st.sampled_from(["a", "b", "c", "d", "e"]),
        st.sampled_from(["east", "west", ""]),
        st.integers(0, 3),
        states,
    ),
    max_size=10,
)


@given(
    any_candidates,
    st.dictionaries(st.sampled_from(["s1", "s2"]), st.sampled_from(["a", "b", "c", "x"])),
    st.sampled_from(["s1", "s2", "s3", None]),
    st.sampled_from([None, "east", "west", "", "north"]),
)
def test_table_routes_decide_as_choose(cands, affinities, session, group):
    previous = affinities.get(session) if session else None
    assert Routes.of(tuple(cands)).choose(previous, selection_group=group) == choose(
        cands, affinities, session, selection_group=group
    )


def test_table_route_does_not_walk_the_candidates():
    class Counting(tuple):
        """A candidate tuple that counts how often it is iterated."""

        walks = 0

        def __iter__(self):
            Counting.walks += 1
            return super().__iter__()

    table = RoutingTable()
    cands = Counting(cand(f"p{i}", rank=i % 5) for i in range(1000))
    table.swap(Overlay("net", "c1", 1, "sha256:x", cands))
    after_swap = Counting.walks
    for n in range(50):
        assert table.route(f"s{n}").candidate.provider == "p0"
        assert table.route(f"s{n}", selection_group="g").reason == AFFINITY
    assert Counting.walks == after_swap


# -- sharded overlays: checked per shard, the same overlay as the whole check ---------------------

unique_candidates = st.lists(
    st.builds(
        lambda i, g, r, s: Candidate(candidate_id(f"uid-{i}"), f"p{i}", f"http://127.0.0.1:1/p{i}", g, r, s),
        st.integers(0, 10_000),
        st.sampled_from(["east", "west", ""]),
        st.integers(0, 3),
        states,
    ),
    max_size=40,
    unique_by=lambda c: c.id,
)


@given(unique_candidates, st.integers(1, 8))
def test_sharded_overlay_checked_per_shard_is_the_whole_overlay(cands, count):
    ordered = tuple(sorted(cands))
    parts = split(Overlay("net", "c1", 4, overlay_digest(ordered), ordered), count)
    index = validate_index(parts.index, consumer="c1")
    parsed = [(e.name, parse_shard(parts.shards[e.name], entry=e, shard_count=count)) for e in index.shards]
    assert assemble_overlay(index, parsed) == validate_overlay(assemble(parts.index, parts.shards), consumer="c1")
