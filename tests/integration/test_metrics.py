"""``/metrics`` of the real operator and the real gateways, scraped while real things happen:
a drain through the CLI, requests routed through a gateway, a provider turning unhealthy,
a provider whose metrics export is turned off. Every value asserted is one the action moves.
"""

from __future__ import annotations

import ssl
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agnprocs import http_json, sample, scrape, wait_for
from drainenv import CONSUMER_NAMES, DrainEnv
from xtask.runtime.certs import CertPaths

pytestmark = pytest.mark.integration


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up()


def operator_metrics(env: DrainEnv) -> dict:
    return scrape(f"{env.operator_url}/metrics")


def gateway_metrics(env: DrainEnv, consumer: str) -> dict:
    return scrape(f"{env.gateways[consumer]}/metrics")


def complete(env: DrainEnv, consumer: str, *, session: str, group: str | None = None):
    headers = {"x-session-id": session, **({"x-selection-group": group} if group else {})}
    return http_json(f"{env.gateways[consumer]}/v1/completions", method="POST", body={"prompt": "hi"}, headers=headers)


def test_operator_overlay_gauges_follow_a_drain(env: DrainEnv):
    before = operator_metrics(env)
    for c in CONSUMER_NAMES:
        assert sample(before, "agn_overlay_revision", consumer=c) == env.overlay(c)["revision"]
        assert sample(before, "agn_overlay_candidates", consumer=c, admission_state="admitted") == 4
        assert sample(before, "agn_overlay_candidates", consumer=c, admission_state="existing_only") == 0
    assert sample(before, "agn_operator_leader") == 1
    assert sample(before, "agn_operator_queue_depth") is not None
    assert (sample(before, "agn_operator_reconcile_duration_seconds_count") or 0) > 0
    assert sample(before, "agn_operator_reconcile_errors_total") == 0

    code, report = env.run_json("--gateway", "gw-a", *env.targets())
    assert code == 0, report
    after = operator_metrics(env)
    for c in CONSUMER_NAMES:
        revision = env.overlay(c)["revision"]
        assert revision > sample(before, "agn_overlay_revision", consumer=c)
        assert sample(after, "agn_overlay_revision", consumer=c) == revision
        assert sample(after, "agn_overlay_candidates", consumer=c, admission_state="admitted") == 2
        assert sample(after, "agn_overlay_candidates", consumer=c, admission_state="existing_only") == 2


def apiserver_body_bytes(env: DrainEnv) -> dict[str, float]:
    """The API server's own view: ``apiserver_request_body_size_bytes_sum`` per resource, read
    with the control plane's admin certificate."""
    certs = CertPaths.under(env.cp.state_dir / "certs")
    tls = ssl.create_default_context(cafile=str(certs.ca_cert))
    tls.load_cert_chain(str(certs.admin_cert), str(certs.admin_key))
    with urllib.request.urlopen(f"{env.cp.server}/metrics", context=tls, timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "apiserver_request_body_size_bytes_sum":
                out[s.labels["resource"]] = out.get(s.labels["resource"], 0.0) + s.value
    return out


def test_operator_counts_the_bytes_it_writes_as_the_api_server_receives_them(env: DrainEnv):
    def written(samples: dict) -> tuple[float, float, float]:
        return (
            sample(samples, "agn_operator_write_bytes_total", kind="index") or 0.0,
            sample(samples, "agn_operator_write_bytes_total", kind="shard") or 0.0,
            sample(samples, "agn_overlay_publication_bytes_count") or 0.0,
        )

    def received(server: dict[str, float]) -> tuple[float, float]:
        return server.get("routingoverlays", 0.0), server.get("routingoverlayshards", 0.0)

    index0, shard0, published0 = written(operator_metrics(env))
    server0 = received(apiserver_body_bytes(env))
    assert index0 > 0 and shard0 > 0 and published0 >= len(CONSUMER_NAMES)  # the first publications

    code, report = env.run_json("--provider", "p-one", *env.targets())
    assert code == 0, report
    seen: list = []

    def agree() -> bool:
        index, shard, published = written(operator_metrics(env))
        server = received(apiserver_body_bytes(env))
        seen.append(((index - index0, shard - shard0), (server[0] - server0[0], server[1] - server0[1])))
        # Only the operator writes overlays: what it counted sending is what the server received.
        return published > published0 and seen[-1][0] == seen[-1][1] and index > index0 and shard > shard0

    wait_for(agree, timeout=30, what=f"the operator's counted bytes to match the API server's: {seen[-3:]}")
    # Each publication here (four providers) is under 16 KiB: the histogram holds every one there.
    after = operator_metrics(env)
    assert sample(after, "agn_overlay_publication_bytes_bucket", le="16384.0") == sample(
        after, "agn_overlay_publication_bytes_count"
    )


def test_operator_probe_metrics_count_failures_and_reading_age(env: DrainEnv):
    first = operator_metrics(env)
    assert (sample(first, "agn_probe_duration_seconds_count") or 0) >= 4
    for name in env.urls:
        age = sample(first, "agn_provider_reading_age_seconds", provider=name)
        assert age is not None and 0 <= age < 45, (name, age)
    assert sample(first, "agn_probe_failures_total", provider="p-two", check="health") is None

    env.set_health("p-two", False)
    wait_for(
        lambda: (sample(operator_metrics(env), "agn_probe_failures_total", provider="p-two", check="health") or 0) >= 2,
        timeout=30,
        what="two failed health probes of p-two counted",
    )
    assert sample(operator_metrics(env), "agn_probe_failures_total", provider="p-one", check="health") is None

    # Metrics export off: the scrape fails (counted), and the last reading only gets older.
    http_json(f"{env.urls['p-three']}/admin/state", method="POST", body={"metrics": False})
    wait_for(
        lambda: (
            (sample(operator_metrics(env), "agn_probe_failures_total", provider="p-three", check="metrics") or 0) >= 1
        ),
        timeout=30,
        what="a failed metrics scrape of p-three counted",
    )
    ages = [sample(operator_metrics(env), "agn_provider_reading_age_seconds", provider="p-three")]
    wait_for(
        lambda: (
            ages.append(sample(operator_metrics(env), "agn_provider_reading_age_seconds", provider="p-three"))
            or ages[-1] > ages[0] + 1
        ),
        timeout=30,
        what="p-three's reading to age",
    )


def test_gateway_counts_requests_sticky_hits_and_reports_its_revisions(env: DrainEnv):
    consumer = "c-a"
    m = gateway_metrics(env, consumer)
    revision = env.overlay(consumer)["revision"]
    assert sample(m, "agn_gateway_serving_revision") == sample(m, "agn_gateway_accepted_revision") == revision
    assert sample(m, "agn_gateway_requests_total", outcome="routed", admission_state="admitted") is None

    first = complete(env, consumer, session="s1", group="chat")
    again = complete(env, consumer, session="s1", group="chat")
    assert first["provider"] == again["provider"] == "p-one"
    m = gateway_metrics(env, consumer)
    assert sample(m, "agn_gateway_requests_total", outcome="routed", admission_state="admitted") == 2
    assert sample(m, "agn_gateway_sticky_hits_total") == 1

    # Drain the session's provider: the session stays on it, now existing_only.
    code, report = env.run_json("--provider", "p-one", *env.targets())
    assert code == 0, report
    assert complete(env, consumer, session="s1", group="chat")["admission_state"] == "existing_only"
    m = gateway_metrics(env, consumer)
    assert sample(m, "agn_gateway_requests_total", outcome="routed", admission_state="existing_only") == 1
    assert sample(m, "agn_gateway_sticky_hits_total") == 2
    new_revision = env.overlay(consumer)["revision"]
    assert new_revision > revision
    assert sample(m, "agn_gateway_serving_revision") == sample(m, "agn_gateway_accepted_revision") == new_revision

    # A group with no admitted candidate: 503, counted as no_route.
    try:
        complete(env, consumer, session="s2", group="no-such-group")
    except Exception as exc:  # noqa: BLE001 - urllib raises HTTPError for the 503
        assert getattr(exc, "code", None) == 503
    else:
        raise AssertionError("a request for an empty group was routed")
    m = gateway_metrics(env, consumer)
    assert sample(m, "agn_gateway_requests_total", outcome="no_route", admission_state="none") == 1
