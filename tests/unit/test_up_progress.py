"""``env up``'s step progress, driven without a cluster: the step runner of every runtime
(:func:`xtask.runtime.steps.run_steps`) with the reporter ``env up`` picks (``step_progress``).

Off a terminal: the plain lines scripts and tests read, unchanged (``- TITLE``, ``- TITLE:
already done``), on stderr. On a pseudo-terminal: a spinner with the elapsed seconds while a step
runs, then ``✓ TITLE (1.2s)``, ``✓ TITLE (already done)`` or ``✗ TITLE (0.0s)``, on stderr too.
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from xtask.progress import StepReporter, step_reporter
from xtask.runtime.steps import Step, run_steps

REPO = Path(__file__).resolve().parents[2]

RUN = """
import time
from xtask.cli.env.up import step_progress
from xtask.runtime.steps import Step, run_steps

steps = [
    Step("start the thing", lambda ctx: time.sleep(1.3)),
    Step("write the context", lambda ctx: None, check=lambda ctx: True),
    Step("wait for <b>[red]consumers[/red]", lambda ctx: 1 / 0),
]
reporter = step_progress()
try:
    run_steps(steps, None, progress=reporter)
except ZeroDivisionError:
    pass
finally:
    reporter.close()
print("the result, on stdout")
"""
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM", "COLUMNS")}
    return {**env, "PYTHONPATH": str(REPO), "LANG": "C.UTF-8", **extra}


def test_off_a_terminal_the_plain_lines_on_stderr():
    out = subprocess.run([sys.executable, "-c", RUN], env=child_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "the result, on stdout\n"
    assert out.stderr.splitlines() == [
        "- start the thing",
        "- write the context: already done",
        "- wait for <b>[red]consumers[/red]",
    ]


def test_on_a_terminal_a_spinner_with_elapsed_time_then_a_tick_or_a_cross_per_step():
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=child_env(TERM="xterm-256color", COLUMNS="100"),
    )
    os.close(slave)
    shown = read_until_exit(master, proc)
    assert proc.stdout is not None and proc.stdout.read() == b"the result, on stdout\n"
    text = ANSI.sub("", shown.decode())
    assert re.search(r"✓ start the thing \(1\.\d+s\)", text), text
    assert "✓ write the context (already done)" in text
    assert re.search(r"✗ wait for <b>\[red\]consumers\[/red\] \(0\.\ds\)", text), text  # text, not markup
    # While the first step ran: a spinner frame, its title and the elapsed seconds, ticking.
    assert re.search(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] start the thing \(0s\)", text), text
    assert re.search(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] start the thing \(1s\)", text), text
    assert "- start the thing" not in text  # no plain lines on a terminal


def read_until_exit(master: int, proc: subprocess.Popen, timeout: float = 60) -> bytes:
    """Everything the child wrote to the terminal, until it exits."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        proc.wait(timeout=10)
    finally:
        os.close(master)
    return b"".join(chunks)


class Recording(StepReporter):
    def __init__(self) -> None:
        super().__init__(lambda message: self.events.append(("line", message)))
        self.events: list[tuple] = []

    def skipped(self, title: str) -> None:
        self.events.append(("skipped", title))

    def started(self, title: str) -> None:
        self.events.append(("started", title))

    def finished(self, title: str, seconds: float) -> None:
        self.events.append(("finished", title, seconds >= 0))

    def failed(self, title: str, seconds: float) -> None:
        self.events.append(("failed", title, seconds >= 0))


def test_the_runner_tells_a_reporter_where_each_step_starts_and_ends_and_rollback_lines():
    def boom(ctx):
        raise RuntimeError("no")

    def bad_undo(ctx):
        raise OSError("undo failed")

    report = Recording()
    steps = [
        Step("one", lambda ctx: None, undo=bad_undo),
        Step("two", lambda ctx: None, check=lambda ctx: True),
        Step("three", boom),
    ]
    try:
        run_steps(steps, None, progress=report)  # type: ignore[arg-type]
    except RuntimeError:
        pass
    assert report.events == [
        ("started", "one"),
        ("finished", "one", True),
        ("skipped", "two"),
        ("started", "three"),
        ("failed", "three", True),
        ("line", "rollback of 'one' failed: undo failed"),
    ]


def test_a_plain_progress_callable_is_its_own_lines():
    lines: list[str] = []
    reporter = step_reporter(lines.append)
    reporter.started("a")
    reporter.finished("a", 1.0)
    reporter.skipped("b")
    reporter("c")
    assert lines == ["a", "b: already done", "c"]
    assert step_reporter(reporter) is reporter
