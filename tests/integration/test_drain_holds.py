"""Drain holders on the real API server, through the real CLI: two holders on one provider, two
holders from two terminals at once on a 50-provider gateway, ``--release-all``, restoring a
holder's run, and ``env drains`` (text, JSON, ``--expired``).

A hold belongs to the caller's Kubernetes identity, so each holder here is a real identity: a
client certificate from the control plane's CA (``tests/identities.py``), its username the same
as its ``--holder``; the admission policy ``agn-drain-holds`` is installed (``install_crds``)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from identities import grant, users_kubeconfig

from agn.kube import PROVIDERS, Invalid
from agnprocs import wait_for
from kubetest import denying_updates, events, wait_crds_served
from reportschema import parse_report
from xtask.drain.core.holds import HOLD_PREFIX, hold_key, holds_of
from xtask.reports import ENV_DRAINS, PROVIDER_DRAIN

pytestmark = pytest.mark.integration

FLEET = 50
A, B, C = "ann@host-a", "bob@host-b", "carol@host-c"


class Cli:
    def __init__(self, control_plane, namespace: str, tmp: Path, kubeconfig: Path | None = None) -> None:
        self.cp, self.ns, self.journal_dir = control_plane, namespace, tmp / "journal"
        self.kubeconfig = kubeconfig or control_plane.kubeconfig

    def drain_argv(self, holder: str, *args: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "xtask",
            "env",
            "provider-drain",
            "--context",
            holder if self.kubeconfig != self.cp.kubeconfig else self.cp.context,
            "--namespace",
            self.ns,
            "--journal-dir",
            str(self.journal_dir),
            "--holder",
            holder,
            *args,
        ]

    def env(self) -> dict[str, str]:
        env = self.cp.env()
        env["NO_COLOR"] = "1"
        env["KUBECONFIG"] = str(self.kubeconfig)
        return env

    def run(self, argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, env=self.env(), timeout=120)

    def drain(self, holder: str, *args: str) -> subprocess.CompletedProcess:
        return self.run(self.drain_argv(holder, *args))

    def drain_json(self, holder: str, *args: str) -> tuple[int, dict]:
        proc = self.drain(holder, *args, "--output", "json")
        return proc.returncode, parse_report(proc.stdout, PROVIDER_DRAIN)

    def drains(self, *args: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "xtask", "env", "drains", "--context", self.cp.context, "-n", self.ns, *args]
        return self.run(argv)

    def restore(self, journal: Path) -> subprocess.CompletedProcess:
        return self.run([sys.executable, "-m", "xtask", "env", "drain-restore", str(journal)])


HOLDERS = [A, B, C, "ops"]


@pytest.fixture
def cli(control_plane, kube, namespace, tmp_path) -> Cli:
    """The CLI run as the identity named by the holder (A, B and ops may drain; C may also
    release any hold); ``drains`` and ``drain-restore`` run as the admin."""
    wait_crds_served(kube, namespace)  # the first drain of a session otherwise met "storage is (re)initializing"
    path = users_kubeconfig(control_plane, HOLDERS, tmp_path / "identities", namespace=namespace)
    grant(kube, namespace, drainers=[A, B, "ops"], releasers=[C])
    return Cli(control_plane, namespace, tmp_path, path)


@pytest.fixture
def fleet(kube, namespace) -> list[str]:
    names = [f"p{i:03d}" for i in range(FLEET)]
    for name in [*names, "other"]:
        kube.create(
            PROVIDERS,
            namespace,
            {
                "apiVersion": "agn.dev/v1alpha1",
                "kind": "InferenceProvider",
                "metadata": {"name": name},
                "spec": {
                    "endpoint": f"http://127.0.0.1:9/{name}",
                    "providerGateway": "gw-other" if name == "other" else "gw-fleet",
                    "selectionGroup": "chat",
                },
            },
        )
    return names


def state(kube, namespace: str, name: str) -> tuple[bool | None, list[str | None]]:
    obj = kube.get(PROVIDERS, namespace, name)
    return ((obj["spec"].get("trafficPolicy") or {}).get("drain"), [h["holder"] for h in holds_of(obj)])


def test_holder_a_undrain_leaves_it_drained_for_holder_b(cli, kube, namespace, fleet):
    code, report = cli.drain_json(
        A, "--provider", "p000", "--reason", "kernel", "--ticket", "CHG-1", "--expires-in", "2h"
    )
    assert code == 0, report["summary"]
    assert report["holder"] == A
    (hold,) = holds_of(kube.get(PROVIDERS, namespace, "p000"))
    assert (hold["holder"], hold["reason"], hold["ticket"], hold["operation"]) == (
        A,
        "kernel",
        "CHG-1",
        report["operation"],
    )
    assert hold["expiresAt"] > hold["since"]

    code, report = cli.drain_json(B, "--provider", "p000", "--reason", "rack move")
    assert code == 0 and report["plan"][0]["holders"] == [A] and report["plan"][0]["drainAfter"] is True
    assert state(kube, namespace, "p000") == (True, [A, B])

    # The same holder again: nothing changes, nothing fails.
    rv = kube.get(PROVIDERS, namespace, "p000")["metadata"]["resourceVersion"]
    code, report = cli.drain_json(B, "--provider", "p000")
    assert code == 0 and {o["outcome"] for o in report["outcomes"]} == {"unchanged"}
    assert kube.get(PROVIDERS, namespace, "p000")["metadata"]["resourceVersion"] == rv

    proc = cli.drain(A, "--provider", "p000", "--undrain")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"p000 stays drained: still held by {B}" in proc.stdout
    assert state(kube, namespace, "p000") == (True, [B])

    # A holds nothing now and B does: refused before writing (exit 3), naming B; still drained.
    rv = kube.get(PROVIDERS, namespace, "p000")["metadata"]["resourceVersion"]
    code, report = cli.drain_json(A, "--provider", "p000", "--undrain")
    assert code == 3 and len(report["refused"]) == 1 and f"held by {B}, not by you" in report["refused"][0]
    assert kube.get(PROVIDERS, namespace, "p000")["metadata"]["resourceVersion"] == rv

    code, report = cli.drain_json(B, "--provider", "p000", "--undrain")
    assert code == 0 and report["stillHeld"] == {}
    assert state(kube, namespace, "p000") == (False, [])
    # The Events tell a write of the flag from a write of one hold.
    drained = [e["note"] for e in events(kube, namespace, regarding="p000", reason="ProviderDrained")]
    undrained = [e["note"] for e in events(kube, namespace, regarding="p000", reason="ProviderUndrained")]
    assert len(drained) == 2 and drained[0].startswith("drained; reason: kernel")
    assert drained[1].startswith(f"drained: hold of {B} added; already drained")
    assert len(undrained) == 2 and undrained[0].startswith(f"undrained: hold of {A} released; still drained")
    assert undrained[1].startswith("undrained; operation")


def replanned(journal: Path) -> int:
    """Intents a 409 made the run plan again (they carry the re-read previous value)."""
    lines = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    return sum(1 for rec in lines if rec["type"] == "intent" and "previous" in rec)


def test_two_holders_from_two_terminals_at_once_keep_both_holds(cli, kube, namespace, fleet, tmp_path):
    """A and B on the same 50 providers at once. A writes paced (--qps); B is started as soon as A
    has planned and is about to write, so B plans from providers A has not written yet and its
    conditional patches meet A's writes: 409, re-read, plan again. No hold may be lost, and the
    last holder's undrain must clear the drain."""

    def both(*args: str) -> None:
        journals = tmp_path / "journal"
        seen = set(journals.glob("drain-*.jsonl")) if journals.exists() else set()
        procs = []
        try:
            for who in (A, B):
                procs.append(
                    subprocess.Popen(
                        cli.drain_argv(who, "--gateway", "gw-fleet", "--qps", "5", *args, "--output", "json"),
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                        env=cli.env(),
                    )
                )
                if who == A:
                    wait_for(
                        lambda: set(journals.glob("drain-*.jsonl")) - seen if journals.exists() else None,
                        timeout=60,
                        what="A's journal (A planned, about to write)",
                    )
            outputs = [p.communicate(timeout=120) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        assert [p.returncode for p in procs] == [0, 0], outputs
        b_report = parse_report(outputs[1][0], PROVIDER_DRAIN)
        assert replanned(Path(b_report["journal"])) > 0  # the two runs did meet on some providers

    both("--reason", "parallel")
    for name in fleet:
        assert state(kube, namespace, name) == (True, [A, B]), name
    assert state(kube, namespace, "other") == (None, [])

    both("--undrain")
    for name in fleet:
        assert state(kube, namespace, name) == (False, []), name


def test_release_all_removes_every_hold_and_clears(cli, kube, namespace, fleet):
    for who in (A, B):
        assert cli.drain(who, "--provider", "p001").returncode == 0
    proc = cli.drain(C, "--provider", "p001", "--release-all")
    assert proc.returncode == 2 and "--release-all removes every holder's hold on --undrain" in proc.stderr
    code, report = cli.drain_json(C, "--provider", "p001", "--undrain", "--release-all")
    assert code == 0 and report["stillHeld"] == {}
    assert state(kube, namespace, "p001") == (False, [])
    obj = kube.get(PROVIDERS, namespace, "p001")
    assert not [k for k in obj["metadata"].get("annotations") or {} if k.startswith(HOLD_PREFIX)]


def test_restoring_a_holders_run_undoes_only_its_hold(cli, kube, namespace, fleet):
    code, first = cli.drain_json(A, "--provider", "p002")
    assert code == 0
    code, second = cli.drain_json(B, "--provider", "p002")
    assert code == 0
    # B's run added only its hold: restoring it removes that hold and keeps A's drain.
    proc = cli.restore(Path(second["journal"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert state(kube, namespace, "p002") == (True, [A])
    # A's run set the flag; once C holds it too, restoring A's run removes A's hold, not C's drain.
    assert cli.drain(C, "--provider", "p002").returncode == 0
    proc = cli.restore(Path(first["journal"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert state(kube, namespace, "p002") == (True, [C])


def test_env_drains_lists_holders_and_expired_holds(cli, kube, namespace, fleet):
    assert cli.drain(A, "--provider", "p003", "--reason", "disk", "--ticket", "T-9").returncode == 0
    ops = cli.drain_argv("ops", "--provider", "p003", "--reason", "x\x1b[2Jy")
    ops[ops.index("--holder") + 1] = "[bold]ops[/bold]"  # identity ops, a hostile display name
    assert cli.run(ops).returncode == 0
    # A drain by hand (no holds), and a hold someone wrote that expired an hour ago.
    kube.merge_patch(PROVIDERS, namespace, "p004", {"spec": {"trafficPolicy": {"drain": True}}})
    stale = {
        "holder": C,
        "reason": "old",
        "ticket": None,
        "since": "2020-01-01T00:00:00Z",
        "expiresAt": "2020-01-01T01:00:00Z",
        "operation": "op-old",
    }
    kube.merge_patch(
        PROVIDERS,
        namespace,
        "p005",
        {
            "metadata": {"annotations": {hold_key(C): json.dumps(stale)}},
            "spec": {"trafficPolicy": {"drain": True}},
        },
    )
    before = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in kube.list(PROVIDERS, namespace)[0]}

    proc = cli.drains("-o", "json")
    assert proc.returncode == 0, proc.stderr
    report = parse_report(proc.stdout, ENV_DRAINS)
    rows = {p["provider"]: p for p in report["providers"]}
    assert sorted(rows) == ["p003", "p004", "p005"]
    assert [(h["holder"], h["reason"], h["ticket"]) for h in rows["p003"]["holds"]] == [
        ("[bold]ops[/bold]", "x\x1b[2Jy", None),  # sorted by holder: '[' before 'a'
        (A, "disk", "T-9"),
    ]
    assert rows["p004"]["holds"] == []
    assert rows["p005"]["holds"][0]["expired"] is True and rows["p003"]["holds"][0]["expired"] is False

    text = cli.drains()
    assert text.returncode == 0, text.stderr
    assert "[bold]ops[/bold]" in text.stdout and "x\\x1b[2Jy" in text.stdout and "\x1b" not in text.stdout
    assert "nobody known" in text.stdout and "EXPIRED" in text.stdout

    expired = parse_report(cli.drains("--expired", "-o", "json").stdout, ENV_DRAINS)
    assert [p["provider"] for p in expired["providers"]] == ["p005"]
    # Reported, never removed: nothing was written.
    after = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in kube.list(PROVIDERS, namespace)[0]}
    assert after == before
    # An expired hold still holds: C's hold keeps p005 drained when another holder releases.
    assert cli.drain(A, "--provider", "p005").returncode == 0
    code, report = cli.drain_json(A, "--provider", "p005", "--undrain")
    # C's hold was written before holds had owners (no owner annotation): reported as such.
    assert code == 0 and report["stillHeld"] == {"p005": [f"{C} (owner unknown)"]}


def hold_of(kube, namespace: str, name: str, holder: str = A) -> dict:
    (hold,) = [h for h in holds_of(kube.get(PROVIDERS, namespace, name)) if h["holder"] == holder]
    return hold


def drains_reason(cli: Cli, name: str) -> list[str | None]:
    report = parse_report(cli.drains("-o", "json").stdout, ENV_DRAINS)
    (row,) = [p for p in report["providers"] if p["provider"] == name]
    return [h["reason"] for h in row["holds"]]


def test_a_rerun_by_the_holder_updates_its_hold_and_says_what_changed(cli, kube, namespace, fleet):
    code, first = cli.drain_json(A, "--provider", "p010", "--reason", "kernel", "--ticket", "CHG-1")
    assert code == 0, first["summary"]
    since = hold_of(kube, namespace, "p010")["since"]

    # --dry-run shows the update and writes nothing.
    rv = kube.get(PROVIDERS, namespace, "p010")["metadata"]["resourceVersion"]
    code, dry = cli.drain_json(A, "--provider", "p010", "--reason", "rack move", "--dry-run")
    assert code == 0 and dry["plan"][0]["note"] == "will update hold: reason 'kernel' -> 'rack move'"
    assert dry["dryRunOutcomes"][0]["holdUpdate"] == [{"field": "reason", "from": "kernel", "to": "rack move"}]
    assert kube.get(PROVIDERS, namespace, "p010")["metadata"]["resourceVersion"] == rv

    code, report = cli.drain_json(A, "--provider", "p010", "--reason", "rack move")
    assert code == 0, report["summary"]
    (outcome,) = report["outcomes"]
    assert outcome["outcome"] == "changed" and outcome["note"] == "updated hold: reason 'kernel' -> 'rack move'"
    assert outcome["holdUpdate"] == [{"field": "reason", "from": "kernel", "to": "rack move"}]
    assert "your hold updated on 1" in report["summary"]
    # The report, the hold on the object and `env drains` agree: the new reason stands; the
    # ticket not given again is kept, and so is since; the hold is this run's now.
    hold = hold_of(kube, namespace, "p010")
    assert (hold["reason"], hold["ticket"], hold["since"], hold["operation"]) == (
        "rack move",
        "CHG-1",
        since,
        report["operation"],
    )
    assert drains_reason(cli, "p010") == ["rack move"]
    notes = [e["note"] for e in events(kube, namespace, regarding="p010", reason="ProviderDrained")]
    assert len(notes) == 2 and notes[1].startswith("drained: updated hold: reason 'kernel' -> 'rack move'; already")

    # The same values again: no write, and it says so.
    rv = kube.get(PROVIDERS, namespace, "p010")["metadata"]["resourceVersion"]
    code, same = cli.drain_json(A, "--provider", "p010", "--reason", "rack move", "--ticket", "CHG-1")
    assert code == 0 and same["outcomes"][0]["outcome"] == "unchanged"
    assert "your hold already says this: nothing to update" in same["outcomes"][0]["note"]
    assert "your hold already as asked on 1 (nothing to update)" in same["summary"]
    assert kube.get(PROVIDERS, namespace, "p010")["metadata"]["resourceVersion"] == rv

    # drain-restore of the updating run's journal puts the earlier hold back, not removes it.
    proc = cli.restore(Path(report["journal"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    hold = hold_of(kube, namespace, "p010")
    assert (hold["reason"], hold["operation"]) == ("kernel", first["operation"])
    assert state(kube, namespace, "p010") == (True, [A])


def test_a_failed_rerun_puts_the_earlier_hold_back(cli, kube, namespace, fleet):
    for name in ("u1", "u2"):
        spec = {"endpoint": f"http://127.0.0.1:9/{name}", "providerGateway": "gw-upd", "selectionGroup": "chat"}
        kube.create(
            PROVIDERS,
            namespace,
            {"apiVersion": "agn.dev/v1alpha1", "kind": "InferenceProvider", "metadata": {"name": name}, "spec": spec},
        )
    code, first = cli.drain_json(A, "--gateway", "gw-upd", "--reason", "kernel", "--ticket", "CHG-1")
    assert code == 0, first["summary"]
    key = hold_key(A)
    before = {n: kube.get(PROVIDERS, namespace, n)["metadata"]["annotations"][key] for n in ("u1", "u2")}
    token = uuid.uuid4().hex[:8]
    with denying_updates(
        kube,
        namespace,
        "inferenceproviders",
        expression="request.dryRun == true",  # the dry run passes; u2's real write is refused
        message="writes to this provider are frozen (test admission policy)",
        object_selector={"matchLabels": {"reject-writes": token}},
    ):
        kube.merge_patch(PROVIDERS, namespace, "u2", {"metadata": {"labels": {"reject-writes": token}}})
        wait_for(lambda: frozen(kube, namespace, "u2"), timeout=30, interval=0.2, what="the admission policy")
        code, report = cli.drain_json(A, "--gateway", "gw-upd", "--reason", "rack move", "--ticket", "CHG-2")
    assert code == 3, report["summary"]
    outcomes = {o["provider"]: o for o in report["outcomes"]}
    assert outcomes["u1"]["outcome"] == "changed" and outcomes["u2"]["outcome"] == "failed"
    assert [u["field"] for u in outcomes["u1"]["holdUpdate"]] == ["reason", "ticket"]
    assert {r["provider"]: r["outcome"] for r in report["restorations"]} == {"u1": "restored"}
    # The earlier hold is back exactly (its reason, ticket and operation), not removed.
    after = {n: kube.get(PROVIDERS, namespace, n)["metadata"]["annotations"][key] for n in ("u1", "u2")}
    assert after == before
    assert hold_of(kube, namespace, "u1")["reason"] == "kernel" and drains_reason(cli, "u1") == ["kernel"]
    assert state(kube, namespace, "u1") == (True, [A])


def frozen(kube, namespace: str, name: str) -> bool:
    try:
        kube.merge_patch(PROVIDERS, namespace, name, {"metadata": {"annotations": {"probe": uuid.uuid4().hex}}})
    except Invalid:
        return True
    return False
