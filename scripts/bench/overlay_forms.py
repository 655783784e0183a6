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
With ``--api`` the writes are also made, one after another as the operator makes them, on the
real local control plane (``benchenv.Bench``: etcd + kube-apiserver, started and stopped by pid):
the burst as creates of every object of the form, the drain as merge patches of the changed
shard and the indexes; the wall time of each is printed (the API server's cost on this machine).

Usage: python scripts/bench/overlay_forms.py [--providers 5000,10000] [--consumers 2,10] [--api]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agn.kube import OVERLAYS, SHARDS, Kube  # noqa: E402
from agn.model import ConsumerView, NetworkView, ProviderView, compute_candidates, next_overlay  # noqa: E402
from agn.netshards import consumer_index, split_network  # noqa: E402
from agn.provider.fleet import provider_views  # noqa: E402
from agn.shards import DEFAULT_SHARD_COUNT, shard_of, split  # noqa: E402

NOW = 1_000_000.0
NET = NetworkView("production")


def fleet(n: int, *, drained: frozenset[int] = frozenset()) -> list[ProviderView]:
    return provider_views(n, now=NOW, name="provider-{i:05d}", groups=8, ranks=4, drained=drained)


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


def measure(providers: int, consumers: int, excluded: int, count: int) -> dict[str, tuple[dict, dict, dict, dict]]:
    views = [ConsumerView(f"consumer-{j}", "production") for j in range(consumers)]
    views[0] = ConsumerView("consumer-0", "production", frozenset(f"provider-{i:05d}" for i in range(excluded)))
    per, net, idx = publication(providers, views, count, frozenset())
    per2, net2, idx2 = publication(providers, views, count, frozenset({excluded + 1}))
    home = f"-{shard_of(fleet(excluded + 2)[-1].candidate_id, count):02d}"  # the drained provider's shard
    named = {  # form -> (burst shards, burst indexes, drain shards, drain indexes), each {name: spec}
        "per-consumer shards (today)": (
            {n: s for sp in per for n, s in sp.shards.items()},
            {v.name: sp.index for v, sp in zip(views, per, strict=True)},
            {n: s for sp in per2 for n, s in sp.shards.items() if n.endswith(home)},
            {v.name: sp.index for v, sp in zip(views, per2, strict=True)},
        ),
        "network shards": (
            dict(net.shards),
            {v.name: i for v, i in zip(views, idx, strict=True)},
            {n: s for n, s in net2.shards.items() if n.endswith(home)},
            {v.name: i for v, i in zip(views, idx2, strict=True)},
        ),
    }
    return named


def row(burst_shards: list, burst_index: list, drain_shards: list, drain_index: list) -> dict[str, float]:
    """Bytes and objects of a burst and of a drain, and the largest object."""
    return {
        "burst_shard_bytes": sum(map(size, burst_shards)),
        "burst_index_bytes": sum(map(size, burst_index)),
        "burst_objects": len(burst_shards) + len(burst_index),
        "drain_bytes": sum(map(size, drain_shards)) + sum(map(size, drain_index)),
        "drain_objects": len(drain_shards) + len(drain_index),
        "largest": max(map(size, [*burst_shards, *burst_index])),
    }


def api_times(kube: Kube, ns: str, objects: tuple[dict, dict, dict, dict]) -> tuple[float, float]:
    """Seconds to create the burst's objects (shards, then indexes), then to patch the drain's."""
    burst_shards, burst_index, drain_shards, drain_index = objects
    started = time.perf_counter()
    for res, items in ((SHARDS, burst_shards), (OVERLAYS, burst_index)):
        for name, spec in items.items():
            kind = res.kind
            kube.create(
                res, ns, {"apiVersion": "agn.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}
            )
    burst = time.perf_counter() - started
    started = time.perf_counter()
    for res, items in ((SHARDS, drain_shards), (OVERLAYS, drain_index)):
        for name, spec in items.items():
            kube.merge_patch(res, ns, name, {"spec": spec})
    return burst, time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--providers", default="5000,10000")
    ap.add_argument("--consumers", default="2,10")
    ap.add_argument("--excluded", type=int, default=20, help="providers consumer-0 excludes")
    ap.add_argument("--shards", type=int, default=DEFAULT_SHARD_COUNT)
    ap.add_argument("--api", action="store_true", help="also time the writes on the real local control plane")
    args = ap.parse_args()
    bench = None
    if args.api:
        from benchenv import Bench

        bench = Bench(Path(tempfile.mkdtemp(prefix="overlay-forms-")))
        bench.start()
    try:
        table(args, bench)
    finally:
        if bench is not None:
            bench.stop()


def table(args: argparse.Namespace, bench) -> None:
    print(
        "| providers × consumers | form | burst: bytes (shards + indexes) | objects | API s "
        "| drain: bytes | objects | API ms | largest object |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in (int(x) for x in args.providers.split(",")):
        for c in (int(x) for x in args.consumers.split(",")):
            for k, (form, objects) in enumerate(measure(p, c, args.excluded, args.shards).items()):
                r = row(*(list(o.values()) for o in objects))
                burst = drain = float("nan")
                if bench is not None:
                    ns = f"forms-{p}-{c}-{k}"
                    bench.kube.ensure_namespace(ns)
                    burst, drain = api_times(bench.kube, ns, objects)
                total = r["burst_shard_bytes"] + r["burst_index_bytes"]
                print(
                    f"| {p:,} × {c} | {form} | {total / 1024:,.0f} KiB ({r['burst_shard_bytes'] / 1024:,.0f} + "
                    f"{r['burst_index_bytes'] / 1024:,.1f}) | {r['burst_objects']:.0f} | {burst:.2f} | "
                    f"{r['drain_bytes'] / 1024:,.1f} KiB | {r['drain_objects']:.0f} | {drain * 1000:,.0f} | "
                    f"{r['largest'] / 1024:,.1f} KiB |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
