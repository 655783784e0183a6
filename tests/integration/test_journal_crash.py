"""The write-ahead journal against real crashes: ``kill -9`` of the real CLI at random points
of a 150-provider fan-out, a host crash that loses every unsynced outcome line, a torn last
line — each followed by ``drain-restore``
on the real API server, after which no provider may be left changed."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agn.kube import PROVIDERS
from agnprocs import wait_for
from kubetest import wait_crds_served
from reportschema import parse_report
from xtask.drain.core.changes import OUR_ANNOTATIONS
from xtask.drain.edges.journal import read_journal
from xtask.reports import DRAIN_RESTORE

pytestmark = pytest.mark.integration

FLEET = 150


@pytest.fixture
def fleet(kube, namespace) -> list[str]:
    names = [f"p{i:03d}" for i in range(FLEET)]
    for name in names:
        kube.create(
            PROVIDERS,
            namespace,
            {
                "apiVersion": "agn.dev/v1alpha1",
                "kind": "InferenceProvider",
                "metadata": {"name": name},
                "spec": {
                    "endpoint": f"http://127.0.0.1:9/{name}",
                    "providerGateway": "gw-fleet",
                    "selectionGroup": "chat",
                },
            },
        )
    return names


def drain_argv(control_plane, namespace: str, journal_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "xtask",
        "env",
        "provider-drain",
        "--context",
        control_plane.context,
        "--namespace",
        namespace,
        "--gateway",
        "gw-fleet",
        "--concurrency",
        "8",
        "--reason",
        "crash test",
        "--journal-dir",
        str(journal_dir),
    ]


def drain_to_completion(control_plane, namespace: str, journal_dir: Path) -> None:
    done = subprocess.run(
        drain_argv(control_plane, namespace, journal_dir),
        capture_output=True,
        text=True,
        env=control_plane.env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def restore(control_plane, journal: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "xtask", "env", "drain-restore", str(journal), *extra],
        capture_output=True,
        text=True,
        env=control_plane.env(),
        timeout=120,
    )


def changed(kube, namespace: str) -> list[str]:
    """Providers whose drain field or drain annotations are no longer as created."""
    items, _ = kube.list(PROVIDERS, namespace)
    out = []
    for p in items:
        annotations = p["metadata"].get("annotations") or {}
        if "drain" in (p["spec"].get("trafficPolicy") or {}) or any(k in annotations for k in OUR_ANNOTATIONS):
            out.append(p["metadata"]["name"])
    return sorted(out)


def count_lines(path: Path, kind: str) -> int:
    try:
        text = path.read_text()
    except OSError:
        return 0
    return text.count(f'"type":"{kind}"')


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_kill_9_at_a_random_point_then_restore_leaves_nothing_changed(
    control_plane, kube, namespace, fleet, tmp_path, seed
):
    rng = random.Random(seed)
    stop_after = rng.randint(1, FLEET - 30)  # intents recorded before the kill
    journal_dir = tmp_path / "journal"
    proc = subprocess.Popen(
        drain_argv(control_plane, namespace, journal_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=control_plane.env(),
    )
    try:
        journal = wait_for(
            lambda: next(iter(journal_dir.glob("drain-*.jsonl")), None),
            timeout=60,
            interval=0.005,
            what="the journal to be created",
        )
        wait_for(
            lambda: count_lines(journal, "intent") >= stop_after or proc.poll() is not None,
            timeout=60,
            interval=0.002,
            what=f"{stop_after} intents",
        )
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert 0 < len(changed(kube, namespace)) < FLEET, "killed part-way through the fan-out"
    if seed % 2 == 0:
        # A host crash loses what was never synced. Keep only the header and the intents (all of
        # which were synced before their PATCH was sent): every landed write is now unrecorded.
        lines = journal.read_text().splitlines(keepends=True)
        journal.write_text("".join(line for line in lines if '"type":"header"' in line or '"type":"intent"' in line))
        assert not any(e.write == "written" for e in read_journal(journal).entries.values())
    dry = restore(control_plane, journal, "--dry-run", "-o", "json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    would = {
        r["provider"]
        for r in parse_report(dry.stdout, DRAIN_RESTORE)["restorations"]
        if r["outcome"] == "would-restore"
    }
    assert would == set(changed(kube, namespace))  # the dry run decides as the real run will, and writes nothing
    result = restore(control_plane, journal)
    assert result.returncode == 0, result.stdout + result.stderr
    assert changed(kube, namespace) == []
    assert read_journal(journal).state == "restored"


def test_a_torn_last_line_still_restores(control_plane, kube, namespace, fleet, tmp_path):
    journal_dir = tmp_path / "journal"
    drain_to_completion(control_plane, namespace, journal_dir)
    assert len(changed(kube, namespace)) == FLEET
    (journal,) = journal_dir.glob("drain-*.jsonl")
    # Cut the file inside its last done line, as a crash in the middle of that append would.
    text = journal.read_text()
    last_done = text.rindex('{"type":"done"')
    journal.write_text(text[: last_done + 20])
    state = read_journal(journal)
    assert state.torn_tail
    result = restore(control_plane, journal)
    assert result.returncode == 0, result.stdout + result.stderr
    assert changed(kube, namespace) == []
    assert all(json.loads(line) for line in journal.read_text().splitlines())  # the torn record was dropped


def test_restore_dry_run_makes_the_real_runs_decisions_and_writes_nothing(
    control_plane, kube, namespace, fleet, tmp_path
):
    journal_dir = tmp_path / "journal"
    drain_to_completion(control_plane, namespace, journal_dir)
    (journal,) = journal_dir.glob("drain-*.jsonl")
    kube.merge_patch(PROVIDERS, namespace, "p001", {"spec": {"rank": 7}})  # another writer, after our drain
    before = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in kube.list(PROVIDERS, namespace)[0]}
    journal_bytes = journal.read_bytes()

    dry = restore(control_plane, journal, "--dry-run", "-o", "json")
    assert dry.returncode == 5, dry.stdout + dry.stderr
    decided = {r["provider"]: r["outcome"] for r in parse_report(dry.stdout, DRAIN_RESTORE)["restorations"]}
    assert decided["p001"] == "changed-by-another-writer"
    assert {o for n, o in decided.items() if n != "p001"} == {"would-restore"}
    assert {
        p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in kube.list(PROVIDERS, namespace)[0]
    } == before
    assert journal.read_bytes() == journal_bytes

    real = restore(control_plane, journal, "-o", "json")
    assert real.returncode == 5, real.stdout + real.stderr
    outcomes = {r["provider"]: r["outcome"] for r in parse_report(real.stdout, DRAIN_RESTORE)["restorations"]}
    assert outcomes == {n: ("restored" if o == "would-restore" else o) for n, o in decided.items()}
    assert changed(kube, namespace) == ["p001"]


def test_a_staging_file_left_by_a_killed_run_is_removed_by_the_next_run_which_says_so(
    control_plane, kube, namespace, tmp_path
):
    # A run killed while creating its journal leaves its hidden staging file, named after its
    # writer (boot, pid, start time). Killing the CLI at exactly that moment cannot be made
    # deterministic without sleeps, so the writer here is a real process, killed and reaped.
    wait_crds_served(kube, namespace)  # one provider is created at once: the CRDs may still be initializing
    spec = {"endpoint": "http://127.0.0.1:9/p000", "providerGateway": "gw-fleet", "selectionGroup": "chat"}
    kube.create(
        PROVIDERS,
        namespace,
        {"apiVersion": "agn.dev/v1alpha1", "kind": "InferenceProvider", "metadata": {"name": "p000"}, "spec": spec},
    )
    writer = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    stat = Path(f"/proc/{writer.pid}/stat").read_text()
    ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
    writer.kill()
    writer.wait()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:8]
    journal_dir = tmp_path / "journal"
    journal_dir.mkdir()
    left = journal_dir / f".drain-20261207T000000Z-dead00.{boot}-{writer.pid}-{ticks}.jsonl.new"
    left.write_text('{"type":"header","for')  # the header it was writing when it died
    done = subprocess.run(
        drain_argv(control_plane, namespace, journal_dir), capture_output=True, text=True, env=control_plane.env()
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"removed the stale staging file {left}: its writer (pid {writer.pid}) is no longer running" in done.stderr
    (journal,) = journal_dir.iterdir()  # the new run's journal, nothing staged left
    assert journal.name.startswith("drain-") and read_journal(journal).entries.keys() == {"p000"}
