"""Watches started from a list already read (``FollowOptions.listed``,
``ConvergenceWaiter.start(seen=...)``), against the real API server: the follower takes the list
as its first snapshot and sends no LIST of its own; what changed since arrives as watch events.
A waiter handed the run's shard cache (``start(shards=...)``) reads no shard held at its digest."""

from __future__ import annotations

import queue
import threading
from collections import Counter

import pytest

from agn.kube import CONSUMERS, LEASES, OVERLAYS, PROVIDERS, SHARDS
from agn.objects import name_of, version_of
from agn.operator.heartbeat import HEARTBEAT_LEASE
from agn.overlays import ShardCache
from agn.shards import is_sharded
from agn.watching import FollowOptions, start_follower
from drainenv import CONSUMER_NAMES, DrainEnv
from xtask.drain.core.states import Outcome, WriteOutcome
from xtask.drain.edges.waiter import ConvergenceWaiter

pytestmark = pytest.mark.integration


def lease(name: str) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": {}}


class Calls:
    """A ``Kube`` method as it is (the real API answers), with each call's plural recorded."""

    def __init__(self, method) -> None:
        self.calls: list[str] = []
        self._method = method

    def __call__(self, res, *args, **kwargs):
        self.calls.append(res.plural)
        return self._method(res, *args, **kwargs)


def p_one_waiter(kube, namespace: str, *, drain: bool) -> ConvergenceWaiter:
    """A convergence waiter for ``p-one``'s drain (or undrain) on every consumer of the drain env."""
    return ConvergenceWaiter(
        kube,
        namespace,
        providers=["p-one"],
        network="net",
        consumers=list(CONSUMER_NAMES),
        drain=drain,
        progress=lambda event: None,
    )


def test_a_follower_given_a_list_starts_watching_from_its_resource_version(kube, namespace, monkeypatch):
    kube.create(LEASES, namespace, lease("before"))
    listed = kube.list(LEASES, namespace)
    kube.create(LEASES, namespace, lease("after"))  # after the list: must come as an event
    lists = Calls(kube.list)
    monkeypatch.setattr(kube, "list", lists)
    snapshots: queue.Queue[list[str]] = queue.Queue()
    events: queue.Queue[tuple[str, str]] = queue.Queue()
    stop = threading.Event()
    start_follower(
        kube,
        LEASES,
        namespace,
        name="watch-test",
        on_snapshot=lambda items: snapshots.put(sorted(name_of(o) for o in items)),
        on_event=lambda kind, obj: events.put((kind, name_of(obj))),
        stop=stop,
        options=FollowOptions(listed=listed),
    )
    try:
        assert snapshots.get(timeout=10) == ["before"]
        assert events.get(timeout=10) == ("ADDED", "after")
        assert lists.calls == []
    finally:
        stop.set()


def test_the_convergence_waiter_started_from_the_runs_reads_lists_only_for_its_fresh_look(
    kube, namespace, agn, control_plane, tmp_path, monkeypatch
):
    DrainEnv(kube, namespace, agn, control_plane, tmp_path).up()
    heartbeat = kube.get(LEASES, namespace, HEARTBEAT_LEASE)
    seen = {
        PROVIDERS: kube.list(PROVIDERS, namespace),  # the whole group: wider than the wait's one provider
        CONSUMERS: kube.list(CONSUMERS, namespace),
        OVERLAYS: kube.list(OVERLAYS, namespace),
        LEASES: ([heartbeat], heartbeat["metadata"]["resourceVersion"]),
    }
    lists = Calls(kube.list)
    monkeypatch.setattr(kube, "list", lists)
    waiter = p_one_waiter(kube, namespace, drain=True)
    waiter.start(seen=seen)
    # The drain is written after the reads the waiter was given: it reaches the waiter as an event.
    kube.merge_patch(PROVIDERS, namespace, "p-one", {"spec": {"trafficPolicy": {"drain": True}}})
    result = waiter.wait(timeout=60, stop=threading.Event())
    assert result.state == "converged", result
    # Only the fresh second observation listed: each kind once, together; the watches listed nothing.
    assert Counter(lists.calls) == {r.plural: 1 for r in (PROVIDERS, CONSUMERS, OVERLAYS, LEASES)}


def test_the_convergence_waiter_reads_no_shard_the_run_already_holds(
    kube, namespace, agn, control_plane, tmp_path, monkeypatch
):
    DrainEnv(kube, namespace, agn, control_plane, tmp_path).up()
    indexes = [o["spec"] for o in kube.list(OVERLAYS, namespace)[0]]
    assert indexes and all(is_sharded(i) for i in indexes)  # the example overlays are sharded
    held = ShardCache(kube, namespace)  # the run's reads of the shards (its capacity guard's, say)
    held.prefetch([(i, [str(e["name"]) for e in i["shards"]]) for i in indexes])
    gets = Calls(kube.get)
    monkeypatch.setattr(kube, "get", gets)
    waiter = p_one_waiter(kube, namespace, drain=False)  # already undrained: converged at once, no shard changes
    waiter.start(shards=held)
    result = waiter.wait(timeout=60, stop=threading.Event())
    assert result.state == "converged", result
    assert SHARDS.plural not in gets.calls  # every shard the wait needed was in hand at its digest


def test_the_confirming_look_lists_only_kinds_no_watch_showed_since_the_write(
    kube, namespace, agn, control_plane, tmp_path, monkeypatch
):
    DrainEnv(kube, namespace, agn, control_plane, tmp_path).up()
    heartbeat = kube.get(LEASES, namespace, HEARTBEAT_LEASE)
    seen = {
        PROVIDERS: kube.list(PROVIDERS, namespace),
        CONSUMERS: kube.list(CONSUMERS, namespace),
        OVERLAYS: kube.list(OVERLAYS, namespace),
        LEASES: ([heartbeat], heartbeat["metadata"]["resourceVersion"]),
    }
    lists = Calls(kube.list)
    monkeypatch.setattr(kube, "list", lists)
    waiter = p_one_waiter(kube, namespace, drain=True)
    waiter.start(seen=seen)
    patched = kube.merge_patch(PROVIDERS, namespace, "p-one", {"spec": {"trafficPolicy": {"drain": True}}})
    written = Outcome("p-one", WriteOutcome.CHANGED, resource_version=version_of(patched))
    result = waiter.wait(timeout=60, stop=threading.Event(), written=[written])
    assert result.state == "converged", result
    # The provider's watch delivered the write itself, and the overlays' and consumers' watches
    # the operator's publication and the gateways' status after it, and the heartbeat is not
    # needed (p-one is in both overlays, judged on them alone): nothing is listed again.
    assert lists.calls == [] and waiter.fresh_reads == 0, lists.calls
    for res in (PROVIDERS, CONSUMERS, OVERLAYS):
        assert waiter._caches[res.plural].seen_since(written.resource_version), res
