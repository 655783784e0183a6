#!/usr/bin/env python3
"""Gateway micro-benchmark: the CPU time one gateway spends taking a new overlay revision.

In-process and without an API server: the real :class:`~agn.gateway.follower.OverlayFollower`,
:class:`~agn.gateway.table.RoutingTable` and :class:`~agn.gateway.status_writer.StatusWriter`,
with the follower's two API calls (GET a shard by name, patch the consumer's status) answered
from memory, so only the gateway's own work is timed. The overlay of ``--candidates``
candidates is split into ``--shards`` shards by :func:`agn.shards.split`, exactly as the
operator stores it. Revision 1 is taken once (every shard fetched); then each timed step
drains or undrains one provider — one shard and the index change, as in a single
``provider-drain`` — and times ``observe(index)`` until the new revision is served, plus
``route()`` for a new session on the served table.

Usage: python scripts/bench/gateway_revision.py [--candidates 5000] [--shards 16] [--repeat 30]
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agn.gateway.follower import OverlayFollower  # noqa: E402
from agn.gateway.status_writer import StatusWriter  # noqa: E402
from agn.gateway.table import RoutingTable  # noqa: E402
from agn.logs import JsonLog  # noqa: E402
from agn.model import ADMITTED, EXISTING_ONLY, Candidate, Overlay, candidate_id, overlay_digest  # noqa: E402
from agn.shards import split  # noqa: E402


class MemoryApi:
    """The two calls the follower makes, answered from memory (a benchmark stand-in, not a test fake)."""

    host = "memory"

    def __init__(self) -> None:
        self.shards: dict[str, dict[str, Any]] = {}

    def get(self, res: Any, namespace: str, name: str, *, timeout: float | None = None) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": self.shards[name]}

    def merge_patch_status(self, res: Any, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=5000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    cands = [
        Candidate(
            candidate_id(f"uid-{i}"), f"p{i:05d}", f"http://127.0.0.1:9/pool/p{i:05d}", f"g{i % 4}", i % 7, ADMITTED
        )
        for i in range(args.candidates)
    ]
    api, table, stop = MemoryApi(), RoutingTable(), threading.Event()
    log = JsonLog(component="gateway", stream=io.StringIO())
    status = StatusWriter(api, namespace="bench", consumer="c1", log=log)  # type: ignore[arg-type]
    writer = threading.Thread(target=status.run, daemon=True)
    writer.start()
    follower = OverlayFollower(
        api,  # type: ignore[arg-type]
        namespace="bench",
        consumer="c1",
        table=table,
        status=status,
        log=log,
        stop=stop,
    )

    def publish(revision: int) -> dict[str, Any]:
        ordered = tuple(sorted(cands, key=lambda c: (c.id, c.provider)))
        parts = split(Overlay("net", "c1", revision, overlay_digest(ordered), ordered), args.shards)
        api.shards = parts.shards
        return {"metadata": {"name": "c1"}, "spec": parts.index}

    def take(revision: int) -> float:
        index = publish(revision)
        start = time.perf_counter()
        follower.observe(index)
        elapsed = time.perf_counter() - start
        served = table.serving
        assert served is not None and served.revision == revision, "the revision was not served"
        return elapsed

    first = take(1)
    takes, routes = [], []
    for step in range(args.repeat):
        i = (step * 7919) % len(cands)
        state = EXISTING_ONLY if cands[i].admission_state == ADMITTED else ADMITTED
        cands[i] = dataclasses.replace(cands[i], admission_state=state)
        takes.append(take(step + 2))
        start = time.perf_counter()
        for n in range(100):
            table.route(f"s-{step}-{n}")
        routes.append((time.perf_counter() - start) / 100)
    stop.set()
    status.close()
    writer.join(timeout=5)

    print(f"{args.candidates} candidates, {args.shards} shards, {args.repeat} revisions of one changed shard")
    print(f"first revision (every shard fetched):  {first * 1000:8.1f} ms")
    print(
        f"new revision, one shard changed:       median {statistics.median(takes) * 1000:6.1f} ms"
        f"  (min {min(takes) * 1000:.1f}, max {max(takes) * 1000:.1f})"
    )
    print(f"route() for a new session:             median {statistics.median(routes) * 1e6:6.1f} µs")


if __name__ == "__main__":
    main()
