"""A SIGINT that lands while `python -m xtask` is still loading its modules (found by the chaos
soak: a traceback and exit -2) ends as an interrupted run: exit 8, one line, no traceback."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

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


# A SIGHUP or SIGTERM after the CLI has loaded, before a command installs handlers of its own
# (a drain reads its kubeconfig and the cluster before its signal latch): found by the chaos
# soak, a SIGHUP'd drain died by the signal (-1) instead of ending as an interrupted run.
SIGNAL_IN_A_COMMAND = """
import os, signal, sys, time
import click
import xtask.__main__ as entry

@click.command()
def command():
    os.kill(os.getpid(), signal.{sig})
    time.sleep(10)
    print("not interrupted")

entry.finish(entry.main([], command=command))
"""


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGTERM", "SIGINT"])
def test_a_signal_before_a_command_handles_it_is_an_interrupted_run(sig):
    proc = subprocess.run(
        [sys.executable, "-c", SIGNAL_IN_A_COMMAND.format(sig=sig)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    assert proc.returncode == ExitCode.INTERRUPTED, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "not interrupted" not in proc.stdout


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGTERM"])
def test_sighup_or_sigterm_while_the_cli_loads_is_an_interrupted_run(sig):
    proc = subprocess.run(
        [sys.executable, "-c", INTERRUPT_WHILE_IMPORTING.replace("signal.SIGINT", f"signal.{sig}")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    assert proc.returncode == ExitCode.INTERRUPTED, (proc.returncode, proc.stderr)
    assert proc.stderr == "interrupted\n"


def test_a_sighup_ignored_at_start_stays_ignored():
    """``nohup``: the CLI does not take SIGHUP back."""
    script = SIGNAL_IN_A_COMMAND.format(sig="SIGHUP").replace("time.sleep(10)", "time.sleep(0.5)")
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert "not interrupted" in proc.stdout
