"""The convergence waiter's caches at fleet size: only what the wait is about wakes it, and an
overlay is parsed once per resourceVersion."""

from __future__ import annotations

import queue

from xtask.drain.waiter import ConvergenceWaiter, _Cache


def provider(name: str, rv: str = "1") -> dict:
    return {"metadata": {"name": name, "resourceVersion": rv}, "spec": {}}


def test_events_about_other_objects_are_dropped_without_waking():
    wake: queue.Queue[str] = queue.Queue()
    cache = _Cache(wake, "inferenceproviders", ["p-1"])
    cache.snapshot([provider(f"p-{i}") for i in range(1000)])
    assert list(cache.items) == ["p-1"] and wake.get_nowait() == "inferenceproviders"
    for i in range(2, 1000):
        cache.event("MODIFIED", provider(f"p-{i}", rv="2"))  # another provider's status changed
    assert wake.empty()
    cache.event("MODIFIED", provider("p-1", rv="2"))
    assert wake.get_nowait() == "inferenceproviders" and cache.get("p-1")["metadata"]["resourceVersion"] == "2"
    cache.event("DELETED", provider("p-1", rv="3"))
    assert cache.get("p-1") is None and wake.get_nowait() == "inferenceproviders"


def overlay(rv: str, state: str) -> dict:
    candidates = [
        {"id": f"c-{i}", "provider": f"p-{i}", "endpoint": "http://127.0.0.1:1", "admission_state": state}
        for i in range(5000)
    ]
    spec = {"network": "net", "consumer": "c", "revision": int(rv), "digest": rv, "candidates": candidates}
    return {"metadata": {"name": "c", "resourceVersion": rv}, "spec": spec}


def test_an_overlay_is_parsed_once_per_resource_version():
    waiter = ConvergenceWaiter(None, "ns", providers=["p-7"], network="net", consumers=["c"], drain=True, notify=print)  # type: ignore[arg-type]
    first = waiter._overlay(overlay("5", "admitted"))
    assert waiter._overlay(overlay("5", "admitted")) is first  # same version: not parsed again
    changed = waiter._overlay(overlay("6", "existing_only"))
    assert changed is not first and changed.revision == 6
    assert changed.candidate_for("p-7").admission_state == "existing_only"
    assert changed.candidate_for("p-5000") is None
