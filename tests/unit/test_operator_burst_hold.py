"""The window for additions (agn.operator.burst): what is held while a burst is probed, and what never is."""

from __future__ import annotations

import dataclasses

from poolviews import pool_view

from agn.model import NetworkView, ProviderView
from agn.operator.burst import (
    SHARD_WRITERS,
    Burst,
    additions_only,
    awaiting_first_probe,
    hold_for,
    index_behind,
    published,
)
from agn.operator.verdicts import HISTORY, Verdicts

NOW = 1_000_000.0
NET = NetworkView("net", match_labels={"pool": "a"}, metrics_max_age_seconds=45)
CONSUMER = {"metadata": {"name": "c", "uid": "u-1", "generation": 1}, "spec": {"network": "net"}}
BOUND = 12.0


def view(i: int, **kw) -> ProviderView:
    return pool_view(i, now=NOW, **kw)


def unprobed(i: int) -> ProviderView:
    return view(i, healthy=None, metrics_observed_at=None)


def burst(verdicts: Verdicts, probed: int, created: int):
    """The network's verdict with ``probed`` providers probed healthy of ``created``."""
    fleet = [view(i) for i in range(probed)] + [unprobed(i) for i in range(probed, created)]
    return verdicts.evaluate(NET, fleet, now=NOW)


def test_additions_while_providers_await_their_first_probe_are_held_until_the_bound():
    verdicts = Verdicts()
    last = published(CONSUMER, burst(verdicts, 10, 20))
    judged = burst(verdicts, 15, 30)
    assert awaiting_first_probe(judged) == 15 and additions_only(last, judged)
    assert hold_for(last, judged, CONSUMER, behind=False, now=NOW, bound=BOUND) == BOUND
    since = dataclasses.replace(last, held_since=NOW)
    assert hold_for(since, judged, CONSUMER, behind=False, now=NOW + 5, bound=BOUND) == BOUND - 5
    assert hold_for(since, judged, CONSUMER, behind=False, now=NOW + BOUND, bound=BOUND) is None


def test_the_last_first_probe_ends_the_hold():
    verdicts = Verdicts()
    last = published(CONSUMER, burst(verdicts, 10, 20))
    done = burst(verdicts, 30, 30)
    assert awaiting_first_probe(done) == 0 and additions_only(last, done)
    assert hold_for(last, done, CONSUMER, behind=False, now=NOW, bound=BOUND) is None


def test_a_provider_never_probed_for_its_invalid_endpoint_does_not_hold_a_burst():
    verdicts = Verdicts()
    invalid = unprobed(99)
    invalid = dataclasses.replace(invalid, endpoint="not a url")
    last = published(CONSUMER, verdicts.evaluate(NET, [view(0), invalid], now=NOW))
    judged = verdicts.evaluate(NET, [view(0), view(1), invalid], now=NOW)
    assert additions_only(last, judged) and awaiting_first_probe(judged) == 0
    assert hold_for(last, judged, CONSUMER, behind=False, now=NOW, bound=BOUND) is None


def test_a_drain_removal_or_failure_among_additions_is_published_at_once():
    verdicts = Verdicts()
    last = published(CONSUMER, burst(verdicts, 10, 20))
    changes = {
        "drain": [view(0, drain=True), *(view(i) for i in range(1, 15))],
        "removal": [view(i) for i in range(1, 15)],
        "failure": [view(0, healthy=False), *(view(i) for i in range(1, 15))],
        "rank": [view(0, rank=7), *(view(i) for i in range(1, 15))],
    }
    for what, fleet in changes.items():
        judged = verdicts.evaluate(NET, [*fleet, *(unprobed(i) for i in range(15, 30))], now=NOW)
        assert not additions_only(last, judged), what
        assert hold_for(last, judged, CONSUMER, behind=False, now=NOW, bound=BOUND) is None, what


def test_a_changed_consumer_network_or_index_behind_the_shards_is_published_at_once():
    verdicts = Verdicts()
    last = published(CONSUMER, burst(verdicts, 10, 20))
    judged = burst(verdicts, 15, 30)
    edited = {**CONSUMER, "metadata": {**CONSUMER["metadata"], "generation": 2}}
    assert hold_for(last, judged, edited, behind=False, now=NOW, bound=BOUND) is None
    assert hold_for(last, judged, CONSUMER, behind=True, now=NOW, bound=BOUND) is None
    assert hold_for(None, judged, CONSUMER, behind=False, now=NOW, bound=BOUND) is None
    other = NetworkView("net", match_labels={"pool": "a"}, metrics_max_age_seconds=90)
    assert not additions_only(last, Verdicts().evaluate(other, [view(i) for i in range(15)], now=NOW))


def test_nothing_changed_is_not_held_and_an_old_version_is_compared_whole():
    verdicts = Verdicts()
    first = burst(verdicts, 10, 20)
    last = published(CONSUMER, first)
    assert not additions_only(last, first)
    judged = first
    for n in range(11, 11 + HISTORY + 5):  # more versions than the history keeps
        judged = burst(verdicts, n, 100)
    assert additions_only(last, judged)
    drained = verdicts.evaluate(
        NET, [view(0, drain=True), *(view(i) for i in range(1, 90)), *(unprobed(i) for i in range(90, 100))], now=NOW
    )
    assert not additions_only(last, drained)


def test_an_index_is_behind_when_a_shard_it_names_is_at_another_digest_or_gone():
    index = {"spec": {"shards": [{"name": "s0", "digest": "a"}, {"name": "s1", "digest": "b"}]}}
    stored = {"s0": {"spec": {"digest": "a"}}, "s1": {"spec": {"digest": "b"}}}
    assert not index_behind(index, stored)
    assert index_behind(index, {**stored, "s1": {"spec": {"digest": "c"}}})
    assert index_behind(index, {"s0": stored["s0"]})
    assert index_behind(None, stored)


def test_the_network_wide_answers_are_kept_per_verdict_and_follow_a_new_one():
    verdicts = Verdicts()
    keep = Burst()
    last = published(CONSUMER, burst(verdicts, 10, 20))
    judged = burst(verdicts, 15, 30)
    assert keep.additions_only(last, judged) and keep.awaiting_first_probe(judged) == 15
    # A first probe that finds a provider down: new views, the same candidates.
    fleet = [view(i) for i in range(15)] + [view(15, healthy=False)] + [unprobed(i) for i in range(16, 30)]
    down = verdicts.evaluate(NET, fleet, now=NOW)
    assert down.by_provider == judged.by_provider and keep.awaiting_first_probe(down) == 14
    drained = verdicts.evaluate(NET, [view(0, drain=True), *fleet[1:]], now=NOW)
    assert not keep.additions_only(last, drained)
    assert hold_for(last, drained, CONSUMER, behind=False, now=NOW, bound=BOUND, burst=keep) is None
    assert hold_for(last, down, CONSUMER, behind=False, now=NOW, bound=BOUND, burst=keep) == BOUND


def test_a_publications_shards_are_written_one_at_a_time_only_while_a_burst_is_probed():
    verdicts, shared = Verdicts(), Burst()
    assert shared.shard_writers(burst(verdicts, 3, 5)) == 1
    assert shared.shard_writers(burst(verdicts, 5, 5)) == SHARD_WRITERS > 1
    drained = verdicts.evaluate(NET, [view(i, drain=i == 0) for i in range(5)], now=NOW)
    assert shared.shard_writers(drained) == SHARD_WRITERS
