"""The chaos soak's faults and heals: processes killed, paused or restarted, providers turned
unhealthy or slow, a concurrent writer; ``env up`` heals and ``env status`` tells the truth (I5)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import signal
import time

from chaos_env import CONSUMERS, HEAL_BOUND, PROVIDERS


class Faults:
    """Mixed into the soak: what breaks the env and what heals it."""

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
