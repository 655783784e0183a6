"""Expired drain holds on the real API server, seen by the real operator: a hold drained with
``--expires-in 5s`` yields exactly one ``HoldExpired`` Warning Event on its provider, naming its
owner, holder and ticket, and still exactly one after the operator restarts (the restarted
operator's create of the same Event is answered 409); ``agn_drain_holds_expired`` counts it.
Expiry is judged on the API server's clock."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agn.kube import PROVIDERS
from agnprocs import http_json, sample, scrape, wait_for
from kubetest import events

pytestmark = pytest.mark.integration


def expired_gauge(url: str) -> float | None:
    return sample(scrape(f"{url}/metrics"), "agn_drain_holds_expired")


def test_an_expired_hold_is_reported_once_across_restarts(control_plane, kube, namespace, agn, tmp_path):
    kube.create(
        PROVIDERS,
        namespace,
        {
            "apiVersion": "agn.dev/v1alpha1",
            "kind": "InferenceProvider",
            "metadata": {"name": "p1"},
            "spec": {"endpoint": "http://127.0.0.1:9/p1", "providerGateway": "gw", "selectionGroup": "chat"},
        },
    )
    url = agn.operator_with_health()
    argv = [sys.executable, "-m", "xtask", "env", "provider-drain", "--context", control_plane.context]
    argv += ["-n", namespace, "--journal-dir", str(tmp_path / "journal"), "--provider", "p1"]
    argv += ["--holder", "night shift", "--ticket", "CHG-42", "--expires-in", "5s"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=control_plane.env(), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    def expired_events() -> list[dict]:
        return events(kube, namespace, regarding="p1", reason="HoldExpired")

    (event,) = wait_for(expired_events, timeout=60, what="a HoldExpired Event")
    assert event["type"] == "Warning" and event["regarding"]["uid"]
    assert "owner agn-admin, holder night shift, ticket CHG-42" in event["note"]
    wait_for(lambda: expired_gauge(url) == 1, what="agn_drain_holds_expired 1")

    agn.stop("operator")
    url = agn.operator_with_health()
    # The restarted operator tried to record it again: the API server answered 409.
    wait_for(
        lambda: "hold expiry already recorded" in agn.log("operator"),
        what="the restarted operator's create of the HoldExpired Event, answered 409",
    )
    assert http_json(f"{url}/healthz")["writes"].get("events:create", 0) >= 1
    assert len(expired_events()) == 1
    assert expired_gauge(url) == 1
    # The hold still holds: expiry is reported, never acted on.
    assert kube.get(PROVIDERS, namespace, "p1")["spec"]["trafficPolicy"]["drain"] is True
