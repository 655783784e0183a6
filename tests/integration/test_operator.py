"""The real operator against the real control plane, with real fake providers.

Every wait is a wait-for-condition with a timeout that fails the test; no fixed sleeps.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS
from agn.model import candidate_id
from agn.objects import parse_time
from agn.overlays import read_overlay
from agn.shards import Incomplete
from agnprocs import http_json, wait_for

pytestmark = pytest.mark.integration

API = "agn.dev/v1alpha1"


# -- helpers ---------------------------------------------------------------------------------
def make_network(kube, ns, name="net", **spec):
    kube.create(
        NETWORKS,
        ns,
        {
            "apiVersion": API,
            "kind": "InferenceNetwork",
            "metadata": {"name": name},
            "spec": {"providerSelector": {"matchLabels": {"agn.dev/net": name}}, **spec},
        },
    )


def make_consumer(kube, ns, name, *, network="net", excluded=()):
    spec = {"network": network}
    if excluded:
        spec["excludedProviders"] = list(excluded)
    kube.create(
        CONSUMERS, ns, {"apiVersion": API, "kind": "InferenceConsumer", "metadata": {"name": name}, "spec": spec}
    )


def make_provider(kube, ns, name, url, *, network="net", group="g1", rank=1):
    return kube.create(
        PROVIDERS,
        ns,
        {
            "apiVersion": API,
            "kind": "InferenceProvider",
            "metadata": {"name": name, "labels": {"agn.dev/net": network}},
            "spec": {"endpoint": url, "providerGateway": "gw-a", "selectionGroup": group, "rank": rank},
        },
    )


def set_drain(kube, ns, name, drain: bool):
    kube.merge_patch(PROVIDERS, ns, name, {"spec": {"trafficPolicy": {"drain": drain}}})


def overlay(kube, ns, consumer):
    """The consumer's whole overlay spec (index and shards assembled), or None."""
    try:
        return read_overlay(kube, ns, consumer)
    except Incomplete:
        return None  # caught between two of the operator's writes even after retries: look again


def states(kube, ns, consumer) -> dict[str, str]:
    spec = overlay(kube, ns, consumer)
    return {c["provider"]: c["admission_state"] for c in (spec or {}).get("candidates", [])}


def wait_states(kube, ns, consumer, expected: dict[str, str], *, timeout=20.0):
    return wait_for(
        lambda: states(kube, ns, consumer) == expected and overlay(kube, ns, consumer),
        timeout=timeout,
        what=f"overlay {consumer} == {expected}",
    )


def candidate(spec, provider):
    return next(c for c in spec["candidates"] if c["provider"] == provider)


def provider_status(kube, ns, name):
    return kube.get(PROVIDERS, ns, name).get("status") or {}


def operator_log_events(agn) -> list[dict]:
    """JSON log lines of the most recent operator run (readable after it stopped, too)."""
    text = (agn.sup.log_dir / "operator.log").read_text(errors="replace")
    text = text.split("\n--- ")[-1]
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def started_setup(kube, namespace, agn, providers=("p1", "p2"), consumers=("c1",), **network_spec):
    make_network(kube, namespace, **network_spec)
    urls = {}
    for i, name in enumerate(providers):
        urls[name] = agn.provider(name)
        make_provider(kube, namespace, name, urls[name], rank=i)
    for c in consumers:
        make_consumer(kube, namespace, c)
    agn.operator()
    for c in consumers:
        wait_states(kube, namespace, c, {p: "admitted" for p in providers})
    return urls


# -- tests -------------------------------------------------------------------------------------
def test_status_is_written_and_load_absent_stays_absent(kube, namespace, agn):
    urls = started_setup(kube, namespace, agn, providers=("p1",))
    uid = kube.get(PROVIDERS, namespace, "p1")["metadata"]["uid"]
    status = provider_status(kube, namespace, "p1")
    assert status["candidateId"] == candidate_id(uid)
    assert status["probe"]["healthy"] is True and status["probe"]["metricsObservedAt"]
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Valid": "True",
        "Available": "True",
        "MetricsFresh": "True",
        "Trusted": "True",
    }
    assert status["observedGeneration"] == 1
    # Not drained: its readings stay in the operator (docs/operator.md), nothing is published.
    assert "load" not in status
    set_drain(kube, namespace, "p1", True)
    assert (
        wait_for(lambda: provider_status(kube, namespace, "p1").get("load"), what="p1's load published")["waiting"] == 0
    )

    http_json(f"{urls['p1']}/admin/state", method="POST", body={"exportWaiting": False})
    load = wait_for(
        lambda: (
            "waiting" not in (provider_status(kube, namespace, "p1").get("load") or {"waiting": 0})
            and provider_status(kube, namespace, "p1")["load"]
        ),
        what="waiting to disappear from load",
    )
    assert load["running"] == 0


def test_drain_is_existing_only_in_every_overlay_with_identity_unchanged(kube, namespace, agn):
    started_setup(kube, namespace, agn, consumers=("c1", "c2"))
    before = {c: overlay(kube, namespace, c) for c in ("c1", "c2")}

    set_drain(kube, namespace, "p1", True)
    for c in ("c1", "c2"):
        after = wait_states(kube, namespace, c, {"p1": "existing_only", "p2": "admitted"}, timeout=5)
        old, new = candidate(before[c], "p1"), candidate(after, "p1")
        assert (new["id"], new["selectionGroup"], new["rank"], new["endpoint"]) == (
            old["id"],
            old["selectionGroup"],
            old["rank"],
            old["endpoint"],
        )
        assert after["revision"] == before[c]["revision"] + 1

    set_drain(kube, namespace, "p1", False)
    for c in ("c1", "c2"):
        after = wait_states(kube, namespace, c, {"p1": "admitted", "p2": "admitted"}, timeout=5)
        assert after["revision"] == before[c]["revision"] + 2
        assert candidate(after, "p1") == candidate(before[c], "p1")


def test_unhealthy_provider_stays_out_whether_drained_or_not(kube, namespace, agn):
    urls = started_setup(kube, namespace, agn)
    http_json(f"{urls['p1']}/admin/state", method="POST", body={"healthy": False})
    wait_states(kube, namespace, "c1", {"p2": "admitted"})
    status = provider_status(kube, namespace, "p1")
    assert status["probe"]["healthy"] is False and "503" in status["probe"]["healthError"]

    set_drain(kube, namespace, "p1", True)
    rev = overlay(kube, namespace, "c1")["revision"]
    set_drain(kube, namespace, "p2", True)  # a change that must show up, so we know p1's drain was reconciled
    spec = wait_states(kube, namespace, "c1", {"p2": "existing_only"})
    assert spec["revision"] == rev + 1

    set_drain(kube, namespace, "p1", False)  # undrain while unhealthy: still absent
    set_drain(kube, namespace, "p2", False)
    spec = wait_states(kube, namespace, "c1", {"p2": "admitted"})
    assert "p1" not in states(kube, namespace, "c1")

    http_json(f"{urls['p1']}/admin/state", method="POST", body={"healthy": True})
    spec = wait_states(kube, namespace, "c1", {"p1": "admitted", "p2": "admitted"})
    assert candidate(spec, "p1")["id"] == provider_status(kube, namespace, "p1")["candidateId"]


def test_metrics_only_change_updates_status_not_overlay(kube, namespace, agn):
    urls = started_setup(kube, namespace, agn)
    set_drain(kube, namespace, "p1", True)  # only a drained provider's load is published
    wait_states(kube, namespace, "c1", {"p1": "existing_only", "p2": "admitted"})
    before = kube.get(OVERLAYS, namespace, "c1")
    http_json(f"{urls['p1']}/admin/state", method="POST", body={"waiting": 7})
    wait_for(
        lambda: (provider_status(kube, namespace, "p1").get("load") or {}).get("waiting") == 7,
        what="status.load.waiting == 7",
    )
    # The operator has reconciled after the status write (a later drain lands exactly one revision on).
    set_drain(kube, namespace, "p2", True)
    spec = wait_states(kube, namespace, "c1", {"p1": "existing_only", "p2": "existing_only"})
    assert spec["revision"] == before["spec"]["revision"] + 1


def test_metrics_only_change_writes_no_overlay(kube, namespace, agn):
    urls = started_setup(kube, namespace, agn, providers=("p1",))
    set_drain(kube, namespace, "p1", True)  # only a drained provider's load is published
    wait_states(kube, namespace, "c1", {"p1": "existing_only"})
    before = kube.get(OVERLAYS, namespace, "c1")
    http_json(f"{urls['p1']}/admin/state", method="POST", body={"waiting": 3})
    wait_for(
        lambda: (provider_status(kube, namespace, "p1").get("load") or {}).get("waiting") == 3,
        what="status.load.waiting == 3",
    )
    wait_for(
        lambda: any(
            e.get("msg") == "provider status changed" and (e.get("load") or {}).get("waiting") == 3
            for e in operator_log_events(agn)
        ),
        what="operator logged the load change",
    )
    after = kube.get(OVERLAYS, namespace, "c1")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_excluded_provider_absent_only_from_that_consumer(kube, namespace, agn):
    make_network(kube, namespace)
    for i, name in enumerate(("p1", "p2")):
        make_provider(kube, namespace, name, agn.provider(name), rank=i)
    make_consumer(kube, namespace, "c1")
    make_consumer(kube, namespace, "c2", excluded=["p1"])
    agn.operator()
    wait_states(kube, namespace, "c1", {"p1": "admitted", "p2": "admitted"})
    wait_states(kube, namespace, "c2", {"p2": "admitted"})
    set_drain(kube, namespace, "p1", True)  # drain never makes an excluded provider appear
    wait_states(kube, namespace, "c1", {"p1": "existing_only", "p2": "admitted"})
    assert states(kube, namespace, "c2") == {"p2": "admitted"}


def test_operator_restart_does_not_churn_revisions(kube, namespace, agn):
    started_setup(kube, namespace, agn, consumers=("c1", "c2"))
    set_drain(kube, namespace, "p1", True)
    for c in ("c1", "c2"):
        wait_states(kube, namespace, c, {"p1": "existing_only", "p2": "admitted"})
    before = {c: kube.get(OVERLAYS, namespace, c) for c in ("c1", "c2")}

    agn.stop("operator")
    agn.operator()
    wait_for(
        lambda: any(e.get("msg") == "initial reconcile done" for e in operator_log_events(agn)),
        what="the restarted operator's first reconcile of every consumer",
    )
    for c in ("c1", "c2"):
        after = kube.get(OVERLAYS, namespace, c)
        assert after["spec"]["revision"] == before[c]["spec"]["revision"]
        assert after["spec"]["digest"] == before[c]["spec"]["digest"]
        assert after["metadata"]["resourceVersion"] == before[c]["metadata"]["resourceVersion"]

    set_drain(kube, namespace, "p1", False)
    for c in ("c1", "c2"):
        spec = wait_states(kube, namespace, c, {"p1": "admitted", "p2": "admitted"})
        assert spec["revision"] == before[c]["spec"]["revision"] + 1


def test_stale_metrics_remove_provider(kube, namespace, agn):
    urls = started_setup(kube, namespace, agn, metricsMaxAgeSeconds=2)
    http_json(f"{urls['p1']}/admin/state", method="POST", body={"metrics": False})
    wait_states(kube, namespace, "c1", {"p2": "admitted"}, timeout=15)
    status = provider_status(kube, namespace, "p1")
    assert status["probe"]["healthy"] is True
    assert "404" in status["probe"]["metricsError"]
    assert status["probe"]["metricsObservedAt"]  # the last successful scrape is kept
    wait_for(
        lambda: any(
            c["type"] == "MetricsFresh" and c["status"] == "False"
            for c in provider_status(kube, namespace, "p1")["conditions"]
        ),
        what="MetricsFresh=False",
    )

    http_json(f"{urls['p1']}/admin/state", method="POST", body={"metrics": True})
    wait_states(kube, namespace, "c1", {"p1": "admitted", "p2": "admitted"}, timeout=15)


def test_burst_drain_coalesces_revisions(kube, namespace, agn):
    make_network(kube, namespace)
    url = agn.provider("shared")  # thirty providers behind one fake endpoint keep the test light
    names = [f"p{i:02d}" for i in range(30)]
    for i, name in enumerate(names):
        make_provider(kube, namespace, name, url, rank=i % 3)
    make_consumer(kube, namespace, "c1")
    agn.operator()
    before = wait_states(kube, namespace, "c1", {n: "admitted" for n in names}, timeout=30)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda n: set_drain(kube, namespace, n, True), names))
    after = wait_states(kube, namespace, "c1", {n: "existing_only" for n in names}, timeout=10)
    revisions = after["revision"] - before["revision"]
    assert 1 <= revisions <= 5, f"{revisions} revisions for a 30-provider drain"
    assert [c["id"] for c in after["candidates"]] == [c["id"] for c in before["candidates"]]


def test_sigterm_stops_cleanly_with_exit_zero(kube, namespace, agn):
    make_network(kube, namespace)
    make_provider(kube, namespace, "p1", agn.provider("p1"))
    make_consumer(kube, namespace, "c1")
    agn.operator()
    wait_states(kube, namespace, "c1", {"p1": "admitted"})
    agn.stop("operator")  # SIGTERM, then SIGKILL only after a grace period
    assert agn.sup.exit_codes["operator"] == 0  # a SIGKILL would show as -9
    assert [e["msg"] for e in operator_log_events(agn)][-1] == "operator stopped"


def test_restart_after_outage_longer_than_metrics_bound_does_not_churn(kube, namespace, agn):
    started_setup(kube, namespace, agn, metricsMaxAgeSeconds=2)
    before = kube.get(OVERLAYS, namespace, "c1")
    agn.stop("operator")

    def all_stale():
        ages = [
            time.time() - parse_time(provider_status(kube, namespace, p)["probe"]["metricsObservedAt"])
            for p in ("p1", "p2")
        ]
        return min(ages) > 3 and ages

    wait_for(all_stale, timeout=15, interval=0.2, what="provider metrics to age past the network's bound")
    agn.operator()
    wait_for(
        lambda: any(e.get("msg") == "initial reconcile done" for e in operator_log_events(agn)),
        what="the restarted operator's first reconcile",
    )
    after = kube.get(OVERLAYS, namespace, "c1")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"]["revision"] == before["spec"]["revision"]


def test_consumer_without_network_gets_no_overlay_until_it_exists(kube, namespace, agn):
    make_provider(kube, namespace, "p1", agn.provider("p1"))
    make_consumer(kube, namespace, "c1")  # its network "net" does not exist yet
    make_consumer(kube, namespace, "c0", network="other")
    make_network(kube, namespace, name="other", providerSelector={})
    agn.operator()
    wait_states(kube, namespace, "c0", {"p1": "admitted"})  # the operator is up and reconciling
    wait_for(
        lambda: any(
            e.get("msg", "").startswith("consumer's network not found") and e.get("consumer") == "c1"
            for e in operator_log_events(agn)
        ),
        what="the missing network to be logged",
    )
    assert overlay(kube, namespace, "c1") is None
    make_network(kube, namespace)
    spec = wait_states(kube, namespace, "c1", {"p1": "admitted"})
    assert spec["revision"] == 1 and spec["network"] == "net"
