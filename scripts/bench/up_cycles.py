"""``env down`` then ``env up --runtime local``, N times: does a fresh bring-up succeed every time?

Each cycle runs the CLI as a user does, with a state folder and a kubeconfig of its own (a
temporary folder: nobody else's env or kube context is touched). A failed ``env up`` is
counted, its ``error:`` and ``hint:`` lines kept, and the next cycle starts from ``env down``.
Prints one line per cycle, then a table: cycles, failures, and the seconds of the bring-ups.
Exit 1 when any cycle failed.

    .venv/bin/python scripts/bench/up_cycles.py --cycles 100
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def xtask(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "xtask", *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=600)


def cycle(env: dict[str, str], name: str) -> tuple[bool, float, list[str]]:
    """One ``env down`` + ``env up``: (succeeded, seconds of the up, its error and hint lines)."""
    down = xtask(env, "env", "down", "--env", name)
    if down.returncode != 0:
        return False, 0.0, [f"env down: exit {down.returncode}", *down.stderr.splitlines()[-3:]]
    began = time.monotonic()
    up = xtask(env, "env", "up", "--env", name, "--runtime", "local")
    took = time.monotonic() - began
    said = [line for line in up.stderr.splitlines() if line.startswith(("error:", "hint:"))]
    return up.returncode == 0, took, said or [f"exit {up.returncode}", *up.stderr.splitlines()[-3:]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--env", default="example")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agn-up-cycles-") as tmp:
        env = {
            **os.environ,
            "AGN_XTASK_HOME": str(Path(tmp) / "home"),
            "KUBECONFIG": str(Path(tmp) / "kubeconfig"),
            "NO_COLOR": "1",
        }
        times: list[float] = []
        failures = 0
        try:
            for n in range(1, args.cycles + 1):
                ok, took, said = cycle(env, args.env)
                times.append(took)
                failures += not ok
                print(
                    f"{n:4d}  {'ok  ' if ok else 'FAIL'}  {took:6.1f} s  " + " | ".join(said if not ok else []),
                    flush=True,
                )
        finally:
            xtask(env, "env", "down", "--env", args.env)
    if not times:
        return 1
    print()
    print(f"{'cycles':>8} {'failures':>9} {'min s':>7} {'median s':>9} {'max s':>7}")
    print(f"{len(times):>8} {failures:>9} {min(times):>7.1f} {statistics.median(times):>9.1f} {max(times):>7.1f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
