#!/usr/bin/env python3
"""A 1,000-provider drain with the load-aware capacity guard against the same drain without it,
on the real local control plane.

Runs in the environment of ``benchenv.py`` (real etcd + kube-apiserver, one fake-provider
process standing in for N providers, the real operator and two real consumer gateways) and
measures with the real CLI, ``--gateway gw-big`` with both consumers as targets (converged):

1. **without the guard** — no provider declares ``spec.capacity.maxConcurrent``, so the guard
   weighs nothing (the last-provider guard alone, as before it);
2. **with the guard** — every provider declares a capacity (gw-big 8 each, the spare of each
   selection group 1,000) and carries a fixed load (gw-big: 1 waiting request each, over
   ``/admin/state``), published by the operator in ``status.load``; the drain weighs the four
   groups (250 leaving each, headroom 1,000 each) before its writes and again under the lock.

Each drain runs ``--repeat`` times (undone with ``--undrain`` between runs, not measured); the table
gives the median and the range, the guard's own time (its decision over the listed fleet,
timed in this process on the objects the CLI reads) and the verdicts the report carries.
Numbers are from this machine, this run; compare rows, not absolutes.
Usage: python scripts/bench/drain_capacity.py [--providers 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from rich.console import Console
from rich.table import Table

from agn.kube import NETWORKS, PROVIDERS  # noqa: E402  (benchenv puts the repo on sys.path)
from agn.operator.heartbeat import read_heartbeat
from benchenv import TARGETS, Bench, wait
from xtask.drain.core.amounts import Amount
from xtask.drain.core.capacity import capacity_groups

LOAD = 1  # waiting requests on each gw-big provider
CAPACITY = (8, 1000)  # spec.capacity.maxConcurrent of a gw-big provider, of a spare


def set_loads(bench: Bench, names: list[str], waiting: int) -> None:
    def post(name: str) -> None:
        body = f'{{"waiting": {waiting}}}'.encode()
        req = urllib.request.Request(f"{bench.pool}/pool/{name}/admin/state", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass

    with cf.ThreadPoolExecutor(8) as pool:
        list(pool.map(post, names))


def published(bench: Bench, names: list[str], waiting: int) -> bool:
    """Whether the operator has published each provider's load (``waiting`` for ``names``)."""
    want = set(names)
    for p in bench.kube.list(PROVIDERS, bench.ns)[0]:
        load = (p.get("status") or {}).get("load")
        if load is None or (p["metadata"]["name"] in want and load.get("waiting") != waiting):
            return False
    return True


def drains(bench: Bench, names: list[str], repeat: int) -> tuple[list[float], list[float], dict]:
    """``repeat`` converged drains of gw-big; their wall times, the guard's own time in each
    (the report's ``timings.capacitySeconds``: every check of the run, LISTs excluded) and the
    last report."""
    times, guarded, report = [], [], {}
    for _ in range(repeat):
        secs, report = bench.xtask("--gateway", "gw-big", "--concurrency", "8", "--timeout", "300", *TARGETS)
        times.append(secs)
        guarded.append(report["timings"].get("capacitySeconds", 0.0))
        bench.xtask("--gateway", "gw-big", "--undrain", "--concurrency", "32", "--timeout", "300", *TARGETS)
    return times, guarded, report


def guard_ms(bench: Bench, names: list[str]) -> float:
    """The guard's decision over the fleet as listed, best of 5, in milliseconds."""
    providers = bench.kube.list(PROVIDERS, bench.ns)[0]
    networks = bench.kube.list(NETWORKS, bench.ns)[0]
    heartbeat = read_heartbeat(bench.kube, bench.ns)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        capacity_groups(providers, networks, names, Amount(0), heartbeat=heartbeat, now=time.time())
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def median_range(times: list[float]) -> str:
    return f"median {statistics.median(times):.1f} s ({min(times):.1f}–{max(times):.1f} s, {len(times)} runs)"


def without_guard(bench: Bench, names: list[str], args: argparse.Namespace) -> tuple[float, str]:
    bench.scenario("without", providers=len(names))
    times, guarded, report = drains(bench, names, args.repeat)
    weighed = len((report.get("capacity") or {}).get("groups", []))
    return statistics.median(times), (
        f"drain of {len(names)} (gw-big) + wait for 2 consumers, no capacity declared (no guard)|"
        f"{median_range(times)}|groups weighed: {weighed}; the guard in the CLI {statistics.median(guarded) * 1000:.0f} ms"
    )


def with_guard(bench: Bench, names: list[str], args: argparse.Namespace) -> tuple[float, str]:
    bench.scenario("with", providers=len(names), capacity=CAPACITY)
    set_loads(bench, names, LOAD)
    wait(lambda: published(bench, names, LOAD), timeout=300, what="every load published", interval=0.5)
    decided = guard_ms(bench, names)
    times, guarded, report = drains(bench, names, args.repeat)
    groups = report["capacity"]["groups"]
    verdicts = ", ".join(f"{g['group']} {g['load']}/{g['headroom']} {g['verdict']}" for g in groups)
    return statistics.median(times), (
        f"the same drain, every provider declaring a capacity (load-aware guard: {len(groups)} groups)|"
        f"{median_range(times)}|the guard in the CLI (both checks) median {statistics.median(guarded) * 1000:.0f} ms; "
        f"its decision alone {decided:.0f} ms (in-process, {len(names) + 4} providers); load/headroom: {verdicts}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--providers", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--first", choices=("without", "with"), default="without", help="which scenario runs first")
    args = parser.parse_args()
    names = [f"p{i:03d}" for i in range(args.providers)]
    scenarios = [without_guard, with_guard] if args.first == "without" else [with_guard, without_guard]
    measured: dict[str, tuple[float, str]] = {}
    with tempfile.TemporaryDirectory(prefix="agn-bench-") as tmp:
        bench = Bench(Path(tmp))
        try:
            bench.start()
            for scenario in scenarios:
                measured[scenario.__name__] = scenario(bench, names, args)
        finally:
            bench.stop()
    base = measured["without_guard"][0]
    rows = [tuple(measured["without_guard"][1].split("|"))]
    label, wall, comparison = measured["with_guard"][1].split("|")
    rows.append((label, wall, f"x{measured['with_guard'][0] / base:.2f} of the baseline; {comparison}"))
    table = Table(title=f"provider-drain with the load-aware capacity guard ({args.providers} providers, this machine)")
    for col in ("scenario", "wall", "comparison"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    Console(width=200).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
