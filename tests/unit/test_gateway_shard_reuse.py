"""A gateway parsing a new content of a shard it holds reuses the candidates written exactly as
before and checks the rest in full (agn.gateway.validation.parse_shard's ``known``)."""

from __future__ import annotations

import copy

import pytest

from agn.credentials import SecretRef
from agn.gateway.validation import InvalidOverlay, parse_shard, validate_index
from agn.model import ADMITTED, EXISTING_ONLY, Candidate, Overlay, SlowStart, overlay_digest
from agn.shards import split

COUNT = 2


def fleet(*, drained: str = "") -> tuple[Candidate, ...]:
    cands = []
    for i in range(40):
        p = f"p{i:02d}"
        drain = p == drained
        cands.append(
            Candidate(
                f"c-{p}",
                p,
                f"http://127.0.0.1:9000/pool/{p}/",
                f"g{i % 3}",
                i % 4,
                EXISTING_ONLY if drain else ADMITTED,
                SlowStart(1_700_000_000, 60) if i == 1 else None,
                1_700_000_100 if drain else None,
                SecretRef("engine-key", "token") if i % 5 == 0 else None,
            )
        )
    return tuple(sorted(cands))


def shards_of(cands: tuple[Candidate, ...]):
    sharded = split(Overlay("net", "c1", 1, overlay_digest(cands), cands), COUNT)
    index = validate_index(sharded.index, consumer="c1")
    return index, sharded.shards


def test_unchanged_candidates_are_reused_and_the_result_is_a_fresh_parse():
    index, shards = shards_of(fleet())
    held = {e.name: parse_shard(shards[e.name], entry=e, shard_count=COUNT) for e in index.shards}
    index2, shards2 = shards_of(fleet(drained="p07"))
    for e in index2.shards:
        known = {c.id: c for c in held[e.name]}
        reused = parse_shard(shards2[e.name], entry=e, shard_count=COUNT, known=known)
        assert reused == parse_shard(shards2[e.name], entry=e, shard_count=COUNT)
        fresh = [c.provider for c in reused if known.get(c.id) is not c]
        assert fresh == (["p07"] if any(c.provider == "p07" for c in reused) else [])


def test_a_known_candidate_written_otherwise_is_checked_again():
    index, shards = shards_of(fleet())
    entry = index.shards[0]
    known = {c.id: c for c in parse_shard(shards[entry.name], entry=entry, shard_count=COUNT)}
    bad = copy.deepcopy(shards[entry.name])
    bad["candidates"][0]["endpoint"] = "ftp://elsewhere/"
    with pytest.raises(InvalidOverlay, match="endpoint"):
        parse_shard(bad, entry=entry, shard_count=COUNT, known=known)
    odd = copy.deepcopy(shards[entry.name])
    odd["candidates"][0]["id"] = ["not", "a", "string"]
    with pytest.raises(InvalidOverlay):
        parse_shard(odd, entry=entry, shard_count=COUNT, known=known)
    # Reused candidates still add up to the shard's digest, or the shard is refused.
    wrong = {**shards[entry.name], "digest": "0" * 64}
    with pytest.raises(InvalidOverlay, match="digest"):
        parse_shard(wrong, entry=entry, shard_count=COUNT, known=known)
