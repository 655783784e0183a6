"""Sessions that end on purpose, against the real API server, operator, consumer gateways and fake
providers: ``--wait-sessions QUIET`` blocks while sticky sessions on a drained provider talk and
ends once they stop; its timeout is exit 11 naming the provider and its sessions; with
``--session-deadline`` the gateways move the sessions to an admitted provider of the same group
(in the cluster: the CLI may be gone), so killing the drained provider fails no turn.

Layout (drainenv.LAYOUT): selection group ``chat`` has p-one (rank 0) and p-three (rank 1), so
five sticky sessions of ``chat`` through c-a's gateway all start on p-one.

Timing bound of ``--wait-sessions 5``: a turn reaches the consumer's ``status.sessions`` at most
one report interval (1 s, the gateway's ``--sessions-report-interval``) plus a status write
after it is routed, its time in milliseconds; the CLI counts QUIET plus the interval it reads in
the report (one observation) from that time, and looks at least every 0.5 s. Both processes
estimate the API server's clock from its whole-second ``Date`` header (±0.5 s each). So it ends
within QUIET + 1 (the observation) + 0.5 (its look) + 1 (two clock estimates) + a write and the
CLI's exit after the last turn: the test allows QUIET + 3.5 s, and requires at least QUIET - 1.
"""

from __future__ import annotations

import threading
import time

import pytest

from agn.kube import CONSUMERS
from agn.objects import parse_time
from agnprocs import wait_for
from drainenv import DrainEnv, complete

pytestmark = pytest.mark.integration

QUIET = 5
SESSIONS = 5


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up()


class Talkers:
    """``SESSIONS`` sticky sessions, each sending a turn every second through one gateway; every
    answer recorded as (time sent, session, status, provider)."""

    def __init__(self, gateway: str, *, prefix: str = "chat") -> None:
        self.gateway = gateway
        self.sessions = [f"{prefix}-{i}" for i in range(SESSIONS)]
        self.turns: list[tuple[float, str, int, str | None]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="talkers", daemon=True)
        self.last_sent = 0.0

    def _run(self) -> None:
        due = time.monotonic()
        while not self.stop.is_set():
            for session in self.sessions:
                at = time.time()
                self.last_sent = at
                code, provider = complete(self.gateway, session=session)
                self.turns.append((at, session, code, provider))
            due += 1.0
            self.stop.wait(max(0.0, due - time.monotonic()))  # a turn per session per second, paced by the clock

    def __enter__(self) -> Talkers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.halt()

    def halt(self) -> float:
        """Stop talking; the time the last turn was sent."""
        self.stop.set()
        self.thread.join(timeout=15)
        return self.last_sent

    def since(self, at: float) -> list[tuple[float, str, int, str | None]]:
        return [t for t in self.turns if t[0] >= at]


def sessions_line(env: DrainEnv, consumer: str, provider: str) -> dict | None:
    report = (env.kube.get(CONSUMERS, env.ns, consumer).get("status") or {}).get("sessions") or {}
    return next((p for p in report.get("providers", ()) if p["provider"] == provider), None)


def test_wait_sessions_blocks_while_sessions_talk_and_ends_after_quiet(env: DrainEnv):
    with Talkers(env.gateways["c-a"]) as talkers:
        wait_for(lambda: len(talkers.turns) >= 2 * SESSIONS, timeout=30, what="every session under way")
        assert {p for *_, p in talkers.turns} == {"p-one"}
        run = env.spawn(
            "--provider", "p-one", "--wait-sessions", str(QUIET), "--sessions-timeout", "120", *env.targets()
        )
        wait_for(
            lambda: (line := sessions_line(env, "c-a", "p-one")) is not None and line["sessions"] == SESSIONS,
            timeout=30,
            what="c-a reporting five sessions on the drained p-one",
        )
        talking_until = time.time() + 3 * QUIET  # three QUIET windows of turns: the wait must not end
        wait_for(lambda: time.time() >= talking_until or run.proc.poll() is not None, timeout=60, interval=0.2)
        assert run.proc.poll() is None, f"--wait-sessions ended while the sessions talked:\n{run.output}"
        last = talkers.halt()
    assert run.wait(timeout=QUIET + 30) == 0, run.output
    ended = time.time()
    assert QUIET - 1 <= ended - last <= QUIET + 3.5, f"ended {ended - last:.1f}s after the last turn\n{run.output}"
    # The sessions stayed on the drained provider (no deadline): sticky, none failed.
    assert all(code == 200 and p == "p-one" for _, _, code, p in talkers.turns), talkers.turns[-10:]
    assert env.journals()[-1]["state"] == "complete"
    line = sessions_line(env, "c-a", "p-one")
    assert line is not None and line["sessions"] == SESSIONS and line["rehomed"] == 0
    assert abs(parse_time(line["lastTurn"]) - last) <= 2


def test_wait_sessions_timeout_is_exit_11_naming_the_provider_and_its_sessions(env: DrainEnv):
    with Talkers(env.gateways["c-a"]) as talkers:
        wait_for(lambda: len(talkers.turns) >= SESSIONS, timeout=30, what="every session under way")
        code, report = env.run_json(
            "--provider", "p-one", "--wait-sessions", str(QUIET), "--sessions-timeout", "12s", *env.targets()
        )
    assert code == 11, report
    assert report["exit"]["name"] == "sessions-active"
    sessions = report["sessions"]
    assert sessions["state"] == "timeout" and sessions["timeoutSeconds"] == 12
    assert any(line.startswith(f"p-one: {SESSIONS} session(s)") for line in sessions["notQuiet"]), sessions
    assert f"p-one: {SESSIONS} session(s)" in report["summary"]
    talking = [p for p in sessions["providers"] if p["consumer"] == "c-a"]
    assert talking[0]["state"] == "talking" and talking[0]["sessions"] == SESSIONS
    # The drain stays applied.
    assert env.drain_value("p-one") is True
    assert env.journals()[-1]["state"] == "applied-sessions-timeout"


def test_session_deadline_moves_sessions_in_the_cluster_and_the_drained_provider_can_go(env: DrainEnv, agn):
    with Talkers(env.gateways["c-a"]) as talkers:
        wait_for(lambda: len(talkers.turns) >= 2 * SESSIONS, timeout=30, what="every session under way")
        # The CLI writes the deadline and exits at once (it converges within the deadline): the
        # deadline is the cluster's, not the process's.
        code, report = env.run_json("--provider", "p-one", "--session-deadline", "10s", *env.targets())
        assert code == 0, report
        written = env.provider("p-one")["spec"]["trafficPolicy"]
        deadline = parse_time(written["sessionDeadline"])
        assert deadline is not None and 8 <= deadline - time.time() <= 11  # the server's clock (this host's)
        for c in ("c-a", "c-b"):
            cand = next(x for x in env.overlay(c)["candidates"] if x["provider"] == "p-one")
            assert cand["admission_state"] == "existing_only" and cand["sessionDeadline"] == written["sessionDeadline"]
        before = [t for t in talkers.turns if t[0] < deadline - 1]
        assert before and {p for *_, p in before[-SESSIONS:]} == {"p-one"}, "sticky until the deadline"
        wait_for(lambda: time.time() >= deadline + 4, timeout=30, interval=0.5, what="four turns past the deadline")
        after = talkers.since(deadline + 1.5)  # past the gateway's clock estimate (±0.5 s) and a turn's own time
        assert len(after) >= 2 * SESSIONS and {p for *_, p in after} == {"p-three"}, after
        wait_for(
            lambda: (line := sessions_line(env, "c-a", "p-one")) is not None and line["rehomed"] == SESSIONS,
            timeout=10,
            what="c-a counting five sessions rehomed away from p-one",
        )
        assert sessions_line(env, "c-a", "p-one")["sessions"] == 0
        agn.stop("provider-p-one")  # by pid: the drained provider goes
        killed = time.time()
        wait_for(lambda: len(talkers.since(killed)) >= 3 * SESSIONS, timeout=30, what="three more turns each")
    assert all(code == 200 for _, _, code, _ in talkers.turns), [t for t in talkers.turns if t[2] != 200]
    assert {p for *_, p in talkers.since(killed)} == {"p-three"}
    # An undrain clears the deadline.
    code, report = env.run_json("--provider", "p-one", "--undrain")
    assert code == 0, report
    assert "sessionDeadline" not in env.provider("p-one")["spec"]["trafficPolicy"]
