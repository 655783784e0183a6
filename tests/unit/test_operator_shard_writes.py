"""What the controller writes to store an overlay as shards: pure helpers and the write plan,
from plain objects (no API server; the writes themselves are covered by
tests/integration/test_overlay_shards_operator.py)."""

from __future__ import annotations

import pytest

from agn.kube import OVERLAYS, SHARDS
from agn.model import ADMITTED, EXISTING_ONLY, Candidate, next_overlay
from agn.operator.ownership import owner_reference
from agn.operator.settings import Settings
from agn.operator.storage import conditional_patch, index_patch, object_body, shard_digests, shard_work
from agn.shards import CONSUMER_LABEL, shard_labels, split

CONSUMER = {"metadata": {"name": "c1", "uid": "u1"}, "spec": {"network": "net"}}


def cand(i: int, state: str = ADMITTED) -> Candidate:
    return Candidate(
        id=f"id-{i:03d}",
        provider=f"p{i:03d}",
        endpoint=f"http://127.0.0.1:{1000 + i}",
        selection_group="g",
        rank=1,
        admission_state=state,
    )


def stored(res_name: str, spec: dict, *, owners=None, labels=None) -> dict:
    refs = owners if owners is not None else [owner_reference(CONSUMER)]
    metadata = {"name": res_name, "uid": f"uid-{res_name}", "ownerReferences": refs}
    if labels is not None:
        metadata["labels"] = labels
    return {"metadata": metadata, "spec": spec}


def store_all(sharded) -> tuple[dict, dict]:
    """The index and shards as the operator stores them (shards labelled with their consumer)."""
    index = stored("c1", sharded.index)
    shards = {n: stored(n, spec, labels={CONSUMER_LABEL: "c1"}) for n, spec in sharded.shards.items()}
    return index, shards


def test_nothing_to_write_when_index_and_shards_are_stored_and_owned():
    sharded = split(next_overlay(None, [cand(i) for i in range(40)], network="net", consumer="c1"), 4)
    index, shards = store_all(sharded)
    assert shard_work(index, shards, sharded, CONSUMER) is None


def test_a_drain_writes_only_its_shard_and_the_index():
    first = next_overlay(None, [cand(i) for i in range(40)], network="net", consumer="c1")
    index, shards = store_all(split(first, 4))
    drained = next_overlay(
        first, [cand(i, EXISTING_ONLY if i == 7 else ADMITTED) for i in range(40)], network="net", consumer="c1"
    )
    new = split(drained, 4)
    work = shard_work(index, shards, new, CONSUMER)
    assert work is not None
    home = next(n for n, s in new.shards.items() if any(c["provider"] == "p007" for c in s["candidates"]))
    assert work.shards == [home] and work.index and work.surplus == []


def test_a_missing_shard_is_written_without_touching_the_index():
    sharded = split(next_overlay(None, [cand(i) for i in range(40)], network="net", consumer="c1"), 4)
    index, shards = store_all(sharded)
    gone = sorted(shards)[0]
    del shards[gone]
    work = shard_work(index, shards, sharded, CONSUMER)
    assert work is not None and work.shards == [gone] and not work.index


def test_fewer_shards_leave_surplus_to_delete_after_the_index():
    overlay = next_overlay(None, [cand(i) for i in range(40)], network="net", consumer="c1")
    index, shards = store_all(split(overlay, 8))
    work = shard_work(index, shards, split(overlay, 2), CONSUMER)
    assert work is not None and work.index
    assert set(work.surplus) == set(shards) - {"c1-shard-00", "c1-shard-01"}
    # Shards 00 and 01 exist but hold 8-shard contents (another shardCount): both rewritten.
    assert work.shards == ["c1-shard-00", "c1-shard-01"]


def test_unowned_objects_are_written_to_adopt_them():
    sharded = split(next_overlay(None, [cand(i) for i in range(40)], network="net", consumer="c1"), 4)
    index, shards = store_all(sharded)
    name = sorted(shards)[1]
    shards[name] = stored(name, sharded.shards[name], owners=[], labels={CONSUMER_LABEL: "c1"})
    work = shard_work(index, shards, sharded, CONSUMER)
    assert work is not None and work.shards == [name] and not work.index


def test_a_shard_without_its_consumer_label_is_written_to_label_it():
    """Shards an earlier operator wrote carry no ``agn.dev/consumer`` label: each is patched once
    to carry it (the index is not written); other labels on a shard do not matter."""
    sharded = split(next_overlay(None, [cand(i) for i in range(40)], network="net", consumer="c1"), 4)
    index, shards = store_all(sharded)
    first, second = sorted(shards)[:2]
    shards[first] = stored(first, sharded.shards[first])  # no labels at all
    shards[second] = stored(second, sharded.shards[second], labels={CONSUMER_LABEL: "c2"})  # someone else's
    work = shard_work(index, shards, sharded, CONSUMER)
    assert work is not None and work.shards == [first, second] and not work.index
    extra = {n: stored(n, sharded.shards[n], labels={CONSUMER_LABEL: "c1", "team": "x"}) for n in sharded.shards}
    assert shard_work(index, extra, sharded, CONSUMER) is None


def test_shard_writes_carry_the_consumer_label_and_keep_other_labels():
    spec = {"consumer": "c1"}
    labels = shard_labels("c1")
    assert labels == {"agn.dev/consumer": "c1"}
    body = object_body(SHARDS, "c1-shard-00", spec, owner_references=[], published_by="me", labels=labels)
    assert body["metadata"]["labels"] == {"agn.dev/consumer": "c1"}
    old = {"metadata": {"name": "c1-shard-00", "resourceVersion": "7", "labels": {"team": "x"}}}
    patch = conditional_patch(old, [], "me", spec, labels=labels)
    # A merge patch: the consumer label is added, "team" is left as it is (not nulled).
    assert patch["metadata"]["labels"] == {"agn.dev/consumer": "c1"}
    assert patch["metadata"]["resourceVersion"] == "7"
    # The index carries no labels of its own doing.
    assert "labels" not in object_body(OVERLAYS, "c1", spec, owner_references=[], published_by="me")["metadata"]


def test_a_consumer_name_too_long_for_a_label_value_gets_no_label():
    assert shard_labels("c" * 63) == {"agn.dev/consumer": "c" * 63}
    assert shard_labels("c" * 64) == {}


def test_shard_digests_leave_out_a_shard_of_another_shard_count():
    overlay = next_overlay(None, [cand(i) for i in range(10)], network="net", consumer="c1")
    one = split(overlay, 1)
    assert shard_digests(one, {"c1-shard-00": stored("c1-shard-00", one.shards["c1-shard-00"])}) == {
        "c1-shard-00": one.shards["c1-shard-00"]["digest"]
    }
    other = dict(one.shards["c1-shard-00"], shardCount=3)
    assert shard_digests(one, {"c1-shard-00": stored("c1-shard-00", other)}) == {}


def test_index_patch_removes_a_legacy_inline_overlays_candidates():
    overlay = next_overlay(None, [cand(1)], network="net", consumer="c1")
    patch = index_patch(overlay.to_spec(), split(overlay, 4).index)
    assert patch["candidates"] is None
    assert patch["revision"] == overlay.revision and patch["shards"]


@pytest.mark.parametrize("count", [0, 101, -1])
def test_settings_refuse_a_shard_count_out_of_range(count):
    with pytest.raises(ValueError, match="shard count must be between 1 and 100"):
        Settings(overlay_shards=count)
