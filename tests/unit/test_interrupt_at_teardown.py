"""A signal that arrives while the CLI tears down (``xtask.__main__.finish``: the outcome is
decided, the streams are being flushed) does not change its exit code. The chaos soak found an
interrupted run whose second Ctrl-C landed there ending with -2 (a ``KeyboardInterrupt``
traceback) instead of exit 8."""

from __future__ import annotations

import pytest

from envcli import run_python

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
    run = run_python(SCRIPT.format(sig=sig))
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
    run = run_python(ESCAPING)
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
    run = run_python(script)
    assert run.returncode == 8, (run.returncode, run.stderr)
