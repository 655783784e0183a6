#!/usr/bin/env python3
"""Overlay storage forms, compared by what a publication writes (issue #45, the design note).

Pure: the real split functions of ``agn.shards`` (per-consumer shards, today's form) and
``agn.netshards`` (network shards shared by the consumers of a network) on a synthetic fleet;
no API server. For each (providers, consumers) size it prints, per form, the compact-JSON bytes
and the number of objects one publication writes:

- **burst**: a publication while providers are being created (a few new providers per
  publication land in every shard, so every shard of the form changes), and its index writes;
- **drain**: one provider drained (one shard changes, and the indexes);
- **largest**: the largest object of the form.

Consumers 2.. exclude nothing; consumer 1 excludes ``--excluded`` providers (what differs).
Each shard write is also priced with ``--ms-per-kib`` (the API server's cost per KiB of a shard
patch measured in docs/benchmarks.md, issue #33: ~35 ms per 49.7 KiB shard).

Usage: python scripts/bench/overlay_forms.py [--providers 5000,10000] [--consumers 2,10]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agn.model import ConsumerView, NetworkView, ProviderView, candidate_id, compute_candidates, next_overlay  # noqa: E402
from agn.netshards import consumer_index, split_network  # noqa: E402
from agn.shards import DEFAULT_SHARD_COUNT, shard_of, split  # noqa: E402

NOW = 1_000_000.0
NET = NetworkView("production")


def fleet(n: int, *, drained: frozenset[int] = frozenset()) -> list[ProviderView]:
    return [
        ProviderView(
            name=f"provider-{i:05d}",
            endpoint=f"http://127.0.0.1:9000/pool/provider-{i:05d}/",
            candidate_id=candidate_id(f"0b7c1e7a-5d0e-4c55-9a36-{i:012d}"),
            selection_group=f"group-{i % 8}",
            rank=i % 4,
            drain=i in drained,
            healthy=True,
            metrics_observed_at=NOW,
        )
        for i in range(n)
    ]


def size(obj: object) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def publication(providers: int, views: list[ConsumerView], count: int, drained: frozenset[int]):
    """Both forms of one publication: today's Sharded per consumer; the network split and indexes."""
    pvs = fleet(providers, drained=drained)
    overlays = [
        next_overlay(None, compute_candidates(pvs, NET, v, now=NOW), network="production", consumer=v.name)
        for v in views
    ]
    net = split_network("production", compute_candidates(pvs, NET, ConsumerView("", "production"), now=NOW), count)
    return [split(o, count) for o in overlays], net, [consumer_index(o, net) for o in overlays]


def measure(providers: int, consumers: int, excluded: int, count: int) -> dict[str, dict[str, float]]:
    views = [ConsumerView(f"consumer-{j}", "production") for j in range(consumers)]
    views[0] = ConsumerView("consumer-0", "production", frozenset(f"provider-{i:05d}" for i in range(excluded)))
    per, net, idx = publication(providers, views, count, frozenset())
    per2, net2, idx2 = publication(providers, views, count, frozenset({excluded + 1}))
    home = f"-{shard_of(candidate_id(f'0b7c1e7a-5d0e-4c55-9a36-{excluded + 1:012d}'), count):02d}"
    return {
        "per-consumer shards (today)": row(
            [s for sp in per for s in sp.shards.values()],
            [sp.index for sp in per],
            [s for sp in per2 for n, s in sp.shards.items() if n.endswith(home)],
            [sp.index for sp in per2],
        ),
        "network shards": row(
            list(net.shards.values()), idx, [s for n, s in net2.shards.items() if n.endswith(home)], idx2
        ),
    }


def row(burst_shards: list, burst_index: list, drain_shards: list, drain_index: list) -> dict[str, float]:
    return {
        "burst_shard_bytes": sum(map(size, burst_shards)),
        "burst_index_bytes": sum(map(size, burst_index)),
        "burst_objects": len(burst_shards) + len(burst_index),
        "drain_bytes": sum(map(size, drain_shards)) + sum(map(size, drain_index)),
        "drain_objects": len(drain_shards) + len(drain_index),
        "largest": max(map(size, [*burst_shards, *burst_index])),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--providers", default="5000,10000")
    ap.add_argument("--consumers", default="2,10")
    ap.add_argument("--excluded", type=int, default=20, help="providers consumer-0 excludes")
    ap.add_argument("--shards", type=int, default=DEFAULT_SHARD_COUNT)
    ap.add_argument("--ms-per-kib", type=float, default=35 / 49.7)
    args = ap.parse_args()
    print(
        "| providers × consumers | form | burst: bytes (shards + indexes) | objects | est. API ms | drain: bytes | objects | largest object |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in (int(x) for x in args.providers.split(",")):
        for c in (int(x) for x in args.consumers.split(",")):
            for form, r in measure(p, c, args.excluded, args.shards).items():
                total = r["burst_shard_bytes"] + r["burst_index_bytes"]
                ms = total / 1024 * args.ms_per_kib
                print(
                    f"| {p:,} × {c} | {form} | {total / 1024:,.0f} KiB ({r['burst_shard_bytes'] / 1024:,.0f} + "
                    f"{r['burst_index_bytes'] / 1024:,.1f}) | {r['burst_objects']:.0f} | {ms:,.0f} | "
                    f"{r['drain_bytes'] / 1024:,.1f} KiB | {r['drain_objects']:.0f} | {r['largest'] / 1024:,.1f} KiB |"
                )


if __name__ == "__main__":
    main()
