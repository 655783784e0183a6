"""Nothing keyed by a deleted object's name stays: the pure pruning, the prober's per-provider
memory and the controller's per-consumer memory (no API: nothing here reaches one)."""

from __future__ import annotations

import asyncio
import io
import threading

import pytest
from prometheus_client import generate_latest

from agn.logs import JsonLog
from agn.model import Overlay
from agn.operator.controller import Operator
from agn.operator.informer import Store
from agn.operator.prober import Prober, ProbeStores
from agn.operator.pruning import prune
from agn.operator.settings import Settings
from agn.operator.workqueue import CoalescingQueue


class Leader:
    identity = "me"

    def __init__(self, leading=True, term=1):
        self.leading, self._term = leading, term

    def is_leader(self):
        return self.leading

    def term(self):
        return self._term

    def status(self):
        return {"leader": self.leading, "identity": self.identity}


def log():
    return JsonLog(component="test", stream=io.StringIO())


def provider(name, uid=None):
    return {
        "metadata": {"name": name, "uid": uid or f"uid-{name}", "resourceVersion": "1"},
        "spec": {"endpoint": "http://127.0.0.1:1"},
        "status": {},
    }


def test_prune_drops_keys_that_are_not_live():
    state = {"a": 1, "b": 2, "c": 3}
    assert prune(state, {"a", "c", "z"}) == ["b"]
    assert state == {"a": 1, "c": 3}
    names = {"x", "y"}
    assert prune(names, ["y"]) == ["x"] and names == {"y"}
    assert prune({}, []) == []


def make_prober(*names: str, **settings) -> tuple[Prober, Store, Leader]:
    """A prober (no API client: nothing here writes) over providers ``names``, with its leadership."""
    providers = Store()
    providers.replace([provider(n) for n in names])
    leadership = Leader()
    p = Prober(
        None,
        "ns",
        settings=Settings(
            **{"probe_interval": 1.0, "probe_timeout": 0.1, "probe_jitter": 0.0, "probe_concurrency": 16, **settings}
        ),
        leadership=leadership,
        stores=ProbeStores(providers=providers, networks=Store()),
        log=log(),
        stop=threading.Event(),
    )
    return p, providers, leadership


@pytest.fixture
def prober():
    p, providers, leadership = make_prober("p1", "p2")
    yield p, providers, leadership
    p._pool.shutdown()


def test_prober_forgets_a_deleted_provider(prober):
    p, providers, _ = prober
    p.begin_term(1)
    assert p.tick(100.0) == ["p1", "p2"]
    p.recorder.remember(provider("p1"))  # what a probe leaves behind
    p.recorder.remember(provider("p2"))
    for name in ("p1", "p2"):
        with p._lock:
            p.schedule.done(name)
    providers.remove("p2")
    p.tick(100.5)
    assert p.remembered() == {"p1"}
    # A probe that was in flight while its provider was deleted re-creates memory; the next tick drops it.
    p.recorder.remember(provider("p2"))
    p.tick(100.6)
    assert p.remembered() == {"p1"}


def test_prober_probes_nothing_while_following_but_still_forgets(prober):
    p, providers, leadership = prober
    p.begin_term(1)
    leadership.leading = False
    assert p.tick(100.0) == []
    p.recorder.remember(provider("p1"))
    providers.remove("p1")
    p.tick(100.1)
    assert p.remembered() == {"p2"}  # still due in this term's first round; p1 is forgotten


def test_prober_waits_for_its_own_term(prober):
    p, _, leadership = prober
    p.begin_term(1)
    leadership._term = 2  # leadership was lost and regained; the controller has not begun term 2
    assert p.tick(100.0) == []
    p.begin_term(2)
    assert p.tick(100.0) == ["p1", "p2"]


def test_first_round_of_a_term_completes_when_its_providers_are_deleted(prober):
    p, providers, _ = prober
    p.begin_term(1)
    assert not p.first_round.is_set()
    providers.replace([])
    p.tick(100.0)
    assert p.first_round.is_set() and p.remembered() == set()


def test_new_term_forgets_the_last_terms_memory(prober):
    p, _, _ = prober
    p.begin_term(1)
    p.recorder.remember(provider("p1"))
    p.begin_term(2)
    assert p.recorder.memory == {}


def make_operator():
    return Operator(None, "ns", settings=Settings(), log=log(), stop=threading.Event(), elector=None)


def overlay(consumer):
    return Overlay(network="net", consumer=consumer, revision=3, digest="d", candidates=())


def test_controller_forgets_a_deleted_consumer_on_its_reconcile():
    op = make_operator()
    op.memory.published["gone"] = ("uid-gone", overlay("gone"))
    op.memory.missing_network["gone"] = "net"
    op.queue.add_after("gone", 30.0)
    op.reconcile("gone", providers=())  # no consumer, no overlay in the caches: nothing to call the API for
    assert op.remembered() == set()
    assert "gone" not in op.queue.pending()


def test_controller_forgets_consumers_whose_deletion_it_missed():
    op = make_operator()
    op.caches.consumers.store.replace([{"metadata": {"name": "kept", "uid": "u"}, "spec": {"network": "net"}}])
    op.memory.published.update({"kept": ("u", overlay("kept")), "gone": ("g", overlay("gone"))})
    op.memory.missing_network.update({"gone-too": "net"})
    op.consumers.forget_deleted()
    assert op.remembered() == {"kept"}


def test_queue_discards_a_schedule_but_keeps_a_fresh_mark():
    q = CoalescingQueue(window=0.0)
    q.add_after("c1", 60.0)
    q.discard_delayed("c1")
    assert q.pending() == set()
    q.add("c1")
    q.discard_delayed("c1")
    assert q.pending() == {"c1"}


def test_queue_clear_drops_marks_and_schedules():
    q = CoalescingQueue(window=0.0)
    q.add("c1")
    q.add_after("c2", 60.0)
    q.clear()
    assert q.pending() == set() and q.take_ready() == set()
    q.add("c3")
    assert q.take_ready() == {"c3"}


def test_a_term_that_ends_leaves_no_per_consumer_memory():
    op = make_operator()

    class Lapsed:
        identity = "me"

        def is_leader(self):
            return False

        def term(self):
            return 1

    op.leadership = Lapsed()
    op.prober.leadership = op.leadership
    op.memory.published["c1"] = ("u", overlay("c1"))
    op.memory.missing_network["c2"] = "net"
    op._lead(1)  # leadership is already gone: the term ends at once
    assert op.remembered() == set()
    op.prober._pool.shutdown()


def test_prober_reports_its_backlog_while_leading_and_none_while_following():
    p, _, leadership = make_prober("p1", "p2", "p3", probe_concurrency=1)
    try:
        p.begin_term(1)
        assert p.tick(100.0) == ["p1"]
        assert p.load(102.0) == {
            "concurrency": 1,
            "inFlight": 1,
            "backlog": 2,
            "lagSeconds": 2.0,
            "behind": True,
            "askedPerSecond": 3.0,  # three providers, each once a second
            "finishedPerSecond": None,  # none finished yet: unknown, not 0
            "fitsIntervalSeconds": None,  # so no interval is named
        }
        leadership.leading = False
        assert p.tick(102.0) == []
        assert p.load(102.0)["backlog"] == 0 and p.load(102.0)["behind"] is False
    finally:
        p._pool.shutdown()


def test_a_tick_follows_the_provider_set_only_when_its_membership_changed(prober):
    """Ticks run 20 times a second over the whole fleet; status writes (updates) must not make
    them walk it again, additions and deletions must."""
    p, providers, _ = prober
    p.begin_term(1)
    assert p.tick(100.0) == ["p1", "p2"]
    syncs = p.membership_syncs
    for name in ("p1", "p2"):
        with p._lock:
            p.schedule.done(name)
        updated = provider(name)
        updated["metadata"]["resourceVersion"] = "2"
        updated["status"] = {"probe": {"healthy": True}}
        providers.upsert(updated)  # what the prober's own status write stores
    providers.replace([providers.peek("p1"), providers.peek("p2")])  # a re-list with the same names
    assert p.tick(100.1) == [] and p.tick(100.2) == []
    assert p.membership_syncs == syncs
    providers.upsert(provider("p3"))
    assert p.tick(100.3) == ["p3"]  # a new provider is due at once
    assert p.membership_syncs == syncs + 1
    providers.remove("p1")
    p.tick(100.4)
    assert p.membership_syncs == syncs + 2 and p.schedule.due_at("p1") is None
    assert p.tick(100.5) == [] and p.membership_syncs == syncs + 2


def test_a_probe_that_outlives_its_provider_leaves_no_series_behind(prober):
    p, providers, _ = prober
    p.begin_term(1)
    assert p.tick(100.0) == ["p1", "p2"]
    providers.remove("p2")
    p.tick(100.1)  # forgets p2, whose probe is still running
    p.metrics.probed("p2", seconds=0.01, health_failed=True, metrics_failed=False)  # its late result
    assert 'provider="p2"' in generate_latest(p.metrics.registry).decode()
    asyncio.run(p._probe_one("p2"))  # the end of that probe (the provider is gone: nothing is dialled)
    assert 'provider="p2"' not in generate_latest(p.metrics.registry).decode() and "p2" not in p.remembered()
    assert p.tick(100.2) == [] and p.membership_syncs == 2  # begin_term's first tick, the deletion
