"""Leader election: the pure rules with an injected clock, and the lease loop over an in-memory
lease store that behaves like the API server for one object (resourceVersion preconditions,
409 on a lost race, 404 before creation). The real thing runs in
tests/integration/test_operator_lifecycle.py."""

from __future__ import annotations

import copy
import io
import threading

import pytest

from agn.kube import Conflict, NotFound, Unreachable
from agn.logs import JsonLog
from agn.operator.elector import Clocks, LeaderElector
from agn.operator.lease import (
    LeaseRecord,
    LeaseTimings,
    Observation,
    Step,
    decide,
    expired,
    leading,
    lease_spec,
    new_identity,
    observe,
    record_of,
    released_spec,
)


# -- the pure rules ------------------------------------------------------------------------------
def rec(holder="a", renew="t1", duration=15, transitions=0, rv="1"):
    return LeaseRecord(
        holder=holder,
        duration=duration,
        acquire_time="t0",
        renew_time=renew,
        transitions=transitions,
        resource_version=rv,
    )


def test_default_timings_are_sane_and_bad_ones_are_named():
    t = LeaseTimings()
    assert (t.duration, t.renew_interval, t.retry_period, t.renew_deadline) == (15, 5.0, 1.0, 10.0)
    assert t.problems() == []
    assert LeaseTimings(duration=3, renew_interval=2.5).problems()  # renew after the deadline (2 s)
    assert LeaseTimings(duration=15, retry_period=6).problems()
    assert LeaseTimings(duration=0).problems()
    assert LeaseTimings(duration=3, renew_interval=0.5, retry_period=0.2).problems() == []


def test_record_of_a_lease_object():
    lease = {
        "metadata": {"resourceVersion": "7"},
        "spec": {
            "holderIdentity": "a",
            "leaseDurationSeconds": 15,
            "acquireTime": "t0",
            "renewTime": "t1",
            "leaseTransitions": 2,
        },
    }
    assert record_of(lease) == LeaseRecord("a", 15, "t0", "t1", 2, "7")
    assert record_of({"metadata": {}, "spec": {}}).holder == ""


def test_observation_clock_starts_when_the_record_changes():
    first = observe(None, rec(), 100.0)
    assert first == Observation(rec(), 100.0)
    same = observe(first, rec(rv="2"), 105.0)  # same content, newer resourceVersion
    assert same.since == 100.0 and same.record.resource_version == "2"
    renewed = observe(same, rec(renew="t2", rv="3"), 106.0)
    assert renewed.since == 106.0
    assert observe(renewed, None, 107.0) is None


def test_expiry_is_measured_on_the_observers_clock():
    obs = Observation(rec(duration=15), since=100.0)
    assert not expired(obs, 114.9)
    assert expired(obs, 115.0)
    assert expired(Observation(rec(holder=""), since=100.0), 100.0)  # free: at once


def test_decide():
    assert decide(None, me="b", now=0.0) is Step.CREATE
    assert decide(Observation(rec(holder="b"), 100.0), me="b", now=100.0) is Step.RENEW
    assert decide(Observation(rec(holder="a"), 100.0), me="b", now=110.0) is Step.WAIT
    assert decide(Observation(rec(holder="a"), 100.0), me="b", now=115.0) is Step.ACQUIRE
    assert decide(Observation(rec(holder=""), 100.0), me="b", now=100.0) is Step.ACQUIRE


def test_leading_ends_at_the_renew_deadline():
    assert leading(renewed_at=100.0, now=109.9, renew_deadline=10.0)
    assert not leading(renewed_at=100.0, now=110.0, renew_deadline=10.0)
    assert not leading(renewed_at=None, now=0.0, renew_deadline=10.0)


def test_lease_spec_counts_transitions_only_when_the_holder_changes():
    created = lease_spec(None, Step.CREATE, me="a", duration=15, wall=0.0)
    assert created["holderIdentity"] == "a" and created["leaseTransitions"] == 0
    assert created["acquireTime"] == created["renewTime"] == "1970-01-01T00:00:00.000000Z"
    renewed = lease_spec(rec(holder="a", transitions=3), Step.RENEW, me="a", duration=15, wall=5.0)
    assert renewed["leaseTransitions"] == 3 and renewed["acquireTime"] == "t0"
    taken = lease_spec(rec(holder="a", transitions=3), Step.ACQUIRE, me="b", duration=15, wall=5.0)
    assert taken["leaseTransitions"] == 4 and taken["acquireTime"] == taken["renewTime"]
    released = released_spec(rec(holder="a", transitions=3), wall=6.0)
    assert released["holderIdentity"] is None and released["leaseTransitions"] == 3


def test_identities_are_unique_per_call():
    assert new_identity() != new_identity()


# -- the loop over an in-memory lease ------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Leases:
    """One namespace's leases, with the API server's optimistic concurrency."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.version = 0
        self.fail: Exception | None = None

    def _check(self) -> None:
        if self.fail is not None:
            raise self.fail

    def get(self, res, namespace, name, *, timeout=None):
        self._check()
        if name not in self.objects:
            raise NotFound("not found", status=404)
        return copy.deepcopy(self.objects[name])

    def _store(self, name, body):
        self.version += 1
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = str(self.version)
        obj["spec"] = {k: v for k, v in obj["spec"].items() if v is not None}
        self.objects[name] = obj
        return copy.deepcopy(obj)

    def create(self, res, namespace, body, *, timeout=None):
        self._check()
        if body["metadata"]["name"] in self.objects:
            raise Conflict("already exists", status=409)
        return self._store(body["metadata"]["name"], body)

    def replace(self, res, namespace, name, body, *, timeout=None):
        self._check()
        if self.objects[name]["metadata"]["resourceVersion"] != body["metadata"].get("resourceVersion"):
            raise Conflict("the object has been modified", status=409)
        return self._store(name, body)

    def holder(self, name="agn-operator"):
        return self.objects[name]["spec"].get("holderIdentity")


TIMINGS = LeaseTimings(duration=15, renew_interval=5.0, retry_period=1.0)


@pytest.fixture
def world():
    leases, clock = Leases(), Clock()

    def elector(identity):
        return LeaderElector(
            leases,
            "ns",
            identity=identity,
            timings=TIMINGS,
            log=JsonLog(component="t", stream=io.StringIO()),
            stop=threading.Event(),
            clocks=Clocks(monotonic=clock, wall=lambda: clock.now),
        )

    return leases, clock, elector


def test_first_candidate_creates_the_lease_and_the_second_follows(world):
    leases, clock, elector = world
    a, b = elector("a"), elector("b")
    assert a.step() == TIMINGS.renew_interval
    assert a.is_leader() and a.term() == 1 and leases.holder() == "a"
    assert b.step() == TIMINGS.retry_period
    assert not b.is_leader() and b.term() == 0
    assert b.status()["holder"] == "a" and a.status()["leader"] is True


def test_a_live_leader_keeps_the_lease(world):
    leases, clock, elector = world
    a, b = elector("a"), elector("b")
    a.step(), b.step()
    for _ in range(10):
        clock.now += 5.0
        a.step(), b.step()
    assert a.is_leader() and not b.is_leader() and leases.holder() == "a" and a.term() == 1


def test_a_dead_leaders_lease_is_taken_only_after_it_expired_on_the_followers_clock(world):
    leases, clock, elector = world
    a, b = elector("a"), elector("b")
    a.step()
    clock.now += 4.0
    b.step()  # b first sees a's record now
    clock.now += 10.0
    b.step()  # a renewed 14 s ago, but b has seen it unchanged for only 10 s
    assert leases.holder() == "a"
    clock.now += 5.0
    assert b.step() == TIMINGS.renew_interval
    assert b.is_leader() and leases.holder() == "b"
    assert leases.objects["agn-operator"]["spec"]["leaseTransitions"] == 1


def test_a_leader_that_cannot_renew_stops_leading_at_the_deadline_before_anyone_may_take_over(world):
    leases, clock, elector = world
    a, b = elector("a"), elector("b")
    a.step()
    b.step()
    leases.fail = Unreachable("API server unreachable", status=0)
    clock.now += 9.9
    assert a.step() == TIMINGS.retry_period and a.is_leader()
    clock.now += 0.1  # 10 s (the renew deadline) after the last successful renew started
    assert not a.is_leader()
    leases.fail = None
    b.step()
    assert not b.is_leader() and leases.holder() == "a"  # b must still wait until 15 s
    clock.now += 5.0
    b.step()
    assert b.is_leader()
    a.step()  # a sees b's record: it does not try to take it back
    assert not a.is_leader() and leases.holder() == "b"


def test_regaining_after_a_lapse_is_a_new_term(world):
    leases, clock, elector = world
    a = elector("a")
    a.step()
    leases.fail = Unreachable("down", status=0)
    clock.now += 11.0
    a.step()
    assert not a.is_leader()
    leases.fail = None
    a.step()  # still the holder on the server: renews
    assert a.is_leader() and a.term() == 2


def test_losing_a_race_is_a_409_and_no_leadership(world):
    leases, clock, elector = world
    a, b, c = elector("a"), elector("b"), elector("c")
    a.step()
    b.step(), c.step()
    clock.now += 15.0
    b.step(), c.step()  # both see the lease expired; b wrote first
    assert leases.holder() == "b" and b.is_leader() and not c.is_leader()


def test_someone_else_holding_the_lease_ends_leadership_at_once(world):
    leases, clock, elector = world
    a = elector("a")
    a.step()
    obj = leases.objects["agn-operator"]
    leases.replace(None, "ns", "agn-operator", {**obj, "spec": {**obj["spec"], "holderIdentity": "intruder"}})
    clock.now += 1.0
    a.step()
    assert not a.is_leader() and a.status()["holder"] == "intruder"


def test_release_hands_over_without_waiting_for_expiry(world):
    leases, clock, elector = world
    a, b = elector("a"), elector("b")
    a.step(), b.step()
    a.release()
    assert not a.is_leader() and leases.holder() is None
    clock.now += 0.5
    b.step()
    assert b.is_leader() and leases.holder() == "b"
    b.release()
    assert leases.holder() is None
    a.step()  # a released for good: it never takes the free lease again
    assert not a.is_leader() and leases.holder() is None


def test_a_follower_releases_nothing(world):
    leases, clock, elector = world
    a, b = elector("a"), elector("b")
    a.step(), b.step()
    b.release()
    assert leases.holder() == "a"
