"""``docs/runbooks/provider-maintenance.md`` cannot rot: every ``sh`` block in it runs here, in
order, with bash, against the example environment on the local runtime — the not-idle branch
(exit 9), the happy path, Events, metrics, bringing the gateway back, waves gated on the env's
Prometheus, and the recovery of a drain run killed with SIGKILL."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from needs import need_prometheus, prometheus_missing

from agnprocs import Traffic, http_json, wait_for
from envcli import Cli
from xtask.drain.edges.journal import JournalError, read_journal
from xtask.runtime.assets import ensure_assets

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
RUNBOOK = REPO / "docs" / "runbooks" / "provider-maintenance.md"
CTX, NS, GW = "local-example", "agn-example", "provider-a"
GW_PROVIDERS = ["provider-one", "provider-two"]


def runbook_blocks() -> dict[str, str]:
    """Heading -> the ``sh`` block under it (one per section)."""
    blocks: dict[str, str] = {}
    heading = None
    for part in re.split(r"^(##+ .*)$", RUNBOOK.read_text(), flags=re.M):
        if part.startswith("#"):
            heading = part.lstrip("# ").strip()
            continue
        found = re.findall(r"^```sh\n(.*?)^```$", part, flags=re.M | re.S)
        assert len(found) <= 1, f"one sh block per section: {heading}"
        if found:
            blocks[heading] = found[0]
    return blocks


BLOCKS = runbook_blocks()
RAN: set[str] = set()
SKIPPED_HERE: set[str] = set()  # sections whose tool this machine lacks (each test skipped saying why)


def section(prefix: str) -> str:
    matches = [h for h in BLOCKS if h.startswith(prefix)]
    assert len(matches) == 1, (prefix, list(BLOCKS))
    return matches[0]


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    c = Cli(tmp_path_factory.mktemp("runbook"))
    tools = [str(Path(sys.executable).parent), str(ensure_assets(build=False))]  # xtask, kubectl
    c.env["PATH"] = os.pathsep.join([*tools, c.env.get("PATH", "")])
    up = c("env", "up", "--env", "example", "--runtime", "local")
    assert up.returncode == 0, up.stdout + up.stderr
    yield c
    c("env", "down")


def run_section(cli: Cli, prefix: str, **env: str) -> subprocess.CompletedProcess:
    """The setup block, then the section's block, in one bash, as an operator pastes them."""
    heading = section(prefix)
    RAN.add(heading)
    RAN.add(section("0."))
    script = "set -euo pipefail\n" + BLOCKS[section("0.")] + "\n" + BLOCKS[heading]
    return subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        cwd=cli.home,
        env={**cli.env, **env},
        timeout=900,
    )


def components(cli: Cli) -> dict[str, dict]:
    return {c["name"]: c for c in cli.status()["components"]}


def drains(cli: Cli) -> dict[str, bool | None]:
    return {p["name"]: p["drain"] for p in cli.status()["objects"]["providers"]}


def set_waiting(cli: Cli, provider: str, waiting: int) -> None:
    http_json(f"{components(cli)['fake-' + provider]['address']}/admin/state", method="POST", body={"waiting": waiting})


def test_preview_writes_nothing(cli):
    out = run_section(cli, "1.")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "provider-one, provider-two" in out.stdout
    assert not any(drains(cli).values())


def test_take_out_branches_on_not_idle_then_succeeds(cli):
    set_waiting(cli, "provider-one", 3)  # three requests queued on one provider of the gateway
    busy = run_section(cli, "2.", IDLE_TIMEOUT="5")
    assert busy.returncode == 9, busy.stdout + busy.stderr
    assert "drained and serving, but not idle after 5s:" in busy.stdout
    assert re.search(r"^provider-one busy .*waiting 3", busy.stdout, flags=re.M), busy.stdout
    assert drains(cli) == {"provider-one": True, "provider-two": True, "provider-three": False, "provider-four": False}

    set_waiting(cli, "provider-one", 0)
    done = run_section(cli, "2.")  # again: idempotent, confirms serving and waits for idle
    assert done.returncode == 0, done.stdout + done.stderr
    assert "can go down now" in done.stdout


def test_events_show_the_drain(cli):
    out = run_section(cli, "Reading the trail: Events")
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"ProviderDrained", out.stdout.split("Events:", 1)[1]), out.stdout  # kubectl describe
    assert "OverlayPublished" in out.stdout  # the consumers' events


def test_metrics_show_the_overlays(cli):
    out = run_section(cli, "Reading the trail: metrics")
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r'^agn_overlay_candidates\{.*admission_state="existing_only".*\} 2\.0$', out.stdout, flags=re.M)


def test_bring_back(cli):
    out = run_section(cli, "4.")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "is back: admitted again on every consumer" in out.stdout
    assert not any(drains(cli).values())


def test_waves_gated_on_prometheus(cli):
    """Section 5 against the env's own Prometheus, with canary traffic through both gateways
    (the error-ratio gate needs requests to count); then section 4 brings the gateway back."""
    if prometheus_missing():
        SKIPPED_HERE.add(section("5."))
    need_prometheus()
    gateways = [c["address"] for name, c in components(cli).items() if name.startswith("gateway-")]
    with Traffic(gateways):
        out = run_section(cli, "5.")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "every gate held" in out.stdout
    assert re.findall(r"^wave \d held: (.*)$", out.stdout, flags=re.M) == ["error-ratio 0, promql 1"] * 2, out.stdout
    assert drains(cli) == {"provider-one": True, "provider-two": True, "provider-three": False, "provider-four": False}
    back = run_section(cli, "4.")
    assert back.returncode == 0, back.stdout + back.stderr
    assert not any(drains(cli).values())


def test_recover_a_killed_drain(cli):
    """kill -9 a drain that is waiting for a consumer whose gateway is stopped; the crash block
    restores what it wrote."""
    gateway = components(cli)["gateway-consumer-a"]["pid"]
    journal_dir = Path(cli.env["AGN_XTASK_JOURNAL_DIR"])
    before = set(journal_dir.glob("drain-*.jsonl"))
    os.kill(gateway, signal.SIGSTOP)
    try:
        run = subprocess.Popen(
            [sys.executable, "-m", "xtask", "env", "provider-drain", "--context", CTX, "--gateway", GW]
            + ["--network", "production", "--consumer", "consumer-a", "--consumer", "consumer-b"],
            env=cli.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:

            def written() -> Path | None:
                for path in set(journal_dir.glob("drain-*.jsonl")) - before:
                    try:
                        entries = read_journal(path).entries
                    except JournalError:  # created, its header not yet written: not yet
                        continue
                    if sorted(n for n, e in entries.items() if e.write == "written") == GW_PROVIDERS:
                        return path
                return None

            journal = wait_for(written, timeout=60, what="both writes of the drain in its journal")
            assert run.poll() is None, "the drain must still be waiting when it is killed"
            run.kill()
        finally:
            run.kill()
            run.wait()
    finally:
        os.kill(gateway, signal.SIGCONT)
    assert drains(cli)["provider-one"] is True  # the killed run left its drain behind

    out = run_section(cli, "After a crash")
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^provider-one: would-restore$", out.stdout, flags=re.M), out.stdout
    assert not any(drains(cli).values())
    assert read_journal(journal).state == "restored"


def test_every_block_of_the_runbook_ran():
    assert RAN | SKIPPED_HERE == set(BLOCKS), f"not run: {set(BLOCKS) - RAN - SKIPPED_HERE}"
