"""Processes: the only module that starts subprocesses.

Two things live here:

- :class:`Supervisor` starts long-running processes (etcd, kube-apiserver, the operator,
  gateways, fake providers) detached from the CLI, records each in a pid file together
  with its kernel start time, and stops them *by pid*: SIGTERM, a grace period, then
  SIGKILL. The start time guards against signalling an unrelated process that reused a pid.
  Nothing here ever looks processes up by name.
- :class:`CmdRunner` runs short commands (docker, kind, kubectl, go) with list arguments
  and captured output (``tests/fakes.py`` has its test double).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from agn.outputfile import write_atomic
from xtask.errors import CommandFailed
from xtask.interrupts import deferred
from xtask.pids import pid_running, proc_stat
from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class ProcessRecord(Record):
    """What a pid file holds: enough to find, verify and stop one process."""

    name: str
    pid: int
    start_ticks: int
    argv: list[str]
    log: str

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_file(cls, path: Path) -> ProcessRecord | None:
        try:
            data = json.loads(path.read_text())
            known = {f.name for f in dataclasses.fields(cls)}
            return cls(**{k: v for k, v in data.items() if k in known})  # pid files of older versions too
        except (OSError, ValueError, TypeError):
            return None


def is_alive(record: ProcessRecord) -> bool:
    """True when the recorded process is running (not a zombie) and is the same process."""
    return pid_running(record.pid, record.start_ticks)


def log_tail(path: str | Path, *, lines: int = 30) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class Supervisor:
    """Starts and stops the detached processes of one environment, tracked by pid files in ``run_dir``."""

    def __init__(self, run_dir: Path, log_dir: Path) -> None:
        self.run_dir = run_dir
        self.log_dir = log_dir
        self._children: dict[int, subprocess.Popen] = {}
        # Exit statuses of children this supervisor started and stopped (tests read them).
        self.exit_codes: dict[str, int | None] = {}

    def pid_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid.json"

    def record(self, name: str) -> ProcessRecord | None:
        return ProcessRecord.from_file(self.pid_file(name))

    def records(self) -> list[ProcessRecord]:
        out = []
        for path in sorted(self.run_dir.glob("*.pid.json")):
            rec = ProcessRecord.from_file(path)
            if rec is not None:
                out.append(rec)
        return out

    def running(self, name: str) -> ProcessRecord | None:
        rec = self.record(name)
        return rec if rec is not None and is_alive(rec) else None

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> ProcessRecord:
        """Start ``argv`` detached (own session, stdin closed, output to ``<log_dir>/<name>.log``)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        # From the moment the process exists it is tracked: its pid file is written before a
        # signal (SIGINT/SIGTERM during `env up`) can interrupt, so rollback and `env down`
        # can always find and stop it.
        with deferred(), open(log_path, "ab") as log:
            log.write(f"\n--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting {name}: {' '.join(argv)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=str(cwd) if cwd else None,
                start_new_session=True,
            )
            self._children[proc.pid] = proc
            stat = proc_stat(proc.pid)
            rec = ProcessRecord(
                name=name, pid=proc.pid, start_ticks=stat[1] if stat else 0, argv=list(argv), log=str(log_path)
            )
            write_atomic(self.pid_file(name), rec.to_json())
        return rec

    def exited(self, rec: ProcessRecord) -> int | None:
        """The exit status if this supervisor started ``rec`` and it has exited, else None."""
        proc = self._children.get(rec.pid)
        return proc.poll() if proc is not None else None

    def stop(self, name: str, *, grace: float = 10.0) -> bool:
        """Stop one process by its pid file (TERM, grace, KILL) and remove the file.

        Returns True if a live process was stopped. Safe to call when nothing runs.
        """
        rec = self.record(name)
        stopped = False
        if rec is not None:
            child = self._children.pop(rec.pid, None)
            stopped = stop_pid(rec, grace=grace, reap=child)
            if child is not None:
                try:
                    self.exit_codes[name] = child.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.exit_codes[name] = None
        self.pid_file(name).unlink(missing_ok=True)
        return stopped


def stop_pid(rec: ProcessRecord, *, grace: float = 10.0, reap: subprocess.Popen | None = None) -> bool:
    """SIGTERM the recorded process, wait up to ``grace`` seconds, then SIGKILL. By pid only."""
    if not is_alive(rec):
        if reap is not None:
            reap.poll()
        return False
    try:
        os.kill(rec.pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if reap is not None:
            reap.poll()
        if not is_alive(rec):
            return True
        time.sleep(0.05)
    try:
        os.kill(rec.pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and is_alive(rec):
        if reap is not None:
            reap.poll()
        time.sleep(0.05)
    return True


# -- short commands ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class CommandResult(Record):
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


class CmdRunner(Protocol):
    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        timeout: float | None = None,
    ) -> CommandResult: ...


class RealCmdRunner:
    """Runs a command with list arguments (never a shell string) and captures its output."""

    def run_visible(self, argv: Sequence[str], *, timeout: float | None = None) -> None:
        """Run a long command whose progress the user should see: its output goes to our stderr."""
        try:
            proc = subprocess.run(list(argv), stdout=sys.stderr, stderr=sys.stderr, timeout=timeout)
        except FileNotFoundError as exc:
            raise CommandFailed(list(argv), 127, f"{argv[0]}: not found") from exc
        except subprocess.TimeoutExpired as exc:
            raise CommandFailed(list(argv), 124, f"timed out after {timeout}s") from exc
        if proc.returncode != 0:
            raise CommandFailed(list(argv), proc.returncode, "see the output above")

    def run_output(self, argv: Sequence[str], *, timeout: float | None = None) -> str:
        """Run a long command whose progress (its stderr) the user should see; returns its stdout."""
        try:
            proc = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=sys.stderr, text=True, timeout=timeout)
        except FileNotFoundError as exc:
            raise CommandFailed(list(argv), 127, f"{argv[0]}: not found") from exc
        except subprocess.TimeoutExpired as exc:
            raise CommandFailed(list(argv), 124, f"timed out after {timeout}s") from exc
        if proc.returncode != 0:
            raise CommandFailed(list(argv), proc.returncode, "see the output above")
        return proc.stdout

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        try:
            proc = subprocess.run(
                list(argv), capture_output=True, text=True, env=dict(env) if env else None, input=input, timeout=timeout
            )
        except FileNotFoundError as exc:
            raise CommandFailed(list(argv), 127, f"{argv[0]}: not found") from exc
        except subprocess.TimeoutExpired as exc:
            raise CommandFailed(list(argv), 124, f"timed out after {timeout}s") from exc
        result = CommandResult(list(argv), proc.returncode, proc.stdout, proc.stderr)
        if check and proc.returncode != 0:
            raise CommandFailed(list(argv), proc.returncode, (proc.stdout + proc.stderr)[-4000:])
        return result
