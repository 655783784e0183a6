"""env up's readiness (pure): the operator's rules and the drain waiter's serving check, reused."""

from __future__ import annotations

import time

from agn.model import ConsumerView, NetworkView, ProviderView, compute_candidates, next_overlay
from agn.shards import Incomplete
from agn.watching import WatchHealth
from xtask.readiness import EnvLook, evaluate_readiness
from xtask.runtime.health import ComponentReport, lost_api_server, probes_behind

NOW = time.time()
NET = NetworkView("net")
CONSUMER = ConsumerView("c", "net")


def provider(name, *, drain=False, healthy=True, endpoint=None):
    return ProviderView(
        name, endpoint or f"http://127.0.0.1:1/{name}", f"id-{name}", "chat", 0, drain, {}, healthy, NOW
    )


def readiness(providers, *, serving=None, overlay_from=None, must_be_healthy=frozenset(), probe_errors=None):
    overlay = next_overlay(
        None, compute_candidates(overlay_from or providers, NET, CONSUMER, now=NOW), network="net", consumer="c"
    )
    rev = overlay.revision if serving is None else serving
    look = EnvLook(
        providers=providers,
        networks={"net": NET},
        consumers=[CONSUMER],
        revisions={"c": (rev, rev)},
        overlays={"c": overlay},
        now=NOW,
        probe_errors=probe_errors or {},
    )
    return evaluate_readiness(look, must_be_healthy=must_be_healthy)


def test_ready_when_every_gateway_serves_its_current_overlay():
    r = readiness([provider("a"), provider("b")])
    assert r.ready and r.served == {"c": 1} and r.excluded == ()


def test_a_drained_provider_does_not_make_the_env_unready():
    # The defect: readiness used to count admitted candidates, so any drain made `env up` time out.
    r = readiness([provider("a", drain=True), provider("b")])
    assert r.ready


def test_an_unhealthy_provider_is_reported_not_waited_for():
    r = readiness([provider("a", healthy=False), provider("b")])
    assert r.ready and r.excluded == ("a for c: unavailable",)


def test_a_fresh_envs_own_fake_provider_that_fails_its_probes_is_waited_for():
    """Just after a fresh bring-up a fake provider's first probe can fail (its Service has no
    endpoint yet): the env is not ready until it answers, so `env up` never reports start-up
    as a provider kept out."""
    r = readiness([provider("a", healthy=False), provider("b")], must_be_healthy=frozenset({"a", "b"}))
    assert not r.ready
    assert r.problems == ("provider a: its probes fail (just started; waiting for it to answer)",)
    assert readiness([provider("a"), provider("b")], must_be_healthy=frozenset({"a", "b"})).ready


def test_a_waited_for_provider_names_what_its_probes_see():
    # A bring-up that times out on a provider's probes says why they fail (the operator's last
    # health error from the status), not only that they do.
    r = readiness(
        [provider("a", healthy=False), provider("b")],
        must_be_healthy=frozenset({"a", "b"}),
        probe_errors={"a": "GET /healthz: timed out", "b": "GET /healthz: Connection refused"},
    )
    assert r.problems == (
        "provider a: its probes fail (just started; waiting for it to answer; last: GET /healthz: timed out)",
    )


def test_a_malformed_endpoint_is_named():
    r = readiness([provider("a", endpoint="ftp://[::1"), provider("b")])
    assert r.ready and r.excluded == ("a for c: invalid",)


def test_a_gateway_behind_its_overlay_is_named():
    r = readiness([provider("a")], serving=0)
    assert not r.ready and r.problems == ("consumer c: overlay revision 1, accepted 0, serving 0",)


def test_an_overlay_behind_the_providers_is_named():
    # The operator has not yet published the drain of a: the overlay still admits it.
    r = readiness([provider("a", drain=True)], overlay_from=[provider("a")])
    assert not r.ready
    assert r.problems == ("consumer c: overlay revision 1 has a admitted, the operator's rules give existing_only",)


def test_an_unprobed_provider_is_waited_for():
    r = readiness([provider("a", healthy=None)])
    assert not r.ready and r.problems == ("provider a: not probed by the operator yet",)


def test_a_missing_overlay_is_named():
    r = evaluate_readiness(
        EnvLook(
            providers=[provider("a")], networks={"net": NET}, consumers=[CONSUMER], revisions={}, overlays={}, now=NOW
        )
    )
    assert r.problems == ("consumer c: no overlay published yet",)


def test_watch_health_turns_unhealthy_only_past_its_bound():
    clock = [100.0]
    h = WatchHealth("x", clock=lambda: clock[0])
    h.ok()
    h.failed(ConnectionError("refused"))
    clock[0] += 29
    assert h.live(30)
    clock[0] += 2
    assert not h.live(30) and h.to_dict(30)["lastError"] == "refused"
    h.ok()
    assert h.live(30)


def test_a_component_that_lost_its_api_server_is_recognised():
    dead = ComponentReport(True, 503, {"watches": {"routingoverlays": {"live": False, "lastError": "refused"}}})
    assert "watches keep failing" in lost_api_server(dead, server="https://127.0.0.1:1")
    moved = ComponentReport(True, 200, {"server": "https://127.0.0.1:1", "watches": {}})
    assert "uses API server https://127.0.0.1:1" in lost_api_server(moved, server="https://127.0.0.1:2")
    fine = ComponentReport(True, 200, {"server": "https://127.0.0.1:2", "watches": {"x": {"live": True}}})
    assert lost_api_server(fine, server="https://127.0.0.1:2") is None


def test_probe_backlog_is_reported_only_while_behind():
    load = {"concurrency": 4, "inFlight": 4, "backlog": 120, "lagSeconds": 3.5}
    behind = ComponentReport(True, 200, {"status": "ok", "probes": {**load, "behind": True}})
    assert probes_behind(behind) == "probes behind: 120 due and waiting for one of 4 slots, the oldest 3.5s late"
    assert probes_behind(ComponentReport(True, 200, {"probes": {**load, "behind": False}})) is None
    rates = {"askedPerSecond": 2000.0, "finishedPerSecond": 932.0, "fitsIntervalSeconds": 10.7}
    named = ComponentReport(True, 200, {"probes": {**load, **rates, "behind": True}})
    assert probes_behind(named) == (
        "probes behind: 120 due and waiting for one of 4 slots, the oldest 3.5s late; the networks ask "
        "2000 probes/s and 932/s finish: a probe interval of 10.7s would fit"
    )
    assert probes_behind(ComponentReport(True, 200, {"status": "ok"})) is None  # a gateway has no prober


def test_an_overlay_still_being_assembled_is_not_ready_and_says_why():
    # A sharded overlay whose index names a shard not yet at its digest: nothing is judged on
    # half of it, and the gateway's revisions are not compared with a revision nobody can serve.
    pending = Incomplete(2, missing=["c-shard-03"], mismatched=["c-shard-11"])
    r = evaluate_readiness(
        EnvLook(
            providers=[provider("a")],
            networks={"net": NET},
            consumers=[CONSUMER],
            revisions={"c": (2, 2)},
            overlays={"c": pending},
            now=NOW,
        )
    )
    assert not r.ready and r.served == {}
    assert r.problems == (
        "consumer c: overlay revision 2 not complete "
        "(shards missing c-shard-03; not yet at the index's digest: c-shard-11)",
    )
