"""Operator lifecycle on the real control plane: overlay ownership and cleanup, and leader
election between real operator processes.

The local control plane runs no kube-controller-manager, so no garbage collector: an overlay
that disappears here was deleted by the operator itself. Who writes is observed three ways:
the Lease's holder, the ``agn.dev/published-by`` annotation on overlays, and each process's
``/healthz`` (``leader``, ``identity``, ``holder`` and the writes it sent). Every wait is a
wait-for-condition that fails on timeout; no fixed sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error

import pytest
from test_operator import make_consumer, make_network, make_provider, set_drain, started_setup, wait_states

from agn.kube import CONSUMERS, LEASES, OVERLAYS, PROVIDERS, SHARDS, Conflict, NotFound
from agn.operator.lease import DEFAULT_LEASE_NAME
from agn.operator.storage import PUBLISHED_BY
from agn.shards import consumer_of_shard
from agnprocs import http_json, wait_for
from xtask.runtime.controlplane import free_port

pytestmark = pytest.mark.integration

API = "agn.dev/v1alpha1"
# Short leases for the tests that wait for an expiry; the renew deadline is 2 s.
SHORT_LEASE = ("--lease-duration", "3", "--lease-renew-interval", "0.5", "--lease-retry-period", "0.2")
STATUS_WRITES = "inferenceproviders/status:patch"


# -- helpers ---------------------------------------------------------------------------------
def get_or_none(kube, res, ns, name):
    try:
        return kube.get(res, ns, name)
    except NotFound:
        return None


def owner_refs(kube, ns, name):
    return (kube.get(OVERLAYS, ns, name)["metadata"].get("ownerReferences")) or []


def consumer_ref(kube, ns, name):
    uid = kube.get(CONSUMERS, ns, name)["metadata"]["uid"]
    return {"apiVersion": API, "kind": "InferenceConsumer", "name": name, "uid": uid, "controller": True}


def published_by(kube, ns, name):
    return (kube.get(OVERLAYS, ns, name)["metadata"].get("annotations") or {}).get(PUBLISHED_BY)


def holder(kube, ns):
    lease = get_or_none(kube, LEASES, ns, DEFAULT_LEASE_NAME)
    return (lease or {}).get("spec", {}).get("holderIdentity")


def healthz(url):
    """The operator's /healthz report, or None while it does not answer 200."""
    try:
        return http_json(url, timeout=2)
    except (urllib.error.URLError, OSError, ValueError):
        return None


def start_operator(agn, name, *extra):
    """A real operator process with /healthz; returns its URL once it answers 200 (caches synced)."""
    port = free_port()
    agn.operator("--health-port", str(port), *extra, name=name)
    url = f"http://127.0.0.1:{port}/healthz"
    wait_for(lambda: healthz(url), what=f"{name} healthy")
    return url


def log_events(agn, name):
    text = (agn.sup.log_dir / f"{name}.log").read_text(errors="replace").split("\n--- ")[-1]
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def two_operators(kube, namespace, agn, *extra, max_age=3):
    """Network (metrics bound ``max_age``: status refreshed every max_age/3 s), p1, p2, c1, then
    operator-a (the leader) and operator-b (a follower). Returns both /healthz URLs."""
    make_network(kube, namespace, metricsMaxAgeSeconds=max_age)
    for i, name in enumerate(("p1", "p2")):
        make_provider(kube, namespace, name, agn.provider(name), rank=i)
    make_consumer(kube, namespace, "c1")
    a = start_operator(agn, "operator-a", *extra)
    wait_for(lambda: healthz(a)["leader"], what="operator-a to lead")
    wait_states(kube, namespace, "c1", {"p1": "admitted", "p2": "admitted"})
    b = start_operator(agn, "operator-b", *extra)
    # /healthz answers once the caches sync, which can be before b first reads the lease.
    wait_for(lambda: (healthz(b) or {}).get("holder"), what="operator-b to read the lease")
    return a, b


# -- ownership and cleanup ------------------------------------------------------------------------
def test_overlays_are_owned_by_their_consumer_and_deleted_with_it(kube, namespace, agn):
    started_setup(kube, namespace, agn, consumers=("c1", "c2"))
    for c in ("c1", "c2"):
        assert owner_refs(kube, namespace, c) == [consumer_ref(kube, namespace, c)]
        assert published_by(kube, namespace, c)
    c2_before = kube.get(OVERLAYS, namespace, "c2")

    kube.delete(CONSUMERS, namespace, "c1")
    # The index goes first, then its shards; the log line comes once all of them are gone.
    deleted = wait_for(
        lambda: [e for e in log_events(agn, "operator") if e.get("msg") == "overlay deleted"],
        timeout=10,
        what="c1's overlay to be deleted",
    )
    assert [(e["consumer"], e["reason"]) for e in deleted] == [("c1", "orphan")]
    assert get_or_none(kube, OVERLAYS, namespace, "c1") is None
    assert not [s for s in kube.list(SHARDS, namespace)[0] if consumer_of_shard(s["metadata"]["name"]) == "c1"]
    assert (
        kube.get(OVERLAYS, namespace, "c2")["metadata"]["resourceVersion"] == c2_before["metadata"]["resourceVersion"]
    )

    # A new consumer of the same name starts a new overlay history, owned by the new consumer.
    make_consumer(kube, namespace, "c1")
    spec = wait_states(kube, namespace, "c1", {"p1": "admitted", "p2": "admitted"})
    assert spec["revision"] == 1
    assert owner_refs(kube, namespace, "c1") == [consumer_ref(kube, namespace, "c1")]


def test_overlays_left_behind_while_no_operator_ran_are_cleaned_up_or_adopted(kube, namespace, agn):
    started_setup(kube, namespace, agn, consumers=("c1", "c2", "c3"))
    agn.stop("operator")
    old_c2 = kube.get(OVERLAYS, namespace, "c2")
    c3_before = kube.get(OVERLAYS, namespace, "c3")["spec"]
    kube.delete(CONSUMERS, namespace, "c1")  # gone for good: its overlay is an orphan
    kube.delete(CONSUMERS, namespace, "c2")  # replaced: its overlay belongs to the old consumer
    make_consumer(kube, namespace, "c2")
    kube.create(
        OVERLAYS,
        namespace,
        {
            "apiVersion": API,
            "kind": "RoutingOverlay",
            "metadata": {"name": "ghost"},
            "spec": {**c3_before, "consumer": "ghost"},
        },
    )  # never had a consumer
    # c3's overlay as an operator without ownerReferences wrote it.
    kube.merge_patch(OVERLAYS, namespace, "c3", {"metadata": {"ownerReferences": None, "annotations": None}})

    agn.operator()
    # The objects themselves, not an assembled read (a read of "ghost", which lists c3's shards,
    # could never assemble and would look absent before the delete).
    wait_for(
        lambda: (
            get_or_none(kube, OVERLAYS, namespace, "c1") is None
            and get_or_none(kube, OVERLAYS, namespace, "ghost") is None
            and not [s for s in kube.list(SHARDS, namespace)[0] if consumer_of_shard(s["metadata"]["name"]) == "c1"]
        ),
        timeout=15,
        what="the orphaned overlays and c1's shards to be deleted",
    )
    new_c2 = wait_for(
        lambda: (
            (o := get_or_none(kube, OVERLAYS, namespace, "c2"))
            and o["metadata"]["uid"] != old_c2["metadata"]["uid"]
            and o
        ),
        timeout=15,
        what="c2's overlay to be replaced",
    )
    assert new_c2["metadata"]["ownerReferences"] == [consumer_ref(kube, namespace, "c2")]
    assert new_c2["spec"]["revision"] == 1
    wait_for(
        lambda: owner_refs(kube, namespace, "c3") == [consumer_ref(kube, namespace, "c3")],
        timeout=15,
        what="c3's overlay to be adopted",
    )
    assert kube.get(OVERLAYS, namespace, "c3")["spec"] == c3_before  # adoption is not a new revision
    reasons = {(e["consumer"], e["reason"]) for e in log_events(agn, "operator") if e.get("msg") == "overlay deleted"}
    assert reasons == {("c1", "orphan"), ("ghost", "orphan"), ("c2", "stale")}


# -- leader election ---------------------------------------------------------------------------
def test_two_operators_only_the_lease_holder_writes_and_sigterm_hands_over(kube, namespace, agn):
    a, b = two_operators(kube, namespace, agn, "--lease-retry-period", "0.2")
    ha, hb = healthz(a), healthz(b)
    assert hb["ok"] and hb["leader"] is False and hb["holder"] == ha["identity"] != hb["identity"]
    assert holder(kube, namespace) == ha["identity"]

    set_drain(kube, namespace, "p1", True)
    wait_states(kube, namespace, "c1", {"p1": "existing_only", "p2": "admitted"})
    assert published_by(kube, namespace, "c1") == ha["identity"]
    # A publishes each new load reading of a drained provider in its status (p1's waiting count
    # changes twice); B, synced and healthy, has written nothing at all.
    p1 = kube.get(PROVIDERS, namespace, "p1")["spec"]["endpoint"]
    for waiting in (3, 5):
        status_writes = healthz(a)["writes"][STATUS_WRITES]
        http_json(f"{p1}/admin/state", method="POST", body={"waiting": waiting})
        wait_for(lambda n=status_writes: healthz(a)["writes"][STATUS_WRITES] > n, what="operator-a's status write")
    assert healthz(b)["writes"] == {} and healthz(b)["leader"] is False

    agn.stop("operator-a")  # SIGTERM: a clean stop releases the lease
    assert agn.sup.exit_codes["operator-a"] == 0
    assert "lease released" in [e.get("msg") for e in log_events(agn, "operator-a")]
    wait_for(lambda: healthz(b)["leader"], timeout=5, what="operator-b to take over at once")
    assert holder(kube, namespace) == hb["identity"]

    set_drain(kube, namespace, "p1", False)
    wait_states(kube, namespace, "c1", {"p1": "admitted", "p2": "admitted"}, timeout=10)
    assert published_by(kube, namespace, "c1") == hb["identity"]
    # p1 undrained: its status no longer carries its load, a change only the leader writes.
    wait_for(lambda: healthz(b)["writes"].get(STATUS_WRITES, 0) > 0, what="operator-b to write provider status")


def test_sigkill_leader_is_replaced_once_its_lease_expires(kube, namespace, agn):
    a, b = two_operators(kube, namespace, agn, *SHORT_LEASE)
    ha, hb = healthz(a), healthz(b)
    assert hb["leader"] is False and holder(kube, namespace) == ha["identity"]

    os.kill(agn.sup.record("operator-a").pid, signal.SIGKILL)  # no release: the lease must expire
    killed = time.monotonic()
    wait_for(lambda: healthz(b)["leader"], timeout=15, what="operator-b to take over after expiry")
    waited = time.monotonic() - killed
    # operator-a renewed at most 0.5 s before it died; operator-b waits 3 s from when it saw that.
    assert waited >= 2.0, f"took over {waited:.2f}s after the kill, before the lease could expire"
    lease = kube.get(LEASES, namespace, DEFAULT_LEASE_NAME)["spec"]
    assert lease["holderIdentity"] == hb["identity"] and lease["leaseTransitions"] >= 1

    set_drain(kube, namespace, "p2", True)
    wait_states(kube, namespace, "c1", {"p1": "admitted", "p2": "existing_only"}, timeout=10)
    assert published_by(kube, namespace, "c1") == hb["identity"]
    agn.stop("operator-a")  # already dead: only its pid file goes


def test_a_leader_that_loses_its_lease_writes_nothing_until_it_leads_again(kube, namespace, agn):
    make_network(kube, namespace, metricsMaxAgeSeconds=3)
    make_provider(kube, namespace, "p1", agn.provider("p1"))
    make_consumer(kube, namespace, "c1")
    a = start_operator(agn, "operator-a", *SHORT_LEASE, "--log-level", "debug")
    wait_for(lambda: healthz(a)["leader"], what="operator-a to lead")
    wait_states(kube, namespace, "c1", {"p1": "admitted"})
    me = healthz(a)["identity"]

    def steal():
        lease = kube.get(LEASES, namespace, DEFAULT_LEASE_NAME)
        lease["spec"].update(holderIdentity="intruder", leaseDurationSeconds=2)
        try:
            return kube.replace(LEASES, namespace, DEFAULT_LEASE_NAME, lease)
        except Conflict:  # operator-a renewed in between: read again
            return None

    wait_for(steal, what="the lease to be taken over by an intruder")
    wait_for(
        lambda: healthz(a)["leader"] is False and healthz(a)["holder"] == "intruder",
        timeout=5,
        what="operator-a to stop leading",
    )
    set_drain(kube, namespace, "p1", True)  # must wait for the next term
    # The intruder never renews: after its 2 s, operator-a takes the lease back (a new term).
    wait_for(lambda: healthz(a)["leader"] and healthz(a)["term"] == 2, timeout=10, what="operator-a to lead again")
    wait_states(kube, namespace, "c1", {"p1": "existing_only"}, timeout=10)
    assert published_by(kube, namespace, "c1") == me

    events = log_events(agn, "operator-a")
    msgs = [e.get("msg") for e in events]
    lost = msgs.index("lost leadership; writes stop")
    regained = next(i for i, e in enumerate(events) if e.get("msg") == "became leader" and e.get("term") == 2)
    assert lost < regained
    # At least 2 s (the intruder's lease) during which a writing follower would have refreshed
    # provider status and published the drain.
    assert [e for e in events[lost:regained] if e.get("msg") == "api write"] == []
    assert any(e.get("msg") == "api write" for e in events[regained:])
