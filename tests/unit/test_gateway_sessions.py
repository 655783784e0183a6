"""Sessions that end on purpose, in the gateway and the model: sticky sessions counted per provider
(ttl, cap), the session deadline's re-homing choice, ``status.sessions`` and its writes, and the
deadline from the provider's spec to the existing_only candidate (``provider-drain --session-deadline``)."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agn.gateway.metrics import GatewayMetrics
from agn.gateway.routing import AFFINITY, REHOMED, choose
from agn.gateway.sessions import SessionBook, report_loop, rfc3339_ms
from agn.gateway.table import Routes, RoutingTable
from agn.gateway.validation import InvalidOverlay, validate_overlay
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
    overlay_digest,
    rfc3339,
)
from agn.objects import parse_time, provider_view

T0 = 1_700_000_000
DEADLINE = T0 + 10


def cand(provider: str, *, group: str = "g", rank: int = 0, state: str = ADMITTED, deadline: int | None = None):
    return Candidate(f"c-{provider}", provider, f"http://127.0.0.1/{provider}", group, rank, state, None, deadline)


def overlay_of(revision: int, cands: list[Candidate]) -> Overlay:
    return Overlay("net", "c1", revision, overlay_digest(cands), tuple(cands))


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- the session book ---------------------------------------------------------------------------


def test_book_counts_sessions_per_provider_and_moves_them():
    book = SessionBook()
    for s in ("s1", "s2", "s3"):
        book.turn(s, "a", now=T0)
    book.turn(None, "b", now=T0 + 1)  # a request without a session: a turn, no session
    book.turn("s1", "b", now=T0 + 2, rehomed_from="a")
    lines = {line.provider: line for line in book.lines()}
    assert (lines["a"].sessions, lines["a"].rehomed, lines["a"].last_turn) == (2, 1, T0)
    assert (lines["b"].sessions, lines["b"].rehomed, lines["b"].last_turn) == (1, 0, T0 + 2)


def test_book_forgets_a_session_idle_past_the_ttl():
    book = SessionBook(ttl=60)
    book.turn("old", "a", now=T0)
    book.turn("new", "a", now=T0 + 50)
    assert book.provider_of("old", now=T0 + 60) == "a"  # exactly the ttl: still known
    book.expire(now=T0 + 70)
    assert book.affinities() == {"new": "a"} and book.expired == 1
    assert book.lines()[0].sessions == 1
    assert book.provider_of("new", now=T0 + 111) is None  # idle 61 s: forgotten at its next turn
    assert book.lines()[0].sessions == 0 and len(book) == 0


def test_book_cap_forgets_the_least_recently_used_and_counts_it():
    book = SessionBook(max_sessions=2)
    book.turn("s1", "a", now=T0)
    book.turn("s2", "b", now=T0 + 1)
    book.turn("s1", "a", now=T0 + 2)
    book.turn("s3", "a", now=T0 + 3)  # s2 (least recently used) goes
    assert book.affinities() == {"s1": "a", "s3": "a"} and book.evicted == 1
    assert {line.provider: line.sessions for line in book.lines()} == {"a": 2, "b": 0}


def test_book_forgets_a_provider_that_left_once_quiet():
    book = SessionBook(ttl=60)
    book.turn(None, "gone", now=T0)
    book.keep_providers({"a"}, now=T0 + 30)
    assert [line.provider for line in book.lines()] == ["gone"]  # a recent turn is still reported
    book.keep_providers({"a"}, now=T0 + 61)
    assert book.lines() == []


@given(st.lists(st.tuples(st.sampled_from(["s1", "s2", "s3", "s4"]), st.sampled_from(["a", "b", "c"])), max_size=40))
def test_book_counts_always_match_its_sessions(turns):
    book = SessionBook(max_sessions=3)
    for i, (session, provider) in enumerate(turns):
        book.turn(session, provider, now=T0 + i)
        counted = {line.provider: line.sessions for line in book.lines() if line.sessions}
        bound: dict[str, int] = {}
        for p in book.affinities().values():
            bound[p] = bound.get(p, 0) + 1
        assert counted == bound and len(book) <= 3


# -- the deadline's re-homing choice -------------------------------------------------------------


def test_before_the_deadline_a_session_stays_after_it_moves_within_its_group():
    cands = [
        cand("drained", state=EXISTING_ONLY, deadline=DEADLINE),
        cand("other-group", group="h", rank=0),
        cand("same-group", rank=5),
    ]
    routes = Routes.of(tuple(cands))
    assert routes.choose("drained", now=DEADLINE - 1) == dataclasses.replace(
        routes.choose("drained", now=DEADLINE - 1), reason=AFFINITY
    )
    assert routes.choose("drained", now=DEADLINE - 1).candidate.provider == "drained"
    moved = routes.choose("drained", now=DEADLINE)
    assert (moved.candidate.provider, moved.reason, moved.previous_provider) == ("same-group", REHOMED, "drained")
    assert choose(cands, {"s": "drained"}, "s", now=DEADLINE) == moved


def test_after_the_deadline_a_group_without_admitted_candidate_keeps_the_session():
    cands = [cand("drained", state=EXISTING_ONLY, deadline=DEADLINE), cand("elsewhere", group="h")]
    decision = Routes.of(tuple(cands)).choose("drained", now=DEADLINE + 100)
    assert (decision.candidate.provider, decision.reason) == ("drained", AFFINITY)
    assert choose(cands, {"s": "drained"}, "s", now=DEADLINE + 100) == decision


@given(
    st.lists(
        st.builds(
            lambda p, g, r, s, d: cand(p, group=g, rank=r, state=s, deadline=d if s == EXISTING_ONLY else None),
            st.sampled_from(["a", "b", "c", "d"]),
            st.sampled_from(["east", "west"]),
            st.integers(0, 3),
            st.sampled_from([ADMITTED, EXISTING_ONLY]),
            st.sampled_from([None, DEADLINE]),
        ),
        max_size=8,
        unique_by=lambda c: c.provider,
    ),
    st.sampled_from(["a", "b", "c", "x"]),
    st.sampled_from([None, "east", "west"]),
    st.sampled_from([DEADLINE - 1, DEADLINE, DEADLINE + 1]),
)
def test_table_routes_decide_as_choose_with_deadlines(cands, previous, group, now):
    assert Routes.of(tuple(cands)).choose(previous, selection_group=group, now=now) == choose(
        cands, {"s": previous}, "s", selection_group=group, now=now
    )


def test_table_rehomes_at_the_deadline_counts_it_and_reports_it():
    clock = Clock()
    table = RoutingTable(clock=clock)
    table.swap(overlay_of(1, [cand("p1"), cand("p2", rank=1)]))
    for s in ("s1", "s2", "s3"):
        assert table.route(s).candidate.provider == "p1"
    table.swap(overlay_of(2, [cand("p1", state=EXISTING_ONLY, deadline=DEADLINE), cand("p2", rank=1)]))
    clock.now = DEADLINE - 1
    assert table.route("s1").candidate.provider == "p1"  # sticky until the deadline
    report = table.session_report(interval=1.0)
    assert report["revision"] == 2
    assert report["providers"] == [
        {"provider": "p1", "sessions": 3, "rehomed": 0, "lastTurn": rfc3339_ms(DEADLINE - 1)}
    ]  # p2 is admitted: not listed
    clock.now = DEADLINE + 0.5
    assert [table.route(s).candidate.provider for s in ("s1", "s2")] == ["p2", "p2"]
    assert table.route("s1").reason == AFFINITY  # rebound: it stays on p2
    line = table.session_report(interval=1.0)["providers"][0]
    assert line == {"provider": "p1", "sessions": 1, "rehomed": 2, "lastTurn": rfc3339_ms(DEADLINE - 1)}
    assert table.snapshot()["affinities"] == {"s1": "p2", "s2": "p2", "s3": "p1"}


def test_report_is_bounded_and_rounds_the_last_turn_up():
    clock = Clock(T0 + 0.2004)
    table = RoutingTable(clock=clock)
    drained = [cand(f"p{i:03d}", group=f"g{i}", state=EXISTING_ONLY) for i in range(105)]
    table.swap(overlay_of(1, [dataclasses.replace(c, admission_state=ADMITTED) for c in drained]))
    for c in drained:
        table.route(f"s-{c.provider}", selection_group=c.selection_group)
    table.swap(overlay_of(2, drained))
    report = table.session_report(interval=1.0)
    assert len(report["providers"]) == 100 and report["omitted"] == 5
    assert report["providers"][0]["lastTurn"] == rfc3339(T0)[:-1] + ".201Z"  # never earlier than the turn
    assert report["since"] == rfc3339(T0)[:-1] + ".201Z" and report["ttlSeconds"] == 600.0
    assert parse_time(report["since"]) == pytest.approx(T0 + 0.201)


def test_report_loop_submits_only_changes():
    reports = iter([None, {"a": 1}, {"a": 1}, {"a": 2}])
    submitted: list[dict] = []
    stop = threading.Event()
    loop = report_loop(lambda: next(reports), submitted.append, interval=0.001, stop=stop)
    assert [next(loop), next(loop)] == [{"a": 1}, {"a": 2}]
    assert submitted == [{"sessions": {"a": 1}}, {"sessions": {"a": 2}}]


def test_metrics_show_the_last_report():
    report = {"providers": [{"provider": "p1", "sessions": 3, "rehomed": 2, "lastTurn": rfc3339(T0)}]}
    metrics = GatewayMetrics(accepted=lambda: 1, serving=lambda: 1, sessions=lambda: report)
    assert metrics.registry.get_sample_value("agn_gateway_sticky_sessions", {"provider": "p1"}) == 3
    assert metrics.registry.get_sample_value("agn_gateway_rehomed_sessions_total", {"provider": "p1"}) == 2


# -- the deadline from the provider to the candidate ---------------------------------------------


def provider_obj(*, drain: bool, deadline: str | None) -> dict:
    policy: dict = {"drain": drain}
    if deadline is not None:
        policy["sessionDeadline"] = deadline
    return {
        "metadata": {"name": "p1", "uid": "uid-p1", "labels": {"pool": "x"}},
        "spec": {"endpoint": "http://127.0.0.1:9000", "selectionGroup": "g", "trafficPolicy": policy},
        "status": {"probe": {"healthy": True, "metricsObservedAt": rfc3339(T0)}},
    }


@pytest.mark.parametrize(("drain", "expected"), [(True, DEADLINE), (False, None)])
def test_candidate_carries_the_deadline_only_while_drained(drain, expected):
    view = provider_view(provider_obj(drain=drain, deadline=rfc3339(DEADLINE)))
    assert isinstance(view, ProviderView) and view.session_deadline == DEADLINE
    (c,) = compute_candidates([view], NetworkView("net"), ConsumerView("c1", "net"), now=T0 + 1)
    assert c.session_deadline == expected
    assert ("sessionDeadline" in c.to_dict()) is (expected is not None)
    assert Candidate.from_dict(c.to_dict()) == c


def test_deadline_changes_the_digest_and_a_candidate_without_one_digests_as_before():
    plain = Candidate(candidate_id("u"), "p1", "http://127.0.0.1/p1", "g", 0, EXISTING_ONLY)
    assert plain.row_items == [plain.id, "p1", "http://127.0.0.1/p1", "g", 0, EXISTING_ONLY]
    assert overlay_digest([plain]) != overlay_digest([dataclasses.replace(plain, session_deadline=DEADLINE)])


@pytest.mark.parametrize(
    ("state", "deadline", "problem"),
    [
        (ADMITTED, rfc3339(DEADLINE), "sessionDeadline is only for an existing_only candidate"),
        (EXISTING_ONLY, "tomorrow", "sessionDeadline 'tomorrow' must be an RFC 3339 time"),
    ],
)
def test_overlay_validation_names_a_bad_deadline(state, deadline, problem):
    c = {**cand("p1", state=state).to_dict(), "sessionDeadline": deadline}
    spec = {"network": "net", "consumer": "c1", "revision": 1, "digest": "sha256:x", "candidates": [c]}
    with pytest.raises(InvalidOverlay) as err:
        validate_overlay(spec, consumer="c1")
    assert problem in str(err.value)
