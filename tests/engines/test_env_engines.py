"""``env up --env engines --runtime local``: the local runtime starts a real llama-server per
provider that declares an engine, points the provider at it (format llamacpp), routes real
completions to it through a consumer gateway, and ``env down`` stops it by pid."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from agnprocs import sample, scrape, wait_for
from envcli import Cli
from reportschema import parse_report
from xtask.reports import ENV_STATUS

pytestmark = pytest.mark.engines
ENGINES = ("llama-one", "llama-two")


@pytest.fixture(scope="module")
def cli(tmp_path_factory, llama):
    c = Cli(tmp_path_factory.mktemp("engines"))
    yield c
    c("env", "down", "--env", "engines")  # never leave processes behind, whatever failed


def complete(gateway: str, *, max_tokens: int) -> tuple[str, dict]:
    """One completion through the gateway in group chat: (the provider that served it, its answer)."""
    req = urllib.request.Request(
        f"{gateway}/v1/completions",
        data=json.dumps({"prompt": "Once upon a time", "max_tokens": max_tokens}).encode(),
        headers={"Content-Type": "application/json", "x-selection-group": "chat"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.headers["x-agn-provider"], json.loads(resp.read())


def test_up_starts_real_engines_that_serve_completions_and_down_stops_them(cli):
    started = time.monotonic()
    up = cli("env", "up", "--env", "engines", "--runtime", "local", timeout=600)
    assert up.returncode == 0, up.stdout + up.stderr
    print(f"\nenv up --env engines: {time.monotonic() - started:.1f}s")
    assert "start inference engines (llama-server)" in up.stderr
    proc = cli("env", "status", "--env", "engines", "--output", "json")
    assert proc.returncode == 0, proc.stderr
    status = parse_report(proc.stdout, ENV_STATUS)
    components = {c["name"]: c for c in status["components"]}
    engines = [components[f"engine-{name}"] for name in ENGINES]
    assert all(e["running"] and e["healthy"] for e in engines), engines
    for consumer in status["objects"]["consumers"]:
        assert consumer["candidates"] == dict.fromkeys([*ENGINES, "fake-chat", "fake-embeddings"], "admitted")
    gateway = components["gateway-consumer-a"]["address"]

    before = {e["name"]: sample(scrape(e["metricsUrl"]), "llamacpp:tokens_predicted_total") or 0 for e in engines}
    provider, answer = complete(gateway, max_tokens=8)
    assert provider in ENGINES, (provider, answer)  # rank 0 of group chat: a real engine
    assert answer["choices"][0]["text"] and answer["usage"]["completion_tokens"] == 8, answer
    served = components[f"engine-{provider}"]
    wait_for(  # counted by the server itself, as the slot is released
        lambda: sample(scrape(served["metricsUrl"]), "llamacpp:tokens_predicted_total") == before[served["name"]] + 8,
        what=f"{served['name']} to count the 8 tokens it generated",
    )
    log = Path(cli.home) / "state" / "envs" / "engines" / "logs" / f"engine-{provider}.log"
    assert "--metrics" in log.read_text()  # its log is in the env's state folder

    down = cli("env", "down", "--env", "engines")
    assert down.returncode == 0, down.stderr
    for e in engines:
        assert f"stop {e['name']} (pid {e['pid']})" in down.stderr
        assert not Path(f"/proc/{e['pid']}").exists()
