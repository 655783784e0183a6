"""Slow start on return: the window in the model, the operator's verdicts, overlay validation and
the gateway's weighted new-session choice (``provider-drain --undrain --slow-start``)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agn.gateway.routing import AFFINITY, NEW_SESSION, choose, new_session_chain, pick
from agn.gateway.table import Routes, RoutingTable
from agn.gateway.validation import InvalidOverlay, parse_shard, validate_overlay
from agn.model import (
    ADMITTED,
    EXISTING_ONLY,
    SLOW_START_FLOOR,
    Candidate,
    ConsumerView,
    NetworkView,
    Overlay,
    ProviderView,
    SlowStart,
    candidate_id,
    compute_candidates,
    overlay_digest,
    ramp,
)
from agn.objects import provider_view
from agn.operator.verdicts import Verdicts
from agn.shards import split

START = 1_700_000_000
WINDOW = SlowStart(START, 60)
NET = NetworkView("net", metrics_max_age_seconds=45)
CONSUMER = ConsumerView("c1", "net")


def view(name: str = "p1", **kw) -> ProviderView:
    base = ProviderView(
        name=name,
        endpoint=f"http://127.0.0.1:9000/{name}",
        candidate_id=candidate_id(f"uid-{name}"),
        selection_group="g",
        healthy=True,
        metrics_observed_at=START + 30,
    )
    return dataclasses.replace(base, **kw)


def cand(provider: str, *, rank: int = 0, window: SlowStart | None = None, state: str = ADMITTED) -> Candidate:
    return Candidate(f"c-{provider}", provider, f"http://127.0.0.1/{provider}", "g", rank, state, window)


# -- the ramp and the window ------------------------------------------------------------------


def test_ramp_is_linear_from_the_floor_to_one_over_the_window():
    assert ramp(None, START) == 1.0
    assert ramp(WINDOW, START - 5) == SLOW_START_FLOOR  # a clock behind the server's: the floor
    assert ramp(WINDOW, START) == SLOW_START_FLOOR
    assert ramp(WINDOW, START + 30) == pytest.approx(SLOW_START_FLOOR + (1 - SLOW_START_FLOOR) / 2)
    assert ramp(WINDOW, START + 60) == 1.0
    assert ramp(WINDOW, START + 600) == 1.0
    samples = [ramp(WINDOW, START + t / 4) for t in range(0, 260)]
    assert samples == sorted(samples)


def test_window_round_trips_and_bad_windows_are_none():
    assert SlowStart.from_dict(WINDOW.to_dict()) == WINDOW
    assert WINDOW.to_dict() == {"startTime": "2023-11-14T22:13:20Z", "durationSeconds": 60}
    for bad in (
        None,
        "60s",
        {"startTime": "2023-11-14T22:13:20Z"},
        {"startTime": "yesterday", "durationSeconds": 60},
        {"startTime": "2023-11-14T22:13:20Z", "durationSeconds": 0},
        {"startTime": "2023-11-14T22:13:20Z", "durationSeconds": 3601},
        {"startTime": "2023-11-14T22:13:20Z", "durationSeconds": True},
    ):
        assert SlowStart.from_dict(bad) is None, bad


def test_provider_view_reads_the_window_from_the_spec():
    obj = {
        "metadata": {"name": "p1", "uid": "u1"},
        "spec": {"endpoint": "http://x", "trafficPolicy": {"slowStart": WINDOW.to_dict()}},
    }
    assert provider_view(obj).slow_start == WINDOW


def test_admitted_candidate_carries_the_window_until_it_ends_and_a_drained_one_never():
    p = view(slow_start=WINDOW)
    (during,) = compute_candidates([p], NET, CONSUMER, now=START + 10)
    assert during.slow_start == WINDOW and during.to_dict()["slowStart"] == WINDOW.to_dict()
    (after,) = compute_candidates(
        [dataclasses.replace(p, metrics_observed_at=START + 70)], NET, CONSUMER, now=START + 70
    )
    assert after.slow_start is None and "slowStart" not in after.to_dict()
    (drained,) = compute_candidates([view(slow_start=WINDOW, drain=True)], NET, CONSUMER, now=START + 10)
    assert drained.admission_state == EXISTING_ONLY and drained.slow_start is None


def test_digest_without_a_window_is_unchanged_and_with_one_differs():
    plain = cand("p1")
    assert overlay_digest([plain]) == overlay_digest([Candidate(*dataclasses.astuple(plain)[:6])])
    assert overlay_digest([cand("p1", window=WINDOW)]) != overlay_digest([plain])
    assert overlay_digest([cand("p1", window=WINDOW)]) != overlay_digest([cand("p1", window=SlowStart(START, 61))])


def test_verdicts_recheck_at_the_window_end_and_drop_it_in_a_new_version():
    verdicts = Verdicts()
    fleet = (view("p1", slow_start=WINDOW), view("p2", rank=1))
    during = verdicts.evaluate(NET, fleet, now=START + 10)
    assert during.recheck_at == START + 60  # before the readings go stale (START + 75)
    assert during.by_provider["p1"].slow_start == WINDOW
    same = verdicts.evaluate(NET, fleet, now=START + 59)
    assert same.version == during.version
    after = verdicts.evaluate(NET, fleet, now=START + 60)
    assert after.version != during.version and after.by_provider["p1"].slow_start is None
    assert after.digest == overlay_digest(compute_candidates(fleet, NET, CONSUMER, now=START + 60))


# -- the gateway's checks ---------------------------------------------------------------------


def overlay_spec(*cands: Candidate) -> dict:
    return Overlay("net", "c1", 1, overlay_digest(cands), tuple(cands)).to_spec()


def test_validation_accepts_a_window_and_keeps_it_through_shards():
    spec = overlay_spec(cand("p1", window=WINDOW), cand("p2", rank=1))
    assert validate_overlay(spec, consumer="c1").candidate_for("p1").slow_start == WINDOW
    overlay = Overlay.from_spec(spec)
    sharded = split(overlay, 4)
    from agn.gateway.validation import validate_index

    index = validate_index(sharded.index, consumer="c1")
    parsed = [c for e in index.shards for c in parse_shard(sharded.shards[e.name], entry=e, shard_count=4)]
    assert {c.provider: c.slow_start for c in parsed} == {"p1": WINDOW, "p2": None}


@pytest.mark.parametrize(
    ("window", "state", "problem"),
    [
        ({"startTime": "soon", "durationSeconds": 60}, ADMITTED, "slowStart"),
        ({"startTime": "2023-11-14T22:13:20Z", "durationSeconds": 0}, ADMITTED, "slowStart"),
        (WINDOW.to_dict(), EXISTING_ONLY, "only for an admitted candidate"),
    ],
)
def test_validation_refuses_a_bad_window(window, state, problem):
    spec = overlay_spec(cand("p1", state=state))
    spec["candidates"][0]["slowStart"] = window
    with pytest.raises(InvalidOverlay, match=problem):
        validate_overlay(spec, consumer="c1")


# -- the weighted new-session choice ----------------------------------------------------------


def shares(cands: list[Candidate], now: float, n: int = 1000) -> dict[str, float]:
    """Each provider's share of ``n`` new sessions, with draws evenly spread over [0, 1)."""
    chain = new_session_chain(cands)
    counts: dict[str, int] = {}
    for i in range(n):
        picked = pick(chain, now=now, draw=(i + 0.5) / n)
        assert picked is not None
        counts[picked.provider] = counts.get(picked.provider, 0) + 1
    return {p: c / n for p, c in counts.items()}


def test_returning_best_provider_ramps_from_the_floor_to_its_full_share():
    cands = [cand("back", rank=0, window=WINDOW), cand("other", rank=1)]
    got = [shares(cands, START + t).get("back", 0.0) for t in (0, 15, 30, 45, 59.9, 60)]
    assert got[0] == pytest.approx(SLOW_START_FLOOR, abs=0.002)
    assert got[2] == pytest.approx(0.525, abs=0.002)
    assert got == sorted(got) and got[-1] == 1.0
    assert shares([cand("back", rank=0), cand("other", rank=1)], START)["back"] == 1.0  # without a window


def test_a_window_on_a_provider_without_a_share_changes_nothing():
    cands = [cand("best", rank=0), cand("back", rank=1, window=WINDOW)]
    assert new_session_chain(cands) == (cands[0],)
    assert shares(cands, START + 1) == {"best": 1.0}


def test_two_windows_take_independent_fractions_and_all_in_windows_fall_back_to_the_first():
    w2 = SlowStart(START, 120)
    cands = [cand("a", rank=0, window=WINDOW), cand("b", rank=1, window=w2), cand("c", rank=2)]
    got = shares(cands, START + 30, n=10_000)
    ra, rb = ramp(WINDOW, START + 30), ramp(w2, START + 30)
    assert got["a"] == pytest.approx(ra, abs=0.001)
    assert got["b"] == pytest.approx((1 - ra) * rb, abs=0.001)
    only = shares(cands[:2], START + 30, n=10_000)
    assert only["b"] == pytest.approx((1 - ra) * rb, abs=0.001)
    assert only["a"] == pytest.approx(1 - (1 - ra) * rb, abs=0.001)  # the rest: the first


def test_sticky_sessions_keep_their_provider_whatever_the_window():
    cands = [cand("back", rank=0, window=WINDOW), cand("other", rank=1)]
    decision = choose(cands, {"s1": "back"}, "s1", now=START, draw=0.99)
    assert decision.candidate.provider == "back" and decision.reason == AFFINITY
    fresh = choose(cands, {}, "s2", now=START, draw=0.99)
    assert fresh.candidate.provider == "other" and fresh.reason == NEW_SESSION


windows = st.sampled_from([None, WINDOW, SlowStart(START + 20, 10)])
any_candidates = st.lists(
    st.builds(
        lambda p, g, r, s, w: Candidate(f"c-{p}", p, f"http://h/{p}", g, r, s, w if s == ADMITTED else None),
        st.sampled_from("abcdef"),
        st.sampled_from(["", "east", "west"]),
        st.integers(0, 2),
        st.sampled_from([ADMITTED, EXISTING_ONLY]),
        windows,
    ),
    max_size=8,
    unique_by=lambda c: c.provider,
)


@given(
    any_candidates,
    st.sampled_from([None, "a", "b", "x"]),
    st.sampled_from([None, "", "east", "west", "north"]),
    st.floats(START - 10, START + 90),
    st.floats(0, 1, exclude_max=True),
)
def test_table_routes_decide_as_choose_with_windows(cands, previous, group, now, draw):
    affinities = {"s": previous} if previous else {}
    assert Routes.of(tuple(cands)).choose(previous, selection_group=group, now=now, draw=draw) == choose(
        cands, affinities, "s", selection_group=group, now=now, draw=draw
    )


def test_table_judges_windows_on_its_clock():
    draws = iter([0.5, 0.5])
    now = [START + 1.0]
    table = RoutingTable(clock=lambda: now[0], draw=lambda: next(draws))
    table.swap(Overlay("net", "c1", 1, "d", (cand("back", window=WINDOW), cand("other", rank=1))))
    assert table.route(None).candidate.provider == "other"  # ramp ~0.066 < 0.5
    now[0] = START + 50.0  # ramp ~0.87
    assert table.route(None).candidate.provider == "back"


def test_env_status_shows_the_window_left_and_nothing_once_drained_or_over():
    from xtask.envstatus import slow_start_status

    def obj(drain: bool) -> dict:
        return {"spec": {"trafficPolicy": {"drain": drain, "slowStart": WINDOW.to_dict()}}}

    assert slow_start_status(obj(False), now=START + 15) == {**WINDOW.to_dict(), "remainingSeconds": 45.0}
    assert slow_start_status(obj(False), now=START - 3)["remainingSeconds"] == 60.0
    assert slow_start_status(obj(False), now=START + 60) is None
    assert slow_start_status(obj(True), now=START + 15) is None
    assert slow_start_status({"spec": {}}, now=START) is None
