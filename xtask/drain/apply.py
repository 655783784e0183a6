"""The fan-out: server-side dry runs, bounded concurrent patches, and best-effort restoration.

A gateway-wide change is not a transaction: every provider gets its own outcome. At most
``concurrency`` requests are in flight; a stop event (set by a signal) stops new writes
while in-flight ones finish. A 409 (the object changed since we read it) is answered by
re-reading and re-planning, never by overwriting.
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import threading
import time
from collections.abc import Callable, Sequence

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from agn.kube import PROVIDERS, Conflict, Kube, KubeError, NotFound
from xtask.drain.journal import Journal
from xtask.drain.plan import Change, RestoreDecision, plan_changes, restore_decision, restore_patch

PatchFor = Callable[[Change], dict]
Notify = Callable[[str, str, dict], None]  # (event, provider, details)


@dataclasses.dataclass
class Outcome:
    provider: str
    outcome: str  # changed | unchanged | failed | not-attempted | dry-run-ok | dry-run-rejected
    error: str | None = None
    reason: str | None = None
    status: int | None = None
    generation: int | None = None
    note: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def _retrying_conflicts() -> Retrying:
    return Retrying(
        retry=retry_if_exception_type(Conflict),
        stop=stop_after_attempt(6),
        wait=wait_exponential(multiplier=0.02, max=0.5),
        reraise=True,
    )


def _failed(name: str, exc: KubeError, *, outcome: str = "failed") -> Outcome:
    return Outcome(name, outcome, error=str(exc), reason=exc.reason or None, status=exc.status or None)


def _write_one(kube: Kube, namespace: str, change: Change, patch_for: PatchFor, *, dry_run: bool) -> tuple[Outcome, Change]:
    current = change
    try:
        for attempt in _retrying_conflicts():
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    # Someone wrote the object since we read it: decide again from what is there now.
                    current = plan_changes([kube.get(PROVIDERS, namespace, change.provider)], requested=change.requested)[0]
                    if current.already:
                        return Outcome(change.provider, "unchanged", note="already in requested state (set by another writer)"), current
                obj = kube.merge_patch(PROVIDERS, namespace, change.provider, patch_for(current), dry_run=dry_run)
        gen = int(obj.get("metadata", {}).get("generation") or 0)
        return Outcome(change.provider, "dry-run-ok" if dry_run else "changed", generation=gen), current
    except KubeError as exc:
        return _failed(change.provider, exc, outcome="dry-run-rejected" if dry_run else "failed"), current


def server_dry_run(kube: Kube, namespace: str, changes: Sequence[Change], patch_for: PatchFor, *, concurrency: int) -> list[Outcome]:
    """Send every planned patch with ``dryRun=All``: admission, validation and RBAC answer now."""
    todo = [c for c in changes if not c.already]
    with cf.ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="dry-run") as pool:
        results = list(pool.map(lambda c: _write_one(kube, namespace, c, patch_for, dry_run=True)[0], todo))
    return results


def fan_out(
    kube: Kube, namespace: str, changes: Sequence[Change], patch_for: PatchFor, *, concurrency: int, qps: float | None,
    stop: threading.Event, journal: Journal | None, notify: Notify,
) -> list[Outcome]:
    """Apply ``changes`` with at most ``concurrency`` requests in flight; one outcome per provider."""
    outcomes: dict[str, Outcome] = {}
    for c in changes:
        if c.already:
            outcomes[c.provider] = Outcome(c.provider, "unchanged", note="already in requested state")
    pending = [c for c in changes if not c.already]
    min_interval = 1.0 / qps if qps else 0.0
    last_submit = 0.0

    def task(change: Change) -> Outcome:
        outcome, final = _write_one(kube, namespace, change, patch_for, dry_run=False)
        if outcome.outcome == "changed" and journal is not None:
            journal.record_write(final.provider, generation=outcome.generation or 0, change=final)
        return outcome

    with cf.ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="drain") as pool:
        in_flight: dict[cf.Future, str] = {}
        queue = list(pending)
        while queue or in_flight:
            while queue and len(in_flight) < concurrency and not stop.is_set():
                wait = last_submit + min_interval - time.monotonic()
                if wait > 0:
                    if stop.wait(wait):
                        break
                change = queue.pop(0)
                last_submit = time.monotonic()
                notify("write-started", change.provider, {})
                in_flight[pool.submit(task, change)] = change.provider
            if stop.is_set():
                for change in queue:
                    outcomes[change.provider] = Outcome(change.provider, "not-attempted", note="interrupted before write")
                queue = []
            if not in_flight:
                continue
            done, _ = cf.wait(list(in_flight), timeout=0.1, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                name = in_flight.pop(fut)
                outcomes[name] = fut.result()
                notify("write-finished", name, outcomes[name].to_dict())
    return [outcomes[c.provider] for c in changes]


@dataclasses.dataclass
class Restoration:
    provider: str
    outcome: str  # restored | already-at-previous-value | changed-by-another-writer | provider-deleted | failed
    error: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def restore(
    kube: Kube, namespace: str, written: Sequence[tuple[Change, int]], *, journal: Journal | None, notify: Notify,
    concurrency: int = 4,
) -> list[Restoration]:
    """Put back what this run changed, only where nobody changed it since. Best effort, per provider."""

    def one(item: tuple[Change, int]) -> Restoration:
        change, written_generation = item
        try:
            for attempt in _retrying_conflicts():
                with attempt:
                    try:
                        current = kube.get(PROVIDERS, namespace, change.provider)
                    except NotFound:
                        current = None
                    decision = restore_decision(change, written_generation=written_generation, current=current)
                    if decision is not RestoreDecision.RESTORE:
                        return Restoration(change.provider, decision.value)
                    rv = current["metadata"]["resourceVersion"]
                    kube.merge_patch(PROVIDERS, namespace, change.provider, restore_patch(change, resource_version=rv))
            return Restoration(change.provider, "restored")
        except KubeError as exc:
            return Restoration(change.provider, "failed", error=str(exc))

    with cf.ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="restore") as pool:
        results = list(pool.map(one, written))
    for r in results:
        if journal is not None:
            journal.record_restore(r.provider, r.outcome)
        notify("restored", r.provider, r.to_dict())
    return results
