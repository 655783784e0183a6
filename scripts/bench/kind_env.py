#!/usr/bin/env python3
"""The kind runtime, measured in one run on one machine, through the CLI as a user runs it.

Rows (each command timed wall-clock, process start included):

1. ``--cold`` only: the node image built from nothing (``scripts/build-kind-node-image.sh
   --archive-only`` with an empty cache folder and an empty Go build cache; the Go module
   download cache is kept, as on a machine that built anything Go before). Tens of minutes.
2. ``env up --runtime kind`` from nothing (no cluster, no images in the engine) with the
   caches warm: the node image archive, the Debian base and the wheels on disk.
3. A repeated ``env up`` of the running env (``--repeat`` runs; median, min, max).
4. One converged drain of ``provider-one`` (``--network production --consumer consumer-a
   --consumer consumer-b``) on the kind env and the same drain on a ``local`` env of the same
   definition, alternated pair by pair, each from a freshly undrained state; medians and the
   median of the per-pair ratios.

Both envs are removed at the end (``env down``). State lives in a temporary folder; the kind
env is named ``benchkind`` so that an ``example`` env is left alone.
Usage: python scripts/bench/kind_env.py [--repeat 5] [--cold]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[2]
TARGETS = ("--network", "production", "--consumer", "consumer-a", "--consumer", "consumer-b")
KIND_ENV, LOCAL_ENV = "benchkind", "benchlocal"


def timed(argv: list[str], env: dict[str, str], *, timeout: float = 3600) -> float:
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"benchmark step failed ({proc.returncode}): {' '.join(argv)}\n{proc.stdout}{proc.stderr}")
    return seconds


def xtask(*args: str) -> list[str]:
    return [sys.executable, "-m", "xtask", *args]


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f}, n={len(xs)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cold", action="store_true", help="also time a node image build from empty caches")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="agn-kind-bench-"))
    envs = tmp / "envs"
    envs.mkdir()
    example = yaml.safe_load((REPO / "envs" / "example.yaml").read_text())
    for name in (KIND_ENV, LOCAL_ENV):
        (envs / f"{name}.yaml").write_text(yaml.safe_dump({**example, "name": name, "namespace": f"agn-{name}"}))
    kind_config = (REPO / "envs" / "kind-example.yaml").read_text()
    (envs / f"kind-{KIND_ENV}.yaml").write_text(kind_config)
    env = {
        **os.environ,
        "AGN_XTASK_HOME": str(tmp / "xtask"),
        "AGN_XTASK_ENVS_DIR": str(envs),
        "KUBECONFIG": str(tmp / "kubeconfig"),
        "PYTHONPATH": str(REPO),
        "NO_COLOR": "1",
    }
    rows: list[tuple[str, str]] = []
    try:
        if args.cold:
            cold = {**env, "AGN_CACHE_DIR": str(tmp / "cold-cache"), "GOCACHE": str(tmp / "cold-gocache")}
            seconds = timed([str(REPO / "scripts" / "build-kind-node-image.sh"), "--archive-only"], cold, timeout=7200)
            rows.append(("node image, cold build (empty caches; Go modules downloaded before)", f"{seconds:.0f} s"))

        up = xtask("env", "up", "--runtime", "kind", "--env", KIND_ENV, "--timeout", "300")
        seconds = timed(up, env)
        rows.append(
            (
                "env up --runtime kind from nothing, caches warm, node image in the engine (goal ≤ 120 s)",
                f"{seconds:.1f} s",
            )
        )
        again = [timed(up, env) for _ in range(args.repeat)]
        rows.append(("env up again, nothing changed (goal ≤ 10 s)", spread(again)))

        timed(xtask("env", "up", "--runtime", "local", "--env", LOCAL_ENV), env)
        kind_times, local_times, ratios = [], [], []
        for _ in range(args.repeat):
            pair = {}
            for name, context, namespace in (
                ("kind", f"kind-{KIND_ENV}", f"agn-{KIND_ENV}"),
                ("local", f"local-{LOCAL_ENV}", f"agn-{LOCAL_ENV}"),
            ):
                base = ("env", "provider-drain", "--context", context, "--namespace", namespace, "--provider")
                pair[name] = timed(xtask(*base, "provider-one", *TARGETS), env)
                timed(xtask(*base, "provider-one", "--undrain", *TARGETS), env)
            kind_times.append(pair["kind"])
            local_times.append(pair["local"])
            ratios.append(pair["kind"] / pair["local"])
        rows.append(("converged drain of one provider, kind", spread(kind_times)))
        rows.append(("the same drain, local runtime", spread(local_times)))
        rows.append(("kind / local, median of per-pair ratios (goal ≤ 1.5×)", f"×{statistics.median(ratios):.2f}"))
    finally:
        for name in (KIND_ENV, LOCAL_ENV):
            subprocess.run(xtask("env", "down", "--env", name), cwd=REPO, env=env, capture_output=True, timeout=900)

    table = Table(
        title=f"kind runtime — {dt.date.today()}, {platform.node()}, {os.cpu_count()} cores", title_justify="left"
    )
    table.add_column("what")
    table.add_column("wall time")
    for what, value in rows:
        table.add_row(what, value)
    Console(width=140).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
