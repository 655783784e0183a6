"""``env up --env engines --runtime local``: the local runtime starts a real llama-server per
provider that declares an engine, points the provider at it (format llamacpp), routes real
completions to it through a consumer gateway, and ``env down`` stops it by pid. The keyed engine
(``apiKey: true``) is reached only with the key the runtime put in its Secret: a wrong one is a
named ``Unauthorized`` that never shows the token, and fixing the Secret admits it again."""

from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agn.kube import PROVIDERS, Kube
from agnprocs import sample, scrape, wait_for
from envcli import Cli
from kubetest import events
from reportschema import parse_report
from xtask.reports import ENV_STATUS

pytestmark = pytest.mark.engines
ENGINES = ("llama-one", "llama-two")
KEYED, SECRET, KEY = "llama-keyed", "llama-keyed-api-key", "token"
NS = "agn-engines"


@pytest.fixture(scope="module")
def cli(tmp_path_factory, llama):
    c = Cli(tmp_path_factory.mktemp("engines"))
    yield c
    c("env", "down", "--env", "engines")  # never leave processes behind, whatever failed


@pytest.fixture(scope="module")
def up(cli) -> str:
    """``env up`` once for the module; its stderr."""
    started = time.monotonic()
    proc = cli("env", "up", "--env", "engines", "--runtime", "local", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(f"\nenv up --env engines: {time.monotonic() - started:.1f}s")
    return proc.stderr


@pytest.fixture(scope="module")
def env_kube(cli, up):
    k = Kube.from_kubeconfig(kubeconfig=str(cli.home / "kubeconfig"), context="local-engines", field_manager="test")
    yield k
    k.close()


def env_status(cli) -> dict:
    proc = cli("env", "status", "--env", "engines", "--output", "json")
    assert proc.returncode == 0, proc.stderr
    return parse_report(proc.stdout, ENV_STATUS)


def complete(gateway: str, *, max_tokens: int, group: str = "chat", **extra) -> tuple[str, dict]:
    """One completion through the gateway in ``group``: (the provider that served it, its answer)."""
    req = urllib.request.Request(
        f"{gateway}/v1/completions",
        data=json.dumps({"prompt": "Once upon a time", "max_tokens": max_tokens, **extra}).encode(),
        headers={"Content-Type": "application/json", "x-selection-group": group},
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        return resp.headers["x-agn-provider"], json.loads(resp.read())


def test_up_starts_real_engines_that_serve_completions_and_down_stops_them(cli, up):
    assert "start inference engines (llama-server)" in up
    status = env_status(cli)
    components = {c["name"]: c for c in status["components"]}
    assert all(components[f"engine-{n}"]["running"] and components[f"engine-{n}"]["healthy"] for n in (*ENGINES, KEYED))
    engines = [components[f"engine-{name}"] for name in ENGINES]  # the keyed one's /metrics wants its key
    assert all(e["running"] and e["healthy"] for e in engines), engines
    for consumer in status["objects"]["consumers"]:
        everyone = [*ENGINES, KEYED, "fake-chat", "fake-embeddings"]
        assert consumer["candidates"] == dict.fromkeys(everyone, "admitted")
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


def state_dir(cli) -> Path:
    return Path(cli.home) / "state" / "envs" / "engines"


def put_secret(kube: Kube, value: str) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": NS}}
    kube.apply({**secret, "stringData": {KEY: value}})


def keyed_condition(kube: Kube, type_: str) -> dict:
    status = kube.get(PROVIDERS, NS, KEYED).get("status") or {}
    return next((c for c in status.get("conditions") or () if c["type"] == type_), {})


def keyed_state(cli) -> str | None:
    return env_status(cli)["objects"]["consumers"][0]["candidates"].get(KEYED)


def test_a_keyed_engine_is_reached_only_with_the_key_its_secret_holds(cli, up, env_kube):
    assert "store the engines' API keys in Secrets" in up
    key_file = state_dir(cli) / "engine-keys" / f"{KEYED}.key"
    key = key_file.read_text().strip()
    assert key_file.stat().st_mode & 0o777 == 0o600 and len(key) >= 40
    assert env_kube.secret_data(NS, SECRET) == {KEY: key.encode()}
    components = {c["name"]: c for c in env_status(cli)["components"]}
    engine, gateway = components[f"engine-{KEYED}"], components["gateway-consumer-a"]["address"]
    cmdline = Path(f"/proc/{engine['pid']}/cmdline").read_bytes().split(b"\0")
    assert b"--api-key-file" in cmdline and not any(key.encode() in arg for arg in cmdline)
    with pytest.raises(urllib.error.HTTPError) as refused:  # the server itself wants the key
        urllib.request.urlopen(engine["metricsUrl"], timeout=5)
    assert refused.value.code == 401

    # Its load, read from its own /metrics with the Secret's token (published once it declares a capacity).
    env_kube.merge_patch(PROVIDERS, NS, KEYED, {"spec": {"capacity": {"maxConcurrent": 2}}})
    served: list[tuple[str, dict]] = []
    long = threading.Thread(
        target=lambda: served.append(complete(gateway, max_tokens=3000, group="keyed", ignore_eos=True)), daemon=True
    )
    long.start()
    wait_for(lambda: load(env_kube) == (1, 0), timeout=60, what=f"{KEYED}'s status.load running 1, waiting 0")
    long.join(timeout=300)
    assert served and served[0][0] == KEYED and served[0][1]["usage"]["completion_tokens"] == 3000, served
    wait_for(lambda: load(env_kube) == (0, 0), timeout=60, what=f"{KEYED}'s status.load back to 0, 0")


def load(kube: Kube) -> tuple | None:
    reading = (kube.get(PROVIDERS, NS, KEYED).get("status") or {}).get("load")
    return (reading.get("running"), reading.get("waiting")) if reading else None


def test_a_wrong_token_is_named_never_shown_and_fixing_the_secret_admits_again(cli, up, env_kube):
    key = (state_dir(cli) / "engine-keys" / f"{KEYED}.key").read_text().strip()
    wrong = "wrong-" + secrets.token_urlsafe(24)
    put_secret(env_kube, wrong)
    unauthorized = wait_for(
        lambda: (c := keyed_condition(env_kube, "MetricsFresh")).get("reason") == "Unauthorized" and c,
        timeout=60,
        what=f"{KEYED} MetricsFresh Unauthorized",
    )
    named = f"GET /metrics: 401 Unauthorized; check spec.authorization.credentials secret {SECRET} key {KEY}"
    assert unauthorized["message"].endswith(named), unauthorized  # after "no successful scrape within 10s: "
    assert env_kube.get(PROVIDERS, NS, KEYED)["status"]["probe"]["metricsError"] == named
    wait_for(lambda: keyed_state(cli) != "admitted", timeout=60, what=f"{KEYED} out of consumer-a's overlay")
    again = cli("env", "up", "--env", "engines", "--runtime", "local", timeout=600)  # idempotent: the Secret is kept
    assert again.returncode == 0, again.stdout + again.stderr
    assert env_kube.secret_data(NS, SECRET) == {KEY: wrong.encode()}
    providers, _ = env_kube.list(PROVIDERS, NS)
    written = json.dumps([p.get("status") for p in providers] + events(env_kube, NS))
    written += "".join(f.read_text(errors="replace") for f in (state_dir(cli) / "logs").glob("*.log"))
    written += cli("env", "status", "--env", "engines", "--output", "json").stdout + again.stdout + again.stderr
    assert events(env_kube, NS) and "Unauthorized" in written  # what was searched holds the failure
    assert key not in written and wrong not in written

    put_secret(env_kube, key)  # fixed: admitted again, through its real /metrics
    wait_for(lambda: keyed_state(cli) == "admitted", timeout=90, what=f"{KEYED} admitted once its Secret is right")
    assert keyed_condition(env_kube, "MetricsFresh").get("status") == "True"


def gone(pid: int) -> bool:
    """No such process, or one that has exited and waits to be reaped (a zombie: its parent, the
    `env up` that started it, is gone, and whoever inherited it reaps it when it gets to it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_down_stops_every_engine_by_pid(cli, up):
    engines = [c for c in env_status(cli)["components"] if c["name"].startswith("engine-")]
    assert len(engines) == 3, engines
    down = cli("env", "down", "--env", "engines")
    assert down.returncode == 0, down.stderr
    for e in engines:
        assert f"stop {e['name']} (pid {e['pid']})" in down.stderr
        assert gone(e["pid"]), f"{e['name']} (pid {e['pid']}) still runs"
