#!/usr/bin/env python3
"""What ``env provider-drain`` costs to import before it sends anything: CPU seconds, so the
reading holds on a shared, loaded machine (wall time there mostly measures the queue for a core).

Each stage runs in ``--repeat`` fresh interpreters and shows the least CPU time seen:

- ``parse``: what every invocation pays before click has parsed the flags (``--help``, a usage
  error and a run alike): the entry point and the command's module.
- ``own``: everything a single drain imports of its own: the parse's modules, then exactly the
  modules ``tests/integration/test_single_drain_imports.py`` pins (its ``OWN_MODULES``, the set a
  real single drain was seen to import, read from the checkout being measured), with the
  official client already imported, so the client's own cost (``kubernetes``, ~0.3 s, kept) and
  what it shares with it are left out; the client is shown beside it, for scale.

Run it with another checkout's interpreter to compare (its editable install is what it imports,
and its test's list is what it measures): ``/path/to/main/.venv/bin/python
scripts/bench/drain_imports.py``. Prints one table; never asserted (the test checks the set).
Usage: python scripts/bench/drain_imports.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import ast
import compileall
import importlib.util
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

CLIENT = "import kubernetes.client, kubernetes.config, kubernetes.watch"
PARSE = "import xtask.__main__, xtask.cli, xtask.cli.env.provider_drain"
PINNED = Path("tests/integration/test_single_drain_imports.py")  # its OWN_MODULES: a real single drain's

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


def pinned_modules(repo: Path) -> list[str]:
    """The modules ``repo``'s import test pins for a single drain (``OWN_MODULES``), sorted."""
    tree = ast.parse((repo / PINNED).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["OWN_MODULES"]:
            texts = [n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            return sorted(set(" ".join(texts).split()))
    raise SystemExit(f"no OWN_MODULES in {repo / PINNED}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7, help="fresh interpreters per stage (default 7)")
    args = parser.parse_args()
    roots = []
    for package in ("xtask", "agn"):  # as installed: bytecode compiled (a fresh worktree has none)
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        roots.append(Path(list(spec.submodule_search_locations)[0]))
        compileall.compile_dir(roots[-1], quiet=1)
    run = "import " + ", ".join(pinned_modules(roots[0].parent))  # the checkout the interpreter imports
    parse = cpu_seconds("pass", PARSE, args.repeat)
    own = cpu_seconds(CLIENT, f"{PARSE}; {run}", args.repeat)
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
