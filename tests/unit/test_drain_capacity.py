"""The load-aware capacity guard's decision (:mod:`xtask.drain.core.capacity`): the load the drained
providers carry against the headroom of those that stay admitted, the margin, and what is not
known (never assumed to fit); the groups where no provider declares a capacity are left alone."""

from __future__ import annotations

import pytest

from agn.objects import max_concurrent_of, provider_view, rfc3339
from xtask.drain.core.amounts import Amount
from xtask.drain.core.capacity import EXCEEDS, FITS, UNKNOWN_VERDICT, capacity_groups, capacity_refusals
from xtask.drain.core.journal_records import JournalHeader

NOW = 1_800_000_010.0
FRESH = rfc3339(NOW - 2)
MAX_AGE = 45


def provider(
    name: str,
    *,
    capacity: int | None = 10,
    running: int | None = 0,
    waiting: int | None = 0,
    observed: str | None = FRESH,
    drain: bool = False,
    group: str = "chat",
    healthy: bool = True,
) -> dict:
    spec: dict = {"endpoint": f"http://127.0.0.1:9/{name}", "selectionGroup": group}
    if capacity is not None:
        spec["capacity"] = {"maxConcurrent": capacity}
    if drain:
        spec["trafficPolicy"] = {"drain": True}
    status: dict = {
        "probe": {"healthy": healthy, "metricsObservedAt": FRESH},
        "conditions": [{"type": "MetricsFresh", "status": "True"}],
    }
    if observed is not None:
        load: dict = {"observedAt": observed}
        if running is not None:
            load["running"] = running
        if waiting is not None:
            load["waiting"] = waiting
        status["load"] = load
    return {"metadata": {"name": name, "labels": {"net": "yes"}}, "spec": spec, "status": status}


NET = {
    "metadata": {"name": "net"},
    "spec": {"providerSelector": {"matchLabels": {"net": "yes"}}, "metricsMaxAgeSeconds": MAX_AGE},
}


def weigh(providers, to_drain=("a",), margin=None, heartbeat=None):
    return capacity_groups(providers, [NET], list(to_drain), margin, heartbeat=heartbeat, now=NOW)


def test_a_drain_whose_load_fits_the_headroom_of_the_staying_providers_passes():
    (row,) = weigh([provider("a", running=4, waiting=2), provider("b", running=3), provider("c", running=1)])
    assert (row.load, row.capacity, row.staying_load, row.headroom) == (6, 20, 4, 16)
    assert row.verdict == FITS and capacity_refusals([row]) == []


def test_a_drain_past_the_headroom_is_refused_naming_the_group_the_load_and_the_headroom():
    (row,) = weigh(
        [provider("a", running=8, waiting=1), provider("b", running=9), provider("c", capacity=5, running=3)]
    )
    assert (row.load, row.headroom) == (9, 3)
    assert row.verdict == EXCEEDS
    (refusal,) = capacity_refusals([row])
    assert "selection group 'chat'" in refusal and "carry load 9 (a 9)" in refusal
    assert "headroom 3" in refusal and "capacity 15, load 12, margin 0" in refusal and "--force" in refusal


@pytest.mark.parametrize(
    "margin, held, verdict",
    [(Amount(4), 4, EXCEEDS), (Amount(3), 3, FITS), (Amount(30, True), 4, EXCEEDS), (Amount(25, True), 3, FITS)],
)
def test_the_margin_is_requests_or_a_percentage_of_the_staying_capacity_rounded_up(margin, held, verdict):
    (row,) = weigh([provider("a", running=5), provider("b", capacity=12, running=4)], margin=margin)
    assert row.margin == held and row.headroom == 8 - held and row.verdict == verdict


def test_a_missing_reading_or_capacity_is_unknown_never_assumed_to_fit():
    fleet = [
        provider("a", capacity=None, observed=None),  # drained: its load has never been published
        provider("b", capacity=None),  # stays: no capacity declared
        provider("c", waiting=None),  # stays: the waiting gauge is not exported
        provider("d", observed=rfc3339(NOW - 100)),  # stays: the reading expired
    ]
    (row,) = weigh(fleet)
    assert row.verdict == UNKNOWN_VERDICT and row.load is None and row.headroom is None
    text = " | ".join(row.unknown)
    assert "a: load unknown (no load reading yet)" in text
    assert "b: capacity unknown" in text
    assert "c: load unknown (the provider does not export agn_provider_waiting)" in text
    assert "d: load unknown (reading expired" in text
    (refusal,) = capacity_refusals([row])
    assert "not assumed to fit" in refusal and "b: capacity unknown" in refusal


def test_the_heartbeat_vouches_for_a_reading_the_status_still_calls_fresh():
    old = rfc3339(NOW - 100)
    fleet = [provider("a", running=1, observed=old), provider("b", running=1, observed=old)]
    assert weigh(fleet)[0].verdict == UNKNOWN_VERDICT
    assert weigh(fleet, heartbeat=NOW - 1)[0].verdict == FITS


def test_drained_and_failed_providers_neither_leave_load_nor_give_headroom():
    fleet = [
        provider("a", running=5),
        provider("b", running=0, drain=True),  # drained already: not leaving, not staying
        provider("c", running=0, healthy=False),  # a hard failure: not admitted
        provider("d", capacity=6, running=2),
    ]
    (row,) = weigh(fleet)
    assert [p.provider for p in row.leaving] == ["a"] and [p.provider for p in row.staying] == ["d"]
    assert (row.load, row.headroom, row.verdict) == (5, 4, EXCEEDS)


def test_no_provider_staying_admitted_exceeds_even_at_load_zero():
    (row,) = weigh([provider("a"), provider("b")], to_drain=("a", "b"))
    assert row.verdict == EXCEEDS and "no provider stays admitted" in capacity_refusals([row])[0]


def test_groups_where_no_provider_declares_a_capacity_and_groups_not_drained_are_not_weighed():
    fleet = [
        provider("a", capacity=None),
        provider("b", capacity=None),
        provider("e", group="embed", running=9),
        provider("f", group="embed", capacity=1),
    ]
    assert weigh(fleet) == []  # chat declares no capacity: the last-provider guard alone, as before
    (row,) = weigh(fleet, to_drain=("e",))
    assert row.group == "embed" and row.verdict == EXCEEDS
    assert weigh(fleet, to_drain=()) == []


@pytest.mark.parametrize("value, read", [(4, 4), (0, None), (-1, None), (True, None), ("4", None), (None, None)])
def test_max_concurrent_is_read_only_as_the_crd_allows_it(value, read):
    spec = {"endpoint": "http://x", "capacity": {"maxConcurrent": value}}
    assert max_concurrent_of(spec) == read
    assert provider_view({"metadata": {"name": "p"}, "spec": spec}).max_concurrent == read


def test_the_report_row_carries_every_number():
    (row,) = weigh([provider("a", running=2), provider("b", running=1)], margin=Amount(1))
    d = row.to_dict()
    assert {k: d[k] for k in ("load", "capacity", "stayingLoad", "margin", "headroom", "verdict")} == {
        "load": 2,
        "capacity": 10,
        "stayingLoad": 1,
        "margin": 1,
        "headroom": 8,
        "verdict": FITS,
    }
    assert d["leaving"] == [{"provider": "a", "load": 2, "capacity": 10, "detail": "running 2, waiting 0"}]


def test_the_journal_header_records_what_force_set_aside_and_nothing_otherwise():
    def header(overridden):
        return JournalHeader(
            operation="op",
            context=None,
            namespace="ns",
            requested=True,
            reason=None,
            changes=[],
            capacity_override=overridden,
        ).record(now="2026-12-07T12:00:00+00:00")

    assert header(["capacity: network net, ... exceeds"])["capacityOverride"] == ["capacity: network net, ... exceeds"]
    assert "capacityOverride" not in header(None) and "capacityOverride" not in header([])
