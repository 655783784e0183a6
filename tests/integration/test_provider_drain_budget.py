"""The declared disruption budget (``spec.disruptionBudget`` on the InferenceNetwork) and the
drain lock (the Lease ``agn-drain-<network>``) against the real API server, the real operator
and real CLIs started at once as subprocesses."""

from __future__ import annotations

import json
import signal
import subprocess
import threading

import pytest

from agn.kube import LEASES, NETWORKS, PROVIDERS, Invalid, NotFound
from agn.objects import drain_of, parse_time
from agnprocs import wait_for
from drainenv import DrainEnv
from reportschema import parse_report
from xtask.drain.core.holds import holds_of
from xtask.drain.core.lock import DEFAULT_TTL, lock_name

pytestmark = pytest.mark.integration

CHAT = {f"p-{i:02d}": ("gw", "chat", i) for i in range(10)}


def declare(env: DrainEnv, max_unavailable) -> None:
    env.kube.merge_patch(NETWORKS, env.ns, "net", {"spec": {"disruptionBudget": {"maxUnavailable": max_unavailable}}})


class Recorder:
    """A watch on InferenceProviders opened before the runs start: how many of the group are
    drained after every event."""

    def __init__(self, env: DrainEnv) -> None:
        items, self.rv = env.kube.list(PROVIDERS, env.ns)
        self.env = env
        self.drained = {p["metadata"]["name"]: drain_of(p) for p in items}
        self.counts = [sum(self.drained.values())]
        self.events = [dict(self.drained)]  # every provider's drain value after each event
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for kind, obj in self.env.kube.watch(PROVIDERS, self.env.ns, resource_version=self.rv, timeout_seconds=5):
                self.rv = obj.get("metadata", {}).get("resourceVersion", self.rv)
                if kind in ("ADDED", "MODIFIED"):
                    self.drained[obj["metadata"]["name"]] = drain_of(obj)
                    self.counts.append(sum(self.drained.values()))
                    self.events.append(dict(self.drained))
                if self.stop.is_set():
                    return

    def close(self) -> list[int]:
        self.stop.set()
        self.thread.join(timeout=30)
        return self.counts


def spawn_json(env: DrainEnv, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        env.argv(*args, "--output", "json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env.env()
    )


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, dict]:
    out, err = proc.communicate(timeout=timeout)
    try:
        return proc.returncode, parse_report(out)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n(exit {proc.returncode}; stderr: {err[-2000:]!r})") from exc


@pytest.fixture
def chat(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up(providers=CHAT)


@pytest.mark.parametrize("waves", [False, True])
def test_ten_runs_at_once_never_exceed_the_declared_budget(chat: DrainEnv, waves: bool):
    declare(chat, 2)
    recorder = Recorder(chat)
    names = sorted(CHAT) if not waves else sorted(CHAT)[:3]
    extra = [*chat.targets(), "--wave-size", "1", "--soak", "0"] if waves else []
    procs = {n: spawn_json(chat, "--provider", n, *extra, "--lock-timeout", "120") for n in names}
    results = {n: finish(p) for n, p in procs.items()}
    counts = recorder.close()
    assert max(counts) <= 2, counts
    ok = sorted(n for n, (code, _) in results.items() if code == 0)
    refused = {n: r for n, (code, r) in results.items() if code == 3}
    assert len(ok) == 2 and len(refused) == len(names) - 2, {n: (c, r["summary"]) for n, (c, r) in results.items()}
    for report in refused.values():
        assert "disruptionBudget.maxUnavailable 2 (2)" in report["refused"][0], report["refused"]
    assert sorted(n for n in CHAT if chat.drain_value(n)) == ok
    with pytest.raises(NotFound):  # every run gave its lock back
        chat.kube.get(LEASES, chat.ns, lock_name("net"))


HOLDING = {"a-1": ("gw-a", "chat", 0), "a-2": ("gw-a", "embed", 0), "a-3": ("gw-a", "chat", 1)}
HOLDING |= {"a-4": ("gw-a", "embed", 1), "p-three": ("gw-b", "chat", 2), "p-four": ("gw-b", "embed", 2)}


def test_a_killed_holder_s_lock_is_taken_after_its_ttl_and_a_short_timeout_refuses(
    kube, namespace, agn, control_plane, tmp_path
):
    env = DrainEnv(kube, namespace, agn, control_plane, tmp_path).up(providers=HOLDING)
    # Holder: four writes paced 10 s apart (--qps 0.1) under the lock: about 30 s holding it.
    holder = subprocess.Popen(env.argv("--gateway", "gw-a", "--qps", "0.1"), env=env.env(), stdout=subprocess.DEVNULL)
    try:
        lease = wait_for(lambda: _lease(env), timeout=60, what="the holder's drain lock")
        who = lease["spec"]["holderIdentity"]
        assert f"pid {holder.pid} operation " in who
        # A second run with a short --lock-timeout: exit 3 naming the holder, nothing written.
        code, report = env.run_json("--provider", "p-three", "--lock-timeout", "1s")
        assert code == 3 and who in report["refused"][0], report
        assert not env.drain_value("p-three") and report["outcomes"] == []
        # A dry run takes no lock and waits for none; it says who holds the one a real run would wait for.
        code, report = env.run_json("--provider", "p-three", "--dry-run")
        assert code == 0 and not env.drain_value("p-three"), report
        (seen,) = report["lock"]["seen"]
        assert (
            seen["holder"] == who and seen["lease"] == lock_name("net") and seen["leaseDurationSeconds"] == DEFAULT_TTL
        )
        # A waiting run; then the holder dies without releasing.
        waiter = spawn_json(env, "--provider", "p-four", "--lock-timeout", "120")
        said: list[str] = []
        reader = threading.Thread(target=_collect, args=(waiter.stderr, said), daemon=True)
        reader.start()
        wait_for(lambda: any("waiting for the drain lock of network net held by" in x for x in said), timeout=60)
        seen = _lease(env)["spec"]["renewTime"]  # the waiter looks every second: it sees the next renewal
        wait_for(lambda: _lease(env)["spec"]["renewTime"] != seen, timeout=30, what="a renewal the waiter saw")
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        code = waiter.wait(timeout=120)
        reader.join(timeout=10)
        report = parse_report(waiter.stdout.read())
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert code == 0, report
    (taken,) = report["lock"]["acquisitions"]
    assert taken["previousHolder"] == who
    gap = parse_time(taken["acquiredAt"]) - parse_time(taken["previousRenewTime"])
    assert DEFAULT_TTL <= gap <= DEFAULT_TTL + 2, taken
    assert env.drain_value("p-four") is True


def _collect(stream, lines: list[str]) -> None:
    for line in stream:
        lines.append(line)


def _lease(env: DrainEnv):
    try:
        return env.kube.get(LEASES, env.ns, lock_name("net"))
    except NotFound:
        return None


@pytest.fixture
def env_net(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up()


def test_override_is_recorded_in_journal_hold_event_and_report(env_net: DrainEnv):
    env = env_net
    declare(env, 0)
    code, report = env.run_json("--provider", "p-one")
    assert code == 3 and "disruptionBudget.maxUnavailable 0 (0)" in report["refused"][0], report
    code, report = env.run_json("--provider", "p-one", "--override-budget", "CHG-42 emergency kernel")
    assert code == 0, report
    assert report["budget"]["override"] == "CHG-42 emergency kernel"
    assert report["budget"]["groups"][0]["overridden"] is True
    (hold,) = holds_of(env.provider("p-one"))
    assert hold["budgetOverride"] == "CHG-42 emergency kernel"
    (path,) = env.journal_paths()
    assert json.loads(path.read_text().splitlines()[0])["budgetOverride"] == "CHG-42 emergency kernel"
    notes = wait_for(
        lambda: (
            [e.get("note", "") for e in env.kube.list_objects("events.k8s.io/v1", "Event", namespace=env.ns)]
            if any(
                "CHG-42" in (e.get("note") or "")
                for e in env.kube.list_objects("events.k8s.io/v1", "Event", namespace=env.ns)
            )
            else None
        ),
        timeout=30,
    )
    assert any("disruption budget overridden: CHG-42 emergency kernel" in n for n in notes)


@pytest.mark.parametrize("bad", ["abc", -1, "101%", "-1%"])
def test_the_crd_refuses_a_bad_max_unavailable(env_net: DrainEnv, bad):
    body = {
        "apiVersion": "agn.dev/v1alpha1",
        "kind": "InferenceNetwork",
        "metadata": {"name": "bad"},
        "spec": {"disruptionBudget": {"maxUnavailable": bad}},
    }
    with pytest.raises(Invalid, match="maxUnavailable"):
        env_net.kube.create(NETWORKS, env_net.ns, body)
    for good in (0, 3, "25%", "100%"):
        body["spec"]["disruptionBudget"]["maxUnavailable"] = good
        env_net.kube.create(NETWORKS, env_net.ns, body, dry_run=True)


@pytest.mark.parametrize(
    "args, text",
    [
        (("--lock-timeout", "bogus"), "bogus"),
        (("--lock-timeout", "0"), "positive"),
        (("--override-budget", ""), "empty"),
        (("--override-budget", "x\x07y"), "printable"),
        (("--undrain", "--override-budget", "why"), "--override-budget"),
    ],
)
def test_bad_new_flags_are_usage_errors_and_write_nothing(env_net: DrainEnv, args, text):
    proc = env_net.run("--provider", "p-one", *args)
    assert proc.returncode == 2 and text in proc.stderr, proc.stderr
    assert _lease(env_net) is None and not env_net.drain_value("p-one")


def test_a_lock_taken_away_mid_write_stops_the_run_and_restores_what_it_wrote(
    kube, namespace, agn, control_plane, tmp_path
):
    """Someone deletes the drain lock while a run writes under it: the run's next renewal fails,
    it stops writing, restores what it wrote and exits 8 (interrupted), naming the lost lock."""
    env = DrainEnv(kube, namespace, agn, control_plane, tmp_path).up(providers=HOLDING)
    gateway = sorted(n for n, (gw, _, _) in HOLDING.items() if gw == "gw-a")
    run = spawn_json(env, "--gateway", "gw-a", "--qps", "0.1")
    try:
        wait_for(lambda: _lease(env), timeout=60, what="the run's drain lock")
        wait_for(lambda: any(env.drain_value(n) for n in gateway), timeout=60, what="the run's first write")
        env.kube.delete(LEASES, env.ns, lock_name("net"))  # the lock is gone: the next renewal gets 404
        code, report = finish(run, timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert code == 8, report
    assert not any(env.drain_value(n) for n in gateway), {n: env.drain_value(n) for n in gateway}
    assert all(holds_of(env.provider(n)) == [] for n in gateway)
    restored = report["restorations"]
    assert restored and all(r["outcome"] == "restored" for r in restored), report
    assert _lease(env) is None  # nothing of the run's is left behind


def test_runs_over_two_networks_take_both_locks_in_order_and_keep_each_budget(env_net: DrainEnv):
    """A second network "zeta" selects p-one and p-three (both chat) and declares maxUnavailable 1.
    Two runs start at once, each touching both networks (gw-a: p-one, p-two; and p-three): each
    takes the locks of "net" and "zeta" in that order (no deadlock), the second to get them sees
    the first's drain and is refused by zeta's budget, and at no watch event are both drained."""
    env = env_net
    for name in ("p-one", "p-three"):
        env.kube.merge_patch(PROVIDERS, env.ns, name, {"metadata": {"labels": {"zone": "z"}}})
    env.kube.create(
        NETWORKS,
        env.ns,
        {
            "apiVersion": "agn.dev/v1alpha1",
            "kind": "InferenceNetwork",
            "metadata": {"name": "zeta"},
            "spec": {"providerSelector": {"matchLabels": {"zone": "z"}}, "disruptionBudget": {"maxUnavailable": 1}},
        },
    )
    recorder = Recorder(env)
    runs = {"gw-a": spawn_json(env, "--gateway", "gw-a"), "p-three": spawn_json(env, "--provider", "p-three")}
    results = {k: finish(p) for k, p in runs.items()}
    recorder.close()
    codes = sorted(code for code, _ in results.values())
    assert codes == [0, 3], {k: (c, r["summary"]) for k, (c, r) in results.items()}
    (won,) = [r for code, r in results.values() if code == 0]
    (lost,) = [r for code, r in results.values() if code == 3]
    assert [a["network"] for a in won["lock"]["acquisitions"]] == ["net", "zeta"]
    assert won["lock"]["networks"] == ["net", "zeta"]
    assert "zeta" in lost["refused"][0] and "maxUnavailable 1" in lost["refused"][0], lost["refused"]
    both = [e for e in recorder.events if e["p-one"] and e["p-three"]]
    assert both == [], both
    assert [env.drain_value("p-one"), env.drain_value("p-three")].count(True) == 1
    for network in ("net", "zeta"):
        with pytest.raises(NotFound):
            env.kube.get(LEASES, env.ns, lock_name(network))
