"""The convergence waiter's confirming observation: every kind it judges is read at or after the
write. A kind whose watch has already delivered an event at or after the write's
resourceVersion is taken from its cache (its view is that recent); every other kind is listed
again. Without the write's version every kind is listed again, as before."""

from __future__ import annotations

import queue

from agn.kube import CONSUMERS, LEASES, OVERLAYS, PROVIDERS, Resource
from agn.objects import version_of
from xtask.drain.core.converge import Convergence, ProviderCheck, Verdict
from xtask.drain.core.states import Outcome, WriteOutcome
from xtask.drain.edges.waiter import ConvergenceWaiter, _Cache


def obj(name: str, rv: str) -> dict:
    return {"metadata": {"name": name, "resourceVersion": rv}}


class Lists:
    """A ``Kube`` that answers LISTs from fixed objects and records each one asked for."""

    def __init__(self, objs: dict[str, list[dict]]) -> None:
        self.objs = objs
        self.asked: list[str] = []

    def list(self, res: Resource, namespace: str, *, field_selector: str | None = None) -> tuple[list[dict], str]:
        self.asked.append(res.plural)
        return self.objs.get(res.plural, []), "999"


def test_a_stream_is_as_recent_as_the_newest_version_it_delivered_wanted_or_not():
    cache = _Cache(queue.Queue(), "inferenceproviders", ["p-1"])
    assert not cache.seen_since(1)  # nothing delivered yet
    cache.snapshot([obj("p-1", "10"), obj("p-2", "12")])
    assert cache.seen_since(12) and not cache.seen_since(13)  # a list: at least its newest item
    cache.event("MODIFIED", obj("p-2", "20"))  # another provider's event: dropped, but the stream moved on
    assert cache.seen_since(20) and cache.get("p-1")["metadata"]["resourceVersion"] == "10"
    cache.event("MODIFIED", obj("p-1", "15"))  # never backwards
    assert cache.seen_since(20) and cache.get("p-1")["metadata"]["resourceVersion"] == "15"
    cache.event("MODIFIED", obj("p-1", "not-a-number"))
    assert cache.seen_since(20) and not cache.seen_since(21)


def test_versions_that_are_not_numbers_prove_nothing():
    assert version_of(obj("a", "42")) == 42
    assert [version_of(o) for o in (obj("a", ""), obj("a", "4x"), obj("a", "٤٢"), {}, None)] == [None] * 5


def waiter(kube: Lists) -> ConvergenceWaiter:
    return ConvergenceWaiter(
        kube,  # type: ignore[arg-type]
        "ns",
        providers=["p-1"],
        network="net",
        consumers=["c"],
        drain=True,
        progress=print,
    )


def caches_at(w: ConvergenceWaiter, versions: dict[Resource, str]) -> None:
    names = {PROVIDERS: "p-1", CONSUMERS: "c", OVERLAYS: "c", LEASES: "agn-probes"}
    for res, rv in versions.items():
        w._caches[res.plural].snapshot([obj(names[res], rv)])


def test_only_the_kinds_no_watch_showed_since_the_write_are_listed_again():
    fresh = {p.plural: [obj(n, "999")] for p, n in ((CONSUMERS, "c"), (LEASES, "agn-probes"))}
    kube = Lists(fresh)
    w = waiter(kube)
    # The write returned 50: providers and overlays have shown an event since, the consumer and
    # the heartbeat not yet (their cached objects may be from before the write).
    caches_at(w, {PROVIDERS: "50", OVERLAYS: "61", CONSUMERS: "49", LEASES: "12"})
    lookup = w._fresh(50)
    assert sorted(kube.asked) == sorted([CONSUMERS.plural, LEASES.plural])
    assert w.fresh_reads == 2
    assert lookup(CONSUMERS, "c")["metadata"]["resourceVersion"] == "999"  # read again
    assert lookup(LEASES, "agn-probes")["metadata"]["resourceVersion"] == "999"
    assert lookup(OVERLAYS, "c")["metadata"]["resourceVersion"] == "61"  # from the watch
    assert lookup(PROVIDERS, "p-1")["metadata"]["resourceVersion"] == "50"


def verdict(state: str) -> Verdict:
    check = ProviderCheck("c", "p-1", state, True, "excluded: stale" if state == "absent" else "")
    return Verdict(Convergence.CONVERGED, (), (), (check,), ())


def test_the_heartbeat_is_read_again_only_when_the_verdict_judged_a_provider_on_its_freshness():
    for state, listed in (("existing_only", []), ("absent", [LEASES.plural])):
        kube = Lists({})
        w = waiter(kube)
        caches_at(w, {PROVIDERS: "50", OVERLAYS: "61", CONSUMERS: "70", LEASES: "12"})
        w._fresh(50, verdict(state))
        assert kube.asked == listed, state
    kube = Lists({})
    w = waiter(kube)
    caches_at(w, {PROVIDERS: "50", OVERLAYS: "61", CONSUMERS: "70", LEASES: "60"})
    w._fresh(50, verdict("absent"))  # renewed since the write: its watch showed it
    assert kube.asked == []


def test_without_the_writes_version_every_kind_is_listed_again():
    kube = Lists({})
    w = waiter(kube)
    caches_at(w, {PROVIDERS: "50", OVERLAYS: "61", CONSUMERS: "70", LEASES: "80"})
    w._fresh(None)
    assert sorted(kube.asked) == sorted(r.plural for r in (PROVIDERS, CONSUMERS, OVERLAYS, LEASES))


def test_a_writes_version_is_kept_for_the_waiter_never_reported():
    written = Outcome("p-1", WriteOutcome.CHANGED, generation=3, resource_version=77)
    assert "resource_version" not in written.to_dict() and "resourceVersion" not in written.to_dict()
    assert written == Outcome("p-1", WriteOutcome.CHANGED, generation=3)  # not part of what an outcome is


def test_the_heartbeat_the_run_read_is_followed_only_once_a_verdict_finds_a_provider_absent():
    w = waiter(Lists({}))
    followed: list[tuple[str, object]] = []
    w._follow = lambda res, listed: (followed.append((res.plural, listed)), w._following.add(res.plural))  # type: ignore[method-assign]
    beat = ([obj("agn-probes", "12")], "12")
    w.start(seen={LEASES: beat})
    # The other kinds are followed at once (listed by their followers: the run read none of them).
    assert [k for k, _ in followed] == [PROVIDERS.plural, CONSUMERS.plural, OVERLAYS.plural]
    assert w._caches[LEASES.plural].synced.is_set() and w._caches[LEASES.plural].get("agn-probes") == beat[0][0]
    w._health[LEASES.plural].failed(RuntimeError("not followed: never failing"))
    assert w.unreachable_for() == (0.0, "")  # an unfollowed kind is not a failing watch
    w._need_heartbeat(verdict("existing_only"))  # judged on the overlays alone
    assert len(followed) == 3
    w._need_heartbeat(verdict("absent"))  # judged on its freshness: follow it from the run's read
    assert followed[3] == (LEASES.plural, beat)
    w._need_heartbeat(verdict("absent"))
    assert len(followed) == 4  # once


def test_without_the_runs_read_of_the_heartbeat_it_is_followed_at_once():
    w = waiter(Lists({}))
    followed: list[str] = []
    w._follow = lambda res, listed: followed.append(res.plural)  # type: ignore[method-assign]
    w.start()
    assert followed == [r.plural for r in (PROVIDERS, CONSUMERS, OVERLAYS, LEASES)]
