"""Kubernetes Events for what a drain run (or ``drain-restore``) did to each provider.

One Event per provider per fact, ``regarding`` the InferenceProvider, so ``kubectl describe
inferenceprovider NAME`` and ``kubectl get events`` show the history next to the object:

| reason | type | when |
| --- | --- | --- |
| ``ProviderDrained`` / ``ProviderUndrained`` | Normal | this run changed the provider |
| ``DrainFailed`` / ``UndrainFailed`` | Warning | this run's write was refused (the API's reason in the note) |
| ``DrainRestored`` | Normal | a run, or ``drain-restore``, put the provider back |
| ``DrainRestoreFailed`` | Warning | it could not (changed by another writer since, or the write failed) |

The note carries ``--reason``, ``--override-budget`` (on ``ProviderDrained``), the operation id and who (``user@host``, as the
``agn.dev/drain-by`` annotation records it, plus the kube context and its user).

Events are a trail, not part of the operation: they are sent once the provider writes (and
any restoration) are done — while the run reads back or waits for convergence — by a pool of
their own as wide as the run's ``--concurrency`` (the write pool is idle by then, so they
reuse its HTTP connections), each request with a timeout; the end of the run waits for them
at most :data:`CLOSE_TIMEOUT`. A failure never fails the run: the first one is reported
once, as a warning, when the run ends. The facts are
derived purely (:func:`outcome_facts`, :func:`restoration_facts`, :func:`note`); only
:class:`DrainEvents` does I/O.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agn.events import NORMAL, WARNING, Regarding, Reporter, event_body, event_name
from agn.kube import PROVIDERS, Conflict, Kube, NotFound
from xtask.drain.core.states import Outcome, Restoration, RestoreOutcome, WriteOutcome
from xtask.record import Record

CONTROLLER = "agn.dev/provider-drain"
DRAINED = "ProviderDrained"
UNDRAINED = "ProviderUndrained"
DRAIN_FAILED = "DrainFailed"
UNDRAIN_FAILED = "UndrainFailed"
RESTORED = "DrainRestored"
RESTORE_FAILED = "DrainRestoreFailed"
REQUEST_TIMEOUT = 5.0  # seconds, per Event
CLOSE_TIMEOUT = 5.0  # seconds the end of a run waits for Events still in flight


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Fact(Record):
    """One thing to record about one provider."""

    provider: str
    reason: str
    action: str  # Drain | Undrain | Restore
    type: str  # Normal | Warning
    detail: str = ""  # what went wrong, or what the provider was put back to


def outcome_facts(outcomes: Iterable[Outcome], *, drain: bool) -> list[Fact]:
    """The Events a fan-out's outcomes call for: one per provider written or refused.

    Providers already in the requested state, and writes never attempted, changed nothing.
    """
    action = "Drain" if drain else "Undrain"
    out = []
    for o in outcomes:
        if o.outcome == WriteOutcome.CHANGED:
            out.append(Fact(o.provider, DRAINED if drain else UNDRAINED, action, NORMAL))
        elif o.outcome == WriteOutcome.FAILED:
            out.append(Fact(o.provider, DRAIN_FAILED if drain else UNDRAIN_FAILED, action, WARNING, o.error or ""))
    return out


def restoration_facts(restorations: Iterable[Restoration], *, previous: Mapping[str, bool | None]) -> list[Fact]:
    """The Events restorations call for: put back, or could not be put back.

    ``already-at-previous-value`` (the write never landed) and ``provider-deleted`` changed
    nothing on an existing object; ``would-restore`` is a dry run.
    """
    out = []
    for r in restorations:
        name, outcome = r.provider, r.outcome
        if outcome == RestoreOutcome.RESTORED:
            value = previous.get(name)
            shown = "omitted" if value is None else str(value).lower()
            out.append(Fact(name, RESTORED, "Restore", NORMAL, f"spec.trafficPolicy.drain back to {shown}"))
        elif outcome in (RestoreOutcome.OTHER_WRITER, RestoreOutcome.FAILED):
            detail = r.error or "changed by another writer since; not restored"
            out.append(Fact(name, RESTORE_FAILED, "Restore", WARNING, detail))
    return out


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class Byline(Record):
    """Who ran the operation an Event's note names, and why: the operation id, the actor
    (user@host), the kube user and context, ``--reason``, and what ``--override-budget`` or
    ``--force`` set aside (said on ProviderDrained only)."""

    operation: str
    actor: str
    context: str | None
    user: str | None
    reason: str | None
    budget_override: str | None = None
    capacity_override: str | None = None


def note(fact: Fact, byline: Byline) -> str:
    """The Event's note: what happened, why (``--reason``), the operation and who."""
    what = {
        DRAINED: "drained",
        UNDRAINED: "undrained",
        DRAIN_FAILED: "drain failed",
        UNDRAIN_FAILED: "undrain failed",
        RESTORED: "drain restored",
        RESTORE_FAILED: "drain not restored",
    }.get(fact.reason, fact.reason)
    b = byline
    parts = [f"{what}: {fact.detail}" if fact.detail else what]
    if b.reason:
        parts.append(f"reason: {b.reason}")
    if b.budget_override and fact.reason == DRAINED:
        parts.append(f"disruption budget overridden: {b.budget_override}")
    if b.capacity_override and fact.reason == DRAINED:
        parts.append(f"capacity guard overridden (--force): {b.capacity_override}")
    via = ", ".join(
        x for x in (f"kube user {b.user}" if b.user else "", f"context {b.context}" if b.context else "") if x
    )
    parts.append(f"operation {b.operation} by {b.actor}" + (f" ({via})" if via else ""))
    return "; ".join(parts)


class DrainEvents:
    """Records :class:`Fact` s as Events on the providers, off the run's critical path.

    ``record`` only queues; ``close`` waits (bounded) for what is in flight and reports the
    first failure once through ``warn``. Nothing here raises into the run.
    """

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        *,
        operation: str,
        actor: str,
        reason: str | None,
        warn: Callable[[str], None],
        workers: int = 8,
        budget_override: str | None = None,
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._operation = operation
        self._actor = actor
        self._reason = reason
        self._budget_override = budget_override  # --override-budget: said on ProviderDrained
        self._warn = warn
        self._clock: Callable[[], float] = time.time
        self._workers = workers
        self._uids: dict[str, str] = {}
        self._pool: cf.ThreadPoolExecutor | None = None
        self._futures: list[cf.Future] = []
        self._lock = threading.Lock()
        self._failures: list[str] = []
        self.recorded = 0

    def know(self, providers: Iterable[Mapping[str, Any]]) -> None:
        """Remember the providers' uids (from a LIST the run made anyway), so no Event needs a GET."""
        for p in providers:
            meta = p.get("metadata") or {}
            if meta.get("name") and meta.get("uid"):
                self._uids[meta["name"]] = meta["uid"]

    def record(self, facts: Sequence[Fact], *, at: float | None = None, capacity_override: str | None = None) -> None:
        """Queue Events for ``facts``, which happened at ``at`` (default: now; their ``eventTime``);
        ``capacity_override``: what ``--force`` set aside of the capacity guard (said on ProviderDrained)."""
        if not facts:
            return
        when = self._clock() if at is None else at
        if self._pool is None:
            self._pool = cf.ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="events")
        for fact in facts:
            self._futures.append(self._pool.submit(self._send, fact, when, capacity_override))

    def _byline(self, capacity_override: str | None) -> Byline:
        return Byline(
            operation=self._operation,
            actor=self._actor,
            context=self._kube.context,
            user=self._kube.user,
            reason=self._reason,
            budget_override=self._budget_override,
            capacity_override=capacity_override,
        )

    def _send(self, fact: Fact, at: float, capacity_override: str | None) -> None:
        try:
            uid = self._uids.get(fact.provider)
            if uid is None:
                try:
                    uid = self._kube.get(PROVIDERS, self._namespace, fact.provider, timeout=REQUEST_TIMEOUT)[
                        "metadata"
                    ].get("uid")
                except NotFound:
                    return  # deleted: there is nothing left to describe
            regarding = Regarding("InferenceProvider", fact.provider, self._namespace, uid=uid)
            body = event_body(
                name=event_name(fact.provider, self._operation, fact.reason),
                regarding=regarding,
                reason=fact.reason,
                action=fact.action,
                note=note(fact, self._byline(capacity_override)),
                type_=fact.type,
                reporter=Reporter(CONTROLLER, self._actor),
                at=at,
            )
            try:
                self._kube.create_event(self._namespace, body, timeout=REQUEST_TIMEOUT)
            except Conflict:
                pass  # this very fact was recorded before (a repeated drain-restore): one Event is enough
            with self._lock:
                self.recorded += 1
        except Exception as exc:  # noqa: BLE001 - an Event must never fail the drain
            with self._lock:
                self._failures.append(f"{fact.provider}: {exc}")

    def close(self, *, timeout: float = CLOSE_TIMEOUT) -> list[str]:
        """Wait up to ``timeout`` for the Events in flight; warn once if any was not recorded.

        Returns the failures (``provider: error``), for callers that report them.
        """
        if self._pool is None:
            return []
        done, pending = cf.wait(self._futures, timeout=timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            failures = list(self._failures)
        if pending:
            failures.append(f"{len(pending)} Event(s) still unsent after {timeout:.0f}s")
        if failures:
            lost = len(self._failures) + len(pending)
            self._warn(
                f"warning: could not record {lost} Kubernetes Event(s) about this run "
                f"(the drain itself is not affected): {failures[0]}"
            )
        return failures
