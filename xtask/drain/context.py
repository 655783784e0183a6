"""The one context the phases of a drain run share (kind's ``ActionContext``): the request, the
cluster, the pool, the progress stream, and the identity of the run. Made once by
:func:`xtask.drain.run.run_drain`; a phase reads it and returns its result, never a side dict.

Must not: hold results (they are returned by the phases and kept in
:class:`xtask.drain.results.RunResults`, through its one fold).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import datetime as dt
import functools
import time
from typing import Any

from agn.kube import Kube
from agn.names import label_problem
from agn.yamltext import show
from xtask.drain.core.changes import Change, drain_patch
from xtask.drain.core.holds import HoldAsk, hold_key, hold_value, rfc3339
from xtask.drain.core.journal_records import JournalReplay
from xtask.drain.core.progress import Progress, Said
from xtask.drain.core.request import DrainRequest, actor
from xtask.drain.edges.journal import new_operation_id, read_journal
from xtask.drain.edges.kube_events import DrainEvents
from xtask.errors import XtaskError
from xtask.record import Record


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class RunContext(Record):
    """Who runs what, where; the same for every phase of one run."""

    req: DrainRequest
    kube: Kube
    namespace: str
    pool: cf.Executor
    progress: Progress
    events: DrainEvents
    operation: str  # the run's id: new, or the resumed journal's
    actor: str  # user@host
    owner: str  # the caller's Kubernetes username (a SelfSubjectReview): it owns the caller's hold
    started_at: dt.datetime  # on the API server's clock (its Date header when the run began)
    resumed: JournalReplay | None  # --resume: the journal of the drain in waves to continue
    # The API server's clock minus this host's, read with started_at: a write's server time is
    # this host's clock plus it (a slow start's startTime is the moment of its write).
    server_offset: float = 0.0

    @property
    def holder(self) -> str:
        return self.req.hold_holder

    @functools.cached_property
    def hold(self) -> str:
        """The hold this run writes (drain) for :attr:`holder`."""
        return hold_value(
            holder=self.holder,
            reason=self.req.reason,
            ticket=self.req.ticket,
            since=self.started_at,
            expires_in=self.req.expires_in,
            operation=self.operation,
            budget_override=self.req.override_budget,
        )

    @functools.cached_property
    def hold_ask(self) -> HoldAsk | None:
        """What a drain asks of a hold the caller already has (a re-run updates it with the flags
        given: ``--reason``, ``--holder``, ``--ticket``, ``--expires-in`` from this run's start)."""
        req = self.req
        if not req.drain:
            return None
        expires = rfc3339(self.started_at + dt.timedelta(seconds=req.expires_in)) if req.expires_in else None
        return HoldAsk(
            operation=self.operation,
            holder=req.holder,
            reason=req.reason or None,
            ticket=req.ticket,
            expires_at=expires,
        )

    def patch_for(self, change: Change) -> dict[str, Any]:
        timed = change.slow_start is not None or change.session_deadline is not None  # written at the server's now
        return drain_patch(
            change,
            operation=self.operation,
            actor=self.actor,
            at=self.at_text,
            reason=self.req.reason,
            hold=self.hold,
            owner=self.owner,
            now=self.server_now_text() if timed else None,
        )

    def server_now_text(self) -> str:
        """The API server's time now, RFC 3339 whole seconds (as ``at_text``)."""
        return dt.datetime.fromtimestamp(int(time.time() + self.server_offset), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    @functools.cached_property
    def at_text(self) -> str:
        return self.started_at.strftime("%Y-%m-%dT%H:%M:%SZ")

    @property
    def hold_key(self) -> str:
        """The caller's hold: derived from its identity, never from ``--holder``."""
        return hold_key(self.owner)

    def say(self, text: str) -> None:
        self.progress(Said(text))


def namespace_of(req: DrainRequest, kube: Kube) -> str:
    """The namespace the run works in: ``--namespace``, else the context's (checked: it is a name)."""
    namespace = req.namespace or kube.namespace
    problem = label_problem(namespace)
    if problem:  # --namespace is checked by the CLI; this one comes from the kubeconfig's context
        raise XtaskError(
            f"the namespace {show(namespace)} of context {kube.context!r} is not a namespace name: it {problem}",
            hint="fix the context's namespace, or pass --namespace",
        )
    return namespace


def open_context(req: DrainRequest, kube: Kube, namespace: str, pool: cf.Executor, progress: Progress) -> RunContext:
    """The run's context: its operation id (a resumed run's own), who runs it, its Events."""
    # --resume: the journal of the drain in waves to continue; its operation id is this run's.
    resumed = read_journal(req.resume) if req.resume else None
    operation = resumed.operation if resumed is not None else new_operation_id()
    who = actor()
    # The caller's identity owns its hold; the hold's times are on the API server's clock.
    owner, server_time = kube.who_am_i()
    events = DrainEvents(
        kube,
        namespace,
        operation=operation,
        actor=who,
        reason=req.reason,
        warn=lambda text: progress(Said(text)),
        workers=req.concurrency,
        budget_override=req.override_budget,
    )
    return RunContext(
        req=req,
        kube=kube,
        namespace=namespace,
        pool=pool,
        progress=progress,
        events=events,
        operation=operation,
        actor=who,
        owner=owner,
        started_at=dt.datetime.fromtimestamp(server_time, dt.UTC),
        resumed=resumed,
        server_offset=server_time + 0.5 - time.time(),  # Date has whole seconds: its middle
    )
