"""``xtask env drain-restore JOURNAL``: undo what an interrupted or crashed drain run changed."""

from __future__ import annotations

import concurrent.futures as cf
import sys
from pathlib import Path

import click

from agn.kube import Kube
from xtask.cli.output import emit_json, printable
from xtask.cli.params import NonEmptyPath
from xtask.drain import fanout
from xtask.drain.events import DrainEvents, restoration_facts
from xtask.drain.journal import Journal, read_journal
from xtask.drain.preflight import journal_context, require_namespace
from xtask.drain.run import FIELD_MANAGER, MAX_CONCURRENCY, actor
from xtask.drain.states import RunState, restored_ok
from xtask.errors import ExitCode
from xtask.reports import DRAIN_RESTORE, envelope, exit_status


@click.command(name="drain-restore")
@click.argument("journal_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="JOURNAL")
@click.option("--context", help="Kube context (default: the one recorded in the journal).")
@click.option(
    "--kubeconfig",
    type=NonEmptyPath(dir_okay=False),
    help="Kubeconfig file, alone (default: every file of $KUBECONFIG merged as kubectl does, else ~/.kube/config).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Decide as the real run would (read each provider, server-side dry-run "
    "each restoring patch) and show it; write nothing, not even to the journal.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, MAX_CONCURRENCY),
    metavar="N",
    default=8,
    show_default=True,
    help=f"Restore requests in flight at most (1-{MAX_CONCURRENCY}).",
)
@click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True)
def drain_restore(journal_path: Path, context, kubeconfig, dry_run: bool, concurrency: int, output: str) -> None:
    """Put back every provider a provider-drain run changed, where nobody changed it since.

    JOURNAL is the file a run printed (drain-<operation>.jsonl; the .json journals of
    earlier versions are read too). A write the journal shows as sent but not answered is
    treated as "may have been written" and decided from the provider itself. Exit 0 when
    everything is restored (or nothing needed it), 5 when some provider was changed by
    another writer or could not be restored.
    """
    # Everything is checked before the journal is opened for writing (opening may trim a torn
    # last line) and before any write to the API: the journal's content, the kubeconfig and
    # context, and that the journal's namespace exists in that cluster.
    state = read_journal(journal_path)
    recorded_context = journal_context(state, journal_path)
    kube = Kube.from_kubeconfig(
        kubeconfig=kubeconfig,
        context=context or recorded_context,
        field_manager=FIELD_MANAGER,
        pool_size=concurrency + 2,
    )
    journal = None
    events = DrainEvents(
        kube,
        state.namespace,
        operation=state.operation,
        actor=actor(),
        reason=state.reason,
        warn=lambda text: print(printable(text), file=sys.stderr, flush=True),
        workers=concurrency,  # after the restoration, on its idle connections
    )
    try:
        require_namespace(kube, state.namespace, journal=journal_path, recorded_context=recorded_context)
        # A dry run never opens the journal for writing; the real run appends to it.
        if not dry_run:
            journal = Journal.open(journal_path)
            state = journal.state
        written = state.to_restore()
        with cf.ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="restore") as pool:
            results = fanout.restore(
                kube,
                state.namespace,
                written,
                operation=state.operation,
                pool=pool,
                journal=journal,
                notify=lambda *a: None,
                dry_run=dry_run,
            )
        if not dry_run:
            previous = {change.provider: change.previous for change, _ in written}
            events.record(restoration_facts([r.to_dict() for r in results], previous=previous))
    except BaseException:
        if journal is not None:
            journal.close()
        raise
    finally:
        not_recorded = events.close()
        kube.close()
    bad = [r for r in results if not restored_ok(r.outcome)]
    if journal is not None:
        journal.set_state(RunState.after_restoring([r.outcome for r in results]))
        journal.close()
    code = ExitCode.NEEDS_INSPECTION if bad else ExitCode.OK
    if output == "json":
        emit_json(
            envelope(
                DRAIN_RESTORE,
                {
                    "journal": str(journal_path),
                    "operation": state.operation,
                    "dryRun": dry_run,
                    "restorations": [r.to_dict() for r in results],
                    "events": {"recorded": events.recorded, "notRecorded": not_recorded},
                    "exit": exit_status(code),
                },
            )
        )
    else:
        for r in results:
            print(printable(f"  {r.provider}: {r.outcome}{': ' + r.error if r.error else ''}"))
        if not results:
            print("nothing to restore")
        elif dry_run:
            print("dry run: nothing written" + ("; some providers need inspection" if bad else ""))
        else:
            print("restored" if not bad else "some providers need inspection")
    sys.stdout.flush()
    if bad:
        raise click.exceptions.Exit(int(code))
