#!/usr/bin/env python3
"""A gateway drain in waves vs the same drain without waves, on the real local control plane.

Runs in the environment of ``benchenv.py`` (real etcd + kube-apiserver, one fake-provider
process standing in for N providers, the real operator and two real consumer gateways) and
measures with the real CLI, while a client sends completion requests through both gateways
(so the built-in error-ratio gate has evidence to hold on):

1. ``--gateway gw-big`` with both consumers as targets, without waves: wall time and overlay
   revisions per consumer;
2. the same in ``--wave-size 10%`` (10 waves) with ``--soak 5`` and the error-ratio gate:
   wall time, and overlay revisions per consumer per wave: the publications the operator
   logged (``overlay published``, with the providers each changed) that changed a provider of
   that wave; publications that changed none of them (a provider's health, say) are counted
   apart. (Reading revisions from the API when the CLI announces a wave races its first writes.)

Prints a table. Numbers are from this machine, this run; compare rows, not absolutes.
Usage: python scripts/bench/drain_waves.py [--providers 1000] [--waves 10] [--soak 5]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from rich.console import Console
from rich.table import Table

from agn.kube import CONSUMERS  # noqa: E402  (benchenv puts the repo on sys.path)
from benchenv import CONSUMER_NAMES, TARGETS, Bench


class Traffic:
    """Completion requests through both gateways, one after another, until stopped."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.stop = threading.Event()
        self.answers: dict[int, int] = {}
        self.failures: list[float] = []  # monotonic times of the answers that were not 200
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for url in self.urls:
                req = urllib.request.Request(url, data=b'{"prompt":"bench"}', method="POST")
                try:
                    with urllib.request.urlopen(req, timeout=5) as resp:
                        status = resp.status
                except urllib.error.HTTPError as exc:
                    status = exc.code
                except OSError:
                    status = 0
                self.answers[status] = self.answers.get(status, 0) + 1
                if status != 200:
                    self.failures.append(time.monotonic())
            self.stop.wait(0.02)  # the load's pace

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def gateway_urls(bench: Bench) -> list[str]:
    out = []
    for c in CONSUMER_NAMES:
        address = (bench.kube.get(CONSUMERS, bench.ns, c).get("status") or {}).get("address")
        out.append(f"{address}/v1/completions")
    return out


def publications_per_wave(operator_log: Path, namespace: str, waves: list[list[str]]) -> tuple[list[int], int]:
    """From the operator's own log: for each wave, the most overlay publications of one consumer
    that changed any of its providers; and how many publications changed none of them."""
    where = {name: k for k, wave in enumerate(waves) for name in wave}
    counts: dict[tuple[int, str], int] = {}
    other = 0
    for line in operator_log.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # the supervisor's header lines
        if rec.get("msg") != "overlay published" or rec.get("namespace") != namespace:
            continue
        changed = [name for entry in rec["changes"]["changed"].get("providers", []) for name in entry]
        touched = {where[n] for n in changed if n in where}
        if not touched:
            other += 1 if rec["revision"] > 1 and changed else 0
        for k in touched:
            counts[(k, rec["consumer"])] = counts.get((k, rec["consumer"]), 0) + 1
    per_wave = [max(counts.get((k, c), 0) for c in CONSUMER_NAMES) for k in range(len(waves))]
    return per_wave, other


def drain_in_waves(bench: Bench, args: argparse.Namespace) -> tuple[float, dict, list[tuple[float, float]]]:
    """Run the drain in waves; its wall time, report, and the soak windows (monotonic start, end)."""
    argv = bench.drain_argv(
        "--gateway", "gw-big", *TARGETS, "--concurrency", "8", "--timeout", "300",
        "--wave-size", f"{100 // args.waves}%", "--soak", str(args.soak),
    )  # fmt: skip
    windows: list[tuple[float, float]] = []
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=bench.env)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    reader.start()
    for line in proc.stderr:
        if re.match(r"wave \d+: soaking", line):
            soak_start = time.monotonic()
        elif re.match(r"\s*wave \d+: gate ", line):
            windows.append((soak_start, time.monotonic()))
    code = proc.wait(timeout=1800)
    elapsed = time.monotonic() - t0
    reader.join(timeout=10)
    if code != 0:
        raise SystemExit(f"drain in waves failed ({code}): {out[0][-3000:] if out else ''}")
    return elapsed, json.loads(out[0]), windows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--providers", type=int, default=1000)
    parser.add_argument("--waves", type=int, default=10)
    parser.add_argument("--soak", type=float, default=5.0)
    parser.add_argument("--keep-logs", type=Path, metavar="DIR", help="copy the components' logs here at the end")
    args = parser.parse_args()
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="agn-bench-") as tmp:
        bench = Bench(Path(tmp))
        try:
            bench.start()
            bench.scenario("plain", providers=args.providers)
            with Traffic(gateway_urls(bench)) as traffic:
                before = {c: bench.revision(c) for c in CONSUMER_NAMES}
                secs, report = bench.xtask("--gateway", "gw-big", "--concurrency", "8", "--timeout", "300", *TARGETS)
                revs = max(bench.revision(c) - before[c] for c in CONSUMER_NAMES)
            rows.append(
                (
                    f"drain {args.providers} (gw-big) + wait for 2 consumers, no waves",
                    f"{secs:.1f}s total",
                    f"{report['timings'].get('waitSeconds', 0):.1f}s waiting",
                    f"{revs} overlay revisions per consumer; traffic {dict(sorted(traffic.answers.items()))}",
                )
            )

            bench.scenario("waves", providers=args.providers)
            with Traffic(gateway_urls(bench)) as traffic:
                secs, report, windows = drain_in_waves(bench, args)
            in_soaks = sum(1 for t in traffic.failures if any(a <= t <= b for a, b in windows))
            per_wave, other = publications_per_wave(
                Path(tmp) / "logs" / "operator.log", bench.ns, [w["providers"] for w in report["waves"]]
            )
            held = sum(1 for w in report["waves"] if w["state"] == "held")
            values = [g["value"] for w in report["waves"] for g in w["gates"]]
            rows.append(
                (
                    f"same drain in {len(report['waves'])} waves (--wave-size {100 // args.waves}%), "
                    f"--soak {args.soak:g}, error-ratio gate",
                    f"{secs:.1f}s total",
                    f"{report['timings'].get('waitSeconds', 0):.1f}s waiting, {held} waves held "
                    f"(error ratios {min(values):g}..{max(values):g})",
                    f"overlay revisions per consumer per wave: max {max(per_wave)} ({per_wave}); "
                    f"publications of no wave's provider: {other}; "
                    f"traffic {dict(sorted(traffic.answers.items()))}, failures within soaks: {in_soaks}",
                )
            )
        finally:
            bench.stop()
            if args.keep_logs:
                shutil.copytree(Path(tmp) / "logs", args.keep_logs, dirs_exist_ok=True)
    table = Table(title=f"provider-drain in waves ({args.providers} providers, 2 consumers, this machine)")
    for col in ("scenario", "wall", "waiting", "revisions"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    Console(width=200).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
