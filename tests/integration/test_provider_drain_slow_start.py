"""``provider-drain --undrain --slow-start`` against the real API server, operator, consumer
gateways and fake providers: a returning provider's share of new sessions ramps over the window,
with at most two overlay revisions per consumer, and a drain in the window cancels it.

The noise bound. New sessions (a fresh ``x-session-id`` each, selection group ``chat``) are sent
through consumer c-a's gateway at a steady rate, ~40/s, so each 10 s window holds n ≈ 400 of them.
p-one (rank 0) has all of ``chat``'s new sessions when it serves in full, so its expected share in
window k of the 60 s ramp (linear from 5%) is e_k = 0.05 + 0.95 (k + ½) / 6: 0.13, 0.29, 0.45,
0.60, 0.76, 0.92. Each session is an independent trial, so the window's share is binomial with
σ_k = √(e_k (1 − e_k) / n) ≤ 0.025; a share is accepted within 4 σ_k + 0.03 of e_k (0.03 for the
window's edges: the start time is written in whole seconds on the API server's clock and the
gateway serves the undrain some hundreds of milliseconds after it). Consecutive windows differ by
0.158 in expectation and their difference has σ ≤ 0.035 (4.5 σ), so "rises in every window" is a
check that fails by chance about once in 10⁵ runs. After the window p-one takes every new session
(no noise at all: the choice is deterministic again).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
import uuid

import pytest

from agn.model import SlowStart
from agnprocs import wait_for
from drainenv import CONSUMER_NAMES, DrainEnv, complete

pytestmark = pytest.mark.integration

WINDOW = 60
RATE = 40.0  # new sessions per second
FLOOR = 0.05


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up()


class Sender:
    """New sessions at a steady rate through one gateway, each answer recorded as (time, provider)."""

    def __init__(self, gateway: str, rate: float) -> None:
        self.gateway = gateway
        self.period = 1.0 / rate
        self.sent: list[tuple[float, str | None, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="sender", daemon=True)

    def _run(self) -> None:
        due = time.monotonic()
        while not self.stop.is_set():
            at = time.time()
            code, provider = complete(self.gateway, session=f"s-{uuid.uuid4().hex}", group="chat")
            self.sent.append((at, provider, code))
            due += self.period
            self.stop.wait(max(0.0, due - time.monotonic()))  # paced by the clock, not by a sleep per step

    def __enter__(self) -> Sender:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=15)

    def share(self, provider: str, start: float, end: float) -> tuple[float, int]:
        window = [p for at, p, _ in self.sent if start <= at < end]
        return (sum(p == provider for p in window) / len(window) if window else math.nan), len(window)


def window_of(env: DrainEnv, consumer: str, provider: str) -> dict | None:
    cand = next(c for c in env.overlay(consumer)["candidates"] if c["provider"] == provider)
    return cand.get("slowStart")


def index_revision(env: DrainEnv, consumer: str) -> int:
    return int(env.overlay(consumer)["revision"])


def test_slow_start_ramps_the_share_of_new_sessions_with_at_most_two_revisions(env: DrainEnv):
    code, report = env.run_json("--provider", "p-one", *env.targets())
    assert code == 0, report
    before = {c: index_revision(env, c) for c in CONSUMER_NAMES}
    with Sender(env.gateways["c-a"], RATE) as sender:
        wait_for(lambda: len(sender.sent) >= 20, timeout=30, what="the sender under way")
        code, report = env.run_json("--provider", "p-one", "--undrain", "--slow-start", f"{WINDOW}s", *env.targets())
        assert code == 0, report
        written = env.provider("p-one")["spec"]["trafficPolicy"]
        assert "drain" not in written or written["drain"] is False
        window = SlowStart.from_dict(written["slowStart"])
        assert window is not None and window.seconds == WINDOW
        assert abs(window.start - time.time()) < 10  # the server's clock (this host's, here)
        for c in CONSUMER_NAMES:  # published with the undrain, in the same revision
            assert window_of(env, c, "p-one") == written["slowStart"]
            assert env.revisions(c)[1] == before[c] + 1
        wait_for(lambda: time.time() >= window.end + 10, timeout=WINDOW + 30, interval=0.5, what="the window over")
    assert all(code == 200 for _, _, code in sender.sent), "a new session failed"

    shares = []
    for k in range(6):
        share, n = sender.share("p-one", window.start + 10 * k, window.start + 10 * (k + 1))
        expected = FLOOR + (1 - FLOOR) * (k + 0.5) / 6
        bound = 4 * math.sqrt(expected * (1 - expected) / n) + 0.03
        assert n >= 200, f"window {k}: only {n} new sessions (the sender fell behind)"
        assert abs(share - expected) <= bound, (
            f"window {k}: share {share:.3f} of {n}, expected {expected:.3f} ± {bound:.3f}"
        )
        shares.append(share)
    assert all(a < b for a, b in itertools.pairwise(shares)), f"shares do not rise in every window: {shares}"
    after, n = sender.share("p-one", window.end + 2, window.end + 10)
    assert n > 0 and after == 1.0, f"after the window p-one has {after:.3f} of {n} new sessions, not all"

    # The window left the overlay when it ended: one revision for it, one for the undrain.
    for c in CONSUMER_NAMES:
        wait_for(lambda c=c: window_of(env, c, "p-one") is None, timeout=20, what=f"{c}: the window gone")
        assert index_revision(env, c) - before[c] <= 2


def test_a_drain_in_the_window_cancels_it(env: DrainEnv):
    assert env.run_json("--provider", "p-one", *env.targets())[0] == 0
    code, report = env.run_json("--provider", "p-one", "--undrain", "--slow-start", "10m", *env.targets())
    assert code == 0, report
    assert env.provider("p-one")["spec"]["trafficPolicy"]["slowStart"]["durationSeconds"] == 600
    code, report = env.run_json("--provider", "p-one", *env.targets())
    assert code == 0, report
    assert "slowStart" not in env.provider("p-one")["spec"]["trafficPolicy"]
    for c in CONSUMER_NAMES:
        assert env.states(c)["p-one"] == "existing_only" and window_of(env, c, "p-one") is None
    # Back without a slow start: its full share at once, nothing of the cancelled window left.
    assert env.run_json("--provider", "p-one", "--undrain", *env.targets())[0] == 0
    assert all(window_of(env, c, "p-one") is None for c in CONSUMER_NAMES)
    picked = [complete(env.gateways["c-a"], session=f"n-{i}", group="chat")[1] for i in range(40)]
    assert picked == ["p-one"] * 40
