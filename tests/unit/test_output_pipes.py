"""A reader that goes away (``xtask env down 2>&1 | head -1``) must not stop the work half-way:
progress lines are best effort, and a result that cannot be delivered is a quiet exit 1, not a
traceback."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from envcli import REPO
from xtask.cli import output


class _Gone(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_progress_to_a_reader_that_went_away_does_not_raise(monkeypatch):
    monkeypatch.setattr(sys, "stderr", _Gone())
    monkeypatch.setenv("NO_COLOR", "1")
    output.progress("stop operator (pid 1)")  # would raise BrokenPipeError mid-teardown before


def test_a_result_nobody_reads_is_a_quiet_error(tmp_path):
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the CLI writes its result
    env = {**os.environ, "AGN_XTASK_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "xtask", "env", "status", "--env", "example", "-o", "json"],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
    )
    os.close(write)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
