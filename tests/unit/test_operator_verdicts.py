"""The network verdict cache: same answers as the model, work only for what changed."""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
from hypothesis import given, settings
from poolviews import pool_view

from agn.model import (
    ConsumerView,
    Exclusion,
    NetworkView,
    ProviderView,
    compute_candidates,
    overlay_digest,
)
from agn.operator.verdicts import Verdicts, candidates_of, changed_since

NOW = 1_000_000.0
NET = NetworkView("net", match_labels={"pool": "a"}, metrics_max_age_seconds=45)


def view(i: int, **kw) -> ProviderView:
    return pool_view(i, now=NOW, **kw)


def candidates(verdict, consumer: ConsumerView):
    return candidates_of(verdict, consumer)


def test_only_changed_providers_are_evaluated_and_a_refreshed_reading_keeps_the_version():
    verdicts = Verdicts()
    fleet = [view(i) for i in range(1000)]
    first = verdicts.evaluate(NET, fleet, now=NOW)
    assert first.recomputed == 1000 and len(first.selected) == 1000
    assert first.recheck_at == NOW + 45
    again = verdicts.evaluate(NET, fleet, now=NOW + 1)
    assert again.recomputed == 0 and again.version == first.version
    fleet[3] = view(3, metrics_observed_at=NOW + 2)  # a probe refreshed p3's reading: a new view
    refreshed = verdicts.evaluate(NET, fleet, now=NOW + 2)
    assert refreshed.recomputed == 1 and refreshed.version == first.version
    fleet[4] = view(4, drain=True)
    drained = verdicts.evaluate(NET, fleet, now=NOW + 2)
    assert drained.recomputed == 1 and drained.version != first.version


def test_a_reading_going_stale_is_noticed_without_a_new_provider_version():
    verdicts = Verdicts()
    fleet = [view(0), view(1, metrics_observed_at=NOW + 10)]
    assert [f for _, f in verdicts.evaluate(NET, fleet, now=NOW).selected] == [None, None]
    later = verdicts.evaluate(NET, fleet, now=NOW + 46)
    assert [f for _, f in later.selected] == [Exclusion.STALE, None]
    assert later.recomputed == 1 and later.recheck_at == NOW + 55


def test_a_changed_network_re_evaluates_everything():
    verdicts = Verdicts()
    fleet = [view(0), view(1, labels={"pool": "b"})]
    first = verdicts.evaluate(NET, fleet, now=NOW)
    assert [p.name for p, _ in first.selected] == ["p0"]
    wider = dataclasses.replace(NET, match_labels={})
    second = verdicts.evaluate(wider, fleet, now=NOW)
    assert second.recomputed == 2 and [p.name for p, _ in second.selected] == ["p0", "p1"]
    assert second.version != first.version
    verdicts.forget([])
    assert verdicts.evaluate(wider, fleet, now=NOW).recomputed == 2


steps = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=11),
        st.sampled_from(["drain", "undrain", "fail", "heal", "refresh", "relabel", "remove", "wait", "refresh-all"]),
    ),
    max_size=25,
)


@settings(max_examples=80, deadline=None)
@given(steps=steps)
def test_cached_verdicts_give_the_models_candidates_after_any_changes(steps):
    verdicts = Verdicts()
    consumer = ConsumerView("c", "net", excluded_providers=frozenset({"p5"}))
    fleet = {i: view(i) for i in range(12)}
    now = NOW
    last = None
    before = None
    for i, op in steps:
        p = fleet.get(i) or view(i)
        if op == "wait":
            now += 20
        elif op == "refresh-all":  # every reading refreshed (new views) in the batch that drains p
            fleet = {k: dataclasses.replace(v, metrics_observed_at=now) for k, v in fleet.items()}
            p = dataclasses.replace(fleet.get(i) or view(i), drain=not p.drain)
        elif op == "remove":
            fleet.pop(i, None)
            p = None
        else:
            changes = {
                "drain": {"drain": True},
                "undrain": {"drain": False},
                "fail": {"healthy": False},
                "heal": {"healthy": True},
                "refresh": {"metrics_observed_at": now},
                "relabel": {"labels": {"pool": "b" if p.labels.get("pool") == "a" else "a"}},
            }[op]
            p = dataclasses.replace(p, **changes)
        if p is not None:
            fleet[i] = p
        providers = list(fleet.values())
        got = verdicts.evaluate(NET, providers, now=now)
        want = compute_candidates(providers, NET, consumer, now=now)
        assert candidates(got, consumer) == want
        # The shared base candidates: sorted, digested, and each version's delta names exactly
        # the providers whose base candidate changed (unchanged ones keep the same object).
        assert got.candidates == tuple(sorted(got.by_provider.values(), key=lambda c: (c.id, c.provider)))
        assert got.digest == overlay_digest(got.candidates)
        if before is not None:
            moved = {
                n
                for n in got.by_provider.keys() | before.by_provider.keys()
                if got.by_provider.get(n) != before.by_provider.get(n)
            }
            assert changed_since(got, before.version) == moved
            assert all(got.by_provider[n] is before.by_provider[n] for n in got.by_provider.keys() - moved)
        before = got
        if last is not None and last[1] == want:
            pass  # an unchanged outcome may keep or change the version; a changed one must change it
        elif last is not None:
            assert got.version != last[0]
        last = (got.version, want)


def test_consumers_of_one_batch_share_the_networks_verdict_until_a_reading_expires():
    verdicts = Verdicts()
    batch = tuple(view(i, metrics_observed_at=NOW + i) for i in range(3))
    first = verdicts.evaluate(NET, batch, now=NOW + 5)
    again = verdicts.evaluate(NET, batch, now=NOW + 6)  # the next consumer of the same batch
    assert again.recomputed == 0 and again.selected == first.selected and again.version == first.version
    expired = verdicts.evaluate(NET, batch, now=NOW + 45.5)  # p0's reading is stale now
    assert [f for _, f in expired.selected] == [Exclusion.STALE, None, None]
    assert expired.version != first.version
    next_batch = tuple(batch)  # a new snapshot is evaluated, from memory
    assert verdicts.evaluate(NET, next_batch, now=NOW + 45.5).recomputed == 0
    as_list = list(batch)  # a list may change in place: never taken for the same snapshot
    verdicts.evaluate(NET, as_list, now=NOW + 46)
    as_list[1] = view(1, drain=True, metrics_observed_at=NOW + 46)
    assert verdicts.evaluate(NET, as_list, now=NOW + 46).version != expired.version
