"""The prober at fleet size, on the real API server with the real operator: hundreds of
providers served by ONE fake provider process through ``/pool/<name>`` paths, a bounded
probe concurrency, a backlog that is reported (and clears), per-network probe intervals,
and the CRD's validation of ``probeIntervalSeconds``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from test_operator import API, make_consumer, make_network, make_provider, states

from agn.kube import NETWORKS, KubeError
from agnprocs import http_json, sample, scrape, wait_for

pytestmark = pytest.mark.integration


def create_pool(kube, ns, base: str, names: list[str], *, network: str = "net") -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda n: make_provider(kube, ns, n, f"{base}/pool/{n}", network=network), names))


def test_300_providers_through_4_probe_slots_are_all_probed_and_admitted(kube, namespace, agn):
    names = [f"p{i:03d}" for i in range(300)]
    base = agn.provider("pool")
    make_network(kube, namespace)
    create_pool(kube, namespace, base, names)
    make_consumer(kube, namespace, "c1")
    url = agn.operator_with_health("--probe-concurrency", "4", "--probe-interval", "5")
    wait_for(
        lambda: states(kube, namespace, "c1") == dict.fromkeys(names, "admitted"),
        timeout=120,
        interval=0.5,
        what="all 300 providers admitted",
    )
    # Each provider of the pool was probed on its own path (its own state), none more than
    # the slots allow at once.
    checks = [http_json(f"{base}/pool/{n}/admin/state")["healthChecks"] for n in names]
    assert min(checks) >= 1
    metrics = scrape(f"{url}/metrics")
    assert sample(metrics, "agn_probe_concurrency") == 4
    assert sample(metrics, "agn_probe_in_flight") <= 4
    assert http_json(f"{url}/healthz")["probes"]["concurrency"] == 4


def test_too_few_slots_for_slow_providers_show_a_backlog_that_clears(kube, namespace, agn):
    names = [f"slow{i}" for i in range(12)]
    base = agn.provider("pool")
    for n in names:  # each probe takes 2 x 0.4 s; one slot cannot probe 12 providers every 0.5 s
        http_json(f"{base}/pool/{n}/admin/state", method="POST", body={"delaySeconds": 0.4})
    make_network(kube, namespace)
    create_pool(kube, namespace, base, names)
    url = agn.operator_with_health("--probe-concurrency", "1", "--probe-interval", "0.5", "--probe-timeout", "2")

    def behind():
        health = http_json(f"{url}/healthz")
        metrics = scrape(f"{url}/metrics")
        backlog, lag = sample(metrics, "agn_probe_backlog"), sample(metrics, "agn_probe_lag_seconds")
        # (finishedPerSecond: none is known before the first probe has finished)
        if health["probes"]["behind"] and backlog >= 5 and lag > 0.5 and health["probes"]["finishedPerSecond"]:
            return health, metrics
        return None

    health, metrics = wait_for(behind, timeout=30, interval=0.2, what="a reported probe backlog")
    assert health["ok"] is True  # a backlog is reported, not a reason to restart the operator
    assert health["probes"]["inFlight"] <= 1 and health["probes"]["concurrency"] == 1
    # It says what the networks ask (12 providers every 0.5 s), what finishes (one slot, each
    # probe 0.8 s: about 1.25/s) and the interval that would fit that.
    probes = health["probes"]
    assert probes["askedPerSecond"] == 24.0
    assert 0 < probes["finishedPerSecond"] < 24
    assert probes["fitsIntervalSeconds"] == round(12 / probes["finishedPerSecond"], 1)
    assert probes["fitsIntervalSeconds"] > 0.5
    # Nothing was dropped: every slow provider still gets probed.
    wait_for(
        lambda: all(http_json(f"{base}/pool/{n}/admin/state")["healthChecks"] >= 1 for n in names),
        timeout=60,
        interval=0.5,
        what="every slow provider probed despite the backlog",
    )
    metrics = scrape(f"{url}/metrics")
    started = sample(metrics, "agn_probe_start_delay_seconds_count")
    assert started >= len(names)
    assert sample(metrics, "agn_probe_start_delay_seconds_bucket", le="1.0") < started  # many started late
    for n in names:
        http_json(f"{base}/pool/{n}/admin/state", method="POST", body={"delaySeconds": 0})

    def caught_up():
        probes = http_json(f"{url}/healthz")["probes"]
        metrics = scrape(f"{url}/metrics")
        return not probes["behind"] and sample(metrics, "agn_probe_backlog") == 0 and probes

    wait_for(caught_up, timeout=60, interval=0.2, what="the backlog to clear once providers answer fast")


def test_a_networks_probe_interval_overrides_the_global_one(kube, namespace, agn):
    base = agn.provider("pool")
    make_network(kube, namespace, name="fast", probeIntervalSeconds=0.2)
    make_network(kube, namespace, name="slow")
    make_provider(kube, namespace, "pfast", f"{base}/pool/pfast", network="fast")
    make_provider(kube, namespace, "pslow", f"{base}/pool/pslow", network="slow")
    agn.operator("--probe-interval", "4", "--probe-jitter", "0")

    def checks(name: str) -> int:
        return http_json(f"{base}/pool/{name}/admin/state")["healthChecks"]

    wait_for(lambda: checks("pslow") >= 1, timeout=30, what="the first probe of pslow")
    first = checks("pslow")
    wait_for(lambda: checks("pfast") >= 12, timeout=30, interval=0.1, what="pfast probed every 0.2 s")
    # pfast's 12 probes took about 2.4 s; at 4 s, pslow was probed at most once more since.
    assert checks("pslow") - first <= 1


def test_probe_interval_is_validated_by_the_api_server(kube, namespace):
    def network(name: str, **spec):
        body = {
            "apiVersion": API,
            "kind": "InferenceNetwork",
            "metadata": {"name": name},
            "spec": {"providerSelector": {}, **spec},
        }
        return kube.create(NETWORKS, namespace, body)

    with pytest.raises(KubeError, match="probeIntervalSeconds"):
        network("too-fast", probeIntervalSeconds=0.01)
    with pytest.raises(KubeError, match="probeIntervalSeconds must be at most half of metricsMaxAgeSeconds"):
        network("expires", probeIntervalSeconds=30, metricsMaxAgeSeconds=45)
    assert network("ok", probeIntervalSeconds=2.5)["spec"]["probeIntervalSeconds"] == 2.5
    assert [n["metadata"]["name"] for n in kube.list(NETWORKS, namespace)[0]] == ["ok"]  # the refused ones left nothing
