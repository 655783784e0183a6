"""Real llama.cpp servers in the loop: ``llama-server`` processes serving the tiny seeded model
(xtask/llamacpp/model.py), probed by the real operator against the real API server, drained by
the real CLI. Nothing here imitates an engine: health, load and the end of a generation are the
server's own."""

from __future__ import annotations

import threading
import time

import pytest

from agn.kube import NETWORKS, PROVIDERS
from agnprocs import wait_for
from drainenv import DrainEnv
from llamaprocs import Completion, health
from xtask.runtime.local_engines import ensure_key

pytestmark = pytest.mark.engines

PROBE_INTERVAL = 0.1  # the network's probeIntervalSeconds (the CRD's minimum)
# Admission is one probe after the first 200 at most, then the status write, the operator's
# reconcile and its overlay write; this is the time those writes may take on a loaded 2-core box.
WRITE_SLACK = 2.0
# Tokens per completion: long enough that four on two slots keep the server busy through the
# CLI's start, the drain and the status write on a loaded machine (2000 tokens took 5.5 s alone
# on one thread here; a slot's tokens cost more as its context grows).
N_PREDICT = 4000
SPARE = {"p-spare": ("gw-s", "chat", 1)}  # a fake that keeps the group served while llama drains


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    env = DrainEnv(kube, namespace, agn, control_plane, tmp_path).up(providers=SPARE)
    kube.merge_patch(NETWORKS, namespace, "net", {"spec": {"probeIntervalSeconds": PROBE_INTERVAL}})
    return env


def add_llama(env: DrainEnv, name: str, url: str, gateway: str = "gw-l") -> None:
    env.add_provider(name, gateway, "chat", 0, url)
    env.kube.merge_patch(PROVIDERS, env.ns, name, {"spec": {"metrics": {"format": "llamacpp"}}})


def load_of(env: DrainEnv, name: str) -> dict | None:
    """The provider's published load, without when it was read."""
    load = (env.provider(name).get("status") or {}).get("load")
    return {k: v for k, v in load.items() if k in ("running", "waiting", "kvCacheUsage")} if load else None


def probe(env: DrainEnv, name: str) -> dict:
    return (env.provider(name).get("status") or {}).get("probe") or {}


def test_a_loading_server_is_not_admitted_and_is_admitted_within_a_probe_of_its_first_200(env, servers):
    engine = servers.component("p-llama")
    add_llama(env, "p-llama", engine.url())  # before the server exists: probed, no answer
    wait_for(lambda: probe(env, "p-llama").get("healthy") is False, what="p-llama probed and unhealthy")
    assert env.states("c-a").get("p-llama") != "admitted"

    started = time.monotonic()
    servers.start(engine)
    seen: list[tuple[float, int, str | None]] = []  # (when, GET /health, p-llama's state on c-a)
    errors: set[str] = set()  # what the operator's probes said while the server was not ready
    while not seen or seen[-1][2] != "admitted":
        code = health(engine.url())
        seen.append((time.monotonic(), code, env.states("c-a").get("p-llama")))
        errors.add(probe(env, "p-llama").get("healthError") or "")
        assert time.monotonic() - started < 60, f"not admitted within 60 s: {seen[-5:]}"
    first_200 = next(when for when, code, _ in seen if code == 200)
    admitted = next(when for when, _, state in seen if state == "admitted")
    # Never admitted while its /health said anything but 200 (no answer, or 503 while loading).
    assert all(state != "admitted" for when, code, state in seen if code != 200 and when < first_200), seen
    assert admitted - first_200 <= PROBE_INTERVAL + WRITE_SLACK, (admitted - first_200, seen)
    loading = [when for when, code, _ in seen if code == 503]
    if loading and first_200 - loading[0] >= 2 * PROBE_INTERVAL:  # a probe surely landed in the load
        assert "GET /health: HTTP 503" in errors, errors  # the real server's 503, as the operator read it
    print(
        f"\nllama-server: process start to first 200 {first_200 - started:.2f}s, to admitted {admitted - started:.2f}s "
        f"(admitted {admitted - first_200:.2f}s after the first 200); /health codes seen: "
        f"{sorted({code for _, code, _ in seen})}; the operator's health errors: {sorted(errors - {''})}"
    )
    available = next(c for c in env.provider("p-llama")["status"]["conditions"] if c["type"] == "Available")
    assert available["message"] == "GET /health succeeded"


def test_a_keyed_server_is_admitted_with_the_token_its_secret_holds(env, servers, tmp_path):
    key = ensure_key(tmp_path / "keys" / "p-keyed.key")  # as the local runtime makes it
    env.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "p-keyed-api-key", "namespace": env.ns},
            "stringData": {"token": key},
        }
    )
    engine = servers.component("p-keyed", api_key_file=tmp_path / "keys" / "p-keyed.key")
    add_llama(env, "p-keyed", engine.url())
    auth = {"credentials": {"name": "p-keyed-api-key", "key": "token"}}
    env.kube.merge_patch(PROVIDERS, env.ns, "p-keyed", {"spec": {"authorization": auth}})
    started = time.monotonic()
    servers.start(engine)
    wait_for(lambda: health(engine.url()) == 200, timeout=60, interval=0.02, what="p-keyed loaded")
    first_200 = time.monotonic()
    wait_for(lambda: env.states("c-a").get("p-keyed") == "admitted", timeout=60, interval=0.02, what="admitted")
    admitted = time.monotonic()
    assert probe(env, "p-keyed")["metricsFormat"] == "llamacpp"  # its /metrics read with the token
    assert admitted - first_200 <= PROBE_INTERVAL + WRITE_SLACK, admitted - first_200
    print(
        f"\nkeyed llama-server: process start to first 200 {first_200 - started:.2f}s, "
        f"to admitted {admitted - started:.2f}s"
    )


def test_load_from_real_metrics_and_wait_idle_ends_after_the_last_generation(env, servers):
    server = servers.start(servers.component("p-llama", slots=2))
    wait_for(lambda: health(server.url) == 200, what="llama-server loaded")
    add_llama(env, "p-llama", server.url)
    wait_for(lambda: env.states("c-a").get("p-llama") == "admitted", what="p-llama admitted")

    # Four long generations on two slots: two run, two wait in the server's own queue.
    completions = [Completion(server.url, N_PREDICT).start() for _ in range(4)]
    wait_for(lambda: server.load() == (2, 2), timeout=30, what="llama-server running 2, deferring 2")
    spawned = time.monotonic()
    run = env.spawn("--gateway", "gw-l", "--wait-idle", "--idle-timeout", "600", *env.targets())
    wait_for(
        lambda: load_of(env, "p-llama") == {"running": 2, "waiting": 2},
        timeout=90,
        what=f"p-llama's status to show running 2, waiting 2 (the drain's output: {run.lines})",
    )
    assert probe(env, "p-llama")["metricsFormat"] == "llamacpp"
    assert run.proc.poll() is None, run.output  # busy: still waiting
    print(f"\nrunning 2, waiting 2 published {time.monotonic() - spawned:.1f}s after the drain started")

    exited: list[float] = []  # when the CLI exited
    watcher = threading.Thread(target=lambda: (run.proc.wait(), exited.append(time.monotonic())), daemon=True)
    watcher.start()
    for c in completions:
        c.join(timeout=600)
    assert run.wait(timeout=120) == 0, run.output
    watcher.join(timeout=5)
    assert [c.status for c in completions] == [200] * 4 and {c.tokens for c in completions} == {N_PREDICT}
    last_ended = max(c.ended for c in completions if c.ended is not None)
    assert exited[0] >= last_ended, f"--wait-idle ended {last_ended - exited[0]:.2f}s before the last generation"
    assert "idle-wait p-llama: idle (running 0, waiting 0" in run.output, run.output
    print(f"\n--wait-idle ended {exited[0] - last_ended:.2f}s after the last generation")
