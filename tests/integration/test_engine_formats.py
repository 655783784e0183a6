"""Real engines' load, end to end: fake providers serving vLLM's, SGLang's, TGI's and llama.cpp's
server's expositions (and AGN's own), health where each engine serves it, probed by the real
operator against the real API server; ``provider-drain --wait-idle`` run through the real CLI.

Load is real in-flight completions (``holdCompletions``) and a queue set over each fake's
loopback ``/admin/state``. docs/engines.md is the table these names come from. Every format
is detected (``auto``): SGLang's health is read at ``/get_model_info``, asked before ``/health``,
which on SGLang generates a token."""

from __future__ import annotations

import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agn.engines import FORMATS
from agn.kube import PROVIDERS
from agnprocs import http_json, wait_for
from drainenv import DrainEnv

pytestmark = pytest.mark.integration

ENGINES = ("agn", "vllm", "sglang", "tgi", "llamacpp")
NAMES = {fmt: f"p-{fmt}" for fmt in ENGINES}
# Every engine's provider under one gateway (drained together); p-spare keeps the group served.
LAYOUT = {**{name: ("gw-e", "chat", 0) for name in NAMES.values()}, "p-spare": ("gw-s", "chat", 1)}
KV = {"vllm": 0.6, "sglang": 0.6}  # published to tenths; TGI, llama.cpp (today) and AGN export none


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    formats = {name: fmt for fmt, name in NAMES.items() if fmt != "agn"}
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up(providers=LAYOUT, formats=formats)


def admin(env: DrainEnv, provider: str, **state) -> None:
    http_json(f"{env.urls[provider]}/admin/state", method="POST", body=state)


def status(env: DrainEnv, provider: str) -> dict:
    return env.provider(provider).get("status") or {}


def condition(env: DrainEnv, provider: str, type_: str) -> dict:
    return next((c for c in status(env, provider).get("conditions") or () if c["type"] == type_), {"message": ""})


def http_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def by_provider(report: dict) -> dict[str, dict]:
    return {p["provider"]: p for p in report["idle"]["providers"]}


def hold_one_request_each(env: DrainEnv) -> list[threading.Thread]:
    """One completion in flight on every engine's fake, held until ``holdCompletions`` is off."""
    threads = []
    for name in NAMES.values():
        admin(env, name, holdCompletions=True)
        url = f"{env.urls[name]}/v1/completions"
        thread = threading.Thread(
            target=http_json, args=(url,), kwargs={"method": "POST", "body": {"prompt": "hi"}, "timeout": 120}
        )
        thread.start()
        threads.append(thread)
    for name in NAMES.values():
        wait_for(lambda n=name: http_json(f"{env.urls[n]}/admin/state")["running"] == 1, what=f"{name} running 1")
    return threads


def test_each_engine_reports_its_load_and_wait_idle_finishes_once_requests_end(env: DrainEnv):
    for name in NAMES.values():
        admin(env, name, waiting=2, kvCacheUsage=0.63)
    # SGLang with --enable-priority-scheduling (each count as a total and again by priority),
    # whose generating /health takes longer than the operator's 1 s probe timeout.
    admin(env, NAMES["sglang"], prioritySplit=True, healthGenerateSeconds=3.0)
    threads = hold_one_request_each(env)
    try:
        run = env.spawn("--gateway", "gw-e", "--wait-idle", "--idle-timeout", "120", *env.targets())
        for name in NAMES.values():
            wait_for(
                lambda n=name: any(f"idle-wait {n}: busy (running 1, waiting 2" in line for line in run.lines),
                timeout=60,
                what=f"the idle wait to report {name} busy",
            )
        for fmt, name in NAMES.items():  # drained: the operator publishes each one's reading
            s = status(env, name)
            assert s["probe"]["metricsFormat"] == fmt, s
            assert (s["load"]["running"], s["load"]["waiting"]) == (1, 2), s
            assert s["load"].get("kvCacheUsage") == KV.get(fmt), s
            available = next(c for c in s["conditions"] if c["type"] == "Available")
            assert available["message"] == f"GET {FORMATS[fmt].health_path} succeeded"
        assert run.proc.poll() is None, run.output  # busy: still waiting
    finally:
        for name in NAMES.values():
            admin(env, name, holdCompletions=False, waiting=0)
    for thread in threads:
        thread.join(timeout=30)
    assert run.wait(timeout=120) == 0, run.output
    for name in NAMES.values():
        assert f"idle-wait {name}: idle (running 0, waiting 0" in run.output
    assert run.output.splitlines()[-1].startswith("ok: drained, serving on c-a, c-b, and idle: ")
    assert all(env.drain_value(name) is True for name in NAMES.values())
    assert http_json(f"{env.urls[NAMES['sglang']]}/admin/state")["healthGenerations"] == 0  # never generated


def test_an_engine_without_its_waiting_metric_is_unknown_and_the_wait_times_out(env: DrainEnv):
    for name in NAMES.values():
        admin(env, name, exportWaiting=False)
    code, report = env.run_json("--gateway", "gw-e", "--wait-idle", "--idle-timeout", "3", *env.targets())
    assert code == 9, report  # NOT_IDLE: drained and serving, not idle
    assert report["idle"]["state"] == "timeout"
    providers = by_provider(report)
    for fmt, name in NAMES.items():
        p = providers[name]
        if fmt == "tgi":  # TGI renders tgi_queue_size only once set: absent is never queued
            assert p["lastReading"]["waiting"] == 0 and "does not export" not in p["detail"], p
            continue
        assert p["state"] == "unknown", p
        assert p["detail"] == f"the provider does not export {FORMATS[fmt].waiting}", p
        assert p["lastReading"]["running"] == 0 and "waiting" not in p["lastReading"]  # absent, not 0
        assert status(env, name)["probe"]["metricsFormat"] == fmt
    assert "the drain stays applied" in report["summary"]
    assert all(env.drain_value(name) is True for name in NAMES.values())


def test_a_tgi_that_served_nothing_is_idle_and_wait_idle_finishes(env: DrainEnv):
    tgi = NAMES["tgi"]
    text = http_text(f"{env.urls[tgi]}/metrics")
    assert "tgi_batch_max_total_tokens" in text and "tgi_queue_size" not in text  # as TGI: never set
    assert "tgi_batch_current_size" not in text
    code, report = env.run_json("--provider", tgi, "--wait-idle", "--idle-timeout", "60", *env.targets())
    assert code == 0, report
    p = by_provider(report)[tgi]
    assert p["state"] == "idle" and (p["lastReading"]["running"], p["lastReading"]["waiting"]) == (0, 0), p
    assert status(env, tgi)["probe"]["metricsFormat"] == "tgi"


def test_a_vllm_without_its_metrics_is_unknown_and_says_disable_log_stats(env: DrainEnv):
    vllm = NAMES["vllm"]
    admin(env, vllm, engineMetrics=False)  # as vLLM started with --disable-log-stats
    wait_for(
        lambda: "--disable-log-stats" in condition(env, vllm, "MetricsFresh")["message"],
        what="p-vllm's MetricsFresh naming --disable-log-stats",
    )
    assert condition(env, vllm, "MetricsFresh")["status"] == "True"  # a successful scrape, of nothing
    code, report = env.run_json("--provider", vllm, "--wait-idle", "--idle-timeout", "3", *env.targets())
    assert code == 9, report
    p = by_provider(report)[vllm]
    assert p["state"] == "unknown" and "--disable-log-stats" in p["detail"], p


def test_a_llama_server_behind_a_key_stays_available_and_its_refusals_are_named(env: DrainEnv):
    llama = NAMES["llamacpp"]
    admin(env, llama, apiKeys=["engine-key"])  # --api-key: 401 on every path but /health
    wait_for(
        lambda: "401 Unauthorized" in status(env, llama).get("probe", {}).get("metricsError", ""),
        what="p-llamacpp's metricsError naming the authorization",
    )
    s = status(env, llama)
    assert s["probe"]["healthy"] is True and condition(env, llama, "Available")["status"] == "True", s
    # The provider names no Secret: the refusal says to set spec.authorization.
    assert s["probe"]["metricsError"] == (
        "GET /metrics: 401 Unauthorized; the engine asks for credentials: set spec.authorization"
    ), s
    admin(env, llama, apiKeys=[], metrics=False)  # started without --metrics: 501
    wait_for(
        lambda: (
            status(env, llama).get("probe", {}).get("metricsError")
            == "GET /metrics: HTTP 501: metrics endpoint off (start llama-server with --metrics)"
        ),
        what="p-llamacpp's metricsError naming --metrics",
    )


@pytest.fixture
def mixed_engine():
    """A real HTTP endpoint whose /metrics carries two engines' metrics (vLLM's and SGLang's)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            return

        def do_GET(self):
            body = {
                "/health": b"",
                "/metrics": b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"
                b"sglang:num_running_reqs 0\nsglang:num_queue_reqs 0\n",
            }.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_mixed_or_contradicted_formats_are_a_metrics_error_the_status_names(env: DrainEnv, mixed_engine):
    env.add_provider("p-mixed", "gw-m", "other", 0, mixed_engine)
    wait_for(
        lambda: "mix formats (sglang, vllm)" in status(env, "p-mixed").get("probe", {}).get("metricsError", ""),
        what="p-mixed's metricsError",
    )
    probe = status(env, "p-mixed")["probe"]
    assert probe["healthy"] is True and "metricsObservedAt" not in probe  # never a successful scrape
    # Pinned to a format the scrape does not carry: an error naming both, cleared when pinned right.
    env.kube.merge_patch(PROVIDERS, env.ns, "p-tgi", {"spec": {"metrics": {"format": "vllm"}}})
    wait_for(
        lambda: (
            status(env, "p-tgi").get("probe", {}).get("metricsError")
            == "GET /metrics: the metrics are tgi metrics, not vllm as spec.metrics.format says"
        ),
        what="p-tgi's metricsError",
    )
    env.kube.merge_patch(PROVIDERS, env.ns, "p-tgi", {"spec": {"metrics": {"format": "tgi"}}})
    wait_for(lambda: "metricsError" not in status(env, "p-tgi").get("probe", {}), what="p-tgi's error cleared")
    assert status(env, "p-tgi")["probe"]["metricsFormat"] == "tgi"
