"""A SIGINT that lands while `python -m xtask` is still loading its modules (found by the chaos
soak: a traceback and exit -2) ends as an interrupted run: exit 8, one line, no traceback. So
do SIGTERM and SIGHUP (they killed it: -15, -1), then and later, until a command handles them
itself (a drain's signal latch): a drain waiting on its first API request is interrupted, not
killed. A signal the CLI was started ignoring (nohup) stays ignored."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envcli import run_python
from xtask.errors import ExitCode
from xtask.state import REPO_ROOT

# Sends SIGNUM to itself at the moment `python -m xtask` imports click, i.e. mid-start-up.
INTERRUPT_WHILE_IMPORTING = """
import importlib.abc, os, runpy, signal, sys
SIGNUM = int(os.environ["SIGNUM"])

class InterruptOnClick(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "click":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), SIGNUM)
        return None

sys.meta_path.insert(0, InterruptOnClick())
sys.argv = ["xtask", "env", "status"]
runpy.run_module("xtask", run_name="__main__", alter_sys=True)
"""


INTERRUPTING = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


def started(signum: int, *, argv: str = '"xtask", "env", "status"', hangup=signal.SIG_DFL):
    script = INTERRUPT_WHILE_IMPORTING.replace('"xtask", "env", "status"', argv)
    return run_python(script, env={"SIGNUM": str(int(signum))}, hangup=hangup)


@pytest.mark.parametrize("sig", INTERRUPTING, ids=lambda s: s.name)
def test_a_signal_while_the_cli_loads_is_an_interrupted_run(sig):
    proc = started(sig)
    assert proc.returncode == ExitCode.INTERRUPTED, proc.stderr
    assert proc.stderr == "interrupted\n"


def test_a_hangup_the_cli_was_started_ignoring_stays_ignored_while_it_loads():
    proc = started(signal.SIGHUP, argv='"xtask", "--version"', hangup=signal.SIG_IGN)  # as nohup starts it
    assert proc.returncode == 0, proc.stderr
    assert "interrupted" not in proc.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_drain_waiting_on_its_first_request_is_interrupted_not_killed(tmp_path: Path, sig):
    """The API server accepts the connection and never answers: the drain is still before its
    signal latch (asking who the caller is). SIGTERM or SIGHUP there: exit 8, nothing written."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        host, port = silent.getsockname()
        kubeconfig = tmp_path / "config"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": f"http://{host}:{port}"}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "x",
                }
            )
        )
        argv = [sys.executable, "-m", "xtask", "env", "provider-drain", "--kubeconfig", str(kubeconfig)]
        argv += ["--provider", "p-one", "--journal-dir", str(tmp_path / "journal")]
        cli = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
        )
        try:
            silent.settimeout(60)
            conn, _ = silent.accept()  # the CLI's first request is on its way: nothing answers it
            with conn:
                cli.send_signal(sig)
                out, err = cli.communicate(timeout=60)
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait()
    assert cli.returncode == ExitCode.INTERRUPTED, err  # before: killed by the signal (-15, -1)
    assert err.split() == ["aborted"], err  # as a Ctrl-C there says it (click's Abort), no traceback
    assert not list((tmp_path / "journal").glob("*"))  # no journal: nothing was begun


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
    proc = run_python(SIGNAL_IN_A_COMMAND.format(sig=sig))
    assert proc.returncode == ExitCode.INTERRUPTED, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "not interrupted" not in proc.stdout
