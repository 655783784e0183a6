"""The network-shard form (``agn.netshards``) written by the real operator on the real API
server, read by real gateways: a drain among several consumers of one network changes one
network shard and the network's indexes, nothing else; a consumer's exclusions stay in its own
index; and an env whose overlays the previous operator stored per consumer
(``<consumer>-shard-NN``) is upgraded in place at the same revisions while its gateways serve on.
"""

from __future__ import annotations

import pytest
from test_operator import make_consumer, make_network, overlay, set_drain, states
from test_overlay_shards_operator import NETWORK, SHARDS_USED, in_state, index_of, own_shards_of
from test_probe_fleet import create_pool

from agn.kube import CONSUMERS, OVERLAYS, SHARDS, KubeError
from agn.model import Overlay
from agn.netshards import network_shard_name
from agn.shards import shard_of, split
from agnprocs import http_json, wait_for
from kubetest import denying_updates

pytestmark = pytest.mark.integration

PROBES = ("--probe-interval", "2", "--probe-timeout", "5")


def network_rvs(kube, ns, consumers) -> dict[str, str]:
    """resourceVersion of every network shard and of each consumer's index, by name."""
    out = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in kube.list(SHARDS, ns)[0]}
    for c in consumers:
        out[f"index/{c}"] = kube.get(OVERLAYS, ns, c)["metadata"]["resourceVersion"]
    return out


def start(kube, ns, agn, names, consumers: dict[str, tuple[str, ...]]) -> None:
    make_network(kube, ns, metricsMaxAgeSeconds=600)
    create_pool(kube, ns, agn.provider("pool"), names)
    for c, excluded in consumers.items():
        make_consumer(kube, ns, c, excluded=excluded)
    agn.operator(*PROBES)
    for c, excluded in consumers.items():
        want = {n: "admitted" for n in names if n not in excluded}
        wait_for(lambda c=c, want=want: states(kube, ns, c) == want, timeout=180, interval=0.5, what=f"{c} admitted")


def test_a_drain_among_three_consumers_changes_one_network_shard_and_their_indexes(kube, namespace, agn):
    names = [f"p{i:03d}" for i in range(120)]
    consumers = {"a": (), "b": (), "c": ("p042",)}  # c excludes the provider drained below
    start(kube, namespace, agn, names, consumers)
    before_overlays = {c: overlay(kube, namespace, c) for c in consumers}
    assert all(index_of(kube, namespace, c)["spec"]["formatVersion"] == 2 for c in consumers)
    assert index_of(kube, namespace, "c")["spec"]["excluded"] == [
        x["id"] for x in before_overlays["a"]["candidates"] if x["provider"] == "p042"
    ]
    cand = next(x for x in before_overlays["a"]["candidates"] if x["provider"] == "p042")
    home = network_shard_name(NETWORK, shard_of(cand["id"], SHARDS_USED))
    before = network_rvs(kube, namespace, consumers)

    set_drain(kube, namespace, "p042", True)
    for c in ("a", "b"):
        got = wait_for(lambda c=c: in_state(kube, namespace, c, "p042", "existing_only"), what=f"{c} drained")
        assert got["revision"] == before_overlays[c]["revision"] + 1
    want = {e["name"]: e["digest"] for e in index_of(kube, namespace, "a")["spec"]["shards"]}
    wait_for(
        lambda: {e["name"]: e["digest"] for e in index_of(kube, namespace, "c")["spec"]["shards"]} == want,
        what="c's index names the rewritten network shard",
    )
    assert overlay(kube, namespace, "c") == before_overlays["c"]  # c's overlay did not change: same revision
    after = network_rvs(kube, namespace, consumers)
    changed = sorted(n for n in after if after[n] != before.get(n))
    # O(1): one network shard and the network's three indexes, whatever the fleet's size.
    assert changed == sorted([home, "index/a", "index/b", "index/c"])


def served(gateway: str) -> tuple[int, dict[str, str]]:
    routes = http_json(f"{gateway}/routes")
    return routes["servingRevision"], {c["provider"]: c["admission_state"] for c in routes["candidates"]}


def test_a_shared_shard_ahead_of_an_index_is_never_read_with_it(kube, namespace, agn):
    """b's index writes are refused (a real admission policy) while a drain rewrites the network
    shard both consumers' indexes name: a's gateway serves the new revision, b's keeps serving
    its old one whole, and a reader of b's overlay gets no mix; once b's index can be written the
    operator writes it and b's gateway serves the new revision."""
    names = [f"p{i:02d}" for i in range(60)]
    start(kube, namespace, agn, names, {"a": (), "b": ()})
    gateways = {c: agn.gateway(c) for c in ("a", "b")}
    old = {c: overlay(kube, namespace, c)["revision"] for c in gateways}
    for c, url in gateways.items():
        wait_for(lambda url=url, c=c: served(url)[0] == old[c], what=f"gateway {c} serving")
    frozen = "b's index is frozen by the test"
    with denying_updates(kube, namespace, "routingoverlays", expression="object.metadata.name != 'b'", message=frozen):
        wait_for(
            lambda: frozen in index_patch_error(kube, namespace, "b") and not index_patch_error(kube, namespace, "a"),
            timeout=30,
            what="the policy in force",
        )
        set_drain(kube, namespace, "p12", True)
        wait_for(lambda: served(gateways["a"])[0] == old["a"] + 1, timeout=30, what="a serving the drain")
        assert served(gateways["a"])[1]["p12"] == "existing_only"
        wait_for(lambda: frozen in agn.log("operator"), what="the operator's write of b's index refused")
        assert index_of(kube, namespace, "b")["spec"]["revision"] == old["b"]
        revision, states_b = served(gateways["b"])
        assert revision == old["b"] and states_b == dict.fromkeys(names, "admitted")  # old, whole
        assert overlay(kube, namespace, "b") is None  # the shard is ahead of b's index: no mixed read
    wait_for(lambda: served(gateways["b"])[0] == old["b"] + 1, timeout=60, what="b serving the drain")
    assert served(gateways["b"])[1] == {n: "existing_only" if n == "p12" else "admitted" for n in names}


def index_patch_error(kube, ns: str, consumer: str) -> str:
    """The API server's refusal of a (dry-run) update of ``consumer``'s index, or ''."""
    try:
        kube.merge_patch(OVERLAYS, ns, consumer, {"metadata": {"labels": {"probe": "x"}}}, dry_run=True)
    except KubeError as exc:
        return str(exc)
    return ""


def write_previous_form(kube, ns, consumer: str, whole: dict) -> None:
    """Store ``consumer``'s overlay as the previous operator did: an index with no formatVersion
    naming ``<consumer>-shard-NN`` shards (agn.shards.split, that operator's storage code)."""
    sharded = split(Overlay.from_spec(whole), SHARDS_USED)
    uid = kube.get(CONSUMERS, ns, consumer)["metadata"]["uid"]
    owner = {"apiVersion": "agn.dev/v1alpha1", "kind": "InferenceConsumer", "name": consumer, "uid": uid}
    for name, spec in sharded.shards.items():
        meta = {
            "name": name,
            "labels": {"agn.dev/consumer": consumer},
            "ownerReferences": [{**owner, "controller": True}],
        }
        kube.create(
            SHARDS,
            ns,
            {"apiVersion": "agn.dev/v1alpha1", "kind": "RoutingOverlayShard", "metadata": meta, "spec": spec},
        )
    patch = {k: None for k in ("formatVersion", "excluded")} | sharded.index
    kube.merge_patch(OVERLAYS, ns, consumer, {"spec": patch})


def test_an_env_stored_per_consumer_is_upgraded_in_place_at_the_same_revisions(kube, namespace, agn):
    names = [f"p{i:02d}" for i in range(40)]
    consumers = {"c1": (), "c2": ("p07",)}
    start(kube, namespace, agn, names, consumers)
    wholes = {c: overlay(kube, namespace, c) for c in consumers}
    agn.stop("operator")
    # The env as the previous release left it: no network shards, each consumer's own shards.
    for o in kube.list(SHARDS, namespace)[0]:
        kube.delete(SHARDS, namespace, o["metadata"]["name"])
    for c in consumers:
        write_previous_form(kube, namespace, c, wholes[c])
        assert "formatVersion" not in index_of(kube, namespace, c)["spec"] and own_shards_of(kube, namespace, c)
        assert overlay(kube, namespace, c) == wholes[c]
    gateway = agn.gateway("c2")
    revision = wholes["c2"]["revision"]
    wait_for(lambda: http_json(f"{gateway}/routes")["servingRevision"] == revision, what="gateway serving the old form")

    agn.operator(*PROBES, name="operator-2")
    for c in consumers:
        wait_for(
            lambda c=c: (
                index_of(kube, namespace, c)["spec"].get("formatVersion") == 2 and not own_shards_of(kube, namespace, c)
            ),
            timeout=60,
            what=f"{c} upgraded and its own shards deleted",
        )
        assert overlay(kube, namespace, c) == wholes[c]  # same revision, digest and candidates
    # The gateway reads the new form (its network's shards) and serves the same revision on.
    wait_for(lambda: "net-netshard-" in agn.log("gateway-c2"), timeout=30, what="gateway read the network shards")
    routes = http_json(f"{gateway}/routes")
    assert routes["servingRevision"] == revision and len(routes["candidates"]) == len(names) - 1
    assert "p07" not in {x["provider"] for x in routes["candidates"]}
    log = agn.log("operator-2")
    assert "reconcile failed unexpectedly" not in log and "Traceback" not in log
