"""Provider status from probe outcomes: conditions, absent load, merge patches, write decisions."""

from __future__ import annotations

from agn.model import NetworkView, candidate_id
from agn.objects import parse_time, rfc3339
from agn.operator.prometheus import LoadReading
from agn.operator.provider_status import (
    Condition,
    ProbeOutcome,
    merge_conditions,
    merge_patch,
    metrics_max_age,
    next_status,
    published,
    refresh_seconds,
    selecting_networks,
    should_write,
    tolerated,
)

T0 = 1_700_000_000.0
EP = "http://127.0.0.1:8000"
NETS = [NetworkView("net", metrics_max_age_seconds=45)]


def ok(at: float, *, running=1, waiting=2) -> ProbeOutcome:
    return ProbeOutcome(at, True, True, None, metrics_ok=True, load=LoadReading(running, waiting))


def status_after(*outcomes: ProbeOutcome, endpoint: str = EP, networks=NETS) -> dict:
    status: dict = {}
    for o in outcomes:
        status = next_status(status, o, uid="u1", generation=3, endpoint=endpoint, networks=networks)
    return status


def conds(status: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_healthy_provider_status():
    s = status_after(ok(T0))
    assert s["candidateId"] == candidate_id("u1")
    assert s["observedGeneration"] == 3
    assert s["probe"]["healthy"] is True
    assert parse_time(s["probe"]["metricsObservedAt"]) == parse_time(rfc3339(T0))
    assert s["load"] == {"running": 1, "waiting": 2, "observedAt": rfc3339(T0)}
    assert conds(s) == {
        "Valid": ("True", "EndpointValid"),
        "Available": ("True", "HealthCheckPassed"),
        "MetricsFresh": ("True", "MetricsFresh"),
        "Trusted": ("True", "Trusted"),
    }


def test_absent_waiting_is_absent_not_zero():
    s = status_after(ok(T0, waiting=None))
    assert "waiting" not in s["load"] and s["load"]["running"] == 1


def test_failed_scrape_keeps_last_success_time_and_load():
    failed = ProbeOutcome(T0 + 10, True, True, None, metrics_ok=False, metrics_error="GET /metrics: HTTP 404")
    s = status_after(ok(T0), failed)
    assert s["probe"]["metricsObservedAt"] == rfc3339(T0)
    assert s["probe"]["metricsError"] == "GET /metrics: HTTP 404"
    assert s["load"]["waiting"] == 2
    assert conds(s)["MetricsFresh"] == ("True", "MetricsFresh")
    stale = ProbeOutcome(T0 + 46, True, True, None, metrics_ok=False, metrics_error="GET /metrics: HTTP 404")
    s2 = status_after(ok(T0), stale)
    assert conds(s2)["MetricsFresh"] == ("False", "MetricsStale")


def test_never_scraped_has_no_metrics_time():
    s = status_after(ProbeOutcome(T0, True, False, "GET /healthz: HTTP 503", metrics_error="GET /metrics: timed out"))
    assert "metricsObservedAt" not in s["probe"] and "load" not in s
    assert conds(s)["Available"] == ("False", "HealthCheckFailed")
    assert conds(s)["MetricsFresh"] == ("False", "NoMetrics")


def test_invalid_endpoint_is_not_probed():
    s = status_after(ProbeOutcome(T0, False, health_error="not probed"), endpoint="ftp://x")
    assert "healthy" not in s["probe"]
    assert conds(s)["Valid"] == ("False", "InvalidEndpoint")
    assert conds(s)["Available"][0] == "Unknown"


def test_trusted_condition_follows_selecting_networks():
    strict = [NetworkView("a", allowed_schemes=("https",)), NetworkView("b")]
    s = status_after(ok(T0), networks=strict)
    assert conds(s)["Trusted"] == ("False", "Untrusted")
    assert "a" in next(c for c in s["conditions"] if c["type"] == "Trusted")["message"]
    assert conds(status_after(ok(T0), networks=[]))["Trusted"] == ("True", "NoNetwork")


def test_transition_time_moves_only_on_flip():
    prev = merge_conditions([], [Condition("Available", "True", "r", "m")], now=T0)
    same = merge_conditions(prev, [Condition("Available", "True", "r2", "m2")], now=T0 + 5)
    assert same[0]["lastTransitionTime"] == rfc3339(T0)
    flipped = merge_conditions(same, [Condition("Available", "False", "r", "m")], now=T0 + 9)
    assert flipped[0]["lastTransitionTime"] == rfc3339(T0 + 9)


def test_write_decision():
    a = status_after(ok(T0))
    b = status_after(ok(T0), ok(T0 + 1))  # only timestamps moved
    assert not should_write(a, b, last_write_at=T0, now=T0 + 1, refresh=10)
    assert should_write(a, b, last_write_at=T0, now=T0 + 10, refresh=10)
    assert should_write(a, b, last_write_at=None, now=T0 + 1, refresh=10)
    c = status_after(ok(T0), ok(T0 + 1, waiting=7))
    assert should_write(a, c, last_write_at=T0, now=T0 + 1, refresh=10)
    unhealthy = status_after(ok(T0), ProbeOutcome(T0 + 1, True, False, "x", metrics_ok=True, load=LoadReading(1, 2)))
    assert should_write(a, unhealthy, last_write_at=T0, now=T0 + 1, refresh=10)


def quiet_status_after(*outcomes: ProbeOutcome) -> dict:
    """As the operator keeps a provider that is not drained: no load published."""
    status: dict = {}
    for o in outcomes:
        status = next_status(status, o, uid="u1", generation=3, endpoint=EP, networks=NETS)
    return published(status, load=False)


def test_changes_only_an_unchanged_status_is_never_rewritten():
    a = quiet_status_after(ok(T0))
    b = quiet_status_after(ok(T0), ok(T0 + 1, running=5, waiting=9))  # the load moved; not published
    assert "load" not in a and "load" not in b
    assert not should_write(a, b, last_write_at=T0, now=T0 + 1, refresh=None)
    assert not should_write(a, b, last_write_at=T0, now=T0 + 3600, refresh=None)
    assert should_write(a, b, last_write_at=None, now=T0 + 1, refresh=None)  # never written in this term
    down = quiet_status_after(ok(T0), ProbeOutcome(T0 + 1, True, False, "x", metrics_ok=True))
    assert should_write(a, down, last_write_at=T0, now=T0 + 1, refresh=None)  # a transition
    failed = quiet_status_after(ok(T0), ProbeOutcome(T0 + 1, True, True, None, metrics_error="GET /metrics: x"))
    assert should_write(a, failed, last_write_at=T0, now=T0 + 1, refresh=None)


def test_changes_only_a_drained_providers_same_load_is_not_rewritten():
    a = status_after(ok(T0, running=0, waiting=0))
    b = status_after(ok(T0, running=0, waiting=0), ok(T0 + 1, running=0, waiting=0))  # same load, new reading
    assert not should_write(a, b, last_write_at=T0, now=T0 + 1, refresh=None)  # the heartbeat vouches for it
    assert not should_write(a, b, last_write_at=T0, now=T0 + 3600, refresh=None)
    busy = status_after(ok(T0, running=0, waiting=0), ok(T0 + 1, running=2, waiting=0))
    assert should_write(a, busy, last_write_at=T0, now=T0 + 1, refresh=None)  # in-flight count changed
    busier = status_after(ok(T0 + 1, running=2, waiting=0), ok(T0 + 2, running=3, waiting=0))
    assert should_write(busy, busier, last_write_at=T0 + 1, now=T0 + 2, refresh=None)
    same = status_after(ok(T0 + 2, running=3, waiting=0), ok(T0 + 3, running=3, waiting=0))
    assert not should_write(busier, same, last_write_at=T0 + 2, now=T0 + 3, refresh=None)
    # A failed scrape keeps the last reading (its observedAt): nothing new to publish but the error.
    stale = next_status(
        b,
        ProbeOutcome(T0 + 2, True, True, None, metrics_error="GET /metrics: x"),
        uid="u1",
        generation=3,
        endpoint=EP,
        networks=NETS,
    )
    assert stale["load"] == b["load"]
    assert should_write(b, stale, last_write_at=T0 + 1, now=T0 + 2, refresh=None)  # the error is news


def test_refresh_keeps_metrics_fresh():
    assert refresh_seconds(45) == 10
    assert refresh_seconds(3) == 1
    assert metrics_max_age([]) == 45
    assert (
        metrics_max_age([NetworkView("a", metrics_max_age_seconds=9), NetworkView("b", metrics_max_age_seconds=2)]) == 2
    )


def test_selecting_networks():
    nets = [NetworkView("a", match_labels={"t": "x"}), NetworkView("b")]
    assert [n.name for n in selecting_networks({"t": "y"}, nets)] == ["b"]


def test_merge_patch_nulls_vanished_fields():
    old = {"probe": {"healthy": True, "healthError": "x"}, "load": {"running": 1, "waiting": 2}, "extra": 1}
    new = {"probe": {"healthy": True}, "load": {"running": 1}}
    assert merge_patch(old, new) == {"probe": {"healthError": None}, "load": {"waiting": None}, "extra": None}
    assert merge_patch(new, new) == {}
    assert merge_patch({}, new) == new
    assert merge_patch({"c": [1, 2]}, {"c": [1]}) == {"c": [1]}


def test_merge_patch_applied_gives_new():
    def apply(target, patch):
        out = dict(target)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif isinstance(v, dict) and isinstance(out.get(k), dict):
                out[k] = apply(out[k], v)
            else:
                out[k] = v
        return out

    a = status_after(ok(T0))
    b = status_after(ok(T0), ProbeOutcome(T0 + 50, True, False, "down", metrics_error="HTTP 404"))
    c = status_after(ok(T0), ok(T0 + 60, waiting=None))
    for old, new in ((a, b), (b, c), (c, a), ({}, a)):
        assert apply(old, merge_patch(old, new)) == new


class TestFailureThreshold:
    def outcome(self, healthy):
        return ProbeOutcome(1.0, True, healthy, None if healthy else "GET /healthz: timed out")

    def test_a_healthy_provider_survives_fewer_failures_than_the_threshold(self):
        got = tolerated(self.outcome(False), failures=2, previously_healthy=True, threshold=3)
        assert got.healthy is True and got.health_error is None

    def test_the_threshold_th_failure_counts(self):
        got = tolerated(self.outcome(False), failures=3, previously_healthy=True, threshold=3)
        assert got.healthy is False and "timed out" in got.health_error

    def test_a_provider_not_yet_healthy_gets_no_grace(self):
        assert tolerated(self.outcome(False), failures=1, previously_healthy=False, threshold=3).healthy is False

    def test_success_counts_at_once(self):
        assert tolerated(self.outcome(True), failures=0, previously_healthy=False, threshold=3).healthy is True
