"""A drain in waves against the real API server, the real operator, real consumer gateways and
fake providers, driven through the real CLI: waves one after another, each converged and soaked
while traffic flows through the gateways; a breach injected in wave 3; ``kill -9`` and SIGINT
between waves, then ``--resume``."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agn.kube import PROVIDERS
from agnprocs import http_json, wait_for
from drainenv import CONSUMER_NAMES, DrainEnv, default_hangup
from reportschema import parse_report
from xtask.drain.core.holds import OPERATION

pytestmark = pytest.mark.integration

# p-keep (rank 0) serves every new request; the w-* (rank 1) are drained in waves.
WAVED = [f"w-{i}" for i in range(1, 6)]
LAYOUT = {"p-keep": ("gw-b", "chat", 0), **{name: ("gw-a", "chat", 1) for name in WAVED}}


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up(providers=LAYOUT)


class Traffic:
    """Completion requests through both consumers' gateways, one after another, until stopped."""

    def __init__(self, env: DrainEnv) -> None:
        self.urls = [f"{env.gateways[c]}/v1/completions" for c in CONSUMER_NAMES]
        self.stop = threading.Event()
        self.answers: dict[int, int] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for url in self.urls:
                req = urllib.request.Request(url, data=b'{"prompt":"hi"}', method="POST")
                try:
                    with urllib.request.urlopen(req, timeout=5) as resp:
                        status = resp.status
                except urllib.error.HTTPError as exc:
                    status = exc.code
                self.answers[status] = self.answers.get(status, 0) + 1
            self.stop.wait(0.02)  # pacing of the load, not a wait for a condition

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


class JsonRun:
    """The CLI with ``--output json``: the report on stdout, progress lines (``lines``) on stderr."""

    def __init__(self, env: DrainEnv, *args: str) -> None:
        self.proc = subprocess.Popen(
            env.argv(*args, "--output", "json"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env.env(),
            preexec_fn=default_hangup,
        )
        self.stdout = ""
        self.lines: list[str] = []
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        self.stdout = self.proc.stdout.read()

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines) + "\n" + self.stdout[-3000:]

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 120) -> int:
        code = self.proc.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=5)
        return code

    def report(self) -> dict:
        return parse_report(self.stdout)


def wave_args(env: DrainEnv, *extra: str) -> tuple[str, ...]:
    return ("--gateway", "gw-a", *env.targets(), "--timeout", "60", *extra)


def journal_lines(env: DrainEnv) -> list[dict]:
    return [json.loads(line) for line in env.journal_paths()[-1].read_text().splitlines()]


def set_failing(env: DrainEnv, provider: str, failing: bool) -> None:
    http_json(f"{env.urls[provider]}/admin/state", method="POST", body={"failCompletions": failing})


def test_waves_converge_one_after_another_with_every_gate_held(env: DrainEnv):
    before = {c: env.overlay(c)["revision"] for c in CONSUMER_NAMES}
    with Traffic(env) as traffic:
        code, report = env.run_json(*wave_args(env, "--wave-size", "2", "--soak", "1.5", "--max-error-ratio", "0"))
    assert code == 0, report
    assert [w["providers"] for w in report["waves"]] == [["w-1", "w-2"], ["w-3", "w-4"], ["w-5"]]
    for w in report["waves"]:
        assert w["state"] == "held"
        [gate] = w["gates"]
        assert gate["gate"] == "error-ratio" and gate["held"] and gate["value"] == 0.0, gate
        assert gate["threshold"] == "<= 0"
    assert traffic.answers.get(200) and set(traffic.answers) == {200}
    assert all(env.drain_value(n) is True for n in WAVED) and env.drain_value("p-keep") is None
    # Wave k+1's providers are untouched until wave k converged and held: the journal's order.
    lines = journal_lines(env)
    position = {}
    for i, rec in enumerate(lines):
        if rec["type"] == "intent":
            position.setdefault(("intent", rec["provider"]), i)
        elif rec["type"] == "wave":
            position[(rec["wave"], rec["state"])] = i
    for k, wave in enumerate(report["waves"], start=1):
        intents = [position[("intent", n)] for n in wave["providers"]]
        assert position[(k, "written")] > max(intents)
        assert position[(k, "written")] < position[(k, "converged")] < position[(k, "soaked")] < position[(k, "held")]
        if k > 1:
            assert min(intents) > position[(k - 1, "held")], f"wave {k} written before wave {k - 1} held"
    assert env.journals()[-1]["state"] == "complete"
    # At most two overlay revisions per consumer per wave.
    for c in CONSUMER_NAMES:
        assert env.overlay(c)["revision"] - before[c] <= 2 * len(report["waves"])


@pytest.mark.parametrize("on_breach", ["hold", "restore"])
def test_a_breach_in_wave_3_stops_before_wave_4_naming_the_gate_and_its_value(env: DrainEnv, on_breach):
    args = wave_args(env, "--wave-size", "1", "--soak", "2", "--on-breach", on_breach, "--reason", "kernel")
    try:
        with Traffic(env):
            run = JsonRun(env, *args)
            wait_for(lambda: any("wave 3: soaking" in line for line in run.lines), timeout=90, what="wave 3's soak")
            set_failing(env, "p-keep", True)  # admitted, healthy, and failing what it serves
            code = run.wait(timeout=90)
    finally:
        set_failing(env, "p-keep", False)
    report = run.report()
    assert code == 10, run.output
    assert report["exit"] == {"code": 10, "name": "gate-breached"}
    states = [w["state"] for w in report["waves"]]
    assert states == ["held", "held", "breached", "pending", "pending"]
    [gate] = report["waves"][2]["gates"]
    assert not gate["held"] and gate["value"] > 0.01 and gate["threshold"] == "<= 0.01"
    assert "wave 3 of 5 breached: gate error-ratio = " in report["summary"]
    assert "stopped before wave 4 of 5" in report["summary"]
    assert env.drain_value("w-4") is None and env.drain_value("w-5") is None  # never written
    assert OPERATION not in (env.provider("w-4")["metadata"].get("annotations") or {})
    if on_breach == "hold":
        assert all(env.drain_value(n) is True for n in ("w-1", "w-2", "w-3"))
        assert env.journals()[-1]["state"] == "applied-breached"
        assert "waves 1-3 are kept (--on-breach hold)" in report["summary"]
        # drain-restore undoes the waves written, and only those.
        restore = env.restore(report["journal"])
        assert restore.returncode == 0, restore.stdout + restore.stderr
        assert [line.split(":")[0].strip() for line in restore.stdout.splitlines()[:-1]] == ["w-1", "w-2", "w-3"]
    else:
        assert sorted((r["provider"], r["outcome"]) for r in report["restorations"]) == [
            ("w-1", "restored"),
            ("w-2", "restored"),
            ("w-3", "restored"),
        ]
        assert env.journals()[-1]["state"] == "restored"
    assert all(env.drain_value(n) is None for n in WAVED)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGHUP])
def test_stopped_between_waves_then_resumed_finishes_with_nothing_drained_twice(env: DrainEnv, sig):
    generations = {n: env.provider(n)["metadata"]["generation"] for n in WAVED}
    args = wave_args(env, "--wave-size", "2", "--soak", "2")
    with Traffic(env):
        run = JsonRun(env, *args)
        wait_for(lambda: any("wave 2: soaking" in line for line in run.lines), timeout=90, what="wave 2's soak")
        run.signal(sig)
        code = run.wait(timeout=30)
        assert code == (-signal.SIGKILL if sig == signal.SIGKILL else 8), run.output
        journal = env.journal_paths()[-1]
        if sig != signal.SIGKILL:
            assert "the waves written so far are kept" in run.report()["summary"]
            assert env.journals()[-1]["state"] == "applied-interrupted"
        assert [w["state"] for w in env.journals()[-1]["waves"]] == ["held", "converged", "pending"]
        assert env.drain_value("w-5") is None

        # A provider that joins the selection meanwhile refuses the resume, named; nothing written.
        env.add_provider("w-9", "gw-a", "chat", 1, env.urls["w-1"])
        resume = ("--resume", str(journal), *wave_args(env, "--soak", "2"))
        refused = env.run(*resume)
        assert refused.returncode == 3, refused.stdout + refused.stderr
        assert "joined the selection since the journal: w-9" in refused.stdout
        assert env.drain_value("w-5") is None
        env.kube.delete(PROVIDERS, env.ns, "w-9")

        code, report = env.run_json(*resume)
    assert code == 0, report
    assert [(w["state"], w.get("earlier", False)) for w in report["waves"]] == [
        ("held", True),
        ("held", False),
        ("held", False),
    ]
    assert report["operation"] == journal.name.removeprefix("drain-").removesuffix(".jsonl")
    # Nothing drained twice: one spec write per provider over both runs, all by this operation.
    for name in WAVED:
        meta = env.provider(name)["metadata"]
        assert meta["generation"] == generations[name] + 1, name
        assert meta["annotations"][OPERATION] == report["operation"]
    done = [rec["provider"] for rec in journal_lines(env) if rec["type"] == "done"]
    assert sorted(done) == WAVED
    assert env.journals()[-1]["state"] == "complete"
    # And nothing left changed: the one journal undoes both runs' waves.
    restore = env.restore(journal)
    assert restore.returncode == 0, restore.stdout + restore.stderr
    assert all(env.drain_value(n) is None for n in WAVED)


def test_waves_refuse_before_writing_when_a_gateways_metrics_do_not_answer(env: DrainEnv):
    code, report = env.run_json(
        *wave_args(env, "--wave-size", "2", "--gateway-metrics", "c-b=http://127.0.0.1:9/metrics")
    )
    assert code == 3, report
    assert "consumer c-b: its gateway's metrics http://127.0.0.1:9/metrics did not answer" in report["refused"][0]
    assert report["journal"] is None and all(env.drain_value(n) is None for n in WAVED)


def test_no_traffic_is_no_evidence_and_soak_0_gates_nothing(env: DrainEnv):
    code, report = env.run_json(*wave_args(env, "--wave-size", "3", "--soak", "1"))
    assert code == 10, report
    assert [w["state"] for w in report["waves"]] == ["breached", "pending"]
    [gate] = report["waves"][0]["gates"]
    assert not gate["held"] and gate["value"] is None and "no completion requests" in gate["detail"]
    assert env.drain_value("w-4") is None  # wave 2 never written
    restore = env.restore(report["journal"])
    assert restore.returncode == 0, restore.stdout + restore.stderr

    code, report = env.run_json(*wave_args(env, "--wave-size", "3", "--soak", "0"))
    assert code == 0, report
    assert [(w["state"], w["gates"]) for w in report["waves"]] == [("held", []), ("held", [])]
    assert all(env.drain_value(n) is True for n in WAVED)


def test_undrain_in_waves_whose_last_wave_is_not_eligible_exits_7(env: DrainEnv):
    """An undrain stored and served, but a provider of its last wave kept out by a hard failure:
    exit 7 ("not eligible until healthy"), as for an undrain without waves; every wave is passed
    ("held": nothing gates a --soak 0 wave) and the journal is complete."""
    assert env.run("--gateway", "gw-a").returncode == 0  # drained, patch-only
    env.set_health("w-5", False)
    wait_for(lambda: all("w-5" not in env.states(c) for c in CONSUMER_NAMES), what="w-5 excluded as unavailable")
    code, report = env.run_json(*wave_args(env, "--undrain", "--wave-size", "3", "--soak", "0"))
    assert code == 7, report
    assert report["exit"] == {"code": 7, "name": "not-eligible"}
    assert [(w["providers"], w["state"]) for w in report["waves"]] == [
        (["w-1", "w-2", "w-3"], "held"),
        (["w-4", "w-5"], "held"),
    ]
    assert report["convergence"]["state"] == "not-eligible"
    assert report["convergence"]["notEligible"] == [
        f"w-5 for {c}: stored, not eligible until healthy (unavailable)" for c in CONSUMER_NAMES
    ]
    assert all(env.drain_value(n) is False for n in WAVED)  # the undrain is stored on every wave
    assert env.journals()[-1]["state"] == "complete"


def test_undrain_in_waves_whose_earlier_wave_is_not_eligible_exits_7(env: DrainEnv):
    """A provider of wave 1 kept out by a hard failure, wave 2 fine: the later wave's convergence
    does not hide the earlier finding. Exit 7, the report naming the provider per consumer."""
    assert env.run("--gateway", "gw-a").returncode == 0  # drained, patch-only
    env.set_health("w-2", False)
    wait_for(lambda: all("w-2" not in env.states(c) for c in CONSUMER_NAMES), what="w-2 excluded as unavailable")
    code, report = env.run_json(*wave_args(env, "--undrain", "--wave-size", "3", "--soak", "0"))
    assert code == 7, report
    assert [(w["providers"], w["state"]) for w in report["waves"]] == [
        (["w-1", "w-2", "w-3"], "held"),
        (["w-4", "w-5"], "held"),
    ]
    convergence = report["convergence"]
    assert convergence["state"] == "not-eligible"
    assert convergence["notEligible"] == [
        f"w-2 for {c}: stored, not eligible until healthy (unavailable)" for c in CONSUMER_NAMES
    ]
    # Every wave's providers are in the section, each as its wave's wait last saw it.
    rows = {(p["consumer"], p["provider"]): p["ok"] for p in convergence["providers"]}
    assert rows == {(c, n): n != "w-2" for c in CONSUMER_NAMES for n in WAVED}
    assert "not eligible: w-2 for c-a" in report["summary"], report["summary"]
    assert all(env.drain_value(n) is False for n in WAVED)  # the undrain is stored on every wave
    assert env.journals()[-1]["state"] == "complete"


def test_drain_in_waves_whose_first_wave_times_out_stops_there_exit_6(env: DrainEnv):
    """A drain's wave 1 that does not converge (a consumer's gateway stopped) ends the run with
    exit 6 naming the lagging consumer; wave 2 is never written, so no later success hides it."""
    env.agn.stop("gateway-c-b")
    code, report = env.run_json(*wave_args(env, "--wave-size", "3", "--soak", "0", "--timeout", "4"))
    assert code == 6, report
    assert [w["state"] for w in report["waves"]] == ["written", "pending"]
    assert report["convergence"]["state"] == "timeout"
    assert "consumer c-b" in " ".join(report["convergence"]["lagging"])
    assert all(env.drain_value(n) is True for n in ("w-1", "w-2", "w-3"))
    assert env.drain_value("w-4") is None and env.drain_value("w-5") is None  # wave 2 never written


def test_resuming_a_journal_whose_every_wave_held_writes_nothing_and_completes(env: DrainEnv):
    """A run killed after its last wave held, before its journal said complete: --resume has no
    wave left to write. It sends no write, goes on to what the run had left (--wait-sessions),
    marks the journal complete and exits 0 as that run would have, its waves held by it."""
    code, report = env.run_json(*wave_args(env, "--wave-size", "3", "--soak", "0"))
    assert code == 0, report
    journal = Path(report["journal"])
    *kept, last = journal.read_text().splitlines(keepends=True)
    assert json.loads(last)["type"] == "state" and json.loads(last)["state"] == "complete", last
    journal.write_text("".join(kept))  # as if killed between the last wave's "held" and "complete"
    assert env.journals()[-1]["state"] != "complete"
    env.agn.stop("operator")  # nothing else writes the providers now: any write moves a resourceVersion
    versions = {n: env.provider(n)["metadata"]["resourceVersion"] for n in LAYOUT}

    resume = ("--resume", str(journal), *wave_args(env, "--soak", "0", "--wait-sessions", "1"))
    code, report = env.run_json(*resume)
    assert code == 0, report
    # What the run resumed had left to do after its waves still runs: here, --wait-sessions.
    sessions = report["sessions"]
    assert sessions["state"] == "idle", sessions
    assert sorted((p["consumer"], p["provider"]) for p in sessions["providers"]) == [
        (c, n) for c in CONSUMER_NAMES for n in WAVED
    ]
    assert {n: env.provider(n)["metadata"]["resourceVersion"] for n in LAYOUT} == versions  # no write
    assert report["outcomes"] == [] and report["events"]["recorded"] == 0
    assert [(w["state"], w.get("earlier")) for w in report["waves"]] == [("held", True), ("held", True)]
    # Not read back as a patch-only run ("pass --network/--consumer ..."): its waves converged then.
    assert report["stored"] is None and report["convergence"] is None
    assert report["summary"] == "2 wave(s) converged on c-a, c-b"
    assert report["journal"] == str(journal) and env.journals()[-1]["state"] == "complete"
