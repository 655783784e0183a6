"""Terminal escapes and rich markup in data: every echoed value is shown escaped.

Input reaches the terminal from flags, file paths, journals and objects in the cluster. ESC
(and every other control character) must be shown as ``\\x1b``, never sent raw, and text like
``[/]`` or ``[link=file:///etc/passwd]x`` in a value must be shown as it is, never interpreted
as rich markup. Each row runs the real CLI as a subprocess (objects in the session's real
control plane, each test in its own namespace); the unit rows at the end pin the helper.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS, KubeError
from envcli import Cli

API = "agn.dev/v1alpha1"
ESC = "\x1b[31mred\x1b]8;;file:///etc/passwd\x07x\x1b[0m"
MARKUP = ["[/]", "[link=file:///etc/passwd]x", "[bold red]loud"]


def shown(proc: subprocess.CompletedProcess) -> str:
    """The output, once it is clear of raw control characters and tracebacks."""
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output
    raw = sorted({hex(ord(ch)) for ch in output if not ch.isprintable() and ch not in "\n\t"})
    assert not raw, f"raw control characters {raw} in: {output!r}"
    return output


@pytest.mark.e2e
@pytest.mark.parametrize("value", [ESC, *MARKUP], ids=["esc", "close-tag", "link", "style"])
@pytest.mark.parametrize("command", ["status", "down", "up", "render"])
def test_env_flag(tmp_path: Path, command: str, value: str):
    proc = Cli(tmp_path)("env", command, "--env", value)
    output = shown(proc)
    assert proc.returncode == 2, output
    assert "is not a valid environment name" in output
    assert repr(value)[:40] in output  # shown as it is, escaped
    assert not (tmp_path / "state").exists()


@pytest.fixture
def world(control_plane, namespace: str, kube, tmp_path: Path):
    """Providers whose selectionGroup carries an escape or markup, and a kubeconfig whose
    context points at the test's namespace."""
    for i, group in enumerate([ESC, *MARKUP]):
        kube.create(
            PROVIDERS,
            namespace,
            {
                "apiVersion": API,
                "kind": "InferenceProvider",
                "metadata": {"name": f"p-{i}"},
                "spec": {"endpoint": f"http://127.0.0.1:9/p{i}", "selectionGroup": group, "rank": 0},
            },
        )
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    for c in config["contexts"]:
        if c["name"] == control_plane.context:
            c["context"]["namespace"] = namespace
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    readable(kube, namespace)
    return namespace


def readable(kube, namespace: str, *, timeout: float = 60.0) -> None:
    """Wait until every AGN resource can be listed: right after the CRDs are Established the
    API server may still answer "storage is (re)initializing", which `env status` would show."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            for res in (PROVIDERS, NETWORKS, CONSUMERS, OVERLAYS):
                kube.list(res, namespace)
            return
        except KubeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.e2e
def test_namespace_flag(world: str, tmp_path: Path):
    proc = Cli(tmp_path)("env", "provider-drain", "--provider", "p-0", "--namespace", "\x1b[31mns")
    output = shown(proc)
    assert proc.returncode == 2, output
    assert "'\\x1b[31mns' is not a valid namespace" in output


def _journal(namespace: str, provider: str) -> str:
    head = {
        "type": "header",
        "format": "agn.dev/drain-journal/v2",
        "operation": "op-esc",
        "context": "local-tests",
        "namespace": namespace,
        "request": "drain",
        "reason": None,
        "startedAt": "2026-12-01T00:00:00Z",
        "plan": [{"provider": provider, "previous": None, "resourceVersion": "1", "generation": 1}],
    }
    rest = [
        {"type": "intent", "provider": provider, "resourceVersion": "1", "generation": 1},
        {"type": "done", "provider": provider, "generation": 2},
    ]
    return "".join(json.dumps(rec) + "\n" for rec in [head, *rest])


@pytest.mark.e2e
@pytest.mark.parametrize("dry_run", [False, True], ids=["restore", "dry-run"])
@pytest.mark.parametrize("provider", [ESC, "p-[/]"], ids=["esc", "markup"])
def test_journal_provider_names(world: str, tmp_path: Path, provider: str, dry_run: bool):
    journal = tmp_path / "j.jsonl"
    journal.write_text(_journal(world, provider))
    before = journal.read_bytes()
    proc = Cli(tmp_path)("env", "drain-restore", str(journal), *(["--dry-run"] if dry_run else []))
    output = shown(proc)
    assert proc.returncode == 1, output
    assert f"names provider {repr(provider)[:30]}" in output
    assert journal.read_bytes() == before


@pytest.mark.e2e
def test_paths_in_error_messages(tmp_path: Path):
    """The error printer escapes the whole message: here a path (quoted raw by the message)."""
    journal = tmp_path / "j\x1b[2Jsonl"
    journal.write_text("not a journal\n")
    proc = Cli(tmp_path)("env", "drain-restore", str(journal))
    output = shown(proc)
    assert proc.returncode == 1, output
    assert "j\\x1b[2Jsonl: not a drain journal" in output


def _recorded_env(tmp_path: Path, control_plane, namespace: str) -> None:
    """An env `esc` as `env up` records it, pointing at the test control plane and namespace."""
    folder = tmp_path / "state" / "envs" / "esc"
    folder.mkdir(parents=True)
    (folder / ".agn-xtask-env").write_text("esc\n")
    (folder / "env.json").write_text(
        json.dumps(
            {
                "env": "esc",
                "runtime": "local",
                "context": control_plane.context,
                "kubeconfig": str(control_plane.kubeconfig),
                "namespace": namespace,
            }
        )
    )


@pytest.mark.e2e
def test_env_status_shows_selection_groups_escaped(world: str, control_plane, tmp_path: Path):
    _recorded_env(tmp_path, control_plane, world)
    proc = Cli(tmp_path)("env", "status", "--env", "esc", "-o", "wide")  # wide: the selection group's column
    output = shown(proc)
    assert proc.returncode == 0, output
    assert "\\x1b[31mred" in output  # the table may wrap a long cell; its start is on one line


@pytest.mark.e2e
@pytest.mark.parametrize("markup", MARKUP, ids=["close-tag", "link", "style"])
def test_env_status_shows_markup_as_text(world: str, control_plane, kube, tmp_path: Path, markup: str):
    _recorded_env(tmp_path, control_plane, world)
    for p in kube.list(PROVIDERS, world)[0]:
        if p["spec"]["selectionGroup"] != markup:
            kube.delete(PROVIDERS, world, p["metadata"]["name"])
    proc = Cli(tmp_path)("env", "status", "--env", "esc", "-o", "wide")
    output = shown(proc)
    assert proc.returncode == 0, output
    assert markup in output


# -- the one helper -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("\x1b[31mx", "\\x1b[31mx"),
        ("a\rb", "a\\rb"),
        ("a\nb", "a\\nb"),
        ("c1\x85\x9b", "c1\\x85\\x9b"),
        ("bidi\u202eevil", "bidi\\u202eevil"),
        ("del\x7f", "del\\x7f"),
        ("plain é ü 名前", "plain é ü 名前"),
    ],
)
def test_printable(value: str, expected: str):
    from xtask.cli.output import printable

    assert printable(value) == expected


def test_printable_lines_keeps_line_breaks_only():
    from xtask.cli.output import printable_lines

    assert printable_lines("one\n\ttwo\x1b[0m\r") == "one\n\ttwo\\x1b[0m\\r"


@pytest.mark.parametrize("value", [*MARKUP, ":smile:", "\x1b[31m[/]"])
def test_markup_safe_renders_as_the_text_itself(value: str):
    from rich.console import Console

    from xtask.cli.output import markup_safe, printable

    console = Console(record=True, width=200, emoji=False, highlight=False, no_color=True)
    console.print(f"[bold]{markup_safe(value)}[/bold]")
    assert console.export_text().rstrip("\n") == printable(value)


def _recording_console():
    from rich.console import Console

    return Console(record=True, width=200, emoji=False, highlight=False, no_color=True)


def test_live_drain_view_shows_values_as_text():
    """The rich view of a drain (used on a terminal only, so not reachable from a subprocess
    test): names, errors and states from the cluster are text in lines, spinners and tables."""
    from xtask.cli.env.drain_live import RichReporter, render_final
    from xtask.drain.core.progress import Observed, Planned, Said, WaitBegun, WriteFinished, WriteStarted
    from xtask.drain.core.states import Outcome, WriteOutcome
    from xtask.drain.report import Report

    console = _recording_console()
    reporter = RichReporter(console)
    reporter(Said(f"selection (providerGateway {ESC}, namespace ns): p-[/]"))
    reporter(Planned("p-[/]", current=False, requested=True, already=False, drain_after=True))
    reporter(WriteStarted("p-[/]"))
    reporter(WriteFinished(Outcome("p-[/]", WriteOutcome.FAILED, error=f"[link=file:///etc/passwd]x {ESC}")))
    reporter(WaitBegun("waiting for c-[/] to serve the change"))
    reporter(Observed("[/]", (f"[bold]c {ESC}",)))
    reporter.close()
    report = Report("ctx", "ns", "drain", "provider p-[/]", False)
    report.outcomes = [{"provider": "p-[/]", "outcome": "failed", "error": ESC}]
    render_final(report, console)
    text = console.export_text()
    assert "\x1b" not in text and "\x07" not in text
    assert "p-[/]: failed: [link=file:///etc/passwd]x \\x1b[31mred" in text
    assert "[bold]c \\x1b[31mred" in text


def test_env_status_table_shows_values_as_text():
    from xtask.cli.env.status import render_table

    console = _recording_console()
    data = {
        "env": "esc",
        "state": "degraded",
        "runtime": "local",
        "context": f"ctx {ESC}",
        "kubeconfig": "/tmp/[/]kc",
        "namespace": "ns",
        "components": [{"name": "[/]", "pid": 1, "running": False, "healthy": False, "detail": ESC}],
        "objects": {
            "networks": [],
            "providers": [
                {
                    "name": "p-[/]",
                    "providerGateway": "[link=file:///etc/passwd]x",
                    "drain": True,
                    "drainReason": ESC,
                    "available": "True",
                    "selectionGroup": "[bold red]loud",
                    "rank": 0,
                    "endpoint": "http://h/[/]",
                }
            ],
            "consumers": [
                {
                    "name": "c-[/]",
                    "overlayRevision": 1,
                    "acceptedRevision": 1,
                    "servingRevision": 1,
                    "candidates": {"p-[/]": "admitted"},
                    "overlayPending": f"[/] {ESC}",
                }
            ],
        },
    }
    render_table(data, console, wide=True)  # every column
    text = console.export_text()
    assert "\x1b" not in text
    for value in ("/tmp/[/]kc", "ctx \\x1b[31mred", "[link=file:///etc/passwd]x", "[bold red]loud", "c-[/]:"):
        assert value in text, value
