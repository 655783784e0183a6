"""The probes heartbeat (agn/operator/heartbeat.py) and how readers judge freshness by it
(agn.objects.provider_view / with_heartbeat): it vouches only for a reading the status calls
fresh, never makes one newer than the heartbeat, and nothing is vouched for without it."""

from __future__ import annotations

from agn.model import Exclusion, NetworkView, hard_failure
from agn.objects import provider_view, rfc3339
from agn.operator.heartbeat import HEARTBEAT_LEASE, heartbeat_body, heartbeat_time

T0 = 1_700_000_000.0
NET = NetworkView("net", metrics_max_age_seconds=45)


def provider(*, fresh: str = "True", observed: float | None = T0) -> dict:
    probe: dict = {"healthy": True, "healthObservedAt": rfc3339(T0)}
    if observed is not None:
        probe["metricsObservedAt"] = rfc3339(observed)
    return {
        "metadata": {"name": "p1", "uid": "u1"},
        "spec": {"endpoint": "http://127.0.0.1:9000"},
        "status": {"probe": probe, "conditions": [{"type": "MetricsFresh", "status": fresh}]},
    }


def test_a_fresh_status_counts_as_observed_at_the_heartbeat():
    view = provider_view(provider(), T0 + 600)
    assert view.metrics_observed_at == T0 + 600
    assert hard_failure(view, NET, now=T0 + 610) is None
    # Without the heartbeat the same unchanged status went stale long ago.
    assert hard_failure(provider_view(provider()), NET, now=T0 + 610) is Exclusion.STALE


def test_a_stopped_heartbeat_lets_the_reading_expire():
    view = provider_view(provider(), T0 + 600)
    assert hard_failure(view, NET, now=T0 + 600 + 46) is Exclusion.STALE


def test_nothing_is_vouched_for_that_the_status_does_not_call_fresh():
    stale = provider_view(provider(fresh="False"), T0 + 600)
    assert stale.metrics_observed_at == T0
    never = provider_view(provider(fresh="False", observed=None), T0 + 600)
    assert never.metrics_observed_at is None
    # A heartbeat older than the reading never moves it back.
    assert provider_view(provider(), T0 - 5).metrics_observed_at == T0


def test_the_lease_body_and_its_time():
    body = heartbeat_body("op-1", T0)
    assert body["metadata"] == {"name": HEARTBEAT_LEASE}
    assert body["spec"]["holderIdentity"] == "op-1"
    assert heartbeat_time(body) == T0
    update = heartbeat_body("op-1", T0 + 2, current={"metadata": {"resourceVersion": "7"}})
    assert update["metadata"]["resourceVersion"] == "7"
    assert heartbeat_time(None) is None and heartbeat_time({"spec": {}}) is None
