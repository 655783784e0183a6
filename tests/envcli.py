"""The real CLI as a user runs it, as a subprocess, with its own state folder, kubeconfig and
journal folder (shared by the e2e and faults suites)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from reportschema import parse_report
from xtask.reports import ENV_STATUS

REPO = Path(__file__).resolve().parents[1]


def run_xtask(*args: str, env: dict[str, str], timeout: float, preexec_fn=None) -> subprocess.CompletedProcess:
    """``python -m xtask ARGS`` from the repo, as a user runs it: ``env`` over this process's
    environment, no colour, text output captured; ``timeout`` guards against a hang."""
    return subprocess.run(
        [sys.executable, "-m", "xtask", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", **env},
        timeout=timeout,
        preexec_fn=preexec_fn,
    )


def run_python(script: str, *, env: dict[str, str] | None = None, hangup=signal.SIG_DFL) -> subprocess.CompletedProcess:
    """``python -c SCRIPT`` from the repo, output captured: the scaffold of the signal tests.
    ``hangup`` is SIGHUP's disposition at start: ``SIG_DFL`` as a terminal session starts a
    command, ``SIG_IGN`` as ``nohup`` does."""
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, hangup),
    )


class Cli:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = dict(os.environ)
        self.env.update(
            {
                "AGN_XTASK_HOME": str(home / "state"),
                "KUBECONFIG": str(home / "kubeconfig"),
                "AGN_XTASK_JOURNAL_DIR": str(home / "journal"),
                "NO_COLOR": "1",
                "PYTHONPATH": str(REPO),
            }
        )

    def __call__(self, *args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "xtask", *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**self.env, **(env or {})},
            timeout=timeout,
        )

    def status(self) -> dict:
        proc = self("env", "status", "--output", "json")
        assert proc.returncode == 0, proc.stderr
        return parse_report(proc.stdout, ENV_STATUS)
