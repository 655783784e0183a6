"""The convergence waiter's caches at fleet size: only what the wait is about wakes it, and an
overlay is parsed once per version (of its index and the shards it reads). Of a sharded overlay
only the shards holding the selected providers are read, and the consumer counts only once
those are in hand at the index's digest."""

from __future__ import annotations

import queue

from agn.model import Candidate, ConsumerView, NetworkView, Overlay, ProviderView
from agn.shards import Incomplete, split
from xtask.drain.core.converge import Convergence, Observation, evaluate
from xtask.drain.edges.waiter import ConvergenceWaiter, _Cache


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


class Shards:
    """The waiter's shard source (:class:`agn.overlays.ShardCache`'s interface) over stored shard
    objects, recording which shards were asked for."""

    def __init__(self, objs: dict[str, dict]) -> None:
        self.objs = objs
        self.asked: list[str] = []

    def specs(self, index: dict, names) -> dict[str, dict | None]:
        names = list(names)
        self.asked += names
        return {n: (self.objs.get(n) or {}).get("spec") for n in names}


P7 = ["c-007"]  # the candidate id of p-7, the provider the tests wait on


def waiter_for(consumers: list[str], providers: list[str] | None = None) -> ConvergenceWaiter:
    return ConvergenceWaiter(
        None,  # type: ignore[arg-type]  # never reads the API here
        "ns",
        providers=providers or ["p-7"],
        network="net",
        consumers=consumers,
        drain=True,
        progress=print,
    )


def test_an_overlay_is_parsed_once_per_resource_version():
    waiter = waiter_for(["c"])
    first = waiter._overlay(overlay("5", "admitted"), ["c-7"])
    assert waiter._overlay(overlay("5", "admitted"), ["c-7"]) is first  # same version: not parsed again
    changed = waiter._overlay(overlay("6", "existing_only"), ["c-7"])
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
    waiter.shards = Shards(shards)  # type: ignore[assignment]
    got = waiter._overlay(new_index, P7)
    assert isinstance(got, Incomplete) and got.revision == 5 and got.mismatched == [changed]
    verdict = evaluate(observation(got, revision=5), drain=True)
    assert verdict.state is Convergence.WAITING
    assert verdict.lagging == (
        f"consumer c: overlay revision 5 not complete (shards not yet at the index's digest: {changed})",
    )
    # A shard that is absent altogether is named as missing.
    del shards[changed]
    missing = waiter._overlay(new_index, P7)
    assert isinstance(missing, Incomplete) and missing.missing == [changed]
    # Once the changed shard arrives, the overlay is the new revision: the candidates of that shard.
    shards[changed] = new_shards[changed]
    got = waiter._overlay(new_index, P7)
    assert isinstance(got, Overlay) and got.revision == 5 and got.digest == new_index["spec"]["digest"]
    assert {c.id for c in got.candidates} == {c["id"] for c in new_shards[changed]["spec"]["candidates"]}
    assert got.candidate_for("p-7").admission_state == "existing_only"
    assert evaluate(observation(got, revision=5), drain=True).state is Convergence.CONVERGED
    # Only the shard holding p-7 was ever asked for.
    assert set(waiter.shards.asked) == {changed}  # type: ignore[attr-defined]


def test_shards_not_holding_the_providers_cannot_hold_up_the_wait():
    old, new = whole(4, set()), whole(5, {"p-7"})
    waiter = waiter_for(["c"])
    _, old_shards = stored(old, "10")
    new_index, new_shards = stored(new, "12")
    changed = shard_holding(new, "p-7")
    others = [n for n in new_index["spec"]["shards"] if n["name"] != changed]
    assert others  # 40 candidates over 4 shards
    # Every other shard is missing; the one holding p-7 is in hand at the new digest.
    waiter.shards = Shards({changed: new_shards[changed]})  # type: ignore[assignment]
    got = waiter._overlay(new_index, P7)
    assert isinstance(got, Overlay) and got.candidate_for("p-7").admission_state == "existing_only"


def test_a_sharded_overlay_is_parsed_once_per_index_version_and_shard_digests():
    overlay_5 = whole(5, {"p-7"})
    waiter = waiter_for(["c"])
    index, shards = stored(overlay_5, "12")
    waiter.shards = Shards(shards)  # type: ignore[assignment]
    first = waiter._overlay(index, P7)
    assert isinstance(first, Overlay)
    assert waiter._overlay(index, P7) is first  # nothing changed: not parsed again
    # A shard rewritten to another digest under the same index is not the overlay the index names.
    name = shard_holding(overlay_5, "p-7")
    waiter = waiter_for(["c"])
    other = {**shards, name: {**shards[name], "spec": {**shards[name]["spec"], "digest": "elsewhere"}}}
    waiter.shards = Shards(other)  # type: ignore[assignment]
    assert isinstance(waiter._overlay(index, P7), Incomplete)


def test_an_inline_index_still_reads_as_a_whole_overlay():
    waiter = waiter_for(["c"])
    got = waiter._overlay(overlay("3", "admitted"), P7)
    assert isinstance(got, Overlay) and got.revision == 3 and len(got.candidates) == 5000


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
