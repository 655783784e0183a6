"""A signal that arrives while the CLI tears down (``xtask.__main__.finish``: the outcome is
decided, the streams are being flushed) does not change its exit code. The chaos soak found an
interrupted run whose second Ctrl-C landed there ending with -2 (a ``KeyboardInterrupt``
traceback) instead of exit 8."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from envcli import REPO

# finish() as the CLI calls it, with the signal sent at the moment it flushes its log handlers
# (logging.shutdown is its first step), so it lands inside the teardown every time.
SCRIPT = """
import logging, os, signal, sys
import xtask.__main__ as entry
real = logging.shutdown
def shutdown():
    os.kill(os.getpid(), signal.{sig})
    real()
logging.shutdown = shutdown
entry.finish(8)
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_during_teardown_keeps_the_exit_code(sig):
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(sig=sig)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    assert run.returncode == 8, (run.returncode, run.stderr)
    assert "Traceback" not in run.stderr, run.stderr


# A KeyboardInterrupt (from SIGINT, SIGTERM or SIGHUP) that escapes main() itself: in the few
# instructions between its return and finish(), or while it loads the command tree.
ESCAPING = """
import xtask.__main__ as entry
def main():
    raise KeyboardInterrupt("SIGHUP")
entry.main = main
entry.run()
"""


def test_an_interrupt_that_escapes_main_is_an_interrupted_run_not_death_by_sigint():
    run = subprocess.run([sys.executable, "-c", ESCAPING], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert run.returncode == 8, (run.returncode, run.stderr)
    assert "Traceback" not in run.stderr, run.stderr


def test_the_command_tree_loads_inside_main_s_handling():
    """Loading it takes a second on a busy machine: a signal then is an interrupted run."""
    script = """
import sys, xtask.__main__ as entry
import xtask.cli
class Tree:
    def __getattr__(self, name):
        raise KeyboardInterrupt("SIGHUP")
sys.modules["xtask.cli"] = Tree()
sys.exit(entry.main(["env", "status"]))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert run.returncode == 8, (run.returncode, run.stderr)
