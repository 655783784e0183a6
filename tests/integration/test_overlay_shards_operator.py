"""The operator stores each consumer's overlay as a small index plus shards, on the real API
server: hundreds of providers served by ONE fake provider process through ``/pool/<name>``.

What must hold (``agn.shards``): the index carries no candidates and names every non-empty
shard, whose union is the whole overlay; no object grows with the fleet the way one inline
overlay did; a drain of one provider rewrites exactly the shard holding its candidate plus the
index, and the revision goes up by one; objects of a deleted consumer are removed by the
operator (the local control plane runs no garbage collector); a bad ``--overlay-shards`` is a
usage error at startup; the shipped operator Role grants shards what it grants overlays. The
shards are the network's (``agn.netshards``: ``net-netshard-NN``, shared by its consumers): every
one carries the ``agn.dev/network`` label, so a label selector (the API's, and kubectl's) lists
the shards of a consumer's network, and the index lists them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from test_operator import make_consumer, make_network, overlay, set_drain, states
from test_probe_fleet import create_pool

from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, SHARDS, KubeError, NotFound
from agn.model import Overlay
from agn.netshards import network_shard_name
from agn.shards import shard_of
from agnprocs import http_json, wait_for
from kubetest import apply_identities, can_i, denying_updates
from xtask.envdef import load_env
from xtask.manifests import render
from xtask.runtime.assets import ensure_assets

pytestmark = pytest.mark.integration

SHARDS_USED = 16
NETWORK_LABEL = "agn.dev/network"  # what users select on: spelled out, not imported
NETWORK = "net"  # test_operator.make_network's


def index_of(kube, ns, consumer) -> dict | None:
    try:
        return kube.get(OVERLAYS, ns, consumer)
    except NotFound:
        return None


def shards_of(kube, ns, consumer) -> dict[str, dict]:
    """Every RoutingOverlayShard ``consumer``'s overlay can be stored in, by name: its network's
    (shared with the network's other consumers), and any of its own (the earlier form)."""
    prefixes = (f"{NETWORK}-netshard-", f"{consumer}-shard-")
    return {o["metadata"]["name"]: o for o in kube.list(SHARDS, ns)[0] if o["metadata"]["name"].startswith(prefixes)}


def own_shards_of(kube, ns, consumer) -> list[str]:
    """The per-consumer shards (``<consumer>-shard-NN``, the earlier form) in the API."""
    return sorted(n for n in shards_of(kube, ns, consumer) if n.startswith(f"{consumer}-shard-"))


def size(obj: dict) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def fleet(kube, ns, agn, names: list[str], consumers=("c1",), *extra: str) -> None:
    # A long metrics bound: on a shared, loaded machine a late probe must not flip admission.
    make_network(kube, ns, metricsMaxAgeSeconds=600)
    create_pool(kube, ns, agn.provider("pool"), names)
    for c in consumers:
        make_consumer(kube, ns, c)
    agn.operator("--probe-interval", "2", "--probe-timeout", "5", *extra)
    for c in consumers:
        wait_for(
            lambda c=c: states(kube, ns, c) == dict.fromkeys(names, "admitted"),
            timeout=180,
            interval=0.5,
            what=f"all {len(names)} providers admitted in {c}'s overlay",
        )


def in_state(kube, ns, consumer, provider: str, state: str) -> dict | None:
    """The whole overlay when ``provider``'s candidate in it has ``state`` (one read), else None."""
    spec = overlay(kube, ns, consumer)
    found = [c for c in (spec or {}).get("candidates", ()) if c["provider"] == provider]
    return spec if found and found[0]["admission_state"] == state else None


def rvs(kube, ns, consumer) -> dict[str, str]:
    out = {n: o["metadata"]["resourceVersion"] for n, o in shards_of(kube, ns, consumer).items()}
    index = index_of(kube, ns, consumer)
    assert index is not None
    out["index"] = index["metadata"]["resourceVersion"]
    return out


def test_300_providers_are_sharded_and_a_drain_rewrites_one_shard_and_the_index(kube, namespace, agn):
    names = [f"p{i:03d}" for i in range(300)]
    fleet(kube, namespace, agn, names)

    index = index_of(kube, namespace, "c1")
    assert index is not None
    spec = index["spec"]
    assert "candidates" not in spec and spec["shardCount"] == SHARDS_USED
    assert spec["candidateCount"] == 300 and spec["admission"] == {"admitted": 300, "existing_only": 0}
    stored = shards_of(kube, namespace, "c1")
    assert sorted(stored) == [e["name"] for e in spec["shards"]]  # every listed shard present, no other
    for entry in spec["shards"]:
        shard = stored[entry["name"]]["spec"]
        assert shard["digest"] == entry["digest"] and len(shard["candidates"]) == entry["candidates"]
        assert all(shard_of(c["id"], SHARDS_USED) == shard["shard"] for c in shard["candidates"])
    whole = overlay(kube, namespace, "c1")
    assert whole is not None
    assert sorted(c["provider"] for c in whole["candidates"]) == names
    assert sorted(c["provider"] for s in stored.values() for c in s["spec"]["candidates"]) == names
    # The index is owned by the consumer, the shared shards by the network: a garbage collector
    # removes each with its owner.
    consumer_uid = kube.get(CONSUMERS, namespace, "c1")["metadata"]["uid"]
    network_uid = kube.get(NETWORKS, namespace, NETWORK)["metadata"]["uid"]
    assert [r["uid"] for r in index["metadata"]["ownerReferences"]] == [consumer_uid]
    for obj in stored.values():
        assert [r["uid"] for r in obj["metadata"]["ownerReferences"]] == [network_uid]
        assert "consumer" not in obj["spec"]

    # Size: the largest object is a fraction of what one inline overlay would be.
    inline = {"metadata": {"name": "c1"}, "spec": whole}
    largest = max(size(o) for o in [index, *stored.values()])
    print(f"inline overlay {size(inline)} B; index {size(index)} B; largest object {largest} B")
    assert largest * 4 < size(inline)

    target = "p123"
    cand = next(c for c in whole["candidates"] if c["provider"] == target)
    home = network_shard_name(NETWORK, shard_of(cand["id"], SHARDS_USED))
    before = rvs(kube, namespace, "c1")
    before_home = stored[home]["spec"]

    set_drain(kube, namespace, target, True)
    drained = wait_for(
        lambda: in_state(kube, namespace, "c1", target, "existing_only"),
        timeout=30,
        what=f"{target} existing_only",
    )
    assert drained["revision"] == whole["revision"] + 1
    after = rvs(kube, namespace, "c1")
    changed = sorted(n for n in before if after.get(n) != before[n])
    assert changed == sorted([home, "index"])
    assert sorted(after) == sorted(before)
    new_cand = next(c for c in drained["candidates"] if c["provider"] == target)
    assert {k: v for k, v in new_cand.items() if k != "admission_state"} == {
        k: v for k, v in cand.items() if k != "admission_state"
    }  # identity, group and rank unchanged
    assert index_of(kube, namespace, "c1")["spec"]["admission"] == {"admitted": 299, "existing_only": 1}

    set_drain(kube, namespace, target, False)
    back = wait_for(
        lambda: in_state(kube, namespace, "c1", target, "admitted"),
        timeout=30,
        what=f"{target} admitted again",
    )
    assert back["revision"] == whole["revision"] + 2
    assert back["candidates"] == whole["candidates"]
    final = rvs(kube, namespace, "c1")
    assert sorted(n for n in after if final[n] != after[n]) == sorted([home, "index"])
    assert shards_of(kube, namespace, "c1")[home]["spec"] == before_home


def labelled(kube, ns, network: str = NETWORK) -> list[str]:
    """Names of the shards the API lists for ``agn.dev/network=<network>``."""
    items, _ = kube.list(SHARDS, ns, label_selector=f"{NETWORK_LABEL}={network}")
    return sorted(o["metadata"]["name"] for o in items)


def listed_shards(kube, ns, consumer) -> list[str]:
    index = index_of(kube, ns, consumer)
    assert index is not None
    return [e["name"] for e in index["spec"]["shards"]]


def test_a_label_selector_lists_a_consumers_network_shards_with_the_api_and_with_kubectl(
    kube, namespace, agn, control_plane
):
    names = [f"p{i:02d}" for i in range(20)]
    fleet(kube, namespace, agn, names, ("consumer-a", "consumer-b"))
    mine = listed_shards(kube, namespace, "consumer-a")
    assert len(mine) > 1
    wait_for(lambda: labelled(kube, namespace) == mine, timeout=30, what="the network's shards labelled")
    assert listed_shards(kube, namespace, "consumer-b") == mine  # shared: one copy for the network
    assert labelled(kube, namespace, "elsewhere") == []

    kubectl = str(ensure_assets(build=False) / "kubectl")
    done = subprocess.run(
        [
            kubectl,
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--context",
            control_plane.context,
            "--namespace",
            namespace,
            "get",
            "routingoverlayshards",
            "-l",
            "agn.dev/network=net",
            "-o",
            "name",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"routingoverlayshard.agn.dev/{n}" for n in mine]


def test_shards_written_without_the_network_label_get_it_without_a_new_revision(kube, namespace, agn):
    """Shards an earlier operator wrote carry no label: the operator patches it onto each
    (other labels kept), and the overlay's revision and the shards' contents stay as they were."""
    names = [f"p{i:02d}" for i in range(20)]
    fleet(kube, namespace, agn, names)
    before = overlay(kube, namespace, "c1")
    assert before is not None
    agn.stop("operator")
    for name in shards_of(kube, namespace, "c1"):
        kube.merge_patch(SHARDS, namespace, name, {"metadata": {"labels": {NETWORK_LABEL: None, "team": "x"}}})
    assert labelled(kube, namespace) == []

    agn.operator("--probe-interval", "2", "--probe-timeout", "5")
    mine = listed_shards(kube, namespace, "c1")
    wait_for(lambda: labelled(kube, namespace) == mine, timeout=30, what="the network's shards labelled again")
    assert all(o["metadata"]["labels"].get("team") == "x" for o in shards_of(kube, namespace, "c1").values())
    assert overlay(kube, namespace, "c1") == before


def test_a_batch_of_many_consumers_is_reconciled_at_once_each_by_one_revision(kube, namespace, agn):
    """Eight consumers of one network, reconciled by four of the operator's workers at once
    (``--reconcile-workers 4``; the default is one at a time): one drain moves each consumer's
    overlay by exactly one revision, with the provider existing_only everywhere, and no
    reconcile fails on the shared verdict."""
    names = [f"p{i:02d}" for i in range(40)]
    consumers = tuple(f"c{i}" for i in range(8))
    fleet(kube, namespace, agn, names, consumers, "--reconcile-workers", "4")
    before = {c: overlay(kube, namespace, c)["revision"] for c in consumers}
    set_drain(kube, namespace, "p07", True)
    for c in consumers:
        got = wait_for(lambda c=c: in_state(kube, namespace, c, "p07", "existing_only"), what=f"{c} drained")
        assert got["revision"] == before[c] + 1
        assert sum(1 for x in got["candidates"] if x["admission_state"] == "existing_only") == 1
    log = agn.log("operator")
    assert "reconcile failed unexpectedly" not in log and "Traceback" not in log


def test_a_deleted_consumers_index_and_shards_are_removed(kube, namespace, agn):
    """The index goes with its consumer, and so do shards of its own (an earlier operator's form,
    written here as that operator left them); the network's shards stay for its other consumers."""
    names = [f"p{i:02d}" for i in range(20)]
    fleet(kube, namespace, agn, names, ("c1", "c2"))
    assert len(shards_of(kube, namespace, "c2")) > 1
    c2 = kube.get(CONSUMERS, namespace, "c2")
    owner = {"apiVersion": "agn.dev/v1alpha1", "kind": "InferenceConsumer", "name": "c2", "uid": c2["metadata"]["uid"]}
    kube.create(SHARDS, namespace, legacy_shard("c2", 3, owner))
    kept = rvs(kube, namespace, "c1")

    kube.delete(CONSUMERS, namespace, "c2")
    wait_for(
        lambda: index_of(kube, namespace, "c2") is None and not own_shards_of(kube, namespace, "c2"),
        timeout=30,
        what="c2's index and shards deleted",
    )
    assert rvs(kube, namespace, "c1") == kept  # the other consumer's objects and the network's are untouched


def legacy_shard(consumer: str, n: int, owner: dict) -> dict:
    """An (empty) shard of ``consumer`` in the per-consumer form an earlier operator wrote."""
    return {
        "apiVersion": "agn.dev/v1alpha1",
        "kind": "RoutingOverlayShard",
        "metadata": {"name": f"{consumer}-shard-{n:02d}", "ownerReferences": [{**owner, "controller": True}]},
        "spec": {
            "network": NETWORK,
            "consumer": consumer,
            "shard": n,
            "shardCount": 16,
            "digest": "d",
            "candidates": [],
        },
    }


def test_a_smaller_shard_count_moves_candidates_and_deletes_surplus_shards_without_a_new_revision(kube, namespace, agn):
    names = [f"p{i:02d}" for i in range(20)]
    fleet(kube, namespace, agn, names, ("c1",), "--overlay-shards", "8")
    first = overlay(kube, namespace, "c1")
    assert first is not None
    assert index_of(kube, namespace, "c1")["spec"]["shardCount"] == 8
    assert max(int(n.rsplit("-", 1)[1]) for n in shards_of(kube, namespace, "c1")) >= 2

    agn.stop("operator")
    agn.operator("--probe-interval", "2", "--overlay-shards", "2")
    wait_for(
        lambda: (
            index_of(kube, namespace, "c1")["spec"]["shardCount"] == 2
            and sorted(shards_of(kube, namespace, "c1"))
            == [e["name"] for e in index_of(kube, namespace, "c1")["spec"]["shards"]]
        ),
        timeout=30,
        what="c1 stored in 2 shards, surplus shards deleted",
    )
    assert set(shards_of(kube, namespace, "c1")) <= {network_shard_name(NETWORK, 0), network_shard_name(NETWORK, 1)}
    again = overlay(kube, namespace, "c1")
    assert again == first  # same revision, digest and candidates: only the storage changed


def test_a_legacy_inline_overlay_is_converted_to_an_index_without_a_new_revision(kube, namespace, agn):
    names = [f"p{i:02d}" for i in range(6)]
    fleet(kube, namespace, agn, names)
    whole = overlay(kube, namespace, "c1")
    assert whole is not None
    agn.stop("operator")
    # What an earlier operator wrote: one RoutingOverlay carrying every candidate, no shards.
    kube.merge_patch(
        OVERLAYS,
        namespace,
        "c1",
        {"spec": {**whole, "shards": None, "shardCount": None, "candidateCount": None, "admission": None}},
    )
    for name in shards_of(kube, namespace, "c1"):
        kube.delete(SHARDS, namespace, name)
    assert "candidates" in index_of(kube, namespace, "c1")["spec"]

    agn.operator("--probe-interval", "2")
    wait_for(
        lambda: "candidates" not in index_of(kube, namespace, "c1")["spec"],
        timeout=30,
        what="the inline overlay converted to an index",
    )
    assert overlay(kube, namespace, "c1") == whole
    assert Overlay.from_spec(whole).revision == index_of(kube, namespace, "c1")["spec"]["revision"]


def index_update_denied(kube, ns: str, consumer: str) -> bool:
    try:
        kube.merge_patch(OVERLAYS, ns, consumer, {"metadata": {"labels": {"probe": "x"}}}, dry_run=True)
    except KubeError as exc:
        return "frozen by the test" in str(exc)
    return False


def test_operator_killed_between_its_shard_write_and_its_index_write(kube, namespace, agn):
    """The operator writes a drained provider's shard, then the API server refuses its index
    write (a real admission policy), and the operator is SIGKILLed in that state. Meanwhile the
    gateway keeps serving the old revision whole (the index still names the old digest, so the
    new shard is never mixed in). A new operator heals it: the index moves to exactly one
    revision more, the gateway serves it, and nothing else changed."""
    names = [f"p{i:03d}" for i in range(120)]
    fleet(kube, namespace, agn, names)
    gateway = agn.gateway("c1")
    whole = overlay(kube, namespace, "c1")
    assert whole is not None
    revision = whole["revision"]
    wait_for(lambda: http_json(f"{gateway}/routes")["servingRevision"] == revision, what="gateway serving")
    target = "p042"
    cand = next(c for c in whole["candidates"] if c["provider"] == target)
    home = network_shard_name(NETWORK, shard_of(cand["id"], SHARDS_USED))
    before = rvs(kube, namespace, "c1")

    # A real admission policy takes the operator's shard writes and refuses its index write:
    # the state an operator killed between the two leaves behind.
    with denying_updates(kube, namespace, "routingoverlays", message="the index is frozen by the test"):
        wait_for(lambda: index_update_denied(kube, namespace, "c1"), timeout=30, what="the policy in force")
        set_drain(kube, namespace, target, True)
        # The shard holding the provider is rewritten; the index is refused and stays.
        wait_for(
            lambda: any(
                c["provider"] == target and c["admission_state"] == "existing_only"
                for c in shards_of(kube, namespace, "c1")[home]["spec"]["candidates"]
            ),
            timeout=30,
            what=f"{home} rewritten with {target} existing_only",
        )
        wait_for(lambda: "index is frozen" in agn.log("operator"), what="the operator's index write refused")
        index = index_of(kube, namespace, "c1")
        assert index["metadata"]["resourceVersion"] == before["index"] and index["spec"]["revision"] == revision
        listed = {e["name"]: e["digest"] for e in index["spec"]["shards"]}
        assert shards_of(kube, namespace, "c1")[home]["spec"]["digest"] != listed[home]
        os.kill(agn.sup.record("operator").pid, signal.SIGKILL)
        # The gateway serves the old revision, whole: the target still admitted.
        routes = http_json(f"{gateway}/routes")
        assert routes["servingRevision"] == revision
        assert {c["provider"]: c["admission_state"] for c in routes["candidates"]}[target] == "admitted"
        assert len(routes["candidates"]) == len(names)

    wait_for(lambda: not index_update_denied(kube, namespace, "c1"), timeout=30, what="the policy gone")
    agn.operator("--probe-interval", "2", "--probe-timeout", "5", name="operator-2")
    healed = wait_for(lambda: in_state(kube, namespace, "c1", target, "existing_only"), timeout=60, what="index healed")
    assert healed["revision"] == revision + 1  # one revision for one change, despite the crash
    wait_for(lambda: http_json(f"{gateway}/routes")["servingRevision"] == revision + 1, what="gateway serving the heal")
    assert {c["provider"]: c["admission_state"] for c in http_json(f"{gateway}/routes")["candidates"]} == {
        n: "existing_only" if n == target else "admitted" for n in names
    }
    after = rvs(kube, namespace, "c1")
    assert sorted(n for n in before if after.get(n) != before[n]) == sorted([home, "index"])
    assert sorted(after) == sorted(before)


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--overlay-shards", "0"),
        ("--overlay-shards", "101"),
        ("--overlay-shards", "many"),
        ("--reconcile-workers", "0"),
        ("--reconcile-workers", "33"),
        ("--reconcile-workers", "four"),
    ],
)
def test_a_bad_shard_or_worker_count_is_a_clear_startup_error(flag, value):
    done = subprocess.run(
        [sys.executable, "-m", "agn.operator", "--namespace", "ns", flag, value],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert flag in done.stderr and value in done.stderr
    assert "Traceback" not in done.stderr


def test_the_shipped_operator_role_reads_and_writes_shards_as_it_does_overlays(kube, namespace):
    apply_identities(kube, namespace, render(load_env("example"), namespace=namespace))
    operator = f"system:serviceaccount:{namespace}:agn-operator"

    def allowed(verb: str, resource: str, name: str | None = None) -> bool:
        return can_i(kube, operator, verb, resource, namespace, name=name, group="agn.dev")

    for verb in ("get", "list", "watch", "create", "update", "patch", "delete"):
        assert allowed(verb, "routingoverlayshards", "c1-shard-00") == allowed(verb, "routingoverlays", "c1") is True
    assert not allowed("deletecollection", "routingoverlayshards")
