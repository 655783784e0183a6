"""The fan-out: server-side dry runs, bounded concurrent patches, and best-effort restoration.

A gateway-wide change is not a transaction: every provider gets its own outcome. At most
``concurrency`` requests are in flight; a stop event (set by a signal) stops new writes
while in-flight ones finish. A 409 (the object changed since we read it) is answered by
re-reading and re-planning, never by overwriting.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from agn.kube import PROVIDERS, Conflict, Kube, KubeError, NotFound
from agn.objects import version_of
from xtask.drain.core.changes import Change, RestoreDecision, change_note, restore_decision, restore_patch
from xtask.drain.core.changes import replan as replan_change
from xtask.drain.core.progress import Progress, WriteFinished, WriteStarted
from xtask.drain.core.states import Outcome, Restoration, RestoreOutcome, WriteOutcome
from xtask.drain.edges.journal import Journal
from xtask.record import Record

if TYPE_CHECKING:
    from tenacity import Retrying

PatchFor = Callable[[Change], dict]


def _retrying_conflicts() -> Retrying:
    # Loaded only when a write meets a conflict (another writer since the read): rarely.
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

    return Retrying(
        retry=retry_if_exception_type(Conflict),
        stop=stop_after_attempt(5),
        wait=wait_exponential(multiplier=0.02, max=0.5),
        reraise=True,
    )


def _failed(name: str, exc: KubeError, *, outcome: WriteOutcome = WriteOutcome.FAILED) -> Outcome:
    return Outcome(name, outcome, error=str(exc), reason=exc.reason or None, status=exc.status or None)


OnReplan = Callable[[Change], None]


def _write_one(
    kube: Kube,
    namespace: str,
    change: Change,
    patch_for: PatchFor,
    *,
    dry_run: bool,
    on_replan: OnReplan | None = None,
) -> tuple[Outcome, Change]:
    """One conditional PATCH. The common case is one request; only a 409 builds a retry loop."""
    done = WriteOutcome.DRY_RUN_OK if dry_run else WriteOutcome.CHANGED
    try:
        try:
            obj = kube.merge_patch(PROVIDERS, namespace, change.provider, patch_for(change), dry_run=dry_run)
            return _written(change, done, obj, dry_run=dry_run), change
        except Conflict:
            pass
        current = change
        for attempt in _retrying_conflicts():
            with attempt:
                # Someone wrote the object since we read it: decide again from what is there now.
                current = replan_change(change, kube.get(PROVIDERS, namespace, change.provider))
                if current.already:
                    note = change_note(current) or "already in requested state (set by another writer)"
                    return Outcome(change.provider, WriteOutcome.UNCHANGED, note=note), current
                if on_replan is not None:
                    on_replan(current)
                obj = kube.merge_patch(PROVIDERS, namespace, change.provider, patch_for(current), dry_run=dry_run)
        return _written(current, done, obj, dry_run=dry_run), current
    except KubeError as exc:
        return _failed(
            change.provider, exc, outcome=WriteOutcome.DRY_RUN_REJECTED if dry_run else WriteOutcome.FAILED
        ), change


def _written(change: Change, done: WriteOutcome, obj: dict, *, dry_run: bool) -> Outcome:
    """A write (or its dry run) that succeeded; a re-run's hold update says what it changed."""
    update = tuple(c.to_dict() for c in change.hold_update) or None
    note = change_note(change, planned=dry_run)
    version = None if dry_run else version_of(obj)
    return Outcome(
        change.provider, done, generation=_generation(obj), note=note, hold_update=update, resource_version=version
    )


def _generation(obj: dict) -> int:
    return int(obj.get("metadata", {}).get("generation") or 0)


def server_dry_run(
    kube: Kube, namespace: str, changes: Sequence[Change], patch_for: PatchFor, *, pool: cf.Executor
) -> list[Outcome]:
    """Send every planned patch with ``dryRun=All``: admission, validation and RBAC answer now."""
    todo = [c for c in changes if not c.already]
    return list(pool.map(lambda c: _write_one(kube, namespace, c, patch_for, dry_run=True)[0], todo))


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class FanOut(Record):
    """How a run writes: where, what each provider's patch is, and how many at once.

    ``replan`` false (a reviewed plan): a 409 is the provider's failed outcome, not a new plan.
    """

    kube: Kube
    namespace: str
    patch_for: PatchFor
    pool: cf.Executor
    concurrency: int
    qps: float | None = None
    journal: Journal | None = None
    progress: Progress
    replan: bool = True

    def write(self, changes: Sequence[Change], *, stop: threading.Event) -> list[Outcome]:
        """Apply ``changes`` with at most ``concurrency`` requests in flight; one outcome per provider.

        Write-ahead: the intents of every request about to be sent are appended to the journal
        and synced once (group commit) before any of them is sent. Outcomes are appended as they
        arrive and made durable by the next batch's sync and by a final one before returning.
        """
        outcomes = {
            c.provider: Outcome(c.provider, WriteOutcome.UNCHANGED, note=change_note(c) or "already in requested state")
            for c in changes
            if c.already
        }
        queue = collections.deque(c for c in changes if not c.already)
        in_flight: dict[cf.Future, str] = {}
        pace = _Pace(self.qps)
        try:
            while queue or in_flight:
                self._send(pace.batch(queue, self.concurrency - len(in_flight), stop), in_flight)
                if stop.is_set():
                    for change in queue:
                        outcomes[change.provider] = Outcome(
                            change.provider, WriteOutcome.NOT_ATTEMPTED, note="interrupted before write"
                        )
                    queue.clear()
                if in_flight:
                    finished, _ = cf.wait(list(in_flight), timeout=0.1, return_when=cf.FIRST_COMPLETED)
                    for fut in finished:
                        outcome = fut.result()
                        outcomes[in_flight.pop(fut)] = outcome
                        self.progress(WriteFinished(outcome))
        finally:
            if self.journal is not None:
                self.journal.sync()
        return [outcomes[c.provider] for c in changes]

    def _send(self, batch: list[Change], in_flight: dict[cf.Future, str]) -> None:
        if not batch:
            return
        if self.journal is not None:
            self.journal.intents(batch)
        for change in batch:
            self.progress(WriteStarted(change.provider))
            in_flight[self.pool.submit(self._one, change)] = change.provider

    def _replanned(self, change: Change) -> None:
        if not self.replan:
            raise Conflict(
                f"provider {change.provider} changed since the plan was made; a plan is applied exactly, "
                "never planned again",
                status=409,
                reason="Conflict",
            )
        if self.journal is not None:
            self.journal.intents([change], replanned=True)

    def _one(self, change: Change) -> Outcome:
        outcome, final = _write_one(
            self.kube, self.namespace, change, self.patch_for, dry_run=False, on_replan=self._replanned
        )
        if self.journal is not None:
            if outcome.outcome is WriteOutcome.CHANGED:
                self.journal.done(final.provider, generation=outcome.generation or 0)
            elif outcome.outcome is WriteOutcome.FAILED:
                self.journal.failed(final.provider, status=outcome.status or 0)
        return outcome


class _Pace:
    """``--qps``: how many of the queued changes may be sent now (all that fit, unpaced)."""

    def __init__(self, qps: float | None) -> None:
        self.min_interval = 1.0 / qps if qps else 0.0
        self.last_submit = 0.0

    def batch(self, queue: collections.deque[Change], room: int, stop: threading.Event) -> list[Change]:
        batch: list[Change] = []
        while queue and len(batch) < room and not stop.is_set():
            if self.min_interval:
                wait = self.last_submit + self.min_interval - time.monotonic()
                if wait > 0 and (batch or stop.wait(wait)):
                    break  # send what is batched now; pace the rest (or stop on a signal)
                self.last_submit = time.monotonic()
            batch.append(queue.popleft())
        return batch


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class RestoreFanOut(Record):
    """How a run puts back what it wrote: where, as which operation (only what ``operation``
    changed, and nobody changed since), on which pool, into which journal. With ``dry_run``
    every decision is made from the live objects exactly as for real and each restoring patch
    is sent with ``dryRun=All``; ``restored`` then reads ``would-restore``."""

    kube: Kube
    namespace: str
    operation: str
    pool: cf.Executor
    journal: Journal | None = None
    progress: Progress
    dry_run: bool = False

    def restore(self, written: Sequence[tuple[Change, int]]) -> list[Restoration]:
        """Put back ``written`` (each change with the generation our write produced). Best effort, per provider."""
        try:
            return list(self.pool.map(self._one, written))
        finally:
            if self.journal is not None:
                self.journal.sync()

    def _one(self, item: tuple[Change, int]) -> Restoration:
        change, written_generation = item
        result = _restore_one(
            self.kube,
            self.namespace,
            change,
            operation=self.operation,
            written_generation=written_generation,
            dry_run=self.dry_run,
        )
        if self.journal is not None:
            self.journal.restored(result.provider, result.outcome)
        from xtask.drain.core.progress_phases import RestoreFinished  # only a restoration says it

        self.progress(RestoreFinished(result))
        return result


def _restore_one(
    kube: Kube,
    namespace: str,
    change: Change,
    *,
    operation: str,
    written_generation: int,
    dry_run: bool,
) -> Restoration:
    try:
        for attempt in _retrying_conflicts():
            with attempt:
                try:
                    current = kube.get(PROVIDERS, namespace, change.provider)
                except NotFound:
                    current = None
                decision = restore_decision(
                    change, operation=operation, written_generation=written_generation, current=current
                )
                if decision not in (RestoreDecision.RESTORE, RestoreDecision.RESTORE_HOLDS):
                    return Restoration(change.provider, RestoreOutcome(decision.value))
                assert current is not None  # RESTORE is only decided for an object that exists
                rv = current["metadata"]["resourceVersion"]
                patch = restore_patch(change, resource_version=rv, flag=decision is RestoreDecision.RESTORE)
                kube.merge_patch(PROVIDERS, namespace, change.provider, patch, dry_run=dry_run)
        return Restoration(change.provider, RestoreOutcome.WOULD_RESTORE if dry_run else RestoreOutcome.RESTORED)
    except KubeError as exc:
        return Restoration(change.provider, RestoreOutcome.FAILED, error=str(exc))
