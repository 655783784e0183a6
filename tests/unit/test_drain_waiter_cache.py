"""The convergence waiter's caches at fleet size: only what the wait is about wakes it, and an
overlay is parsed once per version (of its index and the shards it names). A sharded overlay
counts only once every shard it names is in hand at the index's digest."""

from __future__ import annotations

import queue

from agn.kube import OVERLAYS, SHARDS, Resource
from agn.model import Candidate, ConsumerView, NetworkView, Overlay, ProviderView
from agn.shards import Incomplete, split
from xtask.drain.converge import Observation, State, evaluate
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


def no_shards(res: Resource, name: str) -> dict | None:
    return None


def waiter_for(consumers: list[str], providers: list[str] | None = None) -> ConvergenceWaiter:
    return ConvergenceWaiter(
        None,  # type: ignore[arg-type]  # never reads the API here
        "ns",
        providers=providers or ["p-7"],
        network="net",
        consumers=consumers,
        drain=True,
        notify=print,
    )


def test_an_overlay_is_parsed_once_per_resource_version():
    waiter = waiter_for(["c"])
    first = waiter._overlay(overlay("5", "admitted"), no_shards)
    assert waiter._overlay(overlay("5", "admitted"), no_shards) is first  # same version: not parsed again
    changed = waiter._overlay(overlay("6", "existing_only"), no_shards)
    assert changed is not first and changed.revision == 6
    assert changed.candidate_for("p-7").admission_state == "existing_only"
    assert changed.candidate_for("p-5000") is None


# -- sharded overlays ---------------------------------------------------------------------------


def whole(revision: int, drained: set[str]) -> Overlay:
    cands = tuple(
        Candidate(
            f"c-{i:03d}",
            f"p-{i}",
            "http://127.0.0.1:1",
            "chat",
            0,
            "existing_only" if f"p-{i}" in drained else "admitted",
        )
        for i in range(40)
    )
    return Overlay(network="net", consumer="c", revision=revision, digest=f"d{revision}", candidates=cands)


def stored(overlay: Overlay, rv: str) -> tuple[dict, dict[str, dict]]:
    """The index object and shard objects the operator would store for ``overlay``."""
    parts = split(overlay, 4)
    index = {"metadata": {"name": overlay.consumer, "resourceVersion": rv}, "spec": parts.index}
    shards = {
        name: {"metadata": {"name": name, "resourceVersion": rv}, "spec": spec} for name, spec in parts.shards.items()
    }
    return index, shards


def lookup_over(index: dict, shards: dict[str, dict]):
    def lookup(res: Resource, name: str) -> dict | None:
        if res == OVERLAYS:
            return index if name == index["metadata"]["name"] else None
        return shards.get(name) if res == SHARDS else None

    return lookup


def shard_holding(overlay: Overlay, provider: str) -> str:
    parts = split(overlay, 4)
    return next(n for n, s in parts.shards.items() if any(c["provider"] == provider for c in s["candidates"]))


def test_an_index_whose_shard_is_behind_is_not_converged_until_the_shard_arrives():
    old, new = whole(4, set()), whole(5, {"p-7"})
    waiter = waiter_for(["c"])
    _, old_shards = stored(old, "10")
    new_index, new_shards = stored(new, "12")
    changed = shard_holding(new, "p-7")
    # The new index is in hand, its changed shard still at the old revision's digest.
    shards = {**old_shards}
    got = waiter._overlay(new_index, lookup_over(new_index, shards))
    assert isinstance(got, Incomplete) and got.revision == 5 and got.mismatched == [changed]
    verdict = evaluate(observation(got, revision=5), drain=True)
    assert verdict.state is State.WAITING
    assert verdict.lagging == (
        f"consumer c: overlay revision 5 not complete (shards not yet at the index's digest: {changed})",
    )
    # A shard that is absent altogether is named as missing.
    del shards[changed]
    missing = waiter._overlay(new_index, lookup_over(new_index, shards))
    assert isinstance(missing, Incomplete) and missing.missing == [changed]
    # Once the changed shard arrives, the overlay is the new revision, whole.
    shards[changed] = new_shards[changed]
    got = waiter._overlay(new_index, lookup_over(new_index, shards))
    assert isinstance(got, Overlay) and got.revision == 5 and len(got.candidates) == 40
    assert got.candidate_for("p-7").admission_state == "existing_only"
    assert evaluate(observation(got, revision=5), drain=True).state is State.CONVERGED


def test_a_sharded_overlay_is_parsed_once_per_index_version_and_shard_digests():
    overlay_5 = whole(5, {"p-7"})
    waiter = waiter_for(["c"])
    index, shards = stored(overlay_5, "12")
    first = waiter._overlay(index, lookup_over(index, shards))
    assert isinstance(first, Overlay)
    assert waiter._overlay(index, lookup_over(index, dict(shards))) is first  # nothing changed: not parsed again
    # A shard rewritten to another digest under the same index is not the overlay the index names.
    name = shard_holding(overlay_5, "p-7")
    other = {**shards, name: {**shards[name], "spec": {**shards[name]["spec"], "digest": "elsewhere"}}}
    assert isinstance(waiter._overlay(index, lookup_over(index, other)), Incomplete)


def test_an_inline_index_still_reads_as_a_whole_overlay():
    waiter = waiter_for(["c"])
    got = waiter._overlay(overlay("3", "admitted"), no_shards)
    assert isinstance(got, Overlay) and got.revision == 3 and len(got.candidates) == 5000


def test_only_the_wanted_consumers_shards_wake_the_waiter():
    waiter = waiter_for(["c-a"])
    cache = waiter._caches[SHARDS.plural]
    cache.snapshot([shard_obj("c-a-shard-00"), shard_obj("c-b-shard-00"), shard_obj("c-a-extra")])
    assert list(cache.items) == ["c-a-shard-00"] and waiter._wake.get_nowait() == SHARDS.plural
    for name in ("c-b-shard-03", "c-ab-shard-01", "c-a", "c-a-shard-1", "x-c-a-shard-02"):
        cache.event("MODIFIED", shard_obj(name))
    assert waiter._wake.empty()
    cache.event("ADDED", shard_obj("c-a-shard-07"))
    assert waiter._wake.get_nowait() == SHARDS.plural and cache.get("c-a-shard-07") is not None
    cache.event("DELETED", shard_obj("c-a-shard-00"))
    assert cache.get("c-a-shard-00") is None and waiter._wake.get_nowait() == SHARDS.plural


def shard_obj(name: str) -> dict:
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": {}}


def observation(overlay: Overlay | Incomplete, *, revision: int) -> Observation:
    provider = ProviderView("p-7", "http://127.0.0.1:1", "c-007", "chat", 0, True, {}, True, 0.0)
    return Observation(
        {"p-7": provider},
        NetworkView("net"),
        {"c": ConsumerView("c", "net")},
        {"c": (revision, revision)},
        {"c": overlay},
        0.0,
    )
