"""The window for additions (agn.operator.burst) in the real operator on the real API server:
providers created while another of the network still awaits its first probe are published with
it, in one revision, as soon as that first probe is in; a drain during such a burst is published
at once, not held.

The provider awaiting its first probe is a fake provider answering slowly (``delaySeconds``),
so the burst's end is the moment its first probe returns.
"""

from __future__ import annotations

import time

import pytest
from test_operator import make_consumer, make_network, make_provider, overlay, set_drain, states

from agn.kube import PROVIDERS
from agnprocs import http_json, wait_for

pytestmark = pytest.mark.integration

# The hold's bound is 3 x --burst-batch-wait (12 s by default); a first probe of the slow
# provider takes 2 x SLOW seconds (its health check and its metrics).
SLOW = 2.5
OPERATOR = ("--probe-interval", "30", "--probe-timeout", "6")


def start(kube, ns, agn) -> tuple[str, int]:
    """The network, consumer c1 and two providers admitted and published; the pool's base URL and the revision."""
    base = agn.provider("pool")
    make_network(kube, ns, metricsMaxAgeSeconds=600)
    make_consumer(kube, ns, "c1")
    for n in ("p0", "p1"):
        make_provider(kube, ns, n, f"{base}/pool/{n}")
    agn.operator(*OPERATOR)
    wait_for(lambda: states(kube, ns, "c1") == {"p0": "admitted", "p1": "admitted"}, timeout=60, what="p0, p1")
    return base, overlay(kube, ns, "c1")["revision"]


def burst(kube, ns, base: str, fast: list[str]) -> float:
    """A slow provider, then ``fast`` ones: returns when the last was created (monotonic)."""
    http_json(f"{base}/pool/slow/admin/state", method="POST", body={"delaySeconds": SLOW})
    make_provider(kube, ns, "slow", f"{base}/pool/slow")
    for n in fast:
        make_provider(kube, ns, n, f"{base}/pool/{n}")
    return time.monotonic()


def probed(kube, ns, name: str) -> bool:
    """Whether ``name``'s first probe is in its status (what the operator judges it by)."""
    return ((kube.get(PROVIDERS, ns, name).get("status") or {}).get("probe") or {}).get("healthy") is not None


def test_additions_during_a_burst_are_published_with_its_last_first_probe_in_one_revision(kube, namespace, agn):
    base, revision = start(kube, namespace, agn)
    fast = [f"f{i}" for i in range(4)]
    created = burst(kube, namespace, base, fast)
    wait_for(lambda: all(probed(kube, namespace, n) for n in fast), timeout=30, what="the fast providers probed")
    # Probed and admissible, but the slow one is still awaiting its first probe: held.
    assert not probed(kube, namespace, "slow")
    assert overlay(kube, namespace, "c1")["revision"] == revision
    want = dict.fromkeys(["p0", "p1", "slow", *fast], "admitted")
    wait_for(lambda: states(kube, namespace, "c1") == want, timeout=30, interval=0.1, what="the burst published")
    took = time.monotonic() - created
    assert overlay(kube, namespace, "c1")["revision"] == revision + 1  # one publication for the burst
    assert took < 11.0, f"published {took:.1f}s after the last create: the bound (12 s), not the last first probe"


def test_a_drain_during_a_burst_is_published_at_once(kube, namespace, agn):
    base, revision = start(kube, namespace, agn)
    fast = ["f0", "f1"]
    burst(kube, namespace, base, fast)
    wait_for(lambda: all(probed(kube, namespace, n) for n in fast), timeout=30, what="the fast providers probed")
    t0 = time.monotonic()
    set_drain(kube, namespace, "p0", True)
    got = wait_for(
        lambda: states(kube, namespace, "c1").get("p0") == "existing_only" and overlay(kube, namespace, "c1"),
        timeout=10,
        interval=0.05,
        what="the drain published",
    )
    took = time.monotonic() - t0
    assert not probed(kube, namespace, "slow"), "the slow provider's first probe ended the burst first: no burst left"
    # Published with the additions held so far, without waiting for the burst to end.
    assert {c["provider"] for c in got["candidates"]} == {"p0", "p1", *fast}
    assert got["revision"] == revision + 1
    assert took < 3.0, f"a drain during a burst took {took:.1f}s to publish"
