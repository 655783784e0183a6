"""The one restore path: put back what a drain run changed, only where nobody changed it since.

``provider-drain`` calls :func:`restore_written` when a write fails or a signal lands, with
the journal it is writing; ``drain-restore JOURNAL`` calls :func:`restore_journal`, which reads
the journal of an interrupted or crashed run and calls :func:`restore_written` the same way.
Either way each provider gets one :class:`~xtask.drain.core.states.Restoration`, the journal
records every outcome and then the run's state (``restored``, or ``needs-inspection`` when
some provider was not restored OK: :func:`xtask.drain.core.states.restored_ok`), and the Events the
outcomes call for are returned for the caller to record once its own writes are done.

This module must not decide exit codes of ``provider-drain`` (``xtask.drain.report`` does) nor
print anything: it returns data.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from agn.kube import Kube
from xtask.drain.core.changes import Change
from xtask.drain.core.progress import Progress, quiet
from xtask.drain.core.request import FIELD_MANAGER, RestoreRequest, actor
from xtask.drain.core.states import Restoration, restored_ok
from xtask.drain.edges import fanout
from xtask.drain.edges.journal import Journal, read_journal
from xtask.drain.edges.kube_events import DrainEvents, Fact, restoration_facts
from xtask.drain.edges.preflight import journal_context, require_namespace
from xtask.drain.record import RunRecord
from xtask.errors import ExitCode
from xtask.record import Record
from xtask.reports import DRAIN_RESTORE, envelope, exit_status


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Restored(Record):
    """One restoration per provider, and the Events they call for."""

    restorations: list[Restoration]
    facts: list[Fact]

    @property
    def ok(self) -> bool:
        return all(restored_ok(r.outcome) for r in self.restorations)

    def to_dicts(self) -> list[dict]:
        return [r.to_dict() for r in self.restorations]


def restore_written(
    kube: Kube,
    namespace: str,
    written: Sequence[tuple[Change, int]],
    *,
    operation: str,
    pool: cf.Executor,
    record: RunRecord,
    progress: Progress,
    dry_run: bool = False,
) -> Restored:
    """Put back ``written`` (each change with the generation our write produced, or would have),
    then record whether the run is restored. With ``dry_run`` (and a record without a journal)
    every decision is made as for real and nothing is written."""
    restorer = fanout.RestoreFanOut(
        kube=kube,
        namespace=namespace,
        operation=operation,
        pool=pool,
        journal=record.journal,
        progress=progress,
        dry_run=dry_run,
    )
    results = restorer.restore(written)
    record.restored(r.outcome for r in results)
    previous = {change.provider: change.previous for change, _ in written}
    return Restored(results, restoration_facts(results, previous=previous))


@dataclasses.dataclass
class RestoreReport:
    """What ``drain-restore`` did (schema: ``schemas/drain-restore-report.schema.json``)."""

    journal: Path
    operation: str
    dry_run: bool
    restored: Restored
    events: dict[str, object]  # Kubernetes Events recorded: recorded, notRecorded

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.restored.ok else ExitCode.NEEDS_INSPECTION

    def to_dict(self) -> dict:
        return envelope(
            DRAIN_RESTORE,
            {
                "journal": str(self.journal),
                "operation": self.operation,
                "dryRun": self.dry_run,
                "restorations": self.restored.to_dicts(),
                "events": self.events,
                "exit": exit_status(self.exit_code),
            },
        )


def restore_journal(req: RestoreRequest, *, warn: Callable[[str], None]) -> RestoreReport:
    """Undo what the run of ``req.journal`` changed; ``warn`` hears about Events not recorded."""
    # Everything is checked before the journal is opened for writing (opening may trim a torn
    # last line) and before any write to the API: the journal's content, the kubeconfig and
    # context, and that the journal's namespace exists in that cluster.
    state = read_journal(req.journal)
    recorded_context = journal_context(state, req.journal)
    kube = Kube.from_kubeconfig(
        kubeconfig=req.kubeconfig,
        context=req.context or recorded_context,
        field_manager=FIELD_MANAGER,
        pool_size=req.concurrency + 2,
    )
    journal = None
    events = DrainEvents(
        kube,
        state.namespace,
        operation=state.operation,
        actor=actor(),
        reason=state.reason,
        warn=warn,
        workers=req.concurrency,  # after the restoration, on its idle connections
    )
    try:
        require_namespace(kube, state.namespace, journal=req.journal, recorded_context=recorded_context)
        # A dry run never opens the journal for writing; the real run appends to it.
        if not req.dry_run:
            journal = Journal.open(req.journal)
            state = journal.state
        with cf.ThreadPoolExecutor(max_workers=req.concurrency, thread_name_prefix="restore") as pool:
            restored = restore_written(
                kube,
                state.namespace,
                state.to_restore(),
                operation=state.operation,
                pool=pool,
                record=RunRecord(journal),
                progress=quiet,
                dry_run=req.dry_run,
            )
        if not req.dry_run:
            events.record(restored.facts)
    finally:
        not_recorded = events.close()
        kube.close()
        if journal is not None:
            journal.close()
    return RestoreReport(
        req.journal,
        state.operation,
        req.dry_run,
        restored,
        {"recorded": events.recorded, "notRecorded": not_recorded},
    )
