"""provider-drain --wait-idle against the real API server, the real operator (which scrapes the
fake providers' /metrics and writes the load readings) and the real consumer gateways, driven
through the real CLI in a subprocess. Load is set over the fake providers' loopback /admin/state."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from agn.objects import rfc3339
from agnprocs import http_json, sample, scrape, wait_for
from drainenv import DrainEnv
from xtask.drain.core.idle import IDLE

pytestmark = pytest.mark.integration


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up()


def admin(env: DrainEnv, provider: str, **state) -> None:
    http_json(f"{env.urls[provider]}/admin/state", method="POST", body=state)


def probe(env: DrainEnv, provider: str) -> dict:
    return (env.provider(provider).get("status") or {}).get("probe") or {}


def wait_for_gauges(env: DrainEnv, provider: str, **want: float) -> None:
    """Until the fake provider itself exports these gauge values (``running=1``: ``agn_provider_running``).

    Not through the operator: it publishes a provider's load only while the provider is drained
    (docs/operator.md, "Status writes at fleet size"), so before the drain there is none to read."""
    wait_for(
        lambda: all(sample(scrape(f"{env.urls[provider]}/metrics"), f"agn_provider_{k}") == v for k, v in want.items()),
        what=f"{provider} to export {want}",
    )


def test_a_provider_that_is_not_drained_publishes_no_load_absent_not_zero(env: DrainEnv):
    """Only a drained provider's readings are written; the others' are kept in the operator, so
    their status has no ``load`` at all (unknown), never a 0 nobody measured."""
    wait_for(lambda: probe(env, "p-one").get("healthy") is True, what="p-one probed")
    assert "load" not in (env.provider("p-one").get("status") or {})


def by_provider(report: dict) -> dict[str, dict]:
    return {p["provider"]: p for p in report["idle"]["providers"]}


def spawn_until_busy(env: DrainEnv, provider: str, reading: str):
    """A ``--wait-idle`` drain of ``provider``, once its idle wait reports it busy with ``reading``."""
    run = env.spawn("--provider", provider, "--wait-idle", "--idle-timeout", "120", *env.targets())
    wait_for(
        lambda: any(f"idle-wait {provider}: busy ({reading}" in line for line in run.lines),
        timeout=60,
        what=f"the idle wait to report {provider} busy ({reading})",
    )
    return run


def test_idle_provider_is_confirmed_by_a_second_reading(env: DrainEnv):
    assert "load" not in (env.provider("p-one").get("status") or {})  # not drained: nothing published
    before = rfc3339(time.time())
    code, report = env.run_json("--provider", "p-one", "--wait-idle", *env.targets())
    assert code == 0, report
    assert report["convergence"]["state"] == "converged"
    assert report["idle"]["state"] == IDLE
    assert report["idle"]["metricsMaxAgeSeconds"] == 45
    p = by_provider(report)["p-one"]
    assert (p["state"], p["idleReadings"]) == (IDLE, 2)
    assert p["lastReading"]["running"] == 0 and p["lastReading"]["waiting"] == 0
    # Two distinct readings: the confirming one was written after the run started.
    assert p["lastReading"]["observedAt"] > before
    assert 0 <= p["ageSeconds"] <= 45
    assert report["exit"]["code"] == 0 and "idle: p-one" in report["summary"]
    assert env.drain_value("p-one") is True
    assert env.journals()[-1]["state"] == "complete"


def test_busy_provider_blocks_until_its_queue_drains(env: DrainEnv):
    admin(env, "p-one", waiting=3)
    run = spawn_until_busy(env, "p-one", "running 0, waiting 3")
    assert run.proc.poll() is None, run.output  # busy: still waiting
    admin(env, "p-one", waiting=0)
    assert run.wait(timeout=90) == 0, run.output
    lines = run.output.splitlines()
    busy = next(i for i, line in enumerate(lines) if "idle-wait p-one: busy" in line)
    idle = next(i for i, line in enumerate(lines) if "idle-wait p-one: idle (running 0, waiting 0" in line)
    assert busy < idle
    assert lines[-1].startswith("ok: drained, serving on c-a, c-b, and idle: p-one")
    assert env.drain_value("p-one") is True


def test_running_requests_hold_the_wait_until_they_finish(env: DrainEnv):
    """A completion held in flight on the fake provider is a real running request: the wait
    reports it busy until the request has finished, then idle."""
    admin(env, "p-one", holdCompletions=True)
    answers: list[dict] = []
    request = threading.Thread(
        target=lambda: answers.append(
            http_json(f"{env.urls['p-one']}/v1/completions", method="POST", body={"prompt": "hi"}, timeout=120)
        ),
        daemon=True,
    )
    request.start()
    try:
        wait_for_gauges(env, "p-one", running=1, waiting=0)
        run = spawn_until_busy(env, "p-one", "running 1, waiting 0")
        assert run.proc.poll() is None, run.output
        assert answers == []  # the request is still in flight
    finally:
        admin(env, "p-one", holdCompletions=False)
    request.join(timeout=30)
    assert len(answers) == 1 and answers[0]["provider"] == "p-one"  # answered once released
    assert run.wait(timeout=90) == 0, run.output
    assert "idle-wait p-one: idle (running 0, waiting 0" in run.output
    assert run.output.splitlines()[-1].startswith("ok: drained, serving on c-a, c-b, and idle: p-one")


def test_busy_until_timeout_exits_9_naming_it_and_keeps_the_drain(env: DrainEnv):
    admin(env, "p-two", waiting=2)
    code, report = env.run_json("--gateway", "gw-a", "--wait-idle", "--idle-timeout", "3", *env.targets())
    assert code == 9, report
    assert report["convergence"]["state"] == "converged"  # drained and serving ...
    assert report["idle"]["state"] == "timeout"  # ... not idle
    p = by_provider(report)["p-two"]
    assert p["state"] == "busy" and p["lastReading"]["waiting"] == 2 and p["ageSeconds"] is not None
    assert "p-two busy (running 0, waiting 2; read " in report["summary"]
    assert "the drain stays applied" in report["summary"]
    assert any(m.startswith("p-two busy") for m in report["idle"]["notIdle"])
    assert env.drain_value("p-one") is True and env.drain_value("p-two") is True  # not restored
    assert all(env.states(c)["p-two"] == "existing_only" for c in ("c-a", "c-b"))
    assert env.journals()[-1]["state"] == "applied-idle-timeout"


def test_metrics_off_and_waiting_not_exported_are_unknown_never_idle(env: DrainEnv):
    admin(env, "p-one", metrics=False)
    admin(env, "p-two", exportWaiting=False)
    wait_for(lambda: "HTTP 404" in probe(env, "p-one").get("metricsError", ""), what="p-one's scrape failing")
    wait_for_gauges(env, "p-two", running=0)  # ... and no waiting gauge (checked below)
    code, report = env.run_json("--gateway", "gw-a", "--wait-idle", "--idle-timeout", "3", *env.targets())
    assert code == 9, report
    one, two = by_provider(report)["p-one"], by_provider(report)["p-two"]
    # p-one: the operator kept its last reading in memory (running 0, waiting 0, still within
    # metricsMaxAgeSeconds) and publishes it once drained, but the provider's load now is unknown.
    assert one["state"] == "unknown"
    assert one["detail"] == "the last scrape failed: GET /metrics: HTTP 404"
    assert one["lastReading"]["running"] == 0 and one["lastReading"]["waiting"] == 0
    # p-two: running 0 and no waiting gauge: not a zero.
    assert two["state"] == "unknown"
    assert two["detail"] == "the provider does not export agn_provider_waiting"
    assert two["lastReading"]["running"] == 0 and "waiting" not in two["lastReading"]
    assert "p-one unknown (the last scrape failed" in report["summary"]
    assert "p-two unknown (the provider does not export agn_provider_waiting" in report["summary"]
    assert env.drain_value("p-one") is True and env.drain_value("p-two") is True


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_the_idle_wait_keeps_the_drain_and_exits_8(env: DrainEnv, sig):
    admin(env, "p-one", waiting=1)
    run = env.spawn("--provider", "p-one", "--wait-idle", "--idle-timeout", "120", *env.targets())
    wait_for(
        lambda: any("idle-wait p-one: busy" in line for line in run.lines), timeout=60, what="the idle wait to start"
    )
    run.signal(sig)
    assert run.wait(timeout=30) == 8, run.output
    last = run.output.splitlines()[-1]
    assert "interrupted while waiting for idle; the drain is kept" in last and "p-one busy" in last
    assert env.drain_value("p-one") is True
    assert all(env.states(c)["p-one"] == "existing_only" for c in ("c-a", "c-b"))
    assert env.journals()[-1]["state"] == "applied-idle-interrupted"
