"""The env's own Prometheus, end to end: ``env up`` on the local runtime starts Debian's
``prometheus`` (scraping the operator, the gateways and the fake providers), ``env status``
shows its URL, ``promtool check metrics`` passes on every ``/metrics`` the env's processes
serve, and the PromQL gate (xtask/drain/gates/promql.py) holds and breaches against that real server
on real gateway traffic. Skipped when prometheus or promtool is not installed, failed instead
when ``AGN_REQUIRE_PROMETHEUS=1`` (.ci/run installs them with scripts/install-prometheus.sh)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from needs import need_prometheus

from agnprocs import Traffic, http_status, wait_for
from envcli import Cli
from reportschema import parse_report
from xtask.drain.gates.promql import PrometheusUnavailable, PromQLError, PromQLGate
from xtask.procs import ProcessRecord, is_alive
from xtask.reports import ENV_UP
from xtask.runtime import prometheus

pytestmark = pytest.mark.e2e
need_prometheus(module=True)

# Targets of the example env: the operator, two gateways, four fake providers.
EXPECTED_TARGETS = {
    ("agn-operator", "operator"),
    ("agn-gateway", "consumer-a"),
    ("agn-gateway", "consumer-b"),
    *(("agn-provider", f"provider-{n}") for n in ("one", "two", "three", "four")),
}


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    c = Cli(tmp_path_factory.mktemp("prom"))
    yield c
    c("env", "down")  # never leave processes behind, whatever failed


@pytest.fixture(scope="module")
def status(cli):
    up = cli("env", "up", "--env", "example", "--runtime", "local")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "start Prometheus (scraping the operator and gateways)" in up.stderr
    assert "prometheus" in up.stdout.split("started: ", 1)[1]
    return cli.status()


@pytest.fixture(scope="module")
def prom(status) -> str:
    """The env's Prometheus URL, once every expected target has been scraped and is up."""
    url = status["prometheus"]["url"]

    def targets():
        active = query_api(url, "/api/v1/targets", {"state": "active"})["activeTargets"]
        ids = {
            (t["labels"]["job"], t["labels"].get("consumer") or t["labels"].get("provider") or "operator")
            for t in active
        }
        return ids == EXPECTED_TARGETS and all(t["health"] == "up" for t in active) and active

    wait_for(targets, timeout=60, interval=0.2, what="Prometheus to scrape every target of the env")
    return url


def query_api(url: str, path: str, params: dict[str, str]) -> dict:
    with urllib.request.urlopen(f"{url}{path}?{urllib.parse.urlencode(params)}", timeout=5) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return body["data"]


def test_promtool_accepts_the_config(tmp_path: Path):
    targets = prometheus.ScrapeTargets(
        operator="127.0.0.1:1001",
        gateways={"consumer-a": "127.0.0.1:1002"},
        providers={"provider-one": "127.0.0.1:1004"},
    )
    prometheus.write_files(tmp_path, targets)
    check = subprocess.run(
        ["promtool", "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr


def instant(url: str, expr: str) -> list[dict]:
    return query_api(url, "/api/v1/query", {"query": expr})["result"]


def test_status_shows_the_url_and_prometheus_answers_there(cli, status):
    prom = status["prometheus"]
    assert prom["running"] and prom["url"].startswith("http://127.0.0.1:")
    component = next(c for c in status["components"] if c["name"] == "prometheus")
    assert component["running"] and component["healthy"] and component["address"] == prom["url"]
    assert http_status(f"{prom['url']}/-/ready") == 200
    table = cli("env", "status").stdout
    assert f"prometheus: {prom['url']}" in table


def test_it_scrapes_every_target_labelled(prom):
    up = {
        (s["metric"]["job"], s["metric"].get("consumer") or s["metric"].get("provider") or "operator"): s
        for s in instant(prom, "up")
    }
    assert set(up) == EXPECTED_TARGETS
    assert all(s["value"][1] == "1" for s in up.values())
    # The gateways' own metrics carry the target's consumer label, so a query can name one.
    served = instant(prom, 'agn_gateway_serving_revision{consumer="consumer-a"}')
    assert len(served) == 1 and float(served[0]["value"][1]) >= 1


def test_promtool_check_metrics_passes_on_every_metrics_endpoint(cli, status):
    # Traffic first, so the labelled counters have samples: routed and bad requests.
    gateways = [c for c in status["components"] if c["name"].startswith("gateway-")]
    for gateway in gateways:
        complete(gateway["address"], b'{"prompt": "hi"}')
        complete(gateway["address"], b"not json")
    served = [c for c in status["components"] if c["name"] == "operator" or c["name"].startswith(("gateway-", "fake-"))]
    assert len(served) == 1 + 2 + 4
    for component in served:
        url = component.get("metricsUrl") or f"{component['address']}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read()
        assert text.strip(), url
        lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=30)
        assert lint.returncode == 0, f"{component['name']} ({url}): {lint.stdout.decode()}{lint.stderr.decode()}"


def complete(gateway: str, body: bytes) -> int:
    req = urllib.request.Request(
        f"{gateway}/v1/completions",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "x-selection-group": "chat"},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


# The error rate of consumer-a's gateway over 5 s: no failing request is 0, absent counters too.
ERRORS = 'sum(rate(agn_gateway_requests_total{consumer="consumer-a", outcome!="routed"}[5s]))'
NO_ERRORS = f"({ERRORS} or vector(0)) == bool 0"


def scraped_since(prom: str, since: float, *, scrapes: int = 2) -> bool:
    """Prometheus has scraped consumer-a's gateway ``scrapes`` intervals after ``since``."""
    result = instant(prom, 'timestamp(up{job="agn-gateway", consumer="consumer-a"})')
    return bool(result) and float(result[0]["value"][1]) >= since + scrapes


def bad_requests(prom: str) -> float:
    result = instant(prom, 'sum(agn_gateway_requests_total{consumer="consumer-a", outcome="bad_request"})')
    return float(result[0]["value"][1]) if result else 0.0


def test_promql_gate_holds_on_a_clean_soak_and_breaches_on_failing_requests(status, prom):
    gateway = next(c["address"] for c in status["components"] if c["name"] == "gateway-consumer-a")
    clean = lambda: float(instant(prom, ERRORS + " or vector(0)")[0]["value"][1]) == 0  # noqa: E731
    wait_for(clean, timeout=30, interval=0.2, what="no failing request in the last 5 s")
    gate = PromQLGate(prom, NO_ERRORS, timeout=5)
    assert gate.validate().held

    # A clean soak: only routed requests while the window is scraped.
    began = time.time()
    gate.begin()
    assert complete(gateway, b'{"prompt": "hi"}') == 200
    wait_for(lambda: scraped_since(prom, began), timeout=30, interval=0.2, what="two scrapes into the soak")
    reading = gate.read(0)
    assert reading.held, reading
    assert reading.gate == "promql" and reading.value == 1 and reading.threshold == "non-empty and true over the soak"

    # A soak with failing requests: two batches, each seen by a scrape, so rate() sees the increase.
    # The same soak through a guard: the serving revision while the error rate is under 1 %,
    # nothing while it is not; the instants with no sample are a breach.
    guarded = PromQLGate(
        prom, f'agn_gateway_serving_revision{{consumer="consumer-a"}} and on() (({ERRORS} or vector(0)) < 0.01)'
    )
    gate.begin()
    guarded.begin()
    for batch in (1, 2):
        before = bad_requests(prom)
        for _ in range(5):
            assert complete(gateway, b"not json") == 400
        wait_for(
            lambda want=before + 5: bad_requests(prom) >= want, timeout=30, interval=0.2, what=f"batch {batch} scraped"
        )
    reading = gate.read(0)
    assert not reading.held, reading
    assert reading.value == 0 and " is 0 at " in reading.detail and reading.detail.startswith(NO_ERRORS)
    breach = guarded.read(0)
    assert not breach.held and breach.value is None and "the result is empty at " in breach.detail


def test_promql_gate_refuses_a_bad_expression_and_a_server_that_is_not_prometheus(status, prom):
    with pytest.raises(PromQLError) as err:
        PromQLGate(prom, "sum(rate(agn_gateway_requests_total[5s])", timeout=5).validate()
    assert "Prometheus answered 400: bad_data:" in str(err.value) and "--gate-promql 'sum(rate(" in str(err.value)
    bad = PromQLGate(prom, "rate(up[5s)", timeout=5)
    bad.begin()
    reading = bad.read(1)
    assert not reading.held and "Prometheus answered 400: bad_data" in reading.detail

    gateway = next(c["address"] for c in status["components"] if c["name"] == "gateway-consumer-a")
    with pytest.raises(PrometheusUnavailable, match="Prometheus answered 404"):
        PromQLGate(gateway, "vector(1)", timeout=5).validate()
    empty = PromQLGate(prom, "up{job='no-such-job'}", timeout=5)
    assert not empty.validate().held
    empty.begin()
    assert "the result is empty over the whole soak" in empty.read(1).detail


GATEWAY_ERRORS = (
    '(sum(rate(agn_gateway_requests_total{outcome=~"no_route|upstream_error"}[10s])) or vector(0)) < bool 0.5'
)


def wave_drain(cli, prom: str, expr: str, *extra: str):
    return cli(
        "env", "provider-drain", "--context", "local-example", "--gateway", "provider-a",
        "--network", "production", "--consumer", "consumer-a", "--consumer", "consumer-b",
        "--wave-size", "1", "--soak", "3", "--gate-promql", expr, "--prometheus", prom,
        "--reason", "waves under a PromQL gate", "--output", "json", *extra,
    )  # fmt: skip


def test_a_drain_in_waves_soaks_under_the_promql_gate_and_stops_on_its_breach(cli, status, prom):
    gateways = [c["address"] for c in status["components"] if c["name"].startswith("gateway-")]
    with Traffic(gateways):
        held = wave_drain(cli, prom, GATEWAY_ERRORS)
        assert held.returncode == 0, held.stdout + held.stderr
        waves = json.loads(held.stdout)["waves"]
        assert [w["state"] for w in waves] == ["held", "held"]
        for w in waves:
            assert {g["gate"]: g["held"] for g in w["gates"]} == {"error-ratio": True, "promql": True}, w
        undrain = cli("env", "provider-drain", "--context", "local-example", "--gateway", "provider-a", "--undrain")
        assert undrain.returncode == 0, undrain.stdout + undrain.stderr

        # A query that never has a sample: the first wave breaches on it, the second is never written.
        breached = wave_drain(
            cli, prom, 'agn_gateway_requests_total{outcome="no-such-outcome"}', "--on-breach", "restore"
        )
    assert breached.returncode == 10, breached.stdout + breached.stderr
    report = json.loads(breached.stdout)
    first, second = report["waves"]
    promql = next(g for g in first["gates"] if g["gate"] == "promql")
    assert first["state"] == "breached" and not promql["held"] and "the result is empty" in promql["detail"]
    assert second["state"] == "pending"
    drained = cli("env", "drains", "--context", "local-example", "--output", "json")
    assert drained.returncode == 0, drained.stderr
    assert json.loads(drained.stdout)["providers"] == [], "--on-breach restore left a provider drained"


def test_a_bad_promql_expression_is_refused_before_any_write(cli, status, prom):
    bad = wave_drain(cli, prom, "sum(rate(")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "--gate-promql 'sum(rate('" in bad.stderr
    drained = cli("env", "drains", "--context", "local-example", "--output", "json")
    assert json.loads(drained.stdout)["providers"] == []


def test_a_dead_prometheus_is_reported_and_started_again_by_up_and_down_removes_it(cli, status, prom):
    pid = next(c["pid"] for c in cli.status()["components"] if c["name"] == "prometheus")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not cli.status()["prometheus"]["running"], what="Prometheus to be seen dead")
    dead = cli.status()
    assert dead["state"] == "degraded" and dead["prometheus"]["url"] is None
    assert (
        dead["prometheus"]["detail"].startswith("exited (log: ")
        and "`env up` starts it again" in dead["prometheus"]["detail"]
    )
    repaired = cli("env", "up", "--output", "json")
    assert repaired.returncode == 0, repaired.stderr
    report = parse_report(repaired.stdout, ENV_UP)
    assert (report["started"], report["prometheus"]) == (["prometheus"], prom)
    again = cli.status()
    assert again["state"] == "up" and again["prometheus"]["url"] == prom  # the same port
    folder = Path(cli.env["AGN_XTASK_HOME"]) / "envs" / "example" / "prometheus"
    assert (folder / "data").is_dir()
    record = ProcessRecord.from_file(
        Path(cli.env["AGN_XTASK_HOME"]) / "envs" / "example" / "run" / "prometheus.pid.json"
    )
    assert record is not None and is_alive(record)
    down = cli("env", "down")
    assert down.returncode == 0 and "prometheus" in down.stdout, down.stdout + down.stderr
    assert not is_alive(record) and not folder.exists()
    assert http_status(f"{prom}/-/ready") == 0
