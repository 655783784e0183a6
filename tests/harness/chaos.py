#!/usr/bin/env python3
"""A seeded chaos soak: real drains, real faults and real traffic on the example environment,
checked against invariants, reported as one table.

It brings up ``envs/example.yaml`` on the ``local`` runtime (real etcd, kube-apiserver, operator,
gateways and fake providers as local processes) in a folder of its own, then runs one step at a
time until ``--duration`` seconds or ``--max-ops`` steps, whichever comes first:

- **operations** through the real CLI, as a subprocess: single and gateway drains and undrains
  with targets, ``--wait-idle`` drains, patch-only drains; some of them with a fault injected
  mid-run, or a concurrent writer changing a provider's rank while they run;
- **interrupted runs**: a paced run (``--qps 0.5``) stopped by SIGINT, a double SIGINT, SIGHUP
  (a dropped terminal) or SIGKILL in its fan-out or its wait, then ``env drain-restore`` of the
  journal it left (every CLI starts with SIGHUP at its default disposition, as a terminal
  session starts it: ``chaos_env.default_hangup``);
- **a second maintainer**, ``bob``, with his own identity (a client certificate from the env's
  CA, the shipped drain Role, not the release verb; ``chaos_team.py``): on 40% of the steps one
  drain or undrain of his, through the real CLI, at the same time as the step's own action;
- **a declared budget**: ``spec.disruptionBudget: {maxUnavailable: 1}`` on the network, patched
  in at the start: every drain by anyone is checked against it;
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
- **I2** after each step's recovery every provider's drain value and the owners of its holds
  are those the model of requested state says (per provider, who holds it: exit 0/6/7/9 stored
  the request, a drain adding its user's hold, an undrain removing it; exit 3/4 changed
  nothing; any other end is undone with ``env drain-restore``, as the run's user);
- **I3** every routed response names its overlay revision (``x-agn-overlay-revision``) and its
  candidate is in that revision, as a poller recorded it from the index and its shards (a
  revision the poller never saw whole counts as *unverified*);
- **I4** from a targeted drain's exit 0 until the next step, no new or re-homed session lands
  on a drained provider;
- **I5** while a fault holds, ``env status`` does not report the faulty component running and
  healthy; after it, ``env up`` heals the env (every provider back in every overlay, revisions
  agreeing) within 60 s;
- **I6** no CLI drain write takes a selection group above the declared budget, checked at every
  watch event (``chaos_watch.py`` says exactly what counts);
- **I7** no hold is released by anyone but its owner or a granted releaser (who wrote each
  change: kube-apiserver's audit log, joined to the watch's versions by resourceVersion).

The schedule of step N is drawn from ``random.Random(f"{seed}:{N}")`` (bob's from
``f"{seed}:{N}:bob"``), so ``--seed S`` replays
the same steps whatever happened before; a violation prints the seed and the step. Exit 0
when no invariant was violated, 1 otherwise.

    .venv/bin/python tests/harness/chaos.py --seed 7 --duration 600
    .venv/bin/python tests/harness/chaos.py --seed 7 --max-ops 12 --report chaos.json
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chaos_checks import Checks, table
from chaos_env import (
    CONSUMERS,
    CTX,
    ENV,
    GATEWAYS,
    HEAL_BOUND,
    MIDRUN,
    NS,
    PROCESSES,
    PROVIDERS,
    STORED,
    TARGETS,
    UNCHANGED,
    Api,
    Env,
    Poller,
    Traffic,
)
from chaos_faults import Faults
from chaos_team import ADMIN, BOB, Team, refused_for_another_owner
from chaos_watch import Recorder

BUDGET = 1  # the network's declared spec.disruptionBudget.maxUnavailable, per selection group

# -- the soak ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Violation:
    invariant: str
    step: int
    detail: str


class Soak(Faults, Checks):
    def __init__(self, args: argparse.Namespace, home: Path) -> None:
        self.args = args
        self.seed = args.seed
        self.env = Env(home)
        self.model: dict[str, set[str]] = {p: set() for p in PROVIDERS}  # provider -> who holds it drained
        self.team = Team(self.env)
        self.bob: collections.Counter[str] = collections.Counter()
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
        self.api.declare_budget(BUDGET)
        self.team.setup()
        self.recorder = Recorder(self.api.objects, NS, lambda detail: self.violate("I6", detail))
        self.recorder.start()
        self.poller = Poller(self.api)
        self.poller.thread.start()
        self.settle(HEAL_BOUND)
        self.traffic = [Traffic(self.env, c, self.args.rate, self.seed) for c in CONSUMERS]
        for t in self.traffic:
            t.thread.start()

    # -- operations ------------------------------------------------------------------------
    def close_window(self) -> None:
        if self.open_window is not None:
            start, drained, step = self.open_window
            self.windows.append((start, time.monotonic(), drained, step))
            self.open_window = None

    def cli_drain(self, rng: random.Random, selection: list[str], undrain: bool, extra: list[str]) -> None:
        """One CLI run, perhaps with a fault or a concurrent writer while it runs. A fifth of the
        undrains release every hold (``--release-all``: the admin is a granted releaser), drawn
        from a stream of their own so that the rest of the schedule is unchanged."""
        release_all = undrain and random.Random(f"{self.seed}:{self.step}:release").random() < 0.2
        if release_all:
            extra = [*extra, "--release-all"]
        targeted = "--network" in extra
        selected = [selection[1]] if selection[0] == "--provider" else GATEWAYS[selection[1]]
        kind = ("undrain" if undrain else "drain") + ("-gateway" if selection[0] == "--gateway" else "")
        kind += "-release-all" if release_all else ""
        kind += "-wait-idle" if "--wait-idle" in extra else "" if targeted else "-patch-only"
        midrun = rng.choice(MIDRUN) if targeted and rng.random() < 0.4 else None
        midrun_at = rng.uniform(0.3, 3.0)
        write_at = rng.uniform(0.2, 2.0) if rng.random() < 0.25 else None
        wrng = random.Random(rng.random())
        frng = random.Random(rng.random())
        self.ops[kind] += 1
        before = copy.deepcopy(self.model)
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
        if code in STORED and release_all:
            self.model.update({p: set() for p in selected})
            self.released.update(selected)
        elif code in STORED:
            self.hold(selected, ADMIN, not undrain)
        elif code not in UNCHANGED:
            self.restore(journals, before, f"{kind} exit {code}")
        if code == 0 and targeted:
            self.check_converged(selected, exited)
        if code == 0 and targeted and not undrain:
            drained = frozenset(p for p, holders in self.model.items() if holders and p != self.team.busy())
            self.open_window = (exited, drained, self.step)

    def hold(self, providers: list[str], user: str, drain: bool) -> None:
        """The model after ``user``'s stored drain or undrain: a drain adds the user's hold, an
        undrain removes it (the flag stays while another hold remains)."""
        for p in providers:
            (self.model[p].add if drain else self.model[p].discard)(user)
            if user == ADMIN:
                self.admin_stored[p] = (set(self.model[p]), drain)

    def interrupted(self, rng: random.Random) -> None:
        """A paced run stopped on purpose, then ``env drain-restore`` of its journal."""
        gateway = rng.choice(sorted(GATEWAYS))
        undrain = rng.random() < 0.5  # drawn whatever the model says: the schedule never depends on outcomes
        how = rng.choice(("sigint", "double-sigint", "sigkill", "sighup"))
        at = rng.uniform(0.8, 4.0)
        # Half the time a paused gateway holds the run in its wait, so the signal lands there;
        # otherwise the pacing (--qps 0.5) makes it land in the fan-out or just after.
        hold = rng.random() < 0.5
        self.ops[f"interrupted ({how})"] += 1
        self.faults[f"cli {how}"] += 1
        before = copy.deepcopy(self.model)
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
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        self.exits[f"interrupted {how}:{proc.returncode}"] += 1
        self.say(f"interrupted run exit {proc.returncode}")
        if proc.returncode < 0 and how != "sigkill":  # died by a signal it should have handled: say how
            self.say(f"its output:\n{out[-3000:]}")
        if proc.returncode in STORED:  # finished before the signal landed
            self.hold(GATEWAYS[gateway], ADMIN, not undrain)
        else:
            self.restore(journals, before, f"interrupted {how}")

    @staticmethod
    def interrupt(proc: subprocess.Popen, how: str) -> None:
        if proc.poll() is not None:
            return
        if how == "sigkill":
            proc.send_signal(signal.SIGKILL)
            return
        proc.send_signal(signal.SIGHUP if how == "sighup" else signal.SIGINT)
        if how == "double-sigint":
            time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)

    def restore(self, journals: set[Path], before: dict[str, set[str]], what: str) -> None:
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
        for p, holders in before.items():  # the admin's part goes back; bob's is his own run's
            self.model[p] = {u for u in self.model[p] if u != ADMIN} | {u for u in holders if u == ADMIN}

    def one_step(self) -> None:
        rng = random.Random(f"{self.seed}:{self.step}")
        self.close_window()
        self.released: set[str] = set()  # providers whose every hold the step's run released
        self.admin_stored: dict[str, tuple[set[str], bool]] = {}  # the step's stored admin run: model after, drain
        bob = self.team.start(self.seed, self.step)
        if bob is not None:
            self.bob[bob.kind] += 1
            self.say(f"bob starts: {bob.kind} {bob.provider}")
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
        self.finish_bob()
        self.check_model()

    def raced_release(self, provider: str) -> None:
        """Bob's drain and the admin's --release-all of the same provider ran at once: they do
        not commute, and the API server ordered them. Either order is legal: released after
        bob's hold was added (no hold), or bob's hold added after (bob's alone)."""
        self.bob["drain raced a release-all"] += 1
        try:
            flag, owners = self.api.holds()[provider]
        except Exception:
            return  # I2 reads it again
        if (flag, set(owners)) in ((False, set()), (True, {BOB})):
            self.model[provider] = set(owners)
            self.say(f"bob's drain of {provider} raced a release-all: ordered as {sorted(owners) or 'released last'}")
        else:
            self.hold([provider], BOB, True)  # neither legal order: I2 reports it

    def raced_admin(self, provider: str) -> None:
        """Bob's ``--release-all`` undrain and the admin's run of the same provider, in the same
        step, both stored: the API server ordered them (bob's run may even find nothing to write,
        read back before the admin's write lands). Either order is legal: bob's last (no hold,
        undrained) or the admin's last (the admin's run's result)."""
        self.bob["release-all raced the admin"] += 1
        after, _ = self.admin_stored[provider]
        try:
            flag, owners = self.api.holds()[provider]
        except Exception:
            self.model[provider] = set()
            return  # I2 reads it again
        if (flag, set(owners)) in ((False, set()), (bool(after), after)):
            self.model[provider] = set(owners)
            self.say(
                f"bob's release-all of {provider} raced the admin's run: ordered as {sorted(owners) or 'bob last'}"
            )
        else:
            self.model[provider] = set()  # neither legal order: I2 reports it

    def finish_bob(self) -> None:
        """Bob's operation of this step: its exit, the model, and a restore of what it left."""
        done = self.team.finish()
        if done is None:
            return
        run, code, out = done
        self.exits[f"{run.kind}:{code}"] += 1
        self.say(f"bob {run.kind} {run.provider} exit {code}: {out.strip().splitlines()[-1] if out.strip() else ''}")
        if code == 3 and run.release_all:
            self.bob["release-all refused"] += 1
        elif code == 3 and run.undrain and refused_for_another_owner(out):
            self.bob["undrain refused: held by another"] += 1
        if code in STORED and run.release_all and run.provider in self.admin_stored:
            self.raced_admin(run.provider)
        elif code in STORED and run.release_all:
            self.model[run.provider] = set()
        elif code in STORED and not run.undrain and run.provider in self.released:
            self.raced_release(run.provider)
        elif code in STORED:
            self.hold([run.provider], BOB, not run.undrain)
        elif code not in UNCHANGED:
            for name, rcode, said in self.team.restore(run):
                self.exits[f"bob drain-restore:{rcode}"] += 1
                self.say(f"bob drain-restore {name}: exit {rcode}" + ("" if rcode == 0 else f"\n{said[-600:]}"))

    def stop_actors(self) -> None:
        self.team.stop()
        if hasattr(self, "recorder"):
            self.recorder.close()
        for t in getattr(self, "traffic", []):
            t.stop.set()
        for t in getattr(self, "traffic", []):
            t.thread.join(timeout=10)
        if hasattr(self, "poller"):
            self.poller.stop.set()
            self.poller.thread.join(timeout=10)

    def run(self) -> int:
        start = time.monotonic()
        try:
            self.up()
            while time.monotonic() - start < self.args.duration and self.step < self.args.max_ops:
                self.step += 1
                self.one_step()
            self.close_window()
        finally:
            try:
                self.stop_actors()
            finally:  # the env comes down even when the soak is stopped mid-bring-up
                if not self.args.keep:
                    self.env.run("env", "down", timeout=300)
        self.check_traffic()
        self.check_budget_and_holds()
        report = self.report(time.monotonic() - start)
        print(table(report))
        if self.args.report:
            Path(self.args.report).write_text(json.dumps(report, indent=2))
        self.log.close()
        return 1 if self.violations else 0


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
    # SIGTERM and SIGHUP end the soak as Ctrl-C does, through its cleanup (the env comes down).
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stopped)
    try:
        return Soak(args, home).run()
    except KeyboardInterrupt as stop:
        print(f"chaos: stopped by {stop or 'SIGINT'} at its cleanup's end (env down unless --keep)", flush=True)
        return 130


def stopped(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


if __name__ == "__main__":
    sys.exit(main())
