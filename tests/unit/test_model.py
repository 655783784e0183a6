"""Unit and property tests of the pure overlay model (agn.model; docs/overlays.md)."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from agn.model import (
    ADMITTED,
    EXISTING_ONLY,
    Candidate,
    ConsumerView,
    Exclusion,
    LabelRequirement,
    NetworkView,
    Overlay,
    ProviderView,
    admission_state,
    candidate_id,
    compute_candidates,
    endpoint_trusted,
    endpoint_valid,
    exclusion,
    group_admitted_counts,
    next_overlay,
    overlay_digest,
    selects,
)

NOW = 1_700_000_000.0
NET = NetworkView(name="net", metrics_max_age_seconds=45)
CONSUMER = ConsumerView(name="c1", network="net")


def provider(name: str = "p1", **changes) -> ProviderView:
    base = ProviderView(
        name=name,
        endpoint=f"http://{name}.example:8000",
        candidate_id=candidate_id(f"uid-{name}"),
        selection_group="g1",
        rank=1,
        healthy=True,
        metrics_observed_at=NOW - 1,
    )
    return dataclasses.replace(base, **changes)


# -- strategies -------------------------------------------------------------------------------
names = st.sampled_from([f"p{i}" for i in range(8)])
label_keys = st.sampled_from(["tier", "zone", "gpu"])
label_values = st.sampled_from(["a", "b", "c"])
labels = st.dictionaries(label_keys, label_values, max_size=3)
endpoints = st.one_of(
    st.sampled_from(["http://10.0.0.1:8000", "https://gpu.example", "http://h.example:9", "https://a.example/base"]),
    st.sampled_from(["", "ftp://x", "http://", "not a url", "http://h:notaport", "https://:443"]),
)
ages = st.one_of(st.none(), st.floats(min_value=-5, max_value=200, allow_nan=False))


@st.composite
def providers(draw, name=None):
    pname = name or draw(names)
    age = draw(ages)
    return ProviderView(
        name=pname,
        endpoint=draw(endpoints),
        candidate_id=candidate_id("uid-" + pname),
        selection_group=draw(st.sampled_from(["", "g1", "g2"])),
        rank=draw(st.integers(min_value=0, max_value=5)),
        drain=draw(st.booleans()),
        labels=draw(labels),
        healthy=draw(st.sampled_from([True, False, None])),
        metrics_observed_at=None if age is None else NOW - age,
    )


@st.composite
def provider_sets(draw):
    chosen = draw(st.lists(names, unique=True, max_size=6))
    return [draw(providers(name=n)) for n in chosen]


requirements = st.builds(
    LabelRequirement,
    key=label_keys,
    operator=st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]),
    values=st.lists(label_values, max_size=2).map(tuple),
)
networks = st.builds(
    NetworkView,
    name=st.just("net"),
    match_labels=st.dictionaries(label_keys, label_values, max_size=1),
    match_expressions=st.lists(requirements, max_size=2).map(tuple),
    allowed_schemes=st.sampled_from([(), ("https",), ("http", "https")]),
    allowed_hosts=st.sampled_from([(), ("10.0.0.1",), ("gpu.example", "h.example")]),
    metrics_max_age_seconds=st.integers(min_value=1, max_value=120),
)
consumers = st.builds(
    ConsumerView,
    name=st.just("c1"),
    network=st.just("net"),
    excluded_providers=st.frozensets(names, max_size=3),
)


# -- hard failures and drain ---------------------------------------------------------------
@given(p=providers(), net=networks, consumer=consumers)
def test_unusable_provider_is_never_in_overlay_drained_or_not(p, net, consumer):
    for drained in (True, False):
        q = dataclasses.replace(p, drain=drained)
        cands = compute_candidates([q], net, consumer, now=NOW)
        if exclusion(q, net, consumer, now=NOW) is not None:
            assert cands == ()
            assert admission_state(q, net, consumer, now=NOW) is None


@given(p=providers(), net=networks, consumer=consumers)
def test_drain_keeps_identity_and_only_changes_admission(p, net, consumer):
    assume(selects(net, p.labels))
    undrained = compute_candidates([dataclasses.replace(p, drain=False)], net, consumer, now=NOW)
    drained = compute_candidates([dataclasses.replace(p, drain=True)], net, consumer, now=NOW)
    assert len(undrained) == len(drained)
    if exclusion(p, net, consumer, now=NOW) is None:
        (u,), (d,) = undrained, drained
        assert u.admission_state == ADMITTED and d.admission_state == EXISTING_ONLY
        assert (u.id, u.provider, u.endpoint, u.selection_group, u.rank) == (
            d.id,
            d.provider,
            d.endpoint,
            d.selection_group,
            d.rank,
        )
    else:
        assert undrained == drained == ()


@given(p=providers(), net=networks, consumer=consumers)
def test_undrain_never_promotes_blindly(p, net, consumer):
    """Clearing drain re-evaluates: the result equals what a never-drained provider would get."""
    cleared = dataclasses.replace(p, drain=False)
    state = admission_state(cleared, net, consumer, now=NOW)
    assert state == (None if exclusion(p, net, consumer, now=NOW) else ADMITTED)


def test_exclusion_precedence_hard_failures_first():
    consumer = ConsumerView("c1", "net", frozenset({"p1"}))
    strict = NetworkView("net", allowed_hosts=("elsewhere",))
    assert exclusion(provider(endpoint="nope", healthy=False), strict, consumer, now=NOW) is Exclusion.INVALID
    assert (
        exclusion(provider(healthy=False, metrics_observed_at=None), strict, consumer, now=NOW) is Exclusion.UNAVAILABLE
    )
    assert exclusion(provider(healthy=None), strict, consumer, now=NOW) is Exclusion.UNAVAILABLE
    assert exclusion(provider(metrics_observed_at=None), strict, consumer, now=NOW) is Exclusion.STALE
    assert exclusion(provider(), strict, consumer, now=NOW) is Exclusion.UNTRUSTED
    assert exclusion(provider(), NET, consumer, now=NOW) is Exclusion.EXCLUDED
    assert exclusion(provider(), NET, CONSUMER, now=NOW) is None


@pytest.mark.parametrize(
    "change",
    [
        {"endpoint": "ftp://x"},
        {"healthy": False},
        {"healthy": None},
        {"metrics_observed_at": None},
        {"metrics_observed_at": NOW - 46},
    ],
)
def test_each_hard_failure_removes_a_drained_provider(change):
    p = provider(drain=True, **change)
    assert compute_candidates([p], NET, CONSUMER, now=NOW) == ()


def test_drained_healthy_provider_is_existing_only():
    (c,) = compute_candidates([provider(drain=True)], NET, CONSUMER, now=NOW)
    assert c.admission_state == EXISTING_ONLY


def test_metrics_freshness_bound_is_inclusive():
    net = NetworkView("net", metrics_max_age_seconds=2)
    assert compute_candidates([provider(metrics_observed_at=NOW - 2)], net, CONSUMER, now=NOW)
    assert not compute_candidates([provider(metrics_observed_at=NOW - 2.001)], net, CONSUMER, now=NOW)


def test_excluded_provider_only_affects_that_consumer():
    other = ConsumerView("c2", "net", frozenset({"p1"}))
    ps = [provider("p1"), provider("p2")]
    assert {c.provider for c in compute_candidates(ps, NET, CONSUMER, now=NOW)} == {"p1", "p2"}
    assert {c.provider for c in compute_candidates(ps, NET, other, now=NOW)} == {"p2"}


# -- digest and revision -----------------------------------------------------------------------
@given(ps=provider_sets(), net=networks, consumer=consumers, seed=st.integers())
def test_digest_is_independent_of_order(ps, net, consumer, seed):
    shuffled = list(ps)
    random.Random(seed).shuffle(shuffled)
    a = compute_candidates(ps, net, consumer, now=NOW)
    b = compute_candidates(shuffled, net, consumer, now=NOW)
    assert a == b
    assert overlay_digest(a) == overlay_digest(reversed(a))


@given(ps=provider_sets(), net=networks, consumer=consumers, jitter=st.floats(min_value=0, max_value=1))
def test_digest_ignores_timestamps_while_freshness_is_unchanged(ps, net, consumer, jitter):
    """Moving metrics timestamps (and time) within the freshness bound changes nothing semantic."""
    assume(
        all(
            p.metrics_observed_at is None or abs(NOW - p.metrics_observed_at - net.metrics_max_age_seconds) > 2
            for p in ps
        )
    )
    moved = [
        dataclasses.replace(p, metrics_observed_at=p.metrics_observed_at + jitter) if p.metrics_observed_at else p
        for p in ps
    ]
    a = compute_candidates(ps, net, consumer, now=NOW)
    b = compute_candidates(moved, net, consumer, now=NOW + jitter)
    assert overlay_digest(a) == overlay_digest(b)


def test_digest_covers_every_semantic_field():
    (base,) = compute_candidates([provider()], NET, CONSUMER, now=NOW)
    digests = {overlay_digest([base])}
    for change in (
        {"id": "c-other"},
        {"provider": "px"},
        {"endpoint": "http://x:1"},
        {"selection_group": "g9"},
        {"rank": 7},
        {"admission_state": EXISTING_ONLY},
    ):
        digests.add(overlay_digest([dataclasses.replace(base, **change)]))
    assert len(digests) == 7
    assert overlay_digest([]) != overlay_digest([base])


@given(ps=provider_sets(), net=networks, consumer=consumers, start=st.integers(min_value=1, max_value=1000))
def test_same_admission_same_digest_same_revision(ps, net, consumer, start):
    cands = compute_candidates(ps, net, consumer, now=NOW)
    prev = next_overlay(None, cands, network="net", consumer="c1")
    prev = dataclasses.replace(prev, revision=start)
    again = next_overlay(
        prev, compute_candidates(list(reversed(ps)), net, consumer, now=NOW), network="net", consumer="c1"
    )
    assert again == prev


@given(
    before=provider_sets(),
    after=provider_sets(),
    net=networks,
    consumer=consumers,
    start=st.integers(min_value=1, max_value=1000),
)
def test_revision_increments_by_one_exactly_when_digest_changes(before, after, net, consumer, start):
    a = compute_candidates(before, net, consumer, now=NOW)
    b = compute_candidates(after, net, consumer, now=NOW)
    prev = dataclasses.replace(next_overlay(None, a, network="net", consumer="c1"), revision=start)
    nxt = next_overlay(prev, b, network="net", consumer="c1")
    if overlay_digest(a) == overlay_digest(b):
        assert nxt.revision == start and nxt.digest == prev.digest
    else:
        assert nxt.revision == start + 1 and nxt.digest != prev.digest


def test_first_overlay_is_revision_one_and_network_change_bumps():
    first = next_overlay(None, (), network="net", consumer="c1")
    assert first.revision == 1
    moved = next_overlay(first, (), network="other", consumer="c1")
    assert moved.revision == 2 and moved.network == "other"


def test_overlay_spec_round_trip_and_sorted_candidates():
    cands = compute_candidates([provider("p1"), provider("p2", drain=True), provider("p3")], NET, CONSUMER, now=NOW)
    overlay = next_overlay(None, list(reversed(cands)), network="net", consumer="c1")
    ids = [c["id"] for c in overlay.to_spec()["candidates"]]
    assert ids == sorted(ids)
    assert Overlay.from_spec(overlay.to_spec()) == overlay
    assert Candidate.from_dict(overlay.candidates[0].to_dict()) == overlay.candidates[0]
    assert overlay.candidate_for("p2").admission_state == EXISTING_ONLY
    assert overlay.candidate_for("nope") is None


def test_candidate_id_is_stable_and_uid_derived():
    assert candidate_id("u1") == candidate_id("u1") != candidate_id("u2")
    assert candidate_id("u1").startswith("c-")


def test_group_admitted_counts():
    cands = compute_candidates(
        [provider("p1"), provider("p2", drain=True), provider("p3", selection_group="g2", drain=True)],
        NET,
        CONSUMER,
        now=NOW,
    )
    assert group_admitted_counts(cands) == {"g1": 1, "g2": 0}


# -- label selector and endpoint checks -----------------------------------------------------------
def net_with(*exprs: LabelRequirement, **match_labels: str) -> NetworkView:
    return NetworkView("n", match_labels=match_labels, match_expressions=tuple(exprs))


@pytest.mark.parametrize(
    ("network", "labels", "expected"),
    [
        (net_with(), {}, True),
        (net_with(tier="a"), {"tier": "a"}, True),
        (net_with(tier="a"), {"tier": "b"}, False),
        (net_with(tier="a"), {}, False),
        (net_with(LabelRequirement("tier", "In", ("a", "b"))), {"tier": "b"}, True),
        (net_with(LabelRequirement("tier", "In", ("a",))), {}, False),
        (net_with(LabelRequirement("tier", "NotIn", ("a",))), {}, True),
        (net_with(LabelRequirement("tier", "NotIn", ("a",))), {"tier": "a"}, False),
        (net_with(LabelRequirement("tier", "Exists")), {"tier": ""}, True),
        (net_with(LabelRequirement("tier", "Exists")), {}, False),
        (net_with(LabelRequirement("tier", "DoesNotExist")), {}, True),
        (net_with(LabelRequirement("tier", "DoesNotExist")), {"tier": "a"}, False),
        (net_with(LabelRequirement("zone", "Exists"), tier="a"), {"tier": "a"}, False),
        (net_with(LabelRequirement("zone", "Exists"), tier="a"), {"tier": "a", "zone": "z"}, True),
    ],
)
def test_label_selector_semantics(network, labels, expected):
    assert selects(network, labels) is expected


@given(net=networks, lbls=labels)
def test_selector_is_a_conjunction(net, lbls):
    """A selector matches exactly when every matchLabel and every expression matches on its own."""
    parts = [net_with(**{k: v}) for k, v in net.match_labels.items()] + [net_with(e) for e in net.match_expressions]
    assert selects(net, lbls) == all(selects(p, lbls) for p in parts)


def test_unselected_provider_is_not_a_candidate():
    net = net_with(tier="a")
    assert compute_candidates([provider(labels={"tier": "b"})], net, CONSUMER, now=NOW) == ()


@pytest.mark.parametrize(
    ("endpoint", "valid"),
    [
        ("http://127.0.0.1:8000", True),
        ("https://gpu.example", True),
        ("ftp://x", False),
        ("http://", False),
        ("", False),
        ("http://h:notaport", False),
        ("127.0.0.1:8000", False),
    ],
)
def test_endpoint_valid(endpoint, valid):
    assert endpoint_valid(endpoint) is valid


def test_endpoint_trust_policy():
    net = NetworkView("n", allowed_schemes=("https",), allowed_hosts=("gpu.example",))
    assert endpoint_trusted(net, "https://gpu.example:443/x")
    assert not endpoint_trusted(net, "http://gpu.example")
    assert not endpoint_trusted(net, "https://other.example")
    assert endpoint_trusted(NetworkView("n"), "http://anything")


def test_allowed_hosts_match_case_insensitively():
    net = NetworkView("n", allowed_hosts=("GPU.Example",))
    assert endpoint_trusted(net, "https://gpu.example")
    assert endpoint_trusted(net, "https://GPU.EXAMPLE")
