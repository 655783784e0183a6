"""End to end, as a user would: ``python -m xtask env up / status / provider-drain / down``
as subprocesses on the example environment, on the embedded local runtime."""

from __future__ import annotations

import os
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from agnprocs import http_json, wait_for
from envcli import Cli
from reportschema import parse_report
from xtask.procs import ProcessRecord, is_alive
from xtask.reports import ENV_UP
from xtask.runtime.assets import ensure_assets

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
CTX = "local-example"


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    c = Cli(tmp_path_factory.mktemp("e2e"))
    yield c
    c("env", "down")  # never leave processes behind, whatever failed


@pytest.fixture(scope="module")
def example(cli):
    up = cli("env", "up", "--env", "example", "--runtime", "local")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "environment example is up on the local runtime" in up.stdout
    return up


def test_up_is_idempotent_and_status_reports_everything(cli, example):
    again = cli("env", "up", "--env", "example", "--runtime", "local")
    assert again.returncode == 0, again.stderr
    assert "was already up on the local runtime; nothing started" in again.stdout
    as_json = cli("env", "up", "--env", "example", "--runtime", "local", "--output", "json")
    assert as_json.returncode == 0, as_json.stderr
    up_report = parse_report(as_json.stdout, ENV_UP)
    assert (up_report["started"], up_report["context"], up_report["runtime"]) == ([], CTX, "local")
    assert sorted(up_report["served"]) == ["consumer-a", "consumer-b"]
    status = cli.status()
    assert (status["state"], status["runtime"], status["context"], status["namespace"]) == (
        "up",
        "local",
        CTX,
        "agn-example",
    )
    assert status["kubeconfig"] == cli.env["KUBECONFIG"]
    names = {c["name"] for c in status["components"]}
    assert {
        "etcd",
        "kube-apiserver",
        "operator",
        "gateway-consumer-a",
        "gateway-consumer-b",
        "fake-provider-one",
        "fake-provider-four",
    } <= names
    assert all(c["running"] and c["healthy"] for c in status["components"])
    assert [p["name"] for p in status["objects"]["providers"]] == [
        "provider-four",
        "provider-one",
        "provider-three",
        "provider-two",
    ]
    for consumer in status["objects"]["consumers"]:
        assert consumer["overlayRevision"] == consumer["acceptedRevision"] == consumer["servingRevision"]
        assert set(consumer["candidates"].values()) == {"admitted"}
    table = cli("env", "status")
    assert "consumer-a" in table.stdout and "provider-three" in table.stdout
    named = cli("env", "status", "-o", "name")
    assert named.returncode == 0, named.stderr
    lines = named.stdout.splitlines()
    assert "inferenceprovider.agn.dev/provider-three" in lines and "inferenceconsumer.agn.dev/consumer-a" in lines
    assert len(lines) == len(status["objects"]["networks"]) + 4 + 2
    up_named = cli("env", "up", "--env", "example", "--runtime", "local", "-v", "-o", "name")
    assert (up_named.returncode, up_named.stdout) == (0, "environment/example\n"), up_named.stderr


def test_status_shows_where_the_operator_and_each_gateway_serve_metrics(cli, example):
    components = {c["name"]: c for c in cli.status()["components"]}
    expected = {"operator": "agn_operator_leader", "gateway-consumer-a": "agn_gateway_serving_revision"}
    expected["gateway-consumer-b"] = "agn_gateway_serving_revision"
    for name, metric in expected.items():
        url = components[name]["metricsUrl"]
        assert url == components[name]["address"] + "/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert f"\n{metric} " in resp.read().decode(), name
    assert not any("metricsUrl" in c for n, c in components.items() if n not in expected)
    wide = cli("env", "status", "-o", "wide").stdout
    assert "metrics" in wide and components["operator"]["metricsUrl"] in wide
    assert components["operator"]["metricsUrl"] not in cli("env", "status").stdout  # only the wide table has them


def test_kubectl_shows_printer_columns(cli, example):
    kubectl = ensure_assets(build=False) / "kubectl"
    proc = subprocess.run(
        [str(kubectl), "--context", CTX, "get", "inferenceproviders"],
        capture_output=True,
        text=True,
        env=cli.env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    header = proc.stdout.splitlines()[0].split()
    assert header[:4] == ["NAME", "GATEWAY", "DRAIN", "AVAILABLE"]
    assert len(proc.stdout.splitlines()) == 5


def test_seed_sequence_runs_verbatim(cli, example):
    """Seed 000's command sequence, word for word apart from the context name."""

    def drain(*args):
        proc = cli("env", "provider-drain", "--context", CTX, *args, timeout=180)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    out = drain("--provider", "provider-one", "--dry-run")
    assert out.splitlines()[0] == "selection (provider provider-one, namespace agn-example): provider-one"
    assert "nothing written" in out
    assert "stored: spec.trafficPolicy.drain=true" in drain("--provider", "provider-one")
    assert "stored: spec.trafficPolicy.drain=false" in drain("--provider", "provider-one", "--undrain")
    assert "provider-one, provider-two" in drain("--gateway", "provider-a").splitlines()[0]
    drain("--gateway", "provider-a", "--undrain")
    out = drain(
        "--gateway", "provider-a", "--network", "production", "--consumer", "consumer-a", "--consumer", "consumer-b"
    )
    assert "ok: converged: consumer-a, consumer-b serve the change" in out
    for consumer in ("consumer-a", "consumer-b"):
        assert f"{consumer}/provider-one: existing_only" in out and f"{consumer}/provider-two: existing_only" in out
    out = drain(
        "--gateway",
        "provider-a",
        "--undrain",
        "--network",
        "production",
        "--consumer",
        "consumer-a",
        "--consumer",
        "consumer-b",
    )
    assert "consumer-a/provider-one: admitted" in out


def test_sticky_sessions_through_a_consumer_gateway(cli, example):
    gateway = next(c["address"] for c in cli.status()["objects"]["consumers"] if c["name"] == "consumer-a")
    chat = {"x-selection-group": "chat"}

    def complete(session: str) -> str:
        return http_json(
            f"{gateway}/v1/completions", method="POST", body={"prompt": "hi"}, headers={**chat, "x-session-id": session}
        )["provider"]

    assert complete("old-session") == "provider-one"  # rank 0 in the chat group
    drained = cli(
        "env",
        "provider-drain",
        "--context",
        CTX,
        "--provider",
        "provider-one",
        "--network",
        "production",
        "--consumer",
        "consumer-a",
        "--consumer",
        "consumer-b",
    )
    assert drained.returncode == 0, drained.stdout
    assert complete("old-session") == "provider-one"  # existing affinity continues on existing_only
    assert {complete(f"new-{i}") for i in range(5)} == {"provider-three"}  # no new session lands on it
    undrained = cli(
        "env",
        "provider-drain",
        "--context",
        CTX,
        "--provider",
        "provider-one",
        "--undrain",
        "--network",
        "production",
        "--consumer",
        "consumer-a",
        "--consumer",
        "consumer-b",
    )
    assert undrained.returncode == 0, undrained.stdout
    assert complete("newest") == "provider-one"


def test_dead_component_is_repaired_by_up(cli, example):
    status = cli.status()
    operator = next(c for c in status["components"] if c["name"] == "operator")
    os.kill(operator["pid"], 9)
    wait_for(
        lambda: not next(c for c in cli.status()["components"] if c["name"] == "operator")["running"],
        what="operator to be seen dead",
    )
    assert cli.status()["state"] == "degraded"
    repaired = cli("env", "up")
    assert repaired.returncode == 0, repaired.stderr
    assert "started: operator" in repaired.stdout
    assert cli.status()["state"] == "up"


def test_overlay_shards_from_the_env_file_restart_the_operator_with_the_new_count(cli, example, tmp_path):
    """``overlayShards`` in the env file is the operator's --overlay-shards: changing it and
    running ``env up`` again restarts the operator (by pid) with the new count, and the overlays
    are re-stored with it at the same revision; going back restores the default."""
    kubectl = ensure_assets(build=False) / "kubectl"

    def shard_counts() -> dict[str, tuple[int, int]]:
        proc = subprocess.run(
            [str(kubectl), "--context", CTX, "get", "routingoverlays", "-o", "json"],
            capture_output=True,
            text=True,
            env=cli.env,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        items = yaml.safe_load(proc.stdout)["items"]
        return {o["metadata"]["name"]: (o["spec"].get("shardCount"), o["spec"]["revision"]) for o in items}

    before = shard_counts()
    assert before and all(count == 16 for count, _ in before.values())
    envs = tmp_path / "envs"
    envs.mkdir()
    data = yaml.safe_load((REPO / "envs" / "example.yaml").read_text())
    data["overlayShards"] = 4
    (envs / "example.yaml").write_text(yaml.safe_dump(data))
    try:
        up = cli("env", "up", env={"AGN_XTASK_ENVS_DIR": str(envs)})
        assert up.returncode == 0, up.stderr
        assert "operator (restarted: --overlay-shards 16 -> 4)" in up.stdout
        wait_for(
            lambda: shard_counts() == {n: (4, rev) for n, (_, rev) in before.items()},
            what="overlays re-stored with 4 shards at the same revisions",
        )
    finally:
        back = cli("env", "up")
    assert back.returncode == 0 and "operator (restarted: --overlay-shards 4 -> 16)" in back.stdout, back.stdout
    wait_for(lambda: shard_counts() == before, what="overlays back at 16 shards")
    assert cli.status()["state"] == "up"


def test_down_stops_everything_and_is_idempotent(cli, example):
    status = cli.status()
    records = [
        ProcessRecord.from_file(p)
        for p in (Path(cli.env["AGN_XTASK_HOME"]) / "envs" / "example" / "run").glob("*.pid.json")
    ]
    assert len(records) == len(status["components"])
    down = cli("env", "down", "-v")
    assert down.returncode == 0, down.stderr
    assert "environment example is down" in down.stdout
    assert "- stop operator (pid " in down.stderr and "stop operator" not in down.stdout  # progress: stderr
    assert not any(is_alive(r) for r in records)
    config = yaml.safe_load(Path(cli.env["KUBECONFIG"]).read_text())
    assert CTX not in [c["name"] for c in config.get("contexts") or []]
    assert cli.status()["state"] == "down"
    again = cli("env", "down")
    assert again.returncode == 0 and "was not up; nothing to do" in again.stdout


class TestFailuresLeaveNothingRunning:
    def test_unknown_env(self, tmp_path):
        cli = Cli(tmp_path)
        proc = cli("env", "up", "--env", "nope", "--runtime", "local")
        assert proc.returncode == 1
        assert "unknown environment 'nope'" in proc.stderr and "known environments: engines, example" in proc.stderr
        assert not (tmp_path / "state").exists()

    def test_malformed_env_file_names_file_and_field(self, tmp_path):
        envs = tmp_path / "envs"
        envs.mkdir()
        data = yaml.safe_load((REPO / "envs" / "example.yaml").read_text())
        data["providers"][0]["rank"] = "first"
        (envs / "example.yaml").write_text(yaml.safe_dump(data))
        cli = Cli(tmp_path)
        proc = cli("env", "up", "--runtime", "local", env={"AGN_XTASK_ENVS_DIR": str(envs)})
        assert proc.returncode == 1
        assert (
            f"{envs / 'example.yaml'}" in proc.stderr
            and "providers[0].rank: must be a non-negative integer" in proc.stderr
        )
        assert not (tmp_path / "state").exists()

    def test_missing_binaries_say_how_to_provide_them(self, tmp_path):
        cli = Cli(tmp_path)
        proc = cli(
            "env",
            "up",
            "--runtime",
            "local",
            env={
                "KUBEBUILDER_ASSETS": str(tmp_path / "none"),
                "AGN_CACHE_DIR": str(tmp_path / "cache"),
                "PATH": "/nonexistent",
            },
        )
        assert proc.returncode == 1
        assert "binaries are missing" in proc.stderr and "KUBEBUILDER_ASSETS" in proc.stderr
        assert not (tmp_path / "state" / "envs" / "example" / "run").exists()

    def test_apiserver_failing_to_start_shows_log_and_rolls_back(self, tmp_path):
        real = ensure_assets(build=False)
        assets = tmp_path / "assets"
        assets.mkdir()
        for b in ("etcd", "kubectl"):
            (assets / b).symlink_to(real / b)
        fake = assets / "kube-apiserver"
        fake.write_text(
            '#!/bin/sh\necho \'E1202 run.go:72] "command failed" err="simulated: bad certificate"\' >&2\nexit 1\n'
        )
        fake.chmod(0o755)
        cli = Cli(tmp_path)
        proc = cli("env", "up", "--runtime", "local", env={"KUBEBUILDER_ASSETS": str(assets)})
        assert proc.returncode == 1
        assert "kube-apiserver exited during start-up" in proc.stderr
        assert "simulated: bad certificate" in proc.stderr  # the tail of its log
        # Rolled back: etcd (started first) is not left running, and no state remains.
        assert not (tmp_path / "state" / "envs" / "example").exists()
        assert cli.status()["state"] == "down"
