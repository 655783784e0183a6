"""The chaos soak's checks of I1-I4 and its report (see chaos.py)."""

from __future__ import annotations

import collections
import dataclasses
import statistics
import time
from typing import Any

from chaos_env import CONSUMERS, HEAL_BOUND
from chaos_team import ADMIN, BOB
from chaos_watch import HoldChecker, read_audit

from agn.holds import hold_id

INVARIANTS = ("I1", "I2", "I3", "I4", "I5", "I6", "I7")


class Checks:
    """Mixed into the soak: the invariants read back and the report."""

    def check_converged(self, selected: list[str], exited: float) -> None:
        """I1, read at once with the plain client after the run's exit 0 (the model already
        updated: an undrain leaves a provider drained while another's hold remains). The
        provider bob's concurrent run touches is left out: it may change under the read."""
        self.checked_i1 += 1
        selected = [p for p in selected if p != self.team.busy()]
        want = {p: bool(self.model[p]) for p in selected}
        try:
            drains = self.api.drains()
            view = self.api.view()
        except Exception as exc:
            self.violate("I1", f"exit 0 but the API could not be read right after: {exc}")
            return
        for p in selected:
            if drains.get(p) != want[p]:
                self.violate("I1", f"exit 0 but {p} drain is {drains.get(p)}, the holds {self.model[p]} say {want[p]}")
        for consumer in CONSUMERS:
            v = view.get(consumer) or {}
            rev = v.get("revision")
            moved = rev is not None and rev != self.poller.newest_before(consumer, exited)
            candidates = v.get("candidates")
            if candidates is None and rev == v.get("accepted") == v.get("serving"):
                # The index still names the accepted revision but a shard already holds the next
                # one's content (the operator writes the shards, then the index): an after-effect
                # of a change right after the exit (the concurrent writer, bob). The revision was
                # whole when the poller read it: its content is checked from there.
                candidates = self.poller.revision_at(consumer, rev)
            if not (candidates is not None and rev == v.get("accepted") == v.get("serving")):
                if moved:
                    self.unverifiable_i1 += 1
                    continue
                self.violate("I1", f"exit 0 but {consumer}: { ({k: x for k, x in v.items() if k != 'candidates'}) }")
                continue
            states = {prov: state for prov, state in candidates.values()}
            for p in selected:
                state = states.get(p)
                wrong = state == "admitted" if want[p] else state != "admitted"
                if wrong:
                    self.violate("I1", f"exit 0 but {p} is {state} in {consumer} revision {rev}")

    # -- the loop --------------------------------------------------------------------------
    def check_model(self) -> None:
        """I2, once the step's recovery is done."""
        if self.settle(HEAL_BOUND) is None:
            self.heal(time.monotonic(), "an unsettled env")
        try:
            holds = self.api.holds()
        except Exception as exc:
            self.violate("I2", f"providers unreadable after recovery: {exc}")
            return
        for p, holders in self.model.items():
            flag, owners = holds.get(p, (False, frozenset()))
            if flag != bool(holders) or owners != holders:
                self.violate("I2", f"{p} drain is {flag} held by {sorted(owners)}, the model says {sorted(holders)}")
            self.model[p] = set(owners)  # one report per divergence

    def check_budget_and_holds(self) -> None:
        """I7 from the watch recorder's hold removals and the API server's audit log (I6 is
        reported by the recorder as it happens)."""
        writes, updates = read_audit(self.env.audit_log)
        checker = HoldChecker({hold_id(u): u for u in (ADMIN, BOB)}, releasers=[ADMIN])
        problems, self.hold_figures = checker.check(self.recorder.removals, writes)
        self.hold_figures["auditedWrites"] = len(writes)
        self.hold_figures["auditedUpdates"] = len(updates)
        for detail in problems:
            self.violate("I7", detail)

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
            "violations": {i: by_inv.get(i, 0) for i in INVARIANTS},
            "bob": dict(sorted(self.bob.items())),
            "budget": {
                "declaredMaxUnavailable": 1,
                "watchEvents": self.recorder.events,
                "drainWrites": self.recorder.budget.drain_writes,
                "excused": dict(sorted(self.recorder.budget.excused.items())),
                "evaluationsAboveBudget": self.recorder.budget.above_budget,
                "mostUnavailable": dict(sorted(self.recorder.budget.max_unavailable.items())),
            },
            "holds": self.hold_figures,
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
        (
            "second maintainer (bob)",
            f"{sum(v for k, v in r['bob'].items() if k.startswith('bob '))} runs: {kv(r['bob'])}",
        ),
        (
            "declared budget (I6)",
            f"maxUnavailable {r['budget']['declaredMaxUnavailable']}; {r['budget']['watchEvents']} watch events, "
            f"{r['budget']['drainWrites']} budgeted drain writes checked (over the budget but let pass: "
            f"{kv(r['budget']['excused'])}); evaluations with a group above the "
            f"budget for any cause {r['budget']['evaluationsAboveBudget']}; most unavailable per group: "
            f"{kv(r['budget']['mostUnavailable'])}",
        ),
        ("hold releases (I7)", kv(r["holds"])),
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
