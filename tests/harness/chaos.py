#!/usr/bin/env python3
"""A seeded chaos soak: real drains, real faults and real traffic on the example environment,
checked against invariants, reported as one table.

It brings up ``envs/example.yaml`` on the ``local`` runtime (real etcd, kube-apiserver, operator,
gateways and fake providers as local processes) in a folder of its own, then runs one step at a
time until ``--duration`` seconds or ``--max-ops`` steps, whichever comes first:

- **operations** through the real CLI, as a subprocess: single and gateway drains and undrains
  with targets, ``--wait-idle`` drains, patch-only drains; some of them with a fault injected
  mid-run, or a concurrent writer changing a provider's rank while they run;
- **interrupted runs**: a paced run (``--qps 1``) stopped by SIGINT, a double SIGINT or SIGKILL
  in its fan-out or its wait, then ``env drain-restore`` of the journal it left;
- **faults**: SIGKILL, SIGSTOP then SIGCONT, or a restart (SIGTERM) of the operator, a gateway,
  a fake provider, kube-apiserver or etcd, each found by pid in the env's pid files
  (``<state>/envs/example/run/*.pid.json``, checked against the process's start time); a fake
  provider turned unhealthy or slow through its loopback ``/admin/state``; a writer changing a
  provider's ``spec.rank``.

Sticky and new-session requests flow through every gateway the whole time, at ``--rate``
requests per second per gateway, to loopback only.

Invariants, checked with the plain ``kubernetes`` client and plain HTTP, never the project's
readers:

- **I1** a CLI run with targets that exits 0 had converged: each target consumer's shards match
  its index's digests, its ``acceptedRevision`` and ``servingRevision`` equal the index's
  revision (when the index moved on right after the exit, the moment cannot be read back: the
  run counts as *unverifiable*, not as passed), the providers hold the asked drain value and are
  ``existing_only`` (drain) or ``admitted`` (undrain) in that revision;
- **I2** after each step's recovery every provider's drain value is the one the model of
  requested state says (exit 0/6/7/9 stored the request; exit 3/4 changed nothing; any other
  end is undone with ``env drain-restore``);
- **I3** every routed response names its overlay revision (``x-agn-overlay-revision``) and its
  candidate is in that revision, as a poller recorded it from the index and its shards (a
  revision the poller never saw whole counts as *unverified*);
- **I4** from a targeted drain's exit 0 until the next step, no new or re-homed session lands
  on a drained provider;
- **I5** while a fault holds, ``env status`` does not report the faulty component running and
  healthy; after it, ``env up`` heals the env (every provider back in every overlay, revisions
  agreeing) within 60 s.

The schedule of step N is drawn from ``random.Random(f"{seed}:{N}")``, so ``--seed S`` replays
the same steps whatever happened before; a violation prints the seed and the step. Exit 0
when no invariant was violated, 1 otherwise.

    .venv/bin/python tests/harness/chaos.py --seed 7 --duration 600
    .venv/bin/python tests/harness/chaos.py --seed 7 --max-ops 12 --report chaos.json
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ENV = "example"
CTX = "local-example"
NS = "agn-example"
GROUP, VERSION = "agn.dev", "v1alpha1"
NETWORK = "production"
CONSUMERS = ("consumer-a", "consumer-b")
PROVIDERS = {  # provider -> (providerGateway, selectionGroup), as envs/example.yaml has them
    "provider-one": ("provider-a", "chat"),
    "provider-two": ("provider-a", "embeddings"),
    "provider-three": ("provider-b", "chat"),
    "provider-four": ("provider-b", "embeddings"),
}
GATEWAYS = {gw: sorted(p for p, (g, _) in PROVIDERS.items() if g == gw) for gw in ("provider-a", "provider-b")}
TARGETS = ["--network", NETWORK, *(a for c in CONSUMERS for a in ("--consumer", c))]
PROCESSES = (
    "operator",
    "gateway-consumer-a",
    "gateway-consumer-b",
    *(f"fake-{p}" for p in PROVIDERS),
    "kube-apiserver",
    "etcd",
)
MIDRUN = ("operator", "gateway-consumer-a", "gateway-consumer-b", "kube-apiserver", "etcd")
HEAL_BOUND = 60.0
STORED = {0, 6, 7, 9}  # exit codes after which the request is stored
UNCHANGED = {3, 4}  # refused before any write, or restored by the run itself


# -- the CLI and the env's processes --------------------------------------------------------------


class Env:
    """The CLI as a user runs it (a subprocess with its own state, kubeconfig and journals)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.state = home / "state" / "envs" / ENV
        self.journals = home / "journal"
        self.env = {
            **os.environ,
            "AGN_XTASK_HOME": str(home / "state"),
            "KUBECONFIG": str(home / "kubeconfig"),
            "AGN_XTASK_JOURNAL_DIR": str(self.journals),
            "NO_COLOR": "1",
            "PYTHONPATH": str(REPO),
        }

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "xtask", *args]

    def run(self, *args: str, timeout: float = 300) -> tuple[int, str]:
        try:
            proc = subprocess.run(
                self.argv(*args), capture_output=True, text=True, cwd=REPO, env=self.env, timeout=timeout
            )
        except subprocess.TimeoutExpired as exc:
            said = b"".join(x if isinstance(x, bytes) else (x or "").encode() for x in (exc.stdout, exc.stderr))
            return -999, f"timed out after {timeout}s: {said.decode(errors='replace')}"
        return proc.returncode, proc.stdout + proc.stderr

    def spawn(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            self.argv(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
            env=self.env,
        )

    def status(self) -> dict | None:
        code, out = self.run("env", "status", "--output", "json", timeout=60)
        try:
            return json.loads(out[out.index("{") :]) if code == 0 else None
        except ValueError:
            return None

    def pid(self, name: str) -> int | None:
        """The pid in ``name``'s pid file, if that process still runs (same start time)."""
        try:
            rec = json.loads((self.state / "run" / f"{name}.pid.json").read_text())
            stat = Path(f"/proc/{rec['pid']}/stat").read_text()
        except (OSError, ValueError, KeyError):
            return None
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z" or int(fields[19]) != rec.get("start_ticks", int(fields[19])):
            return None
        return int(rec["pid"])

    def port(self, name: str) -> int | None:
        try:
            return json.loads((self.state / "ports.json").read_text()).get(name)
        except (OSError, ValueError):
            return None

    def journal_files(self) -> set[Path]:
        return set(self.journals.glob("drain-*.json*")) if self.journals.exists() else set()


# -- plain reads of the API ---------------------------------------------------------------------


class Api:
    """The plain ``kubernetes`` client, on the env's kubeconfig, every call bounded."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import client, config

        self.objects = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig), context=CTX))

    def items(self, plural: str) -> list[dict]:
        return self.objects.list_namespaced_custom_object(GROUP, VERSION, NS, plural, _request_timeout=3)["items"]

    def drains(self) -> dict[str, bool]:
        return {
            p["metadata"]["name"]: bool((p["spec"].get("trafficPolicy") or {}).get("drain"))
            for p in self.items("inferenceproviders")
        }

    def view(self) -> dict[str, dict]:
        """Per consumer: index revision, candidates (None unless every shard matches), statuses."""
        consumers = {c["metadata"]["name"]: c.get("status") or {} for c in self.items("inferenceconsumers")}
        indexes = {o["metadata"]["name"]: o["spec"] for o in self.items("routingoverlays")}
        shards = {s["metadata"]["name"]: s["spec"] for s in self.items("routingoverlayshards")}
        out = {}
        for name, index in indexes.items():
            out[name] = {
                "revision": index.get("revision"),
                "candidates": candidates_of(index, shards),
                "accepted": consumers.get(name, {}).get("acceptedRevision"),
                "serving": consumers.get(name, {}).get("servingRevision"),
            }
        return out

    def set_rank(self, provider: str, rank: int) -> None:
        self.objects.patch_namespaced_custom_object(
            GROUP, VERSION, NS, "inferenceproviders", provider, {"spec": {"rank": rank}}, _request_timeout=5
        )


def candidates_of(index: dict, shards: dict[str, dict]) -> dict[str, tuple[str, str]] | None:
    """candidate id -> (provider, admission state) of the index's revision, or None when some
    shard it names is missing or at another digest (the revision cannot be read whole now)."""
    if "shards" not in index:
        return {c["id"]: (c["provider"], c["admission_state"]) for c in index.get("candidates") or []}
    out = {}
    for entry in index["shards"]:
        shard = shards.get(entry["name"])
        if shard is None or shard.get("digest") != entry.get("digest"):
            return None
        out.update({c["id"]: (c["provider"], c["admission_state"]) for c in shard.get("candidates") or []})
    return out


class Poller:
    """Records every overlay revision it sees whole (index + matching shards), per consumer."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.history: dict[str, dict[int, dict]] = collections.defaultdict(dict)
        self.first_seen: dict[tuple[str, int], float] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(0.15):
            with contextlib.suppress(Exception):  # the API server is down on purpose at times
                self.record(self.api.view(), time.monotonic())

    def record(self, view: dict[str, dict], now: float) -> None:
        with self.lock:
            for consumer, v in view.items():
                rev = v["revision"]
                self.first_seen.setdefault((consumer, rev), now)
                if v["candidates"] is not None:
                    self.history[consumer].setdefault(rev, v["candidates"])

    def revision_at(self, consumer: str, rev: int) -> dict | None:
        with self.lock:
            return self.history[consumer].get(rev)

    def newest_before(self, consumer: str, t: float) -> int | None:
        with self.lock:
            seen = [r for (c, r), at in self.first_seen.items() if c == consumer and at <= t]
        return max(seen, default=None)


# -- traffic ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Reply:
    sent: float
    consumer: str
    session: str
    new: bool
    code: int
    provider: str | None = None
    candidate: str | None = None
    revision: int | None = None
    routing: str | None = None


class Traffic:
    """Sticky and new-session requests through one gateway at a bounded rate."""

    def __init__(self, env: Env, consumer: str, rate: float, seed: int) -> None:
        self.env, self.consumer, self.rate = env, consumer, rate
        self.rng = random.Random(f"{seed}:traffic:{consumer}")
        groups = (None, "chat", "embeddings")
        self.sticky = [(f"{consumer}-sticky-{i}", groups[i % 3]) for i in range(12)]
        self.replies: list[Reply] = []
        self.errors = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(1.0 / self.rate):
            new = self.rng.random() < 0.5
            session, group = (
                (f"new-{uuid.uuid4().hex[:12]}", self.rng.choice((None, "chat", "embeddings")))
                if new
                else self.rng.choice(self.sticky)
            )
            reply = self.send(session, group, new)
            if reply is None:
                self.errors += 1
            else:
                self.replies.append(reply)

    def send(self, session: str, group: str | None, new: bool) -> Reply | None:
        port = self.env.port(f"gateway-{self.consumer}")
        if port is None:
            return None
        sent = time.monotonic()
        headers = {"content-type": "application/json", "x-session-id": session}
        if group:
            headers["x-selection-group"] = group
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            conn.request("POST", "/v1/completions", body=b'{"prompt": "chaos"}', headers=headers)
            resp = conn.getresponse()
            body = json.loads(resp.read() or b"{}")
            rev = resp.getheader("x-agn-overlay-revision")
        except (OSError, ValueError, http.client.HTTPException):
            return None
        finally:
            conn.close()
        return Reply(
            sent,
            self.consumer,
            session,
            new,
            resp.status,
            resp.getheader("x-agn-provider"),
            body.get("candidateId"),
            int(rev) if rev else None,
            body.get("routing"),
        )


# -- the soak ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Violation:
    invariant: str
    step: int
    detail: str


class Soak:
    def __init__(self, args: argparse.Namespace, home: Path) -> None:
        self.args = args
        self.seed = args.seed
        self.env = Env(home)
        self.model = {p: False for p in PROVIDERS}
        self.violations: list[Violation] = []
        self.ops: collections.Counter[str] = collections.Counter()
        self.faults: collections.Counter[str] = collections.Counter()
        self.exits: collections.Counter[str] = collections.Counter()
        self.heals: list[float] = []
        self.status_seconds: list[float] = []  # how long `env status` took while something was broken
        self.unverifiable_i1 = 0
        self.checked_i1 = 0
        self.windows: list[tuple[float, float, frozenset[str], int]] = []  # I4: (from, to, drained, step)
        self.open_window: tuple[float, frozenset[str], int] | None = None
        self.step = 0
        self.log = open(home / "chaos.log", "a")  # noqa: SIM115 - closed in run()

    def say(self, line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} step {self.step}: {line}", file=self.log, flush=True)
        if self.args.verbose:
            print(f"{stamp} step {self.step}: {line}", flush=True)

    def violate(self, invariant: str, detail: str) -> None:
        v = Violation(invariant, self.step, detail)
        self.violations.append(v)
        print(
            f"VIOLATION {invariant} at step {self.step}: {detail}\n"
            f"  replay: tests/harness/chaos.py --seed {self.seed} --max-ops {self.step}",
            flush=True,
        )

    # -- the env ---------------------------------------------------------------------------
    def up(self) -> None:
        code, out = self.env.run("env", "up", "--env", ENV, "--runtime", "local", timeout=600)
        if code != 0:
            raise SystemExit(f"env up failed ({code}):\n{out}")
        self.api = Api(self.env.home / "kubeconfig")
        self.poller = Poller(self.api)
        self.poller.thread.start()
        self.settle(HEAL_BOUND)
        self.traffic = [Traffic(self.env, c, self.args.rate, self.seed) for c in CONSUMERS]
        for t in self.traffic:
            t.thread.start()

    def settled(self) -> bool:
        try:
            view = self.api.view()
        except Exception:
            return False
        for consumer in CONSUMERS:
            v = view.get(consumer)
            if v is None or v["candidates"] is None:
                return False
            if not (v["revision"] == v["accepted"] == v["serving"]):
                return False
            if sorted(p for p, _ in v["candidates"].values()) != sorted(PROVIDERS):
                return False
        return True

    def settle(self, bound: float) -> float | None:
        start = time.monotonic()
        while time.monotonic() - start < bound:
            if self.settled():
                return time.monotonic() - start
            time.sleep(0.2)
        return None

    def heal(self, since: float, what: str) -> None:
        """I5: ``env up`` heals the env within the bound; the heal time runs from ``since``."""
        code, out = self.env.run("env", "up", "--timeout", "60", timeout=120)
        self.exits[f"env up:{code}"] += 1
        if code != 0:
            self.say(f"env up exit {code}:\n{out}")
            code, out = self.env.run("env", "up", "--timeout", "60", timeout=120)  # a second try counts too
            self.exits[f"env up:{code}"] += 1
        left = HEAL_BOUND - (time.monotonic() - since)
        took = self.settle(max(left, 0.5)) if code == 0 else None
        if took is None:
            self.violate("I5", f"{what}: not healed within {HEAL_BOUND:g}s (env up exit {code})")
            self.settle(120)  # give it a chance before the next step
            return
        self.heals.append(time.monotonic() - since)
        self.say(f"healed {what} in {self.heals[-1]:.1f}s")

    def status_truth(self, component: str, what: str) -> None:
        """I5: while ``component`` is broken, ``env status`` must not call it running and healthy."""
        began = time.monotonic()
        status = self.env.status()
        self.status_seconds.append(time.monotonic() - began)
        self.say(f"env status while {what}: {status and status.get('state')} in {self.status_seconds[-1]:.1f}s")
        if status is None:
            return  # the status command failed: it claimed nothing
        entry = next((c for c in status.get("components", []) if c["name"] == component), None)
        if status.get("state") == "up" or (entry and entry.get("running") and entry.get("healthy")):
            self.violate("I5", f"{what}: env status says state {status.get('state')} and {component} {entry}")

    # -- faults ----------------------------------------------------------------------------
    def signal_component(self, name: str, sig: signal.Signals) -> int | None:
        pid = self.env.pid(name)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pid

    def process_fault(self, rng: random.Random, name: str, *, check_status: bool) -> float:
        """Kill, pause or restart ``name``; returns when the fault ended (the heal clock's start)."""
        kind = rng.choice(("kill", "stop", "restart"))
        pause = rng.uniform(1.5, 6.0)
        self.faults[f"{kind} {name}"] += 1
        self.say(f"fault: {kind} {name} (pid {self.env.pid(name)})")
        if kind == "stop":
            pid = self.signal_component(name, signal.SIGSTOP)
            try:
                if check_status:
                    self.status_truth(name, f"SIGSTOP {name}")
                time.sleep(pause)
            finally:
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
            return time.monotonic()
        pid = self.signal_component(name, signal.SIGKILL if kind == "kill" else signal.SIGTERM)
        if pid is not None:
            deadline = time.monotonic() + 15
            while self.env.pid(name) == pid and time.monotonic() < deadline:
                time.sleep(0.05)
        if check_status:
            self.status_truth(name, f"{kind} {name}")
        return time.monotonic()

    def provider_fault(self, rng: random.Random) -> float:
        provider = rng.choice(sorted(PROVIDERS))
        kind = rng.choice(("unhealthy", "slow"))
        change = {"healthy": False} if kind == "unhealthy" else {"delaySeconds": round(rng.uniform(2.5, 4.0), 1)}
        undo = {"healthy": True} if kind == "unhealthy" else {"delaySeconds": 0}
        self.faults[f"{kind} provider"] += 1
        self.say(f"fault: {provider} {kind} {change}")
        hold = rng.uniform(2.0, 8.0)
        self.admin(provider, change)
        try:
            # Held until the operator has taken it out of every overlay (or 20 s), so the fault
            # really bites: new sessions move, revisions change, then it comes back.
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not self.excluded(provider):
                time.sleep(0.2)
            self.status_truth(f"fake-{provider}", f"{provider} {kind}")
            time.sleep(hold)
        finally:
            self.admin(provider, undo)
        return time.monotonic()

    def excluded(self, provider: str) -> bool:
        try:
            view = self.api.view()
        except Exception:
            return False
        return all(
            (v := view.get(c)) is not None
            and v["candidates"] is not None
            and provider not in {p for p, _ in v["candidates"].values()}
            for c in CONSUMERS
        )

    def admin(self, provider: str, change: dict) -> None:
        port = self.env.port(f"fake-{provider}")
        if port is None:
            return
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("POST", "/admin/state", body=json.dumps(change), headers={"content-type": "application/json"})
            conn.getresponse().read()
        except OSError as exc:
            self.say(f"admin {provider}: {exc}")
        finally:
            conn.close()

    def writer(self, rng: random.Random) -> None:
        provider = rng.choice(sorted(PROVIDERS))
        rank = rng.randint(0, 2)
        self.faults["concurrent writer"] += 1
        try:
            self.api.set_rank(provider, rank)
            self.say(f"writer: {provider} rank {rank}")
        except Exception as exc:  # the API server may be down on purpose
            self.say(f"writer: {provider} rank {rank} failed: {type(exc).__name__}")

    # -- operations ------------------------------------------------------------------------
    def close_window(self) -> None:
        if self.open_window is not None:
            start, drained, step = self.open_window
            self.windows.append((start, time.monotonic(), drained, step))
            self.open_window = None

    def cli_drain(self, rng: random.Random, selection: list[str], undrain: bool, extra: list[str]) -> None:
        """One CLI run, perhaps with a fault or a concurrent writer while it runs."""
        targeted = "--network" in extra
        selected = [selection[1]] if selection[0] == "--provider" else GATEWAYS[selection[1]]
        kind = ("undrain" if undrain else "drain") + ("-gateway" if selection[0] == "--gateway" else "")
        kind += "-wait-idle" if "--wait-idle" in extra else "" if targeted else "-patch-only"
        midrun = rng.choice(MIDRUN) if targeted and rng.random() < 0.4 else None
        midrun_at = rng.uniform(0.3, 3.0)
        write_at = rng.uniform(0.2, 2.0) if rng.random() < 0.25 else None
        wrng = random.Random(rng.random())
        frng = random.Random(rng.random())
        self.ops[kind] += 1
        before = dict(self.model)
        journals = self.env.journal_files()
        args = ["env", "provider-drain", "--context", CTX, *selection, "--timeout", "60", *extra]
        if undrain:
            args.append("--undrain")
        self.say(f"op {kind}: {' '.join(args[2:])}" + (f"; mid-run fault on {midrun}" if midrun else ""))
        proc = self.env.spawn(*args)
        fault_end = None
        started = time.monotonic()
        if write_at is not None:
            time.sleep(write_at)
            if proc.poll() is None:
                self.writer(wrng)
        if midrun is not None:
            time.sleep(max(0.0, midrun_at - (time.monotonic() - started)))
            if proc.poll() is None:
                fault_end = self.process_fault(frng, midrun, check_status=False)
        if fault_end is not None:
            self.heal(fault_end, f"mid-run fault on {midrun}")
        try:
            out, _ = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        code = proc.returncode
        exited = time.monotonic()
        self.exits[f"{kind}:{code}"] += 1
        self.say(f"exit {code}: {out.strip().splitlines()[-1] if out.strip() else ''}")
        if code == 0 and targeted:
            self.check_converged(selected, not undrain, exited)
        if code in STORED:
            self.model.update({p: not undrain for p in selected})
        elif code not in UNCHANGED:
            self.restore(journals, before, f"{kind} exit {code}")
        if code == 0 and targeted and not undrain:
            self.open_window = (exited, frozenset(p for p, d in self.model.items() if d), self.step)

    def interrupted(self, rng: random.Random) -> None:
        """A paced run stopped on purpose, then ``env drain-restore`` of its journal."""
        gateway = rng.choice(sorted(GATEWAYS))
        undrain = rng.random() < 0.5  # drawn whatever the model says: the schedule never depends on outcomes
        how = rng.choice(("sigint", "double-sigint", "sigkill"))
        at = rng.uniform(0.8, 4.0)
        # Half the time a paused gateway holds the run in its wait, so the signal lands there;
        # otherwise the pacing (--qps 0.5) makes it land in the fan-out or just after.
        hold = rng.random() < 0.5
        self.ops[f"interrupted ({how})"] += 1
        self.faults[f"cli {how}"] += 1
        before = dict(self.model)
        journals = self.env.journal_files()
        args = ["env", "provider-drain", "--context", CTX, "--gateway", gateway, "--qps", "0.5", "--timeout", "60"]
        args += [*TARGETS, "--force"] + (["--undrain"] if undrain else [])
        self.say(f"op interrupted ({how} at {at:.1f}s{', wait held' if hold else ''}): {' '.join(args[2:])}")
        held = self.signal_component("gateway-consumer-b", signal.SIGSTOP) if hold else None
        try:
            proc = self.env.spawn(*args)
            time.sleep(at)
            self.interrupt(proc, how)
        finally:
            if held is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(held, signal.SIGCONT)
        try:
            proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        self.exits[f"interrupted {how}:{proc.returncode}"] += 1
        self.say(f"interrupted run exit {proc.returncode}")
        if proc.returncode in STORED:  # finished before the signal landed
            self.model.update({p: not undrain for p in GATEWAYS[gateway]})
        else:
            self.restore(journals, before, f"interrupted {how}")

    @staticmethod
    def interrupt(proc: subprocess.Popen, how: str) -> None:
        if proc.poll() is not None:
            return
        if how == "sigkill":
            proc.send_signal(signal.SIGKILL)
            return
        proc.send_signal(signal.SIGINT)
        if how == "double-sigint":
            time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)

    def restore(self, journals: set[Path], before: dict[str, bool], what: str) -> None:
        """``env drain-restore`` of every journal the run left; the model goes back to ``before``."""
        new = sorted(self.env.journal_files() - journals)
        for journal in new:
            code, out = self.env.run("env", "drain-restore", str(journal), timeout=120)
            if code not in (0,):  # the API server may be down from a fault: heal and try again
                self.heal(time.monotonic(), f"before drain-restore after {what}")
                code, out = self.env.run("env", "drain-restore", str(journal), timeout=120)
            self.exits[f"drain-restore:{code}"] += 1
            self.say(f"drain-restore {journal.name}: exit {code}")
            if code != 0:
                self.say(out[-600:])
        self.model = dict(before)

    def check_converged(self, selected: list[str], drain: bool, exited: float) -> None:
        """I1, read at once with the plain client after the run's exit 0."""
        self.checked_i1 += 1
        try:
            drains = self.api.drains()
            view = self.api.view()
        except Exception as exc:
            self.violate("I1", f"exit 0 but the API could not be read right after: {exc}")
            return
        for p in selected:
            if drains.get(p) != drain:
                self.violate("I1", f"exit 0 but {p} drain is {drains.get(p)}, asked {drain}")
        for consumer in CONSUMERS:
            v = view.get(consumer) or {}
            rev = v.get("revision")
            moved = rev is not None and rev != self.poller.newest_before(consumer, exited)
            if not (v.get("candidates") is not None and rev == v.get("accepted") == v.get("serving")):
                if moved:
                    self.unverifiable_i1 += 1
                    continue
                self.violate("I1", f"exit 0 but {consumer}: { ({k: x for k, x in v.items() if k != 'candidates'}) }")
                continue
            states = {prov: state for prov, state in v["candidates"].values()}
            for p in selected:
                state = states.get(p)
                wrong = state == "admitted" if drain else state != "admitted"
                if wrong:
                    self.violate("I1", f"exit 0 but {p} is {state} in {consumer} revision {rev}")

    # -- the loop --------------------------------------------------------------------------
    def one_step(self) -> None:
        rng = random.Random(f"{self.seed}:{self.step}")
        self.close_window()
        roll = rng.random()
        if roll < 0.45:
            single = rng.random() < 0.6
            name = rng.choice(sorted(PROVIDERS) if single else sorted(GATEWAYS))
            selection = ["--provider" if single else "--gateway", name]
            undrain = rng.random() < 0.45
            flavour = rng.random()
            extra = TARGETS if flavour < 0.7 else [] if flavour < 0.85 else [*TARGETS, "--wait-idle"]
            if "--wait-idle" in extra:
                undrain = False
                extra = [*extra, "--idle-timeout", "20"]
            self.cli_drain(rng, selection, undrain, extra)
        elif roll < 0.6:
            self.interrupted(rng)
        elif roll < 0.9:
            if rng.random() < 0.75:
                name = rng.choice(PROCESSES)
                end = self.process_fault(rng, name, check_status=True)
                self.heal(end, f"fault on {name}")
            else:
                end = self.provider_fault(rng)
                self.heal(end, "provider fault")
        else:
            self.writer(rng)
        self.check_model()

    def check_model(self) -> None:
        """I2, once the step's recovery is done."""
        if self.settle(HEAL_BOUND) is None:
            self.heal(time.monotonic(), "an unsettled env")
        try:
            drains = self.api.drains()
        except Exception as exc:
            self.violate("I2", f"providers unreadable after recovery: {exc}")
            return
        for p, want in self.model.items():
            if drains.get(p) != want:
                self.violate("I2", f"{p} drain is {drains.get(p)}, the model of requests says {want}")
        self.model = {p: drains.get(p, want) for p, want in self.model.items()}  # one report per divergence

    def run(self) -> int:
        start = time.monotonic()
        try:
            self.up()
            while time.monotonic() - start < self.args.duration and self.step < self.args.max_ops:
                self.step += 1
                self.one_step()
            self.close_window()
        finally:
            for t in getattr(self, "traffic", []):
                t.stop.set()
            for t in getattr(self, "traffic", []):
                t.thread.join(timeout=10)
            if hasattr(self, "poller"):
                self.poller.stop.set()
                self.poller.thread.join(timeout=10)
            if not self.args.keep:
                self.env.run("env", "down", timeout=300)
        self.check_traffic()
        report = self.report(time.monotonic() - start)
        print(table(report))
        if self.args.report:
            Path(self.args.report).write_text(json.dumps(report, indent=2))
        self.log.close()
        return 1 if self.violations else 0

    def check_traffic(self) -> None:
        """I3 and I4 over every reply, once the poller's history is complete."""
        self.unverified_i3 = 0
        for t in self.traffic:
            for r in t.replies:
                if r.code != 200:
                    continue
                if r.revision is None:
                    self.violate("I3", f"{r.consumer} routed {r.session} with no x-agn-overlay-revision")
                    continue
                cands = self.poller.revision_at(r.consumer, r.revision)
                if cands is None:
                    self.unverified_i3 += 1
                elif cands.get(r.candidate or "", (None,))[0] != r.provider:
                    self.violate(
                        "I3", f"{r.consumer} routed to {r.provider}/{r.candidate}, not in revision {r.revision}"
                    )
                elif r.routing in ("new_session", "rehomed") and cands[r.candidate or ""][1] != "admitted":
                    self.violate("I3", f"{r.consumer} sent a new session to {r.provider}, not admitted in {r.revision}")
                for begin, end, drained, step in self.windows:
                    if begin < r.sent < end and r.provider in drained and r.routing in ("new_session", "rehomed"):
                        self.step = step
                        self.violate("I4", f"{r.consumer}: {r.routing} session {r.session} on drained {r.provider}")

    def report(self, seconds: float) -> dict[str, Any]:
        replies = [r for t in self.traffic for r in t.replies]
        codes = collections.Counter(r.code for r in replies)
        heals = sorted(self.heals)
        by_inv = collections.Counter(v.invariant for v in self.violations)
        return {
            "seed": self.seed,
            "seconds": round(seconds),
            "steps": self.step,
            "operations": dict(sorted(self.ops.items())),
            "faults": dict(sorted(self.faults.items())),
            "requests": {
                "total": len(replies) + sum(t.errors for t in self.traffic),
                "byCode": {str(k): v for k, v in sorted(codes.items())},
                "noAnswer": sum(t.errors for t in self.traffic),
                "sticky": sum(1 for r in replies if not r.new),
                "newSession": sum(1 for r in replies if r.new),
                "i3Unverified": self.unverified_i3,
            },
            "violations": {i: by_inv.get(i, 0) for i in ("I1", "I2", "I3", "I4", "I5")},
            "violationList": [dataclasses.asdict(v) for v in self.violations],
            "i1": {"checked": self.checked_i1, "unverifiable": self.unverifiable_i1},
            "exits": dict(sorted(self.exits.items())),
            "statusWhileBroken": {
                "count": len(self.status_seconds),
                "maxSeconds": round(max(self.status_seconds), 1) if self.status_seconds else None,
            },
            "heal": {
                "count": len(heals),
                "p50": round(statistics.median(heals), 1) if heals else None,
                "p99": round(heals[min(len(heals) - 1, int(len(heals) * 0.99))], 1) if heals else None,
            },
        }


def table(r: dict[str, Any]) -> str:
    def kv(d: dict) -> str:
        return ", ".join(f"{k} {v}" for k, v in d.items()) or "none"

    req = r["requests"]
    rows = [
        ("run", f"seed {r['seed']}, {r['seconds']} s, {r['steps']} steps"),
        ("operations", f"{sum(r['operations'].values())}: {kv(r['operations'])}"),
        ("faults by kind", f"{sum(r['faults'].values())}: {kv(r['faults'])}"),
        (
            "requests",
            f"{req['total']} ({req['sticky']} sticky, {req['newSession']} new session, "
            f"{req['noAnswer']} no answer); by code: {kv(req['byCode'])}; "
            f"I3 unverified (revision not seen whole): {req['i3Unverified']}",
        ),
        (
            "invariant violations",
            f"{sum(r['violations'].values())} ({kv(r['violations'])}); I1 checked {r['i1']['checked']}, "
            f"unverifiable {r['i1']['unverifiable']}",
        ),
        ("CLI exit codes by kind", kv(r["exits"])),
        ("heal time p50 / p99", f"{r['heal']['p50']} s / {r['heal']['p99']} s over {r['heal']['count']} heals"),
        (
            "`env status` while broken",
            f"{r['statusWhileBroken']['count']} reads, slowest {r['statusWhileBroken']['maxSeconds']} s",
        ),
    ]
    out = ["| measure | value |", "|---|---|"]
    out += [f"| {k} | {v.replace('|', '/')} |" for k, v in rows]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1, help="the schedule's seed (default 1)")
    parser.add_argument("--duration", type=float, default=600, help="seconds to run at most (default 600)")
    parser.add_argument("--max-ops", type=int, default=1_000_000, help="steps to run at most")
    parser.add_argument("--rate", type=float, default=4.0, help="requests per second per gateway (default 4)")
    parser.add_argument("--workdir", type=Path, help="folder for the env's state and chaos.log (default: a new one)")
    parser.add_argument("--report", help="write the report as JSON to this file")
    parser.add_argument("--keep", action="store_true", help="leave the env up at the end")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every step")
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.max_ops <= 0 or not 0 < args.rate <= 50:
        parser.error("--duration and --max-ops must be positive and --rate within (0, 50]")
    home = args.workdir or Path(tempfile.mkdtemp(prefix=f"agn-chaos-{args.seed}-"))
    home.mkdir(parents=True, exist_ok=True)
    print(f"chaos: seed {args.seed}, folder {home}", flush=True)
    return Soak(args, home).run()


if __name__ == "__main__":
    sys.exit(main())
