"""The pure halves of the declared budget (:mod:`xtask.drain.core.budget`) and of the drain lock
(:mod:`xtask.drain.core.lock`): which bound binds, what an override sets aside, and when a
waiting run may take a Lease (judged on its own clock, never the holder's renewTime)."""

from __future__ import annotations

import pytest

from agn.objects import network_view
from agn.operator.lease import LeaseRecord
from xtask.drain.core.amounts import Amount
from xtask.drain.core.budget import declared_amount, declares_budget, group_budgets, networks_of
from xtask.drain.core.lock import (
    LockStep,
    lock_name,
    next_look,
    see,
    step,
    still_held,
    take_spec,
)

NOW = 1_800_000_010.0
ME, OTHER = "ann@h1 pid 1 operation a", "bob@h2 pid 2 operation b"


def provider(name: str, *, drain: bool = False, group: str = "chat", net: str = "net") -> dict:
    spec = {"endpoint": f"http://127.0.0.1:9/{name}", "selectionGroup": group, "providerGateway": "gw"}
    if drain:
        spec["trafficPolicy"] = {"drain": True}
    return {
        "metadata": {"name": name, "labels": {net: "yes"}},
        "spec": spec,
        "status": {"probe": {"healthy": True, "metricsObservedAt": "2027-01-15T08:00:00Z"}},
    }


def network(name: str = "net", max_unavailable=None) -> dict:
    spec: dict = {"providerSelector": {"matchLabels": {name: "yes"}}}
    if max_unavailable is not None:
        spec["disruptionBudget"] = {"maxUnavailable": max_unavailable}
    return {"metadata": {"name": name}, "spec": spec}


FOUR = [provider("a1"), provider("a2", drain=True), provider("a3"), provider("a4")]


def rows(networks, amount=None, *, override=False, to_drain=("a1",)):
    return group_budgets(FOUR, networks, list(to_drain), amount, heartbeat=None, now=NOW, override=override)


def test_the_network_view_reads_the_declared_budget_as_stored():
    assert network_view(network(max_unavailable=2)).max_unavailable == 2
    assert network_view(network(max_unavailable="25%")).max_unavailable == "25%"
    assert network_view(network()).max_unavailable is None
    assert declares_budget([network(), network("b", 1)]) and not declares_budget([network()])


@pytest.mark.parametrize(
    "stored, size, budget",
    [(2, 4, 2), (0, 4, 0), ("25%", 4, 1), ("50%", 3, 2), ("100%", 4, 4), ("abc", 4, 0), (-1, 4, 0), (True, 4, 0)],
)
def test_a_declared_amount_of_a_group_and_a_stored_value_the_server_would_refuse_counts_as_zero(stored, size, budget):
    value = network_view(network(max_unavailable=stored)).max_unavailable
    amount = declared_amount(value)
    assert amount is not None and amount.of(size) == budget


def test_the_declared_budget_alone_binds_every_drain():
    (row,) = rows([network(max_unavailable=1)])
    assert (row.budget, row.declared_budget, row.flag_budget, row.exceeded) == (1, 1, None, True)
    assert row.describe(None).endswith("over the network's disruptionBudget.maxUnavailable 1 (1)")
    (row,) = rows([network(max_unavailable=2)])
    assert (row.unavailable_after, row.exceeded) == (2, False)


def test_the_smaller_of_the_declared_budget_and_max_unavailable_binds_and_is_named():
    (row,) = rows([network(max_unavailable=3)], Amount(1))
    assert (row.budget, row.exceeded) == (1, True)
    assert row.describe(Amount(1)).endswith("over --max-unavailable 1 (1)")
    (row,) = rows([network(max_unavailable="25%")], Amount(3))
    assert (row.budget, row.exceeded) == (1, True)
    assert "disruptionBudget.maxUnavailable 25% (1)" in row.describe(Amount(3))
    assert "--max-unavailable" not in row.describe(Amount(3))


def test_an_override_sets_the_declared_budget_aside_but_max_unavailable_still_binds():
    (row,) = rows([network(max_unavailable=0)], override=True)
    assert (row.budget, row.overridden, row.exceeded) == (None, True, False)
    assert row.to_dict()["overridden"] is True and row.to_dict()["declared"] == "0"
    (row,) = rows([network(max_unavailable=0)], Amount(1), override=True)
    assert (row.budget, row.exceeded) == (1, True)
    (row,) = rows([network()], override=True)  # nothing declared: nothing overridden
    assert row.overridden is False


def test_without_any_bound_a_row_is_reported_but_never_exceeded():
    (row,) = rows([network()])
    assert (row.budget, row.exceeded, row.unavailable_after) == (None, False, 2)


def test_the_locks_a_run_takes_are_the_networks_selecting_what_it_changes_sorted():
    nets = [network("zeta"), network("alpha"), network("unused")]
    ps = [provider("z", net="zeta"), provider("a", net="alpha")]
    assert networks_of(ps, nets) == ["alpha", "zeta"]
    assert networks_of([], nets) == []


def test_lock_names_are_object_names_and_long_networks_stay_distinct():
    assert lock_name("net") == "agn-drain-net"
    long_a, long_b = lock_name("n" * 250 + "a"), lock_name("n" * 250 + "b")
    assert len(long_a) <= 253 and len(long_b) <= 253 and long_a != long_b


def record(holder: str = OTHER, rv: str = "1", duration: int = 15) -> LeaseRecord:
    return LeaseRecord(holder=holder, duration=duration, renew_time="2027-01-15T08:00:00Z", resource_version=rv)


def test_no_lease_is_created_a_free_or_own_lease_is_taken_a_held_one_waited_for():
    assert step(see(None, None, 0.0), me=ME, now=0.0) is LockStep.CREATE
    assert step(see(None, record(holder=""), 0.0), me=ME, now=0.0) is LockStep.TAKE
    assert step(see(None, record(holder=ME), 0.0), me=ME, now=0.0) is LockStep.TAKE
    assert step(see(None, record(), 0.0), me=ME, now=0.0) is LockStep.WAIT


def test_expiry_is_the_resource_version_unchanged_for_the_ttl_on_the_observers_clock():
    seen = see(None, record(rv="1"), 100.0)
    # The holder's renewTime is years in the past by our wall clock: it does not matter.
    assert step(seen, me=ME, now=114.9) is LockStep.WAIT
    assert step(seen, me=ME, now=115.0) is LockStep.TAKE
    # The same version read again keeps the clock; a renewal (a new version) restarts it.
    assert see(seen, record(rv="1"), 110.0) is seen
    renewed = see(seen, record(rv="2"), 110.0)
    assert renewed is not None and renewed.since == 110.0
    assert step(renewed, me=ME, now=120.0) is LockStep.WAIT
    assert step(renewed, me=ME, now=125.0) is LockStep.TAKE
    assert see(renewed, None, 126.0) is None  # deleted (released): create it


def test_a_waiting_run_looks_again_at_most_a_second_later_and_right_at_expiry():
    seen = see(None, record(rv="1"), 100.0)
    assert next_look(seen, 100.0) == 1.0
    assert next_look(seen, 114.5) == pytest.approx(0.5)
    assert next_look(seen, 200.0) == 0.0
    assert next_look(None, 0.0) == 0.0


def test_a_holder_stops_writing_a_third_of_the_ttl_before_anyone_may_take_its_lock():
    assert still_held(renewed_at=100.0, now=109.9, ttl=15)
    assert not still_held(renewed_at=100.0, now=110.0, ttl=15)


def test_taking_over_another_run_s_lease_counts_a_transition_and_names_us():
    spec = take_spec(LeaseRecord(holder=OTHER, duration=15, transitions=2), me=ME, ttl=15, wall=NOW)
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"]) == (ME, 15, 3)
    assert spec["acquireTime"] == spec["renewTime"]
    assert take_spec(None, me=ME, ttl=15, wall=NOW)["leaseTransitions"] == 0
