"""xtask reads sharded overlays (index + RoutingOverlayShards) from the real API server.

No operator runs here: the test stores a consumer's overlay the way a sharding operator does
(:func:`agn.shards.split`), with one shard held back, so each reader is seen both while the
overlay cannot be assembled and once it can — ``env status``'s objects, the drain's
capacity guard (the real CLI) and the convergence waiter (real list+watch).
"""

from __future__ import annotations

import queue
import threading

import pytest

from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS, SHARDS, Kube
from agn.model import Candidate, Overlay, candidate_id
from agn.shards import split
from drainenv import DrainEnv
from xtask.drain.core.progress import Observed
from xtask.drain.edges.waiter import ConvergenceWaiter
from xtask.envstatus import agn_objects
from xtask.errors import ExitCode

CONSUMER = "c-a"
LAYOUT = {"p-one": "chat", "p-two": "embed", "p-three": "chat", "p-four": "embed"}
DRAINED = "p-one"


class Stored:
    """One consumer's overlay stored sharded, with the shard holding ``DRAINED`` held back."""

    def __init__(self, kube: Kube, ns: str) -> None:
        self.kube, self.ns = kube, ns
        cands = []
        for name, group in LAYOUT.items():
            uid = kube.get(PROVIDERS, ns, name)["metadata"]["uid"]
            state = "existing_only" if name == DRAINED else "admitted"
            cands.append(Candidate(candidate_id(uid), name, "http://127.0.0.1:1", group, 0, state))
        overlay = Overlay(network="net", consumer=CONSUMER, revision=2, digest="rev-2", candidates=tuple(cands))
        self.parts = split(overlay, 4)
        self.held = next(
            n for n, s in self.parts.shards.items() if any(c["provider"] == DRAINED for c in s["candidates"])
        )
        kube.create(OVERLAYS, ns, self.body("RoutingOverlay", CONSUMER, self.parts.index))
        for name, spec in self.parts.shards.items():
            if name != self.held:
                kube.create(SHARDS, ns, self.body("RoutingOverlayShard", name, spec))
        # The gateway has accepted and serves revision 2 (it would only once it had every shard).
        kube.merge_patch_status(CONSUMERS, ns, CONSUMER, {"status": {"acceptedRevision": 2, "servingRevision": 2}})

    @staticmethod
    def body(kind: str, name: str, spec: dict) -> dict:
        return {"apiVersion": "agn.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}

    def shard_of(self, provider: str) -> str:
        return next(n for n, s in self.parts.shards.items() if any(c["provider"] == provider for c in s["candidates"]))

    def hold(self, provider: str) -> None:
        """Hold back the shard holding ``provider`` instead (readers of that provider need it)."""
        name = self.shard_of(provider)
        if name != self.held:
            self.release()
            self.kube.delete(SHARDS, self.ns, name)
            self.held = name

    def release(self) -> None:
        self.kube.create(SHARDS, self.ns, self.body("RoutingOverlayShard", self.held, self.parts.shards[self.held]))


@pytest.fixture
def stored(kube, namespace, agn, control_plane, tmp_path) -> tuple[DrainEnv, Stored]:
    env = DrainEnv(kube, namespace, agn, control_plane, tmp_path)
    kube.create(
        NETWORKS,
        namespace,
        {
            "apiVersion": "agn.dev/v1alpha1",
            "kind": "InferenceNetwork",
            "metadata": {"name": "net"},
            "spec": {"providerSelector": {"matchLabels": {"net": "yes"}}},
        },
    )
    kube.create(
        CONSUMERS,
        namespace,
        {
            "apiVersion": "agn.dev/v1alpha1",
            "kind": "InferenceConsumer",
            "metadata": {"name": CONSUMER},
            "spec": {"network": "net"},
        },
    )
    for name, group in LAYOUT.items():
        env.add_provider(name, "gw", group, 0, "http://127.0.0.1:1")
    kube.merge_patch(PROVIDERS, namespace, DRAINED, {"spec": {"trafficPolicy": {"drain": True}}})
    return env, Stored(kube, namespace)


def test_env_status_shows_an_overlay_being_assembled_then_the_whole_overlay(stored, kube, namespace):
    _, overlay = stored
    (consumer,) = agn_objects(kube, namespace)["consumers"]
    assert consumer["overlayRevision"] == 2 and consumer["candidates"] == {}
    assert consumer["overlayPending"] == f"overlay revision 2 not complete (shards missing {overlay.held})"
    overlay.release()
    (consumer,) = agn_objects(kube, namespace)["consumers"]
    assert consumer["overlayPending"] is None and consumer["overlayRevision"] == 2
    assert consumer["candidates"] == {n: "existing_only" if n == DRAINED else "admitted" for n in LAYOUT}


def test_the_capacity_guard_refuses_on_an_overlay_it_cannot_assemble_and_writes_nothing(stored):
    env, overlay = stored
    # The guard reads only the shard holding the provider to drain: hold that one back.
    overlay.hold("p-three")
    code, report = env.run_json("--provider", "p-three", "--network", "net", "--consumer", CONSUMER)
    assert code == ExitCode.REFUSED, report
    assert report["refused"] == [
        f"capacity guard: consumer {CONSUMER}: overlay revision 2 not complete (shards missing {overlay.held}), "
        "so its capacity cannot be checked (retry, or use --force to drain anyway)"
    ]
    assert env.drain_value("p-three") is None
    # In hand again, the guard sees p-three's candidate and the index's admittedByGroup: p-three
    # is chat's last admitted one.
    overlay.release()
    code, report = env.run_json("--provider", "p-three", "--network", "net", "--consumer", CONSUMER)
    assert code == ExitCode.REFUSED, report
    assert report["refused"] == [
        f"capacity guard: consumer {CONSUMER}: selection group 'chat' would have no admitted provider "
        "(has 1 now) (use --force to drain anyway)"
    ]
    assert env.drain_value("p-three") is None
    # An index written before admittedByGroup existed: the guard reads the whole overlay instead
    # and refuses the same.
    kube, ns = overlay.kube, overlay.ns
    kube.merge_patch(OVERLAYS, ns, CONSUMER, {"spec": {"admittedByGroup": None}})
    assert "admittedByGroup" not in kube.get(OVERLAYS, ns, CONSUMER)["spec"]
    code, again = env.run_json("--provider", "p-three", "--network", "net", "--consumer", CONSUMER)
    assert code == ExitCode.REFUSED and again["refused"] == report["refused"], again
    # A provider of a group with another admitted one passes the guard (embed has p-two and p-four).
    code, report = env.run_json("--provider", "p-two", "--network", "net", "--consumer", CONSUMER, "--dry-run")
    assert code == ExitCode.OK and not report.get("refused"), report


def test_the_waiter_waits_for_every_shard_then_converges(stored, kube, namespace):
    _, overlay = stored
    seen: queue.Queue[list[str]] = queue.Queue()
    waiter = ConvergenceWaiter(
        kube,
        namespace,
        providers=[DRAINED],
        network="net",
        consumers=[CONSUMER],
        drain=True,
        progress=lambda event: seen.put(list(event.lagging)) if isinstance(event, Observed) else None,
    )
    results: list = []
    thread = threading.Thread(target=lambda: results.append(waiter.wait(timeout=60, stop=threading.Event())))
    thread.start()
    try:
        lagging = seen.get(timeout=30)
        assert lagging == [f"consumer {CONSUMER}: overlay revision 2 not complete (shards missing {overlay.held})"]
        overlay.release()
    finally:
        thread.join(timeout=60)
    (result,) = results
    assert result.state == "converged" and result.observations >= 2
    assert result.verdict.signature[0] == (CONSUMER, 2, "rev-2", 2, 2)
