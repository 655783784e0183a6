"""Sharded overlays (agn.shards) against the unsharded model (agn.model), with hypothesis."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from agn.model import (
    ADMITTED,
    EXISTING_ONLY,
    ConsumerView,
    NetworkView,
    Overlay,
    ProviderView,
    candidate_id,
    compute_candidates,
    next_overlay,
    overlay_digest,
)
from agn.provider.fleet import provider_views
from agn.shards import (
    Incomplete,
    assemble,
    changed_shards,
    consumer_of_shard,
    shard_name,
    shard_names,
    shard_of,
    split,
    surplus_shards,
)

NOW = 1_000_000.0
NET = NetworkView("net")
CONSUMER = ConsumerView("c", "net")


def fleet(n: int, *, drained=frozenset(), unhealthy=frozenset()) -> list[ProviderView]:
    return provider_views(n, now=NOW, drained=drained, unhealthy=unhealthy)


def overlay_of(providers, previous: Overlay | None = None) -> Overlay:
    cands = compute_candidates(providers, NET, CONSUMER, now=NOW)
    return next_overlay(previous, cands, network="net", consumer="c")


def specs(sharded) -> dict:
    return dict(sharded.shards)


# -- names and placement ------------------------------------------------------------------------


def test_shard_names_round_trip_to_their_consumer():
    assert shard_name("consumer-a", 7) == "consumer-a-shard-07"
    assert shard_names("c", 3) == ["c-shard-00", "c-shard-01", "c-shard-02"]
    assert consumer_of_shard("consumer-a-shard-07") == "consumer-a"
    assert consumer_of_shard("a-shard-x-shard-01") == "a-shard-x"
    for not_a_shard in ("consumer-a", "consumer-a-shard-7", "-shard-01", "c-shard-001"):
        assert consumer_of_shard(not_a_shard) is None


def test_a_candidates_shard_depends_on_its_id_only():
    ids = [candidate_id(f"uid-{i}") for i in range(2000)]
    placed = [shard_of(i, 16) for i in ids]
    assert placed == [shard_of(i, 16) for i in ids]
    counts = [placed.count(n) for n in range(16)]
    assert min(counts) > 2000 / 16 / 2  # spread, not clumped in a few shards


@pytest.mark.parametrize("count", [0, 101])
def test_shard_count_is_bounded(count):
    with pytest.raises(ValueError, match="shard count must be between 1 and 100"):
        split(overlay_of(fleet(3)), count)


def test_the_index_is_small_and_names_only_non_empty_shards():
    sharded = split(overlay_of(fleet(3, drained={1})), 16)
    index = sharded.index
    assert index["candidateCount"] == 3
    assert index["admission"] == {ADMITTED: 2, EXISTING_ONLY: 1}
    # p0 (g0) and p2 (g2) admitted, p1 (g1) drained: g1 is listed with 0
    assert index["admittedByGroup"] == {"g0": 1, "g1": 0, "g2": 1}
    assert {e["name"] for e in index["shards"]} == set(sharded.shards)
    assert len(sharded.shards) <= 3
    assert "candidates" not in index


def test_ten_thousand_providers_fit_in_objects_under_one_mebibyte():
    import json

    sharded = split(overlay_of(fleet(10_000)), 16)
    largest = max(len(json.dumps(s)) for s in [sharded.index, *sharded.shards.values()])
    assert largest < 1024 * 1024 / 2, largest


# -- assembly ------------------------------------------------------------------------------------


def test_assemble_needs_every_listed_shard_at_its_digest():
    old = split(overlay_of(fleet(40)), 4)
    new_overlay = overlay_of(fleet(40, drained={5}), Overlay.from_spec(assemble(old.index, specs(old))))
    new = split(new_overlay, 4)
    (touched,) = changed_shards(new, {n: s["digest"] for n, s in old.shards.items()})
    shards = specs(old)
    with pytest.raises(Incomplete) as raised:
        assemble(new.index, shards)  # the new index, the old shard: not yet
    assert raised.value.mismatched == [touched] and raised.value.missing == []
    assert str(raised.value).startswith(
        f"overlay revision {new_overlay.revision}: shards not yet at the index's digest"
    )
    shards.pop(touched)
    with pytest.raises(Incomplete, match="missing"):
        assemble(new.index, shards)
    shards[touched] = new.shards[touched]
    assert Overlay.from_spec(assemble(new.index, shards)) == new_overlay


def test_an_inline_overlay_is_its_own_assembly():
    spec = overlay_of(fleet(2)).to_spec()
    assert assemble(spec, {}) == spec


def test_surplus_shards_are_those_the_new_layout_does_not_use():
    sharded = split(overlay_of(fleet(1)), 16)
    assert surplus_shards(sharded, ["c-shard-00", *sharded.shards, "c-shard-15"]) == sorted(
        {"c-shard-00", "c-shard-15"} - set(sharded.shards)
    )


# -- properties ----------------------------------------------------------------------------------

changes = st.lists(
    st.tuples(st.sampled_from(["drain", "undrain", "fail", "heal"]), st.integers(min_value=0, max_value=59)),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(min_value=0, max_value=60), count=st.integers(min_value=1, max_value=20), steps=changes)
def test_sharded_overlays_equal_the_model_and_keep_the_revision_rule(n, count, steps):
    drained: set[int] = set()
    unhealthy: set[int] = set()
    overlay = overlay_of(fleet(n))
    stored = split(overlay, count)
    for op, i in steps:
        {"drain": drained.add, "undrain": drained.discard, "fail": unhealthy.add, "heal": unhealthy.discard}[op](i)
        model = overlay_of(fleet(n, drained=frozenset(drained), unhealthy=frozenset(unhealthy)), overlay)
        new = split(model, count)
        writes = changed_shards(new, {name: s["digest"] for name, s in stored.shards.items()})
        # The union of the shards is the unsharded model.
        assert Overlay.from_spec(assemble(new.index, specs(new))) == model
        # Revision rule: +1 exactly when the candidates' digest changes.
        changed = model.digest != overlay.digest
        assert model.revision == overlay.revision + (1 if changed else 0)
        assert model.digest == overlay_digest(model.candidates)
        # Work proportional to change: only shards holding a changed candidate are written.
        before = {c.id: c for c in overlay.candidates}
        after = {c.id: c for c in model.candidates}
        moved = {i for i in set(before) | set(after) if before.get(i) != after.get(i)}
        assert set(writes) <= {shard_name("c", shard_of(i, count)) for i in moved}
        deletes = surplus_shards(new, stored.shards)
        assert set(deletes) <= {shard_name("c", shard_of(i, count)) for i in moved}
        assert bool(writes or deletes) == bool(moved)
        overlay, stored = model, new


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=40),
    steps=st.lists(st.integers(min_value=0, max_value=39), min_size=1, max_size=4),
    data=st.data(),
)
def test_a_reader_fed_shards_in_any_order_never_sees_a_mixed_revision(n, steps, data):
    """The operator writes changed shards, then the index, per revision; the reader's watches
    deliver those objects in any order. Whenever the reader can assemble, it has exactly one
    revision's candidates."""
    count = 4
    drained: set[int] = set()
    overlay = overlay_of(fleet(n))
    revisions = {overlay.revision: overlay}
    writes: list[tuple[str, dict]] = [(name, spec) for name, spec in split(overlay, count).shards.items()]
    writes.append(("index", split(overlay, count).index))
    for i in steps:
        drained ^= {i}
        new = overlay_of(fleet(n, drained=frozenset(drained)), overlay)
        revisions[new.revision] = new
        sharded = split(new, count)
        stored = split(overlay, count)
        for name in changed_shards(sharded, {k: v["digest"] for k, v in stored.shards.items()}):
            writes.append((name, sharded.shards[name]))
        writes.append(("index", sharded.index))
        overlay = new
    delivered = data.draw(st.permutations(range(len(writes))))
    index: dict | None = None
    shards: dict[str, dict] = {}
    newest: dict[str, int] = {}  # per object, the latest write delivered
    last_seen = 0
    for k in delivered:
        name, spec = writes[k]
        # A watch delivers one object's versions in order: an older version never follows a newer one.
        if newest.get(name, -1) > k:
            continue
        newest[name] = k
        if name == "index":
            index = spec
        else:
            shards[name] = spec
        if index is None:
            continue
        try:
            got = Overlay.from_spec(assemble(index, shards))
        except Incomplete:
            continue
        assert got == revisions[got.revision]
        last_seen = max(last_seen, got.revision)
    assert last_seen >= 1
