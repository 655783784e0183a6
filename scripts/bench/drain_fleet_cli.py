#!/usr/bin/env python3
"""The CLI's own part of one converged single drain among a fleet: CPU, requests and bytes.

``fleet.py`` times a single drain among N providers by stage; this bench looks inside the
first stage (the CLI's start to its PATCH). It builds the same env as ``fleet.py`` (one
namespace per size, the real operator and one gateway per consumer, providers in 4 selection
groups plus a spare per group), waits until every consumer serves all of them admitted, and then
runs the single drain of the first provider (converged on every consumer) ``--repeat`` times
through ``requestprobe.py``, undrained between runs. With ``--before DIR`` the CLI of that
checkout (its own ``.venv``) runs in the same rounds, alternating with this one, against the
same env: the operator and gateways are this checkout's for both, so only the CLI differs.

Per run: wall seconds, the CLI's CPU seconds (user + system, from the child's rusage: the
number to compare on a shared machine), the CPU it had spent when it sent its first request and
its PATCH (every thread's, from inside), its API requests, the response bytes (watches not
counted) and the seconds from its start to its first request and to its PATCH; per size and
code the medians. ``--profile DIR`` also runs each CLI under cProfile (its main thread; CPU
then reads higher) and keeps each run's ``.prof`` and request log there.

Usage: python scripts/bench/drain_fleet_cli.py [--providers 4,5000] [--consumers 10] [--repeat 5]
       [--before /work/base2] [--profile DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fleet as fleetbench

from benchenv import REPO, Bench

PROBE = Path(__file__).with_name("requestprobe.py")
COLUMNS = ("wall", "cpu", "cpu_first_request", "cpu_to_patch", "to_patch", "first_request", "requests", "bytes")


def run_cli(bench: Bench, fleet: fleetbench.Fleet, root: Path, out: Path, *, profile: bool) -> dict:
    """One converged single drain by the CLI of checkout ``root``, under requestprobe.py."""
    targets = ["--network", "net"]
    for c in fleet.consumers:
        targets += ["--consumer", c]
    argv = bench.drain_argv("--timeout", "60", "--provider", fleet.names[0], *targets)
    probe = [str(PROBE), f"{out}.json", *(["--profile", f"{out}.prof"] if profile else [])]
    argv = [str(root / ".venv" / "bin" / "python"), *probe, *argv[1:]]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started, t0 = time.time(), time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env={**bench.env, "PYTHONPATH": str(root)}, cwd=root)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"drain by {root} exited {proc.returncode}: {proc.stderr[-2000:]}")
    seen = json.loads(Path(f"{out}.json").read_text())
    first = (seen["firstRequest"] or started) - started
    at = next((i for i, c in enumerate(seen["calls"]) if " PATCH " in f" {c} " and "dryRun" not in c), None)
    patch = None if at is None else float(seen["calls"][at].split()[0])
    cpu = seen.get("cpu") or []
    return {
        "wall": wall,
        "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "requests": seen["requests"],
        "bytes": seen.get("bytes", 0),
        "first_request": first,
        "to_patch": None if patch is None else first + patch,
        "cpu_first_request": cpu[0] if cpu else None,
        "cpu_to_patch": cpu[at] if at is not None and at < len(cpu) else None,
    }


def admit(fleet: fleetbench.Fleet, providers: int, consumers: int) -> int:
    """This size's env up, every provider admitted and served; how many providers in all."""
    fleet.start_size(providers, consumers)
    deadline = time.monotonic() + 900
    fleetbench.wait(lambda: fleet.converged(admitted=0), deadline=deadline, what="empty overlays")
    fleet.create_providers()
    total = len(fleet.names) + fleetbench.SPARES
    fleetbench.wait(lambda: fleet.converged(admitted=total), deadline=deadline, what="every provider admitted")
    return total


def run_size(bench: Bench, fleet: fleetbench.Fleet, n: int, args: argparse.Namespace, keep: Path) -> dict[str, list]:
    """``--repeat`` rounds of every code's CLI at one size, alternating."""
    codes = {"this": REPO} | ({"before": args.before.resolve()} if args.before else {})
    total = admit(fleet, n, args.consumers)
    print(f"{n} x {args.consumers}: admitted, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    runs: dict[str, list] = {code: [] for code in codes}
    for i in range(args.repeat):
        for code, root in codes.items():
            stem = keep / f"{n}x{args.consumers}-{code}-{i}"
            runs[code].append(run_cli(bench, fleet, root, stem, profile=args.profile is not None))
            print(f"  {code} {i}: {json.dumps(runs[code][-1])}", file=sys.stderr, flush=True)
            bench.set_drain([fleet.names[0]], None)
            deadline = time.monotonic() + 120
            fleetbench.wait(lambda: fleet.converged(admitted=total), deadline=deadline, what="undrained")
    fleet.stop_size()
    return runs


def median(runs: list[dict], key: str) -> float:
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--providers", default="4,5000", help="comma-separated fleet sizes (4,5000)")
    p.add_argument("--consumers", type=int, default=10, help="consumers (10)")
    p.add_argument("--repeat", type=int, default=5, help="drains per size and code (5)")
    p.add_argument("--before", type=Path, help="a checkout with its own .venv whose CLI runs in the same rounds")
    p.add_argument("--profile", type=Path, help="run each CLI under cProfile; keep its .prof and request log in DIR")
    args = p.parse_args(argv)
    results: dict[tuple[int, str], list[dict]] = {}
    loads = []
    with tempfile.TemporaryDirectory(prefix="agn-fleetcli-") as tmp:
        keep = args.profile or Path(tmp) / "probe"
        keep.mkdir(parents=True, exist_ok=True)
        bench = Bench(Path(tmp))
        fleet = fleetbench.Fleet(bench, fleetbench.parse_args(["--consumers", str(args.consumers)]))
        try:
            bench.start()
            for n in (int(x) for x in args.providers.split(",")):
                for code, runs in run_size(bench, fleet, n, args, keep).items():
                    results[(n, code)] = runs
                loads.append(os.getloadavg()[0])
        finally:
            bench.stop()
    print(f"load (1 min) after each size: {', '.join(f'{x:.1f}' for x in loads)}")
    print(
        "size code | wall s | CPU s | CPU before the first request s | CPU to the PATCH s | to PATCH s | "
        "first request s | requests | response KiB  (medians)"
    )
    for (n, code), runs in results.items():
        wall, cpu, cpu_first, cpu_patch, patch, first, requests, size = (median(runs, k) for k in COLUMNS)
        print(
            f"{n}x{args.consumers} {code} | {wall:.3f} | {cpu:.3f} | {cpu_first:.3f} | {cpu_patch:.3f} | "
            f"{patch:.3f} | {first:.3f} | {requests:.0f} | {size / 1024:.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
