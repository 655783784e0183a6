"""A small AGN environment inside one test namespace, and a runner for the real CLI.

Four providers in two provider gateways with mixed selection groups (like envs/example),
one network, two consumers, the real operator and two real consumer gateways, all as
processes tracked by pid. The CLI runs as ``python -m xtask`` in a subprocess, as a user would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

from agn.kube import CONSUMERS, NETWORKS, PROVIDERS, Kube
from agn.overlays import read_overlay
from agn.shards import Incomplete
from agnprocs import AgnProcesses, http_json, wait_for
from reportschema import parse_report
from xtask.drain.edges.journal import read_journal

LAYOUT = {  # name: (gateway, group, rank)
    "p-one": ("gw-a", "chat", 0),
    "p-two": ("gw-a", "embed", 0),
    "p-three": ("gw-b", "chat", 1),
    "p-four": ("gw-b", "embed", 1),
}
CONSUMER_NAMES = ("c-a", "c-b")


def default_hangup() -> None:
    """In a CLI the tests signal: SIGHUP as a terminal session starts it (default), even when the
    suite itself runs under ``nohup`` (children inherit an ignored SIGHUP, which the CLI keeps)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def ignore_hangup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


class DrainEnv:
    def __init__(self, kube: Kube, namespace: str, agn: AgnProcesses, control_plane, tmp: Path) -> None:
        self.kube = kube
        self.ns = namespace
        self.agn = agn
        self.cp = control_plane
        self.tmp = tmp
        self.urls: dict[str, str] = {}
        self.gateways: dict[str, str] = {}  # consumer -> the gateway's base URL
        self.operator_url = ""  # the operator's /healthz and /metrics
        self.journal_dir = tmp / "journal"

    def up(
        self, *, providers: dict | None = None, operator_args: tuple[str, ...] = (), formats: dict | None = None
    ) -> DrainEnv:
        """Create the objects and start every process; ``formats``: provider -> the exposition
        its fake serves (``--metrics-format``; unnamed ones serve AGN's own)."""
        layout = providers or LAYOUT
        self.kube.create(
            NETWORKS,
            self.ns,
            {
                "apiVersion": "agn.dev/v1alpha1",
                "kind": "InferenceNetwork",
                "metadata": {"name": "net"},
                "spec": {"providerSelector": {"matchLabels": {"net": "yes"}}, "metricsMaxAgeSeconds": 45},
            },
        )
        for c in CONSUMER_NAMES:
            self.kube.create(
                CONSUMERS,
                self.ns,
                {
                    "apiVersion": "agn.dev/v1alpha1",
                    "kind": "InferenceConsumer",
                    "metadata": {"name": c},
                    "spec": {"network": "net"},
                },
            )
        for name, (gw, group, rank) in layout.items():
            self.urls[name] = self.agn.provider(name, metrics_format=(formats or {}).get(name))
            self.add_provider(name, gw, group, rank, self.urls[name])
        self.operator_url = self.agn.operator_with_health(*operator_args)
        for c in CONSUMER_NAMES:
            self.gateways[c] = self.agn.gateway(c)
        wait_for(
            lambda: all(self.serving_all_admitted(c, len(layout)) for c in CONSUMER_NAMES),
            timeout=60,
            what="both consumers serving an overlay with every provider admitted",
        )
        return self

    def add_provider(self, name: str, gw: str, group: str, rank: int, url: str, *, labels: dict | None = None) -> None:
        self.kube.create(
            PROVIDERS,
            self.ns,
            {
                "apiVersion": "agn.dev/v1alpha1",
                "kind": "InferenceProvider",
                "metadata": {"name": name, "labels": {"net": "yes", **(labels or {})}},
                "spec": {"endpoint": url, "providerGateway": gw, "selectionGroup": group, "rank": rank},
            },
        )

    # -- observations -----------------------------------------------------------------------
    def provider(self, name: str) -> dict:
        return self.kube.get(PROVIDERS, self.ns, name)

    def drain_value(self, name: str):
        return ((self.provider(name).get("spec") or {}).get("trafficPolicy") or {}).get("drain")

    def overlay(self, consumer: str) -> dict | None:
        """The consumer's whole overlay spec (index plus shards, or an inline one), None if none.

        Raises :class:`agn.shards.Incomplete` if its shards never matched its index."""
        return read_overlay(self.kube, self.ns, consumer)

    def states(self, consumer: str) -> dict[str, str]:
        overlay = self.overlay(consumer) or {"candidates": []}
        return {c["provider"]: c["admission_state"] for c in overlay["candidates"]}

    def revisions(self, consumer: str) -> tuple:
        status = self.kube.get(CONSUMERS, self.ns, consumer).get("status") or {}
        return status.get("acceptedRevision"), status.get("servingRevision")

    def serving_all_admitted(self, consumer: str, count: int) -> bool:
        try:
            overlay = self.overlay(consumer)
        except Incomplete:
            return False  # between two of the operator's writes: not yet
        if not overlay:
            return False
        states = {c["provider"]: c["admission_state"] for c in overlay["candidates"]}
        return (
            len(states) == count
            and set(states.values()) == {"admitted"}
            and self.revisions(consumer) == (overlay["revision"], overlay["revision"])
        )

    def set_health(self, provider: str, healthy: bool) -> None:
        http_json(f"{self.urls[provider]}/admin/state", method="POST", body={"healthy": healthy})

    # -- the CLI ------------------------------------------------------------------------------
    def argv(self, *args: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "xtask",
            "env",
            "provider-drain",
            "--context",
            self.cp.context,
            "--namespace",
            self.ns,
            "--journal-dir",
            str(self.journal_dir),
            *args,
        ]

    def env(self) -> dict[str, str]:
        env = self.cp.env()
        env["NO_COLOR"] = "1"
        return env

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*args), capture_output=True, text=True, env=self.env(), timeout=timeout)

    def restore(self, journal: Path | str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """``xtask env drain-restore JOURNAL ARGS`` as a user runs it (the journal names the context)."""
        argv = [sys.executable, "-m", "xtask", "env", "drain-restore", str(journal), *args]
        return subprocess.run(argv, capture_output=True, text=True, env=self.env(), timeout=timeout)

    def run_json(self, *args: str, timeout: float = 120) -> tuple[int, dict]:
        proc = self.run(*args, "--output", "json", timeout=timeout)
        try:
            return proc.returncode, parse_report(proc.stdout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n(exit {proc.returncode}; stderr: {proc.stderr[-2000:]!r})") from exc

    def targets(self) -> list[str]:
        return ["--network", "net", *sum((["--consumer", c] for c in CONSUMER_NAMES), [])]

    def spawn(self, *args: str, nohup: bool = False) -> Running:
        """The CLI running; ``nohup``: started with SIGHUP ignored, as ``nohup`` starts it."""
        return Running(
            subprocess.Popen(
                self.argv(*args),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=self.env(),
                preexec_fn=ignore_hangup if nohup else default_hangup,
            )
        )

    def journal_paths(self) -> list[Path]:
        return sorted(self.journal_dir.glob("drain-*.jsonl")) if self.journal_dir.exists() else []

    def journals(self) -> list[dict]:
        """Each journal replayed into its summary (state, and per provider write/written/restored)."""
        return [read_journal(p).to_dict() for p in self.journal_paths()]


class Running:
    """A CLI process whose output is collected line by line while it runs."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def signal(self, sig: int = signal.SIGINT) -> None:
        os.kill(self.proc.pid, sig)

    def wait(self, timeout: float = 60) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code


def complete(
    gateway: str, *, session: str, group: str = "chat", max_tokens: int | None = None, timeout: float = 10
) -> tuple[int, str | None]:
    """One completion through ``gateway`` in a sticky session: its status and the provider that
    served it (``x-agn-provider``); a refused connection is status 0. ``max_tokens`` is sent
    when given (a real engine generates that many at most)."""
    body: dict[str, object] = {"prompt": "hi"}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    headers = {"Content-Type": "application/json", "x-session-id": session, "x-selection-group": group}
    data = json.dumps(body).encode()
    req = urllib.request.Request(f"{gateway}/v1/completions", data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            json.loads(resp.read())
            return resp.status, resp.headers.get("x-agn-provider")
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except OSError:
        return 0, None
