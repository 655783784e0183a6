"""The last-provider guard on a sharded overlay weighs only the candidates of the providers it
drains: a network shard holds a share of the whole fleet, shared by every consumer of the
network, and the guard reads it once per named consumer."""

from __future__ import annotations

from typing import Any

from agn.model import ADMITTED, EXISTING_ONLY
from xtask.drain.core.changes import Change
from xtask.drain.core.guard import Targets, target_refusals
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.selection import Selector

CONSUMERS = tuple(f"c{i}" for i in range(10))


def provider(name: str, group: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"endpoint": f"http://127.0.0.1:9000/{name}", "selectionGroup": group},
        "status": {"candidateId": f"id-{name}"},
    }


def candidate(name: str, group: str, state: str) -> dict[str, Any]:
    return {
        "id": f"id-{name}",
        "provider": name,
        "endpoint": f"http://127.0.0.1:9000/{name}",
        "selectionGroup": group,
        "rank": 0,
        "admission_state": state,
    }


class ShardOfAFleet:
    """One network shard as every consumer's partial read returns it: the drained provider's
    candidate among thousands of others, which are not candidates a parser accepts (no
    endpoint, no state): parsing one of them raises."""

    def __init__(self, mine: dict[str, Any]) -> None:
        self.others = [{"id": f"id-x{i}", "provider": f"x{i}"} for i in range(3000)]
        self.mine = mine
        self.reads: list[str] = []

    def partial(self, consumer: str, index: dict[str, Any], candidate_ids: list[str]) -> dict[str, Any]:
        self.reads.append(consumer)
        return {
            "network": "net",
            "consumer": consumer,
            "revision": 3,
            "digest": "d",
            "candidates": [*self.others, self.mine],
        }

    def whole(self, consumer: str) -> dict[str, Any] | None:  # pragma: no cover - the index counts its groups
        raise AssertionError("a sharded index with admittedByGroup is never read whole")


def refusals(state: str, admitted_in_group: int) -> tuple[list[str], ShardOfAFleet]:
    reader = ShardOfAFleet(candidate("p1", "g0", state))
    index = {
        "revision": 3,
        "shards": [{"name": "net-netshard-00", "digest": "d"}],
        "admittedByGroup": {"g0": admitted_in_group},
    }
    targets = Targets(
        network={"metadata": {"name": "net"}, "spec": {}},
        consumers={c: {"metadata": {"name": c}, "spec": {"network": "net"}} for c in CONSUMERS},
        indexes={c: index for c in CONSUMERS},
    )
    req = DrainRequest(selector=Selector(provider="p1"), drain=True, network="net", consumers=CONSUMERS)
    change = Change("p1", None, True, "7", 1, {})
    return target_refusals(targets, req, [provider("p1", "g0")], [change], reader), reader


def test_the_last_admitted_provider_of_a_group_is_refused_for_every_consumer_from_its_candidate_alone():
    found, reader = refusals(ADMITTED, 1)
    assert sorted(reader.reads) == sorted(CONSUMERS)
    assert len(found) == len(CONSUMERS)
    assert all("g0" in r and "--force" in r for r in found)


def test_a_group_that_keeps_an_admitted_provider_passes():
    assert refusals(ADMITTED, 2)[0] == []


def test_a_drained_provider_without_an_admitted_candidate_takes_nothing_from_its_group():
    assert refusals(EXISTING_ONLY, 1)[0] == []
