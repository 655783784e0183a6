"""SIGTERM and SIGINT during ``env up`` (issue 22, "Signals during env up").

``env up`` runs as a user's shell or a CI job would run it, with its own state folder and
kubeconfig. The signal is sent the moment a given component has been spawned (its pid file
appears — no sleeps), i.e. during that component's readiness wait. Every process the run
started — seen in its pid files and as its children in ``/proc`` while it ran — must be gone
once it exits (exit 8, "interrupted"), and ``env down`` afterwards finds nothing to stop.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agnprocs import wait_for
from envcli import REPO, Cli
from reportschema import parse_report
from xtask.procs import ProcessRecord, is_alive, stop_pid
from xtask.reports import ENV_DOWN

pytestmark = pytest.mark.e2e


def _children(parent: int) -> list[ProcessRecord]:
    """The processes whose parent is ``parent``, with their start times (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        if int(fields[1]) == parent:
            comm = raw[raw.index("(") + 1 : raw.rindex(")")]
            out.append(ProcessRecord(comm, int(entry.name), int(fields[19]), [], ""))
    return out


class Seen(threading.Thread):
    """Every process a run started: from its pid files and its children, polled until stopped."""

    def __init__(self, parent: int, run_dir: Path) -> None:
        super().__init__(daemon=True)
        self.parent = parent
        self.run_dir = run_dir
        self.records: dict[tuple[int, int], ProcessRecord] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for rec in _children(self.parent):
                self.records.setdefault((rec.pid, rec.start_ticks), rec)
            for path in self.run_dir.glob("*.pid.json") if self.run_dir.exists() else ():
                rec = ProcessRecord.from_file(path)
                if rec is not None:  # named as the run names it
                    self.records[(rec.pid, rec.start_ticks)] = rec
            self.done.wait(0.01)

    def stop(self) -> list[ProcessRecord]:
        self.done.set()
        self.join(timeout=10)
        return list(self.records.values())


@pytest.mark.parametrize(
    ("signum", "component"),
    [
        (signal.SIGTERM, "etcd"),
        (signal.SIGTERM, "kube-apiserver"),
        (signal.SIGTERM, "fake-provider-two"),
        (signal.SIGTERM, "operator"),
        (signal.SIGTERM, "gateway-consumer-b"),
        (signal.SIGINT, "fake-provider-two"),
        (signal.SIGINT, "operator"),
        pytest.param(
            signal.SIGTERM,
            "prometheus",
            marks=pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed"),
        ),
    ],
    ids=lambda v: v.name if isinstance(v, signal.Signals) else v,
)
def test_signal_while_a_component_starts_rolls_back_everything(tmp_path, signum, component):
    cli = Cli(tmp_path)
    state = tmp_path / "state" / "envs" / "example"
    proc = subprocess.Popen(
        [sys.executable, "-m", "xtask", "env", "up", "--env", "example", "--runtime", "local"],
        cwd=REPO,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = Seen(proc.pid, state / "run")
    seen.start()
    started: list[ProcessRecord] = []
    try:
        wait_for(
            lambda: (state / "run" / f"{component}.pid.json").exists() or proc.poll() is not None,
            timeout=240,
            interval=0.01,
            what=f"env up to spawn {component}",
        )
        assert proc.poll() is None, f"env up ended before {component} was spawned: {proc.communicate()}"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        started = seen.stop()
        left = [rec for rec in started if is_alive(rec)]
        for rec in left:  # never leave a process of a failed run behind
            stop_pid(rec, grace=5)
    assert component in {rec.name for rec in started}
    assert [f"{rec.name} (pid {rec.pid})" for rec in left] == [], out + err
    assert proc.returncode == 8, out + err
    assert "interrupted" in err and "Traceback" not in err
    assert not state.exists()  # a fresh bring-up is rolled back whole
    down = cli("env", "down", "--output", "json")
    assert down.returncode == 0, down.stderr
    report = parse_report(down.stdout, ENV_DOWN)
    assert (report["stopped"], report["wasUp"]) == ([], False)
