"""Least privilege, verified on the real API server.

The rendered ServiceAccounts, Roles and RoleBindings are created for real in the test's
namespace. Every allowed *and* every denied verb is then checked with a SubjectAccessReview
(the API server's own RBAC authorizer decides), and the decisive ones once more with real
requests made as the service account (impersonation): a denial that is not enforced fails.

Found on this API server (and relied upon by the gateway): ``resourceNames`` restricts
``list`` and ``watch`` too, because a list/watch with the field selector
``metadata.name=<name>`` is authorized as a request for ``<name>``; without that selector (or
with another name) it is Forbidden.
"""

from __future__ import annotations

import dataclasses

import pytest

from agn.events import Regarding, Reporter, event_body
from agn.kube import CONSUMERS, EVENTS, LEASES, OVERLAYS, PROVIDERS, SHARDS, Conflict, Forbidden, Kube, NotFound
from agn.netshards import network_shard_name, network_shard_names
from agn.operator.lease import DEFAULT_LEASE_NAME
from agn.shards import DEFAULT_SHARD_COUNT, shard_name, shard_names
from kubetest import apply_identities, can_i, events, impersonating, service_account_kubeconfig
from xtask.drain.core.lock import lock_name
from xtask.envdef import load_env
from xtask.manifests import env_objects, render

pytestmark = pytest.mark.integration

ENVDEF = load_env("example")
READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete")


def sa(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


@pytest.fixture
def rbac(kube, namespace):
    """Create the env's identities for real in ``namespace``; returns a check(identity, verb, resource, ...) -> bool."""
    apply_identities(kube, namespace, render(ENVDEF, namespace=namespace))

    def check(
        identity: str,
        verb: str,
        resource: str,
        *,
        subresource: str | None = None,
        name: str | None = None,
        group: str = "agn.dev",
    ) -> bool:
        return can_i(
            kube, sa(namespace, identity), verb, resource, namespace, subresource=subresource, name=name, group=group
        )

    return check


def expect(check, identity, allowed, denied):
    """``allowed``/``denied``: (verb, resource, subresource, name) tuples; every one must come out as stated."""
    wrong = [("should be allowed", *a) for a in allowed if not check(identity, a[0], a[1], subresource=a[2], name=a[3])]
    wrong += [("should be denied", *d) for d in denied if check(identity, d[0], d[1], subresource=d[2], name=d[3])]
    assert not wrong, f"{identity}: {wrong}"


AGN_PLURALS = ("inferenceproviders", "inferencenetworks", "inferenceconsumers", "routingoverlays")


def test_operator_reads_everything_writes_overlays_and_provider_status_never_provider_spec(rbac):
    allowed = [(v, r, None, None) for r in AGN_PLURALS for v in READ]
    allowed += [(v, "routingoverlays", None, None) for v in ("create", "update", "patch")]
    allowed += [("delete", "routingoverlays", None, "consumer-a")]  # orphans, where no garbage collector runs
    allowed += [(v, "inferenceproviders", "status", "provider-one") for v in ("get", "update", "patch")]
    denied = [(v, "inferenceproviders", None, "provider-one") for v in WRITE]
    denied += [(v, r, None, None) for r in ("inferencenetworks", "inferenceconsumers") for v in WRITE]
    denied += [("deletecollection", "routingoverlays", None, None)]
    denied += [(v, "inferenceconsumers", "status", "consumer-a") for v in ("update", "patch")]
    expect(rbac, "agn-operator", allowed, denied)
    assert not rbac("agn-operator", "get", "secrets", group="")
    assert not rbac("agn-operator", "list", "pods", group="")


def test_operator_holds_its_lease_and_nothing_else_in_coordination(rbac):
    def check(identity, verb, resource, *, subresource=None, name=None):
        return rbac(identity, verb, resource, subresource=subresource, name=name, group="coordination.k8s.io")

    allowed = [("create", "leases", None, None)]
    allowed += [(v, "leases", None, DEFAULT_LEASE_NAME) for v in ("get", "update")]
    denied = [(v, "leases", None, DEFAULT_LEASE_NAME) for v in ("patch", "delete")]
    denied += [(v, "leases", None, "another-lease") for v in ("get", "update", "patch", "delete")]
    denied += [(v, "leases", None, None) for v in ("list", "watch", "deletecollection")]
    expect(check, "agn-operator", allowed, denied)
    for identity in ("agn-gateway-consumer-a", "default"):
        assert not any(check(identity, v, "leases", name=DEFAULT_LEASE_NAME) for v in ("get", "create", "update"))
    # The drain may create a Lease (its drain locks; create cannot be restricted by name), never
    # read, take over or delete the operator's.
    assert not any(
        check("agn-provider-drain", v, "leases", name=DEFAULT_LEASE_NAME) for v in ("get", "update", "delete")
    )


def test_provider_drain_takes_renews_and_deletes_only_its_networks_drain_locks(rbac):
    def check(identity, verb, resource, *, subresource=None, name=None):
        return rbac(identity, verb, resource, subresource=subresource, name=name, group="coordination.k8s.io")

    mine = lock_name(ENVDEF.networks[0].name)
    allowed = [("create", "leases", None, None)] + [(v, "leases", None, mine) for v in ("get", "update", "delete")]
    denied = [("patch", "leases", None, mine)]
    denied += [(v, "leases", None, "agn-drain-elsewhere") for v in ("get", "update", "patch", "delete")]
    denied += [(v, "leases", None, "agn-probes") for v in ("update", "patch", "delete")]
    denied += [(v, "leases", None, None) for v in ("deletecollection",)]
    expect(check, "agn-provider-drain", allowed, denied)


@pytest.mark.parametrize("consumer, other", [("consumer-a", "consumer-b"), ("consumer-b", "consumer-a")])
def test_gateway_reads_only_its_overlay_and_writes_only_its_status(rbac, consumer, other):
    allowed = [(v, "routingoverlays", None, consumer) for v in READ]
    allowed += [(v, "inferenceconsumers", "status", consumer) for v in ("get", "update", "patch")]
    denied = [(v, "routingoverlays", None, other) for v in READ]
    denied += [(v, "routingoverlays", None, None) for v in ("list", "watch")]  # all overlays: no
    denied += [(v, "routingoverlays", None, consumer) for v in WRITE]
    denied += [(v, "inferenceconsumers", "status", other) for v in ("get", "update", "patch")]
    denied += [(v, "inferenceconsumers", None, consumer) for v in ("get", "update", "patch")]  # its spec: no
    denied += [(v, r, None, None) for r in ("inferenceproviders", "inferencenetworks") for v in READ]
    # Its overlay's shards: get by name, every name its shards can have; nothing else on shards.
    allowed += [("get", "routingoverlayshards", None, name) for name in shard_names(consumer)]
    denied += [("get", "routingoverlayshards", None, name) for name in shard_names(other)]
    denied += [("get", "routingoverlayshards", None, shard_name(consumer, DEFAULT_SHARD_COUNT))]  # beyond the count
    denied += [(v, "routingoverlayshards", None, None) for v in (*READ, *WRITE)]
    denied += [(v, "routingoverlayshards", None, shard_name(consumer, 0)) for v in ("list", "watch", *WRITE)]
    # Its network's shards (shared by the network's consumers), by name; no other network's.
    allowed += [("get", "routingoverlayshards", None, name) for name in network_shard_names("production", 16)]
    denied += [("get", "routingoverlayshards", None, name) for name in network_shard_names("staging", 16)]
    denied += [("get", "routingoverlayshards", None, network_shard_name("production", DEFAULT_SHARD_COUNT))]
    denied += [(v, "routingoverlayshards", None, network_shard_name("production", 0)) for v in ("list", *WRITE)]
    expect(rbac, f"agn-gateway-{consumer}", allowed, denied)


def test_gateway_gets_its_own_shards_and_is_forbidden_another_consumers(as_sa, kube, namespace):
    for consumer in ("consumer-a", "consumer-b"):
        kube.create(
            SHARDS,
            namespace,
            {
                "apiVersion": "agn.dev/v1alpha1",
                "kind": "RoutingOverlayShard",
                "metadata": {"name": shard_name(consumer, 3)},
                "spec": {
                    "network": "production",
                    "consumer": consumer,
                    "shard": 3,
                    "shardCount": DEFAULT_SHARD_COUNT,
                    "digest": "d",
                    "candidates": [],
                },
            },
        )
    gateway = as_sa("agn-gateway-consumer-a")
    assert gateway.get(SHARDS, namespace, shard_name("consumer-a", 3))["spec"]["consumer"] == "consumer-a"
    with pytest.raises(NotFound):  # allowed, just absent: the follower treats it as pending
        gateway.get(SHARDS, namespace, shard_name("consumer-a", 4))
    with pytest.raises(Forbidden):
        gateway.get(SHARDS, namespace, shard_name("consumer-b", 3))
    with pytest.raises(Forbidden):
        gateway.list(SHARDS, namespace)
    with pytest.raises(Forbidden):
        gateway.merge_patch(SHARDS, namespace, shard_name("consumer-a", 3), {"spec": {"digest": "x"}})


def test_gateway_gets_its_networks_shards_and_is_forbidden_another_networks(
    as_sa, kube, namespace, control_plane, tmp_path
):
    """With each gateway's real identity (a ServiceAccount token, as in its pod): its network's
    shards and its own index, never another network's shards or another consumer's index."""
    for network in ("production", "staging"):
        kube.create(
            SHARDS,
            namespace,
            {
                "apiVersion": "agn.dev/v1alpha1",
                "kind": "RoutingOverlayShard",
                "metadata": {"name": network_shard_name(network, 3)},
                "spec": {
                    "formatVersion": 2,
                    "network": network,
                    "shard": 3,
                    "shardCount": DEFAULT_SHARD_COUNT,
                    "digest": "d",
                    "candidates": [],
                },
            },
        )
    for consumer, other in (("consumer-a", "consumer-b"), ("consumer-b", "consumer-a")):
        account = f"agn-gateway-{consumer}"
        config = service_account_kubeconfig(kube, control_plane.kubeconfig, namespace, account, tmp_path / account)
        gateway = Kube.from_kubeconfig(kubeconfig=str(config), context=f"sa-{account}", field_manager="t")
        try:
            shard = gateway.get(SHARDS, namespace, network_shard_name("production", 3))
            assert shard["spec"]["network"] == "production"
            assert gateway.get(OVERLAYS, namespace, consumer)["metadata"]["name"] == consumer
            with pytest.raises(Forbidden):
                gateway.get(SHARDS, namespace, network_shard_name("staging", 3))
            with pytest.raises(Forbidden):
                gateway.get(OVERLAYS, namespace, other)
            with pytest.raises(Forbidden):
                gateway.merge_patch(SHARDS, namespace, network_shard_name("production", 3), {"spec": {"digest": "x"}})
        finally:
            gateway.close()


def test_provider_drain_reads_and_patches_providers_reads_the_rest_nothing_else(rbac):
    allowed = [(v, "inferenceproviders", None, None) for v in (*READ, "patch")]
    drain_reads = ("routingoverlays", "routingoverlayshards", "inferenceconsumers", "inferencenetworks")
    allowed += [(v, r, None, None) for r in drain_reads for v in READ]
    denied = [(v, "inferenceproviders", None, "provider-one") for v in ("create", "update", "delete")]
    denied += [(v, "inferenceproviders", "status", "provider-one") for v in ("update", "patch")]
    denied += [(v, r, None, None) for r in drain_reads for v in WRITE]
    denied += [("patch", "inferenceconsumers", "status", "consumer-a")]
    expect(rbac, "agn-provider-drain", allowed, denied)
    assert not rbac("agn-provider-drain", "get", "secrets", group="")


def test_the_namespace_default_account_gets_nothing(rbac):
    assert not any(rbac("default", v, r) for r in AGN_PLURALS for v in (*READ, *WRITE))


EVENT_VERBS = (*READ, "update", "patch", "delete", "deletecollection")


@pytest.mark.parametrize("identity", ["agn-provider-drain", "agn-operator"])
def test_the_drain_and_the_operator_may_create_events_and_nothing_more(rbac, identity):
    def check(verb, group, name=None):
        return rbac(identity, verb, "events", group=group, name=name)

    assert check("create", "events.k8s.io")
    wrong = [(v, g) for g in ("events.k8s.io", "") for v in EVENT_VERBS if check(v, g)]
    wrong += [
        (v, "events.k8s.io", "p.1") for v in ("get", "update", "patch", "delete") if check(v, "events.k8s.io", "p.1")
    ]
    assert not wrong, f"{identity} may also {wrong}"
    assert not check("create", "")  # only through events.k8s.io/v1, the API the tool uses


def test_gateways_and_the_default_account_may_not_create_events(rbac):
    for identity in ("agn-gateway-consumer-a", "default"):
        assert not rbac(identity, "create", "events", group="events.k8s.io"), identity


# -- real requests, made as the service accounts -------------------------------------------------


def _seed(kube, namespace: str) -> None:
    for obj in env_objects(dataclasses.replace(ENVDEF, namespace=namespace)):
        kube.apply(obj)
    for c in ENVDEF.consumers:
        kube.create(
            OVERLAYS,
            namespace,
            {
                "apiVersion": "agn.dev/v1alpha1",
                "kind": "RoutingOverlay",
                "metadata": {"name": c.name},
                "spec": {"network": c.network, "consumer": c.name, "revision": 1, "digest": "d", "candidates": []},
            },
        )


@pytest.fixture
def as_sa(kube, namespace, rbac):
    _seed(kube, namespace)
    opened = []

    def connect(identity: str):
        k = impersonating(kube, sa(namespace, identity))
        opened.append(k)
        return k

    yield connect
    for k in opened:
        k.close()


def test_operator_cannot_write_provider_spec_but_can_write_its_status(as_sa, kube, namespace):
    operator = as_sa("agn-operator")
    with pytest.raises(Forbidden):
        operator.merge_patch(PROVIDERS, namespace, "provider-one", {"spec": {"trafficPolicy": {"drain": True}}})
    assert "trafficPolicy" not in kube.get(PROVIDERS, namespace, "provider-one")["spec"]
    operator.merge_patch_status(PROVIDERS, namespace, "provider-one", {"status": {"candidateId": "c1"}})
    operator.merge_patch(OVERLAYS, namespace, "consumer-a", {"spec": {"revision": 2}})
    assert kube.get(OVERLAYS, namespace, "consumer-a")["spec"]["revision"] == 2


def test_gateway_lists_and_watches_its_overlay_by_name_only(as_sa, namespace):
    gateway = as_sa("agn-gateway-consumer-a")
    items, version = gateway.list(OVERLAYS, namespace, field_selector="metadata.name=consumer-a")
    assert [o["metadata"]["name"] for o in items] == ["consumer-a"]
    events = list(
        gateway.watch(
            OVERLAYS, namespace, resource_version=version, timeout_seconds=1, field_selector="metadata.name=consumer-a"
        )
    )
    assert all(obj["metadata"].get("name") in (None, "consumer-a") for _, obj in events)
    assert gateway.get(OVERLAYS, namespace, "consumer-a")["spec"]["consumer"] == "consumer-a"
    with pytest.raises(Forbidden):
        gateway.list(OVERLAYS, namespace)
    with pytest.raises(Forbidden):
        gateway.list(OVERLAYS, namespace, field_selector="metadata.name=consumer-b")
    with pytest.raises(Forbidden):
        gateway.get(OVERLAYS, namespace, "consumer-b")


def test_gateway_writes_only_its_own_consumer_status(as_sa, kube, namespace):
    gateway = as_sa("agn-gateway-consumer-a")
    gateway.merge_patch_status(CONSUMERS, namespace, "consumer-a", {"status": {"servingRevision": 1}})
    assert kube.get(CONSUMERS, namespace, "consumer-a")["status"]["servingRevision"] == 1
    with pytest.raises(Forbidden):
        gateway.merge_patch_status(CONSUMERS, namespace, "consumer-b", {"status": {"servingRevision": 1}})
    with pytest.raises(Forbidden):
        gateway.merge_patch(CONSUMERS, namespace, "consumer-a", {"spec": {"excludedProviders": ["provider-one"]}})
    with pytest.raises(Forbidden):
        gateway.merge_patch(OVERLAYS, namespace, "consumer-a", {"spec": {"revision": 9}})


def test_provider_drain_patches_spec_but_not_status_or_overlays(as_sa, kube, namespace):
    drain = as_sa("agn-provider-drain")
    drain.merge_patch(PROVIDERS, namespace, "provider-one", {"spec": {"trafficPolicy": {"drain": True}}})
    assert kube.get(PROVIDERS, namespace, "provider-one")["spec"]["trafficPolicy"] == {"drain": True}
    assert [o["metadata"]["name"] for o in drain.list(OVERLAYS, namespace)[0]] == ["consumer-a", "consumer-b"]
    with pytest.raises(Forbidden):
        drain.merge_patch_status(PROVIDERS, namespace, "provider-one", {"status": {"candidateId": "x"}})
    with pytest.raises(Forbidden):
        drain.merge_patch(OVERLAYS, namespace, "consumer-a", {"spec": {"revision": 9}})
    with pytest.raises(Forbidden):
        drain.delete(PROVIDERS, namespace, "provider-two")


def test_provider_drain_writes_and_lists_drain_holds(as_sa, kube, namespace):
    """Holds (xtask.drain.core.holds) are annotations written by the same conditional merge patch as the
    flag: the Role's ``patch`` on inferenceproviders covers them, ``list`` serves ``env drains``. The
    admission policy wants the hold's owner annotation to name the writer (its service account)."""
    from xtask.drain.core.holds import hold_key, holds_of, owner_key

    drain = as_sa("agn-provider-drain")
    rv = kube.get(PROVIDERS, namespace, "provider-two")["metadata"]["resourceVersion"]
    value = (
        '{"holder":"ann","reason":null,"ticket":null,"since":"2026-01-01T00:00:00Z","expiresAt":null,"operation":"o"}'
    )
    me = sa(namespace, "agn-provider-drain")
    key = hold_key(me)
    patch = {"metadata": {"resourceVersion": rv, "annotations": {key: value, owner_key(key): me}}}
    drain.merge_patch(PROVIDERS, namespace, "provider-two", {**patch, "spec": {"trafficPolicy": {"drain": True}}})
    with pytest.raises(Conflict):  # the precondition two holders rely on: a stale read is refused, not overwritten
        drain.merge_patch(PROVIDERS, namespace, "provider-two", patch)
    (listed,) = [p for p in drain.list(PROVIDERS, namespace)[0] if p["metadata"]["name"] == "provider-two"]
    assert [(h["holder"], h["owner"]) for h in holds_of(listed)] == [("ann", me)]


def test_provider_drain_creates_events_but_cannot_read_change_or_delete_them(as_sa, kube, namespace):
    drain = as_sa("agn-provider-drain")
    provider = kube.get(PROVIDERS, namespace, "provider-one")
    body = event_body(
        name="provider-one.rbac-test",
        regarding=Regarding.of(provider),
        reason="ProviderDrained",
        action="Drain",
        note="rbac test",
        type_="Normal",
        reporter=Reporter("agn.dev/provider-drain", "test"),
        at=1_700_000_000.0,
    )
    drain.create_event(namespace, body)
    assert [e["metadata"]["name"] for e in events(kube, namespace, regarding="provider-one")] == [
        "provider-one.rbac-test"
    ]
    name = "provider-one.rbac-test"
    for call in (
        lambda: drain.delete(EVENTS, namespace, name),
        lambda: drain.merge_patch(EVENTS, namespace, name, {"note": "rewritten"}),
        lambda: drain.get(EVENTS, namespace, name),
        lambda: drain.list(EVENTS, namespace),
    ):
        with pytest.raises(Forbidden):
            call()
    assert events(kube, namespace, regarding="provider-one")[0]["note"] == "rbac test"


def lease(name: str, holder: str, version: str | None = None) -> dict:
    meta = {"name": name}
    if version:
        meta["resourceVersion"] = version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }


def test_operator_takes_and_renews_its_lease_and_deletes_overlays_but_no_other_lease(as_sa, kube, namespace):
    operator = as_sa("agn-operator")
    created = operator.create(LEASES, namespace, lease(DEFAULT_LEASE_NAME, "op-1"))
    assert operator.get(LEASES, namespace, DEFAULT_LEASE_NAME)["spec"]["holderIdentity"] == "op-1"
    operator.replace(
        LEASES, namespace, DEFAULT_LEASE_NAME, lease(DEFAULT_LEASE_NAME, "op-2", created["metadata"]["resourceVersion"])
    )
    assert kube.get(LEASES, namespace, DEFAULT_LEASE_NAME)["spec"]["holderIdentity"] == "op-2"
    with pytest.raises(Forbidden):
        operator.delete(LEASES, namespace, DEFAULT_LEASE_NAME)
    kube.create(LEASES, namespace, lease("another-lease", "someone"))
    with pytest.raises(Forbidden):
        operator.get(LEASES, namespace, "another-lease")
    with pytest.raises(Forbidden):
        operator.list(LEASES, namespace)

    operator.delete(OVERLAYS, namespace, "consumer-a")
    with pytest.raises(NotFound):
        kube.get(OVERLAYS, namespace, "consumer-a")
