"""A SIGINT that lands while `python -m xtask` is still loading its modules (found by the chaos
soak: a traceback and exit -2) ends as an interrupted run: exit 8, one line, no traceback."""

from __future__ import annotations

import subprocess
import sys

from xtask.errors import ExitCode
from xtask.state import REPO_ROOT

# Sends SIGINT to itself at the moment `python -m xtask` imports click, i.e. mid-start-up.
INTERRUPT_WHILE_IMPORTING = """
import importlib.abc, os, runpy, signal, sys

class InterruptOnClick(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "click":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, InterruptOnClick())
sys.argv = ["xtask", "env", "status"]
runpy.run_module("xtask", run_name="__main__", alter_sys=True)
"""


def test_sigint_while_the_cli_loads_is_an_interrupted_run():
    proc = subprocess.run(
        [sys.executable, "-c", INTERRUPT_WHILE_IMPORTING],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == ExitCode.INTERRUPTED, proc.stderr
    assert proc.stderr == "interrupted\n"
