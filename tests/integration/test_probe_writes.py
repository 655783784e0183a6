"""Provider status writes at fleet size, counted by the real kube-apiserver itself
(``apiserver_request_total`` on its ``/metrics``): with nothing changing, the operator writes no
provider status, only its probes heartbeat (the Lease ``agn-probes``, docs/operator.md); a
provider process killed for real is excluded within failure threshold × interval + 2 s; a
drained provider's reading that stops coming expires and is never shown as 0.
"""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_operator import make_consumer, make_network, make_provider, provider_status, set_drain, states
from test_probe_fleet import create_pool

from agn.kube import LEASES, NETWORKS, PROVIDERS
from agn.model import Exclusion, hard_failure
from agn.objects import network_view, parse_time, provider_view
from agn.operator.heartbeat import HEARTBEAT_LEASE, read_heartbeat
from agnprocs import http_json, sample, scrape, wait_for
from xtask.drain.core.idle import UNKNOWN, classify

pytestmark = pytest.mark.integration

WRITE_VERBS = {"POST", "PUT", "PATCH", "APPLY", "DELETE"}


def apiserver_writes(kube) -> dict[tuple[str, str], float]:
    """Writes the kube-apiserver has served since it started, by (resource, subresource)."""
    # The admin client's own connection pool (its client certificate): GET /metrics.
    resp = kube.api_client.call_api("GET", f"{kube.host}/metrics", _request_timeout=30)
    resp.read()
    text = resp.data.decode()
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for s in family.samples:
            if s.name == "apiserver_request_total" and s.labels.get("verb") in WRITE_VERBS:
                key = (s.labels.get("resource", ""), s.labels.get("subresource", ""))
                out[key] = out.get(key, 0.0) + s.value
    return out


def probes_done(url: str) -> float:
    return sample(scrape(f"{url}/metrics"), "agn_probe_duration_seconds_count") or 0.0


def test_nothing_changing_writes_no_provider_status_only_the_heartbeat(kube, namespace, agn):
    names = [f"p{i:03d}" for i in range(200)]
    base = agn.provider("pool")
    # A metrics bound far shorter than the window: without the heartbeat every unchanged
    # status would go stale and leave the overlay.
    make_network(kube, namespace, metricsMaxAgeSeconds=5)
    create_pool(kube, namespace, base, names)
    make_consumer(kube, namespace, "c1")
    url = agn.operator_with_health("--probe-interval", "1")
    wait_for(
        lambda: states(kube, namespace, "c1") == dict.fromkeys(names, "admitted"),
        timeout=120,
        interval=0.5,
        what="all 200 providers admitted",
    )
    wait_for(lambda: read_heartbeat(kube, namespace), what="the probes heartbeat")
    before, probed = apiserver_writes(kube), probes_done(url)
    # The window: every provider probed about ten more times (about 10 s at a 1 s interval).
    wait_for(lambda: probes_done(url) >= probed + 10 * len(names), timeout=60, interval=0.5, what="2,000 probes")
    after = apiserver_writes(kube)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    assert delta.get(("inferenceproviders", "status"), 0.0) == 0, delta
    assert delta.get(("leases", ""), 0.0) >= 1, delta  # the heartbeat (and the leader lease, if any)
    assert delta.get(("routingoverlays", ""), 0.0) == 0 and delta.get(("routingoverlayshards", ""), 0.0) == 0, delta
    # Still all admitted, and every reader judges them fresh as of the heartbeat.
    assert states(kube, namespace, "c1") == dict.fromkeys(names, "admitted")
    heartbeat = read_heartbeat(kube, namespace)
    network = network_view(kube.get(NETWORKS, namespace, "net"))
    for obj in kube.list(PROVIDERS, namespace)[0]:
        assert "load" not in obj["status"]  # not drained: absent, never a number nobody published
        assert hard_failure(provider_view(obj, heartbeat), network, now=time.time()) is None
    assert http_json(f"{url}/healthz")["writes"].get("leases:update", 0) >= 1


def test_a_provider_process_killed_for_real_is_excluded_within_the_bound(kube, namespace, agn):
    names = [f"p{i:03d}" for i in range(100)]
    base = agn.provider("pool")
    make_network(kube, namespace)
    create_pool(kube, namespace, base, names)
    make_provider(kube, namespace, "solo", agn.provider("solo"))
    make_consumer(kube, namespace, "c1")
    agn.operator("--probe-interval", "1", "--probe-failure-threshold", "3")
    want = {**dict.fromkeys(names, "admitted"), "solo": "admitted"}
    wait_for(lambda: states(kube, namespace, "c1") == want, timeout=120, interval=0.5, what="all admitted")
    agn.stop("provider-solo")  # TERM, then KILL: the process is gone, its port refuses
    # Failure threshold × interval + 2 s.
    wait_for(lambda: "solo" not in states(kube, namespace, "c1"), timeout=3 * 1 + 2, interval=0.1, what="solo out")
    available = next(c for c in provider_status(kube, namespace, "solo")["conditions"] if c["type"] == "Available")
    assert (available["status"], available["reason"]) == ("False", "HealthCheckFailed")  # what kubectl get shows
    assert len(states(kube, namespace, "c1")) == len(names)


def test_a_reading_that_stops_coming_expires_and_is_never_zero(kube, namespace, agn):
    base = agn.provider("pool")
    make_network(kube, namespace, metricsMaxAgeSeconds=3)
    create_pool(kube, namespace, base, ["busy", "quiet"])
    make_consumer(kube, namespace, "c1")
    http_json(f"{base}/pool/busy/admin/state", method="POST", body={"waiting": 3})
    agn.operator("--probe-interval", "1")
    wait_for(lambda: states(kube, namespace, "c1") == {"busy": "admitted", "quiet": "admitted"}, what="admitted")
    set_drain(kube, namespace, "busy", True)
    first = wait_for(lambda: provider_status(kube, namespace, "busy").get("load"), what="busy's load published")
    assert first["waiting"] == 3
    # The same load is not rewritten: the probes heartbeat vouches for it while the operator probes.
    wait_for(
        lambda: (read_heartbeat(kube, namespace) or 0) > parse_time(first["observedAt"]),
        what="a heartbeat after the reading",
    )
    assert provider_status(kube, namespace, "busy")["load"] == first
    assert kube.get(LEASES, namespace, HEARTBEAT_LEASE)["spec"]["renewTime"]
    agn.stop("operator")  # the readings (and the heartbeat) stop coming

    def judged():
        obj = kube.get(PROVIDERS, namespace, "busy")
        return classify("busy", obj, max_age=3, now=time.time())

    reading = wait_for(lambda: (r := judged()).state == UNKNOWN and r, timeout=15, interval=0.2, what="expiry")
    assert reading.why == "reading expired: older than metricsMaxAgeSeconds 3"
    assert reading.waiting == 3 and reading.last_reading()["waiting"] == 3  # the last reading, never 0
    # The quiet provider: no load published at all, and once the heartbeat is older than the
    # bound, its unchanged status is stale to every reader too.
    quiet = kube.get(PROVIDERS, namespace, "quiet")
    assert "load" not in quiet["status"]
    network = network_view(kube.get(NETWORKS, namespace, "net"))
    heartbeat = read_heartbeat(kube, namespace)
    wait_for(lambda: time.time() - heartbeat > 3, timeout=10, interval=0.2, what="the heartbeat to age past the bound")
    assert hard_failure(provider_view(quiet, heartbeat), network, now=time.time()) is Exclusion.STALE


def test_a_drained_providers_unchanged_load_is_not_rewritten_a_changed_one_is(kube, namespace, agn):
    """Over several probe rounds a drained provider whose engine keeps reporting the same load
    is not rewritten (its resourceVersion stays); the heartbeat keeps that reading fresh. One
    whose in-flight count changes is rewritten with the new count."""
    base = agn.provider("pool")
    make_network(kube, namespace, metricsMaxAgeSeconds=3)
    create_pool(kube, namespace, base, ["steady", "moving"])
    make_consumer(kube, namespace, "c1")
    http_json(f"{base}/pool/steady/admin/state", method="POST", body={"waiting": 2})
    url = agn.operator_with_health("--probe-interval", "1")
    wait_for(lambda: states(kube, namespace, "c1") == {"steady": "admitted", "moving": "admitted"}, what="admitted")
    for name in ("steady", "moving"):
        set_drain(kube, namespace, name, True)
    wait_for(lambda: provider_status(kube, namespace, "steady").get("load", {}).get("waiting") == 2, what="steady")
    wait_for(lambda: provider_status(kube, namespace, "moving").get("load", {}).get("waiting") == 0, what="moving")
    steady = kube.get(PROVIDERS, namespace, "steady")
    probed = probes_done(url)
    # Five more probes of each (at a 1 s interval): before this change, five rewrites.
    wait_for(lambda: probes_done(url) >= probed + 10, timeout=30, interval=0.2, what="five probe rounds")
    heartbeat = wait_for(
        lambda: (
            (b := read_heartbeat(kube, namespace)) and b > parse_time(steady["status"]["load"]["observedAt"]) + 3 and b
        ),
        timeout=30,
        interval=0.2,
        what="a heartbeat past the bound after the reading",
    )
    again = kube.get(PROVIDERS, namespace, "steady")
    assert again["metadata"]["resourceVersion"] == steady["metadata"]["resourceVersion"]
    assert again["status"]["load"] == steady["status"]["load"]
    # Older than metricsMaxAgeSeconds by its observedAt, yet fresh: the heartbeat vouches for it.
    reading = classify("steady", again, max_age=3, now=heartbeat + 1, vouched_at=heartbeat)
    assert (reading.state, reading.waiting) == ("busy", 2)
    before = kube.get(PROVIDERS, namespace, "moving")["metadata"]["resourceVersion"]
    http_json(f"{base}/pool/moving/admin/state", method="POST", body={"waiting": 1})
    wait_for(lambda: provider_status(kube, namespace, "moving")["load"].get("waiting") == 1, what="moving rewritten")
    assert kube.get(PROVIDERS, namespace, "moving")["metadata"]["resourceVersion"] != before
