"""Drains weighed and carried out against real llama.cpp servers, through a real consumer gateway:
the load-aware capacity guard refuses a drain whose group cannot absorb the load the server
itself reports; ``--session-deadline`` moves sticky sessions off a drained server in the cluster;
``--undrain --slow-start`` ramps a returning server's share of new sessions. The scenarios of
tests/integration/test_provider_drain_{capacity,sessions,slow_start}.py, on real engines.

Layout: selection group ``chat`` holds two llama-servers, llama-a (rank 0: every new session's
first choice) and llama-b (rank 1); a fake in group ``embed`` is only there for DrainEnv."""

from __future__ import annotations

import itertools
import math
import threading
import time
import uuid

import pytest

from agn.kube import CONSUMERS, PROVIDERS
from agn.model import SlowStart
from agn.objects import parse_time
from agnprocs import wait_for
from drainenv import DrainEnv, complete
from llamaprocs import Completion, LlamaServers, Server, health

pytestmark = pytest.mark.engines

SPARE = {"p-spare": ("gw-s", "embed", 0)}
SESSIONS = 5


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up(providers=SPARE)


@pytest.fixture
def llamas(env: DrainEnv, servers: LlamaServers) -> dict[str, Server]:
    """llama-a (rank 0) and llama-b (rank 1) in group chat, 2 slots each, admitted by both consumers."""
    started = {name: servers.start(servers.component(name, slots=2)) for name in ("llama-a", "llama-b")}
    for rank, (name, server) in enumerate(started.items()):
        wait_for(lambda s=server: health(s.url) == 200, timeout=60, what=f"{name} loaded")
        env.add_provider(name, "gw-l", "chat", rank, server.url)
        env.kube.merge_patch(PROVIDERS, env.ns, name, {"spec": {"metrics": {"format": "llamacpp"}}})
    for c in ("c-a", "c-b"):
        wait_for(lambda c=c: env.serving_all_admitted(c, 3), timeout=60, what=f"{c} serving both llamas admitted")
    return started


class Traffic:
    """Completions through one gateway, paced by the clock: ``sticky`` sessions sending a turn
    each per second, or (``rate``) a new session per send; every answer as (time, status, provider)."""

    def __init__(self, gateway: str, *, sticky: int = 0, rate: float = 0.0) -> None:
        self.gateway, self.sticky, self.period = gateway, sticky, (1.0 / rate if rate else 1.0)
        self.sent: list[tuple[float, int, str | None]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="traffic", daemon=True)

    def _run(self) -> None:
        due = time.monotonic()
        while not self.stop.is_set():
            sessions = [f"chat-{i}" for i in range(self.sticky)] or [f"s-{uuid.uuid4().hex}"]
            for session in sessions:
                at = time.time()
                self.sent.append((at, *complete(self.gateway, session=session, max_tokens=2, timeout=30)))
            due += self.period
            self.stop.wait(max(0.0, due - time.monotonic()))

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)

    def since(self, start: float, end: float = math.inf) -> list[tuple[float, int, str | None]]:
        return [t for t in self.sent if start <= t[0] < end]


def test_a_drain_the_group_cannot_absorb_under_real_load_is_refused_naming_the_numbers(env, llamas):
    for name in llamas:
        env.kube.merge_patch(PROVIDERS, env.ns, name, {"spec": {"capacity": {"maxConcurrent": 2}}})
    # Four long generations through c-a's gateway: all to llama-a (rank 0), two run, two wait.
    gateway, server = env.gateways["c-a"], llamas["llama-a"]
    for _ in range(4):
        Completion(gateway, 4000, group="chat").start()
    wait_for(lambda: server.load() == (2, 2), timeout=60, what="llama-a running 2, deferring 2")
    wait_for(
        lambda: [load_of(env, n) for n in llamas] == [(2, 2), (0, 0)],
        timeout=60,
        what="the published loads: llama-a 2 running 2 waiting, llama-b idle",
    )
    code, report = env.run_json("--provider", "llama-a", *env.targets())
    assert code == 3, report
    (refusal,) = report["refused"]
    assert "network net, selection group 'chat'" in refusal and "carry load 4 (llama-a 4)" in refusal, refusal
    assert "over the headroom 2 of the 1 provider(s)" in refusal and "(capacity 2, load 0, margin 0)" in refusal
    (group,) = [g for g in report["capacity"]["groups"] if g["group"] == "chat"]
    assert (group["load"], group["headroom"], group["verdict"]) == (4, 2, "exceeds"), group
    assert env.drain_value("llama-a") is None and env.journal_paths() == []  # nothing written
    assert server.load() != (0, 0), "the load was gone before the drain was weighed"


def load_of(env: DrainEnv, name: str) -> tuple | None:
    load = (env.provider(name).get("status") or {}).get("load")
    return (load.get("running"), load.get("waiting")) if load else None


def sessions_line(env: DrainEnv, provider: str) -> dict | None:
    report = (env.kube.get(CONSUMERS, env.ns, "c-a").get("status") or {}).get("sessions") or {}
    return next((p for p in report.get("providers", ()) if p["provider"] == provider), None)


def test_session_deadline_moves_sticky_sessions_off_a_drained_real_server(env, llamas, servers):
    with Traffic(env.gateways["c-a"], sticky=SESSIONS) as talk:
        wait_for(lambda: len(talk.sent) >= 2 * SESSIONS, timeout=30, what="every session under way")
        code, report = env.run_json("--provider", "llama-a", "--session-deadline", "10s", *env.targets())
        assert code == 0, report
        deadline = parse_time(env.provider("llama-a")["spec"]["trafficPolicy"]["sessionDeadline"])
        assert deadline is not None and 7 <= deadline - time.time() <= 11
        before = talk.since(0, deadline - 1)
        assert {p for *_, p in before[-SESSIONS:]} == {"llama-a"}, "sticky until the deadline"
        wait_for(lambda: time.time() >= deadline + 4, timeout=30, interval=0.5, what="four turns past the deadline")
        after = talk.since(deadline + 1.5)
        assert len(after) >= 2 * SESSIONS and {p for *_, p in after} == {"llama-b"}, after
        wait_for(
            lambda: (line := sessions_line(env, "llama-a")) is not None and line["rehomed"] == SESSIONS,
            timeout=10,
            what="c-a counting five sessions rehomed away from llama-a",
        )
        servers.sup.stop("engine-llama-a")  # by pid: the drained server goes
        stopped = time.time()
        wait_for(lambda: len(talk.since(stopped)) >= 3 * SESSIONS, timeout=30, what="three more turns each")
    assert all(code == 200 for _, code, _ in talk.sent), [t for t in talk.sent if t[1] != 200]
    assert {p for *_, p in talk.since(stopped)} == {"llama-b"}


WINDOW, RATE, FLOOR = 30, 10.0, 0.05  # three 10 s windows of ~100 new sessions each


def test_slow_start_ramps_a_returning_real_servers_share_of_new_sessions(env, llamas):
    assert env.run_json("--provider", "llama-a", *env.targets())[0] == 0
    with Traffic(env.gateways["c-a"], rate=RATE) as send:
        wait_for(lambda: len(send.sent) >= 10, timeout=30, what="the sender under way")
        assert {p for *_, p in send.sent} == {"llama-b"}  # drained: every new session to rank 1
        code, report = env.run_json("--provider", "llama-a", "--undrain", "--slow-start", f"{WINDOW}s", *env.targets())
        assert code == 0, report
        window = SlowStart.from_dict(env.provider("llama-a")["spec"]["trafficPolicy"]["slowStart"])
        assert window is not None and window.seconds == WINDOW
        wait_for(lambda: time.time() >= window.end + 8, timeout=WINDOW + 30, interval=0.5, what="the window over")
    assert all(code == 200 for _, code, _ in send.sent), "a new session failed"
    shares = []
    for k in range(3):  # expected 0.21, 0.53, 0.84; binomial σ ≤ 0.05 at n ≈ 100
        window_sent = send.since(window.start + 10 * k, window.start + 10 * (k + 1))
        n = len(window_sent)
        share = sum(p == "llama-a" for *_, p in window_sent) / n
        expected = FLOOR + (1 - FLOOR) * (k + 0.5) / 3
        bound = 4 * math.sqrt(expected * (1 - expected) / n) + 0.03
        assert n >= 50, f"window {k}: only {n} new sessions (the sender fell behind)"
        assert abs(share - expected) <= bound, f"window {k}: share {share:.3f} of {n}, expected {expected:.3f}"
        shares.append(share)
    assert all(a < b for a, b in itertools.pairwise(shares)), f"shares do not rise in every window: {shares}"
    after = send.since(window.end + 2)
    assert after and {p for *_, p in after} == {"llama-a"}, "after the window llama-a has every new session"
