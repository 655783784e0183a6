#!/usr/bin/env python3
"""What ``env provider-drain`` costs to import before it sends anything: CPU seconds, so the
reading holds on a shared, loaded machine (wall time there mostly measures the queue for a core).

Each stage runs in ``--repeat`` fresh interpreters and shows the least CPU time seen:

- ``parse``: what every invocation pays before click has parsed the flags (``--help``, a usage
  error and a run alike): the entry point and the command's module.
- ``own``: everything a single drain imports of its own (the parse's modules, the conductor, its
  edges, the progress lines), measured with the official client already imported, so the
  client's own cost (``kubernetes``, ~0.3 s, kept) and what it shares with it are left out;
  the client is shown beside it, for scale.

Run it with another checkout's interpreter to compare (its editable install is what it imports):
``/path/to/main/.venv/bin/python scripts/bench/drain_imports.py``. Prints one table; never
asserted (tests/integration/test_single_drain_imports.py checks the set of modules instead).
Usage: python scripts/bench/drain_imports.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import subprocess
import sys

from rich.console import Console
from rich.table import Table

CLIENT = "import kubernetes.client, kubernetes.config, kubernetes.watch"
PARSE = "import xtask.__main__, xtask.cli, xtask.cli.env.provider_drain"
RUN = "import agn.kube, xtask.drain.run, xtask.cli.env.drain_view"

# -P: the interpreter's own install (its editable checkout), not the current folder.
PROBE = """
import sys, time
before, measured = sys.argv[1], sys.argv[2]
exec(before)
t0 = time.process_time()
exec(measured)
print(time.process_time() - t0)
"""


def cpu_seconds(before: str, measured: str, repeat: int) -> float:
    """The least CPU time ``measured`` took, after ``before``, in ``repeat`` fresh interpreters."""
    runs = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-P", "-c", PROBE, before, measured],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        runs.append(float(out.stdout.strip()))
    return min(runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7, help="fresh interpreters per stage (default 7)")
    args = parser.parse_args()
    for package in ("xtask", "agn"):  # as installed: bytecode compiled (a fresh worktree has none)
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        compileall.compile_dir(list(spec.submodule_search_locations)[0], quiet=1)
    parse = cpu_seconds("pass", PARSE, args.repeat)
    own = cpu_seconds(CLIENT, f"{PARSE}; {RUN}", args.repeat)
    client = cpu_seconds("pass", CLIENT, args.repeat)
    table = Table(title=f"provider-drain's imports, least CPU time of {args.repeat} ({sys.executable})")
    for col in ("stage", "CPU ms", "what"):
        table.add_column(col)
    table.add_row("parse", f"{parse * 1000:.0f}", "entry point + the command's module: every invocation")
    table.add_row("own", f"{own * 1000:.0f}", "a single drain's own imports, after the client's")
    table.add_row("client", f"{client * 1000:.0f}", "the official client alone (kept), for scale")
    Console(width=160).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
