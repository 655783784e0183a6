"""The operator's scrape-time gauges from plain objects: counts per admission state, and a
reading age only where there is a reading (absent, never 0)."""

from __future__ import annotations

from prometheus_client import generate_latest

from agn.operator.metrics import OperatorMetrics, overlay_samples, reading_ages


def test_overlay_samples_count_every_admission_state_per_consumer():
    overlays = [
        {
            "metadata": {"name": "c1"},
            "spec": {
                "consumer": "c1",
                "revision": 7,
                "candidates": [{"admission_state": "admitted"}, {"admission_state": "existing_only"}]
                + [{"admission_state": "admitted"}],
            },
        },
        {"metadata": {"name": "c2"}, "spec": {"consumer": "c2", "revision": 1, "candidates": []}},
    ]
    revisions, counts = overlay_samples(overlays)
    assert revisions == {"c1": 7, "c2": 1}
    assert counts == {
        ("c1", "admitted"): 2,
        ("c1", "existing_only"): 1,
        ("c2", "admitted"): 0,
        ("c2", "existing_only"): 0,
    }


def test_overlay_samples_of_a_sharded_index_come_from_its_admission_counts():
    # An index carries no candidates; reading its shards at every scrape would cost a list per shard.
    index = {
        "metadata": {"name": "c1"},
        "spec": {
            "consumer": "c1",
            "revision": 4,
            "candidateCount": 5000,
            "admission": {"admitted": 4990, "existing_only": 10},
            "shardCount": 16,
            "shards": [{"name": "c1-shard-00", "digest": "d", "candidates": 5000}],
        },
    }
    revisions, counts = overlay_samples([index])
    assert revisions == {"c1": 4}
    assert counts == {("c1", "admitted"): 4990, ("c1", "existing_only"): 10}


def test_reading_age_is_absent_without_a_reading():
    providers = [
        {"metadata": {"name": "fresh"}, "status": {"probe": {"metricsObservedAt": "2026-01-01T00:00:10Z"}}},
        {"metadata": {"name": "never"}, "status": {"probe": {"healthy": True}}},
        {"metadata": {"name": "new"}},
    ]
    now = 1767225600.0 + 15  # 2026-01-01T00:00:15Z
    assert reading_ages(providers, now=now) == {"fresh": 5.0}


def test_registry_is_per_process_object_and_deleted_providers_lose_their_series():
    a, b = OperatorMetrics(), OperatorMetrics()  # two in one process do not clash
    a.probed("p1", seconds=0.01, health_failed=True, metrics_failed=True)
    a.probed("p2", seconds=0.01, health_failed=True, metrics_failed=False)
    assert b'provider="p1"' in generate_latest(a.registry) and b'provider="p1"' not in generate_latest(b.registry)
    a.forget_providers({"p2"})
    text = generate_latest(a.registry).decode()
    assert 'provider="p1"' not in text and 'agn_probe_failures_total{check="health",provider="p2"} 1.0' in text
    assert "agn_probe_duration_seconds_count 2.0" in text


def test_body_bytes_are_counted_per_kind_from_zero():
    from agn.operator.writes import body_bytes, body_kind

    assert [body_kind(p) for p in ("routingoverlays", "routingoverlayshards", "inferenceproviders/status", "x")] == [
        "index",
        "shard",
        "status",
        "other",
    ]
    assert body_bytes({"a": [1, 2]}) == len('{"a": [1, 2]}')  # as the Kubernetes client sends it
    m = OperatorMetrics()
    text = generate_latest(m.registry).decode()
    assert 'agn_operator_write_bytes_total{kind="shard"} 0.0' in text  # a count exists before the first write
    m.wrote("shard", 5000)
    m.wrote("shard", 120)
    text = generate_latest(m.registry).decode()
    assert 'agn_operator_write_bytes_total{kind="shard"} 5120.0' in text
    assert 'agn_operator_write_bytes_total{kind="index"} 0.0' in text
