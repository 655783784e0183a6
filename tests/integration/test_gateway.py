"""The consumer gateway against a real API server and real fake providers (no operator).

The tests play the operator themselves: they write RoutingOverlay objects and watch the
gateway accept, serve and route by them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import urllib.error
import urllib.request

import pytest

from agn.kube import CONSUMERS, OVERLAYS, SHARDS, NotFound
from agn.model import ADMITTED, EXISTING_ONLY, Candidate, Overlay, overlay_digest
from agn.shards import Sharded, split
from agnprocs import http_json, wait_for

pytestmark = pytest.mark.integration

API_VERSION = "agn.dev/v1alpha1"


def create_consumer(kube, namespace: str, name: str) -> None:
    kube.create(
        CONSUMERS,
        namespace,
        {
            "apiVersion": API_VERSION,
            "kind": "InferenceConsumer",
            "metadata": {"name": name},
            "spec": {"network": "net"},
        },
    )


def write_overlay(
    kube, namespace: str, consumer: str, revision: int, candidates: list[Candidate], *, spec_consumer: str | None = None
) -> None:
    """Create or replace the overlay, as the operator would."""
    cands = sorted(candidates)
    body = {
        "apiVersion": API_VERSION,
        "kind": "RoutingOverlay",
        "metadata": {"name": consumer},
        "spec": {
            "network": "net",
            "consumer": spec_consumer or consumer,
            "revision": revision,
            "digest": overlay_digest(cands),
            "candidates": [c.to_dict() for c in cands],
        },
    }
    try:
        current = kube.get(OVERLAYS, namespace, consumer)
    except NotFound:
        kube.create(OVERLAYS, namespace, body)
        return
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    kube.replace(OVERLAYS, namespace, consumer, body)


def put(kube, res, namespace: str, kind: str, name: str, spec: dict) -> None:
    """Create or replace one object with ``spec``, as the operator would."""
    body = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}
    try:
        current = kube.get(res, namespace, name)
    except NotFound:
        kube.create(res, namespace, body)
        return
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    kube.replace(res, namespace, name, body)


def sharded(consumer: str, revision: int, candidates: list[Candidate], count: int = 4) -> Sharded:
    cands = tuple(sorted(candidates))
    return split(Overlay("net", consumer, revision, overlay_digest(cands), cands), count)


def write_shards(kube, namespace: str, overlay: Sharded, names: list[str] | None = None) -> None:
    for name in overlay.shards if names is None else names:
        put(kube, SHARDS, namespace, "RoutingOverlayShard", name, overlay.shards[name])


def write_index(kube, namespace: str, consumer: str, overlay: Sharded) -> None:
    put(kube, OVERLAYS, namespace, "RoutingOverlay", consumer, overlay.index)


def consumer_status(kube, namespace: str, name: str) -> dict:
    return kube.get(CONSUMERS, namespace, name).get("status") or {}


def wait_serving(kube, namespace: str, consumer: str, gateway: str, revision: int) -> dict:
    """Both revisions reported, and the gateway really routing by that revision."""

    def reached():
        status = consumer_status(kube, namespace, consumer)
        served = http_json(f"{gateway}/routes")["servingRevision"]
        ok = status.get("acceptedRevision") == revision and status.get("servingRevision") == revision
        return status if ok and served == revision else None

    return wait_for(reached, what=f"{consumer} serving revision {revision}")


def complete(gateway: str, *, session: str | None = None, group: str | None = None) -> tuple[int, dict, str | None]:
    headers = {"Content-Type": "application/json"}
    if session:
        headers["x-session-id"] = session
    if group:
        headers["x-selection-group"] = group
    req = urllib.request.Request(
        f"{gateway}/v1/completions", data=json.dumps({"prompt": "hi"}).encode(), method="POST", headers=headers
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read()), resp.headers.get("x-agn-provider")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers.get("x-agn-provider")


def provider_of(gateway: str, session: str | None) -> str:
    code, body, header = complete(gateway, session=session)
    assert code == 200, body
    assert body["provider"] == header
    return header


def test_revisions_follow_overlay_and_invalid_is_not_accepted(kube, namespace, agn):
    create_consumer(kube, namespace, "c1")
    gateway = agn.gateway("c1")  # before any overlay exists: it waits for one
    wait_for(lambda: consumer_status(kube, namespace, "c1").get("address") == gateway, what="status.address")
    assert http_json(f"{gateway}/routes")["servingRevision"] is None

    p1 = agn.provider("p1")
    p2 = agn.provider("p2")
    one = Candidate("c-1", "p1", p1, "g", 0, ADMITTED)
    two = Candidate("c-2", "p2", p2, "g", 1, ADMITTED)

    write_overlay(kube, namespace, "c1", 1, [one])
    status = wait_serving(kube, namespace, "c1", gateway, 1)
    assert status["acceptedDigest"] == overlay_digest([one])
    assert status["observedAt"]

    write_overlay(kube, namespace, "c1", 2, [one, two])
    status = wait_serving(kube, namespace, "c1", gateway, 2)
    assert status["acceptedDigest"] == overlay_digest([one, two])
    routes = http_json(f"{gateway}/routes")
    assert [c["provider"] for c in routes["candidates"]] == ["p1", "p2"]

    # Meant for another consumer: rejected with a message; revision 2 keeps serving.
    write_overlay(kube, namespace, "c1", 3, [two], spec_consumer="someone-else")
    status = wait_for(lambda: consumer_status(kube, namespace, "c1").get("message"), what="rejection message")
    assert "revision 3" in status and "someone-else" in status
    status = consumer_status(kube, namespace, "c1")
    assert (status["acceptedRevision"], status["servingRevision"]) == (2, 2)
    assert http_json(f"{gateway}/routes")["servingRevision"] == 2
    assert provider_of(gateway, "s-new") == "p1"

    # An invalid endpoint the schema lets through is rejected too.
    bad = Candidate("c-3", "p3", "not-a-url", "g", 0, ADMITTED)
    write_overlay(kube, namespace, "c1", 4, [one, bad])
    wait_for(
        lambda: "revision 4" in (consumer_status(kube, namespace, "c1").get("message") or ""),
        what="rejection of revision 4",
    )
    assert consumer_status(kube, namespace, "c1")["acceptedRevision"] == 2

    # A valid revision is accepted again and clears the message.
    write_overlay(kube, namespace, "c1", 5, [two])
    status = wait_serving(kube, namespace, "c1", gateway, 5)
    assert "message" not in status
    assert provider_of(gateway, None) == "p2"


def test_sticky_sessions_follow_drain_undrain_and_removal(kube, namespace, agn):
    create_consumer(kube, namespace, "c2")
    p1, p2 = agn.provider("p1"), agn.provider("p2")
    admitted1 = Candidate("c-1", "p1", p1, "g", 0, ADMITTED)
    drained1 = Candidate("c-1", "p1", p1, "g", 0, EXISTING_ONLY)
    admitted2 = Candidate("c-2", "p2", p2, "g", 1, ADMITTED)
    drained2 = Candidate("c-2", "p2", p2, "g", 1, EXISTING_ONLY)

    write_overlay(kube, namespace, "c2", 1, [admitted1, admitted2])
    gateway = agn.gateway("c2")  # overlay exists before the gateway starts
    wait_serving(kube, namespace, "c2", gateway, 1)

    code, body, header = complete(gateway, session="s1")
    assert code == 200 and header == "p1"
    assert body["provider"] == "p1" and body["session"] == "s1"
    assert (body["routedBy"], body["candidateId"], body["admission_state"]) == ("c2", "c-1", ADMITTED)

    # Drain p1: s1 stays on it, new sessions (and session-less requests) avoid it.
    write_overlay(kube, namespace, "c2", 2, [drained1, admitted2])
    wait_serving(kube, namespace, "c2", gateway, 2)
    code, body, header = complete(gateway, session="s1")
    assert (code, header, body["admission_state"]) == (200, "p1", EXISTING_ONLY)
    assert provider_of(gateway, "s2") == "p2"
    assert provider_of(gateway, None) == "p2"
    assert http_json(f"{gateway}/routes")["affinities"] == {"s1": "p1", "s2": "p2"}

    # Undrain p1: new sessions land on it again (best rank); existing ones keep their provider.
    write_overlay(kube, namespace, "c2", 3, [admitted1, admitted2])
    wait_serving(kube, namespace, "c2", gateway, 3)
    assert provider_of(gateway, "s3") == "p1"
    assert provider_of(gateway, "s2") == "p2"
    assert provider_of(gateway, "s1") == "p1"

    # Remove p1: its sessions are re-homed to an admitted candidate.
    write_overlay(kube, namespace, "c2", 4, [admitted2])
    wait_serving(kube, namespace, "c2", gateway, 4)
    code, body, header = complete(gateway, session="s1")
    assert (code, header, body["routing"]) == (200, "p2", "rehomed")

    # Only an existing_only candidate left: sticky sessions continue, new ones get 503.
    write_overlay(kube, namespace, "c2", 5, [drained2])
    wait_serving(kube, namespace, "c2", gateway, 5)
    assert provider_of(gateway, "s1") == "p2"
    code, body, header = complete(gateway, session="s-new")
    assert code == 503 and header is None
    assert body["error"] == "no admitted candidate" and body["servingRevision"] == 5


def test_overlay_deleted_keeps_serving_and_sigterm_stops_cleanly(kube, namespace, agn):
    create_consumer(kube, namespace, "c3")
    p1 = agn.provider("p1")
    gateway = agn.gateway("c3")
    write_overlay(kube, namespace, "c3", 1, [Candidate("c-1", "p1", p1, "g", 0, ADMITTED)])
    wait_serving(kube, namespace, "c3", gateway, 1)

    kube.delete(OVERLAYS, namespace, "c3")
    wait_for(
        lambda: "not found" in (consumer_status(kube, namespace, "c3").get("message") or ""),
        what="overlay-deleted message",
    )
    assert provider_of(gateway, "s1") == "p1"

    rec = agn.sup.record("gateway-c3")
    os.kill(rec.pid, signal.SIGTERM)
    assert wait_for(lambda: agn.sup.exited(rec) is not None, timeout=15, what="gateway exit") is not None
    assert agn.sup.exited(rec) == 0
    events = [json.loads(line)["msg"] for line in agn.log("gateway-c3").splitlines() if line.startswith("{")]
    assert "stopping" in events and events[-1] == "stopped"


def gateway_events(agn, consumer: str, msg: str) -> list[dict]:
    lines = agn.log(f"gateway-{consumer}").splitlines()
    return [e for e in (json.loads(line) for line in lines if line.startswith("{")) if e["msg"] == msg]


def two_providers_and_fillers(agn) -> tuple[Candidate, Candidate, list[Candidate]]:
    """Two real fake providers' candidates (ranked first and second) and twelve fillers that
    spread the overlay over every shard; the fillers rank last, so routing never picks them."""
    p1, p2 = agn.provider("p1"), agn.provider("p2")
    fillers = [Candidate(f"f-{i:02d}", f"f{i}", f"http://127.0.0.1:9/f{i}", "g", 5, ADMITTED) for i in range(12)]
    return Candidate("c-1", "p1", p1, "g", 0, ADMITTED), Candidate("c-2", "p2", p2, "g", 1, ADMITTED), fillers


def test_sharded_overlay_is_served_only_when_every_shard_is_in_hand(kube, namespace, agn):
    create_consumer(kube, namespace, "c4")
    gateway = agn.gateway("c4")
    first, second, fillers = two_providers_and_fillers(agn)
    one = sharded("c4", 1, [first, second, *fillers])
    assert len(one.shards) > 1 and "candidates" not in one.index

    write_shards(kube, namespace, one)
    write_index(kube, namespace, "c4", one)
    status = wait_serving(kube, namespace, "c4", gateway, 1)
    assert status["acceptedDigest"] == one.index["digest"]
    routes = http_json(f"{gateway}/routes")
    assert sorted(c["id"] for c in routes["candidates"]) == sorted(c.id for c in [first, second, *fillers])
    assert provider_of(gateway, "s1") == "p1"

    # Drain p1: one shard changes. Its index is written first, the shard not yet.
    two = sharded("c4", 2, [dataclasses.replace(first, admission_state=EXISTING_ONLY), second, *fillers])
    changed = [n for n in two.shards if two.shards[n]["digest"] != one.shards[n]["digest"]]
    assert len(changed) == 1
    write_index(kube, namespace, "c4", two)

    def pending_message() -> str | None:
        message = consumer_status(kube, namespace, "c4").get("message") or ""
        return message if "waiting for shards" in message else None

    message = wait_for(pending_message, what="the pending-shards message")
    assert "revision 2" in message and changed[0] in message and "still serving revision 1" in message
    status = consumer_status(kube, namespace, "c4")
    assert (status["acceptedRevision"], status["servingRevision"]) == (1, 1)
    assert http_json(f"{gateway}/routes")["servingRevision"] == 1
    assert provider_of(gateway, "s-new") == "p1"  # still routed by revision 1
    assert http_json(f"{gateway}/healthz")["pendingRevision"] == 2
    pending = gateway_events(agn, "c4", "overlay_shards_pending")
    assert pending and pending[-1]["revision"] == 2 and pending[-1]["mismatched"] == changed

    # The shard lands: the gateway swaps to revision 2, having fetched only that shard.
    write_shards(kube, namespace, two, changed)
    status = wait_serving(kube, namespace, "c4", gateway, 2)
    assert status["acceptedDigest"] == two.index["digest"] and "message" not in status
    assert provider_of(gateway, "s-newer") == "p2"
    assert provider_of(gateway, "s1") == "p1"  # sticky on the drained provider
    assembled = {e["revision"]: e for e in gateway_events(agn, "c4", "overlay_assembled")}
    assert sorted(assembled[1]["fetched"]) == sorted(one.shards)
    assert assembled[2]["fetched"] == changed and assembled[2]["reused"] == len(two.shards) - 1
    assert "agn_gateway_shard_gets_total" in urllib.request.urlopen(f"{gateway}/metrics", timeout=10).read().decode()


def test_sharded_overlay_with_an_invalid_shard_is_rejected_naming_it(kube, namespace, agn):
    create_consumer(kube, namespace, "c5")
    gateway = agn.gateway("c5")
    first, second, fillers = two_providers_and_fillers(agn)
    one = sharded("c5", 1, [first, second, *fillers])
    write_shards(kube, namespace, one)
    write_index(kube, namespace, "c5", one)
    wait_serving(kube, namespace, "c5", gateway, 1)

    # Revision 2 gives p1 an endpoint the schema lets through but no gateway can dial: the shard
    # holding it is self-consistent (its digest is its candidates'), yet the index is rejected.
    two = sharded("c5", 2, [dataclasses.replace(first, endpoint="not-a-url"), second, *fillers])
    (bad,) = [n for n in two.shards if two.shards[n]["digest"] != one.shards[n]["digest"]]
    write_shards(kube, namespace, two, [bad])
    write_index(kube, namespace, "c5", two)
    message = wait_for(
        lambda: (m := consumer_status(kube, namespace, "c5").get("message") or "").startswith("rejected") and m,
        what="the rejection of revision 2",
    )
    assert message.startswith(f"rejected overlay revision 2: shard {bad}: candidates[")
    assert "endpoint 'not-a-url' is not an http(s) URL" in message
    status = consumer_status(kube, namespace, "c5")
    assert (status["acceptedRevision"], status["servingRevision"]) == (1, 1)
    assert http_json(f"{gateway}/routes")["servingRevision"] == 1
    assert provider_of(gateway, "s-new") == "p1"  # still routed by revision 1

    # Revision 3 drains p1 instead: valid again, served, and only the changed shard was fetched.
    three = sharded("c5", 3, [dataclasses.replace(first, admission_state=EXISTING_ONLY), second, *fillers])
    write_shards(kube, namespace, three, [bad])
    write_index(kube, namespace, "c5", three)
    status = wait_serving(kube, namespace, "c5", gateway, 3)
    assert "message" not in status and provider_of(gateway, "s-newer") == "p2"
    assembled = {e["revision"]: e for e in gateway_events(agn, "c5", "overlay_assembled")}
    assert 2 not in assembled and assembled[3]["fetched"] == [bad]
    assert assembled[3]["reused"] == len(three.shards) - 1
