#!/usr/bin/env python3
"""Scale benchmark for provider-drain on the real local control plane.

Runs in the environment of ``benchenv.py`` (real etcd + kube-apiserver, one fake-provider
process standing in for N providers, the real operator and two real consumer gateways) and
measures with the real CLI:

1. gateway-wide patch-only drain of N providers at --concurrency 1 (the baseline) vs 8 vs 32;
2. gateway-wide drain with convergence targets: wall time until both consumers serve it, and
   how many overlay revisions each consumer saw (burst coalescing), for the operator's default
   coalesce window vs a zero window (the baseline);
3. single-provider drain: time until the overlays carry it (operator reaction).

Prints a table. Numbers are from this machine, this run; compare rows, not absolutes.
Usage: python scripts/bench/drain_scale.py [--providers 200] [--repeat 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchenv import PROVIDERS, TARGETS, Bench, wait


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--providers", type=int, default=200)
    args = parser.parse_args()
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="agn-bench-") as tmp:
        bench = Bench(Path(tmp))
        try:
            bench.start()
            bench.scenario("fanout", providers=args.providers, coalesce=0.1)
            baseline = None
            for conc in (1, 8, 32):
                secs, report = bench.xtask("--gateway", "gw-big", "--concurrency", str(conc))
                apply = report["timings"]["applySeconds"]
                baseline = baseline or apply
                rows.append(
                    (
                        f"patch-only drain of {args.providers}, --concurrency {conc}",
                        f"{apply:.2f}s writes",
                        f"{secs:.2f}s total",
                        f"x{baseline / apply:.1f} vs concurrency 1",
                    )
                )
                bench.xtask("--gateway", "gw-big", "--undrain", "--concurrency", "32")

            results = {}
            for label, window in (
                ("coalesce window 0 (baseline)", 0.0),
                ("coalesce 0.1s, batches <= 1s (default)", 0.1),
            ):
                bench.scenario(f"conv-{int(window * 1000)}", providers=args.providers, coalesce=window)
                before = {c: bench.revision(c) for c in ("c-a", "c-b")}
                secs, report = bench.xtask("--gateway", "gw-big", "--concurrency", "8", *TARGETS)
                revs = max(bench.revision(c) - before[c] for c in ("c-a", "c-b"))
                results[label] = revs
                rows.append(
                    (
                        f"drain {args.providers} + wait for 2 consumers, {label}",
                        f"{report['timings']['waitSeconds']:.2f}s wait",
                        f"{secs:.2f}s total",
                        f"{revs} overlay revisions per consumer",
                    )
                )

            bench.scenario("single", providers=args.providers, coalesce=0.1)
            lat = []
            for i in range(5):
                name = f"p{i:03d}"
                t0 = time.monotonic()
                bench.kube.merge_patch(PROVIDERS, bench.ns, name, {"spec": {"trafficPolicy": {"drain": True}}})
                wait(
                    lambda name=name: all(
                        any(
                            c["provider"] == name and c["admission_state"] == "existing_only"
                            for c in (bench.overlay(x) or {}).get("candidates", ())
                        )
                        for x in ("c-a", "c-b")
                    ),
                    timeout=30,
                    what="overlay change",
                )
                lat.append(time.monotonic() - t0)
            lat.sort()
            rows.append(
                (
                    "single drain -> both overlays existing_only (5 runs)",
                    f"median {lat[2] * 1000:.0f}ms",
                    f"max {lat[-1] * 1000:.0f}ms",
                    "spec write to overlay, watch-driven",
                )
            )
        finally:
            bench.stop()
    table = Table(title=f"provider-drain at scale ({args.providers} providers, 2 consumers, this machine)")
    for col in ("scenario", "measure", "total", "comparison"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    Console(width=160).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
