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
