"""``xtask env drain-restore JOURNAL``: undo what an interrupted or crashed drain run changed.

The flags become one :class:`~xtask.drain.core.request.RestoreRequest`; the restoration is
:func:`xtask.drain.restore.restore_journal`, the same path a failed ``provider-drain`` takes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from xtask.cli.complete import complete_context
from xtask.cli.env.options import output_option
from xtask.cli.formats import REPORT_FORMATS, emit_report
from xtask.cli.helptext import Example, HelpCommand
from xtask.cli.output import printable
from xtask.drain.core.defaults import MAX_CONCURRENCY
from xtask.drain.core.request import RestoreRequest
from xtask.drain.core.states import RestoreOutcome
from xtask.drain.restore import RestoreReport, restore_journal
from xtask.errors import ExitCode, exit_codes_epilog
from xtask.params import NonEmptyPath

EXAMPLES = (
    Example(
        "Show what undoing an interrupted run would put back (the journal path it printed); write nothing.",
        "~/.local/state/agn-xtask/journal/drain-OPERATION.jsonl --dry-run",
    ),
    Example("Undo it.", "~/.local/state/agn-xtask/journal/drain-OPERATION.jsonl"),
)
EXIT_CODES = {
    ExitCode.OK: "done: everything restored, or nothing needed it",
    ExitCode.ERROR: None,
    ExitCode.USAGE: None,
    ExitCode.NEEDS_INSPECTION: None,
    ExitCode.INTERRUPTED: "interrupted (SIGINT/SIGTERM): stopped part-way; run it again",
}


@click.command(name="drain-restore", cls=HelpCommand, examples=EXAMPLES, epilog=exit_codes_epilog(EXIT_CODES))
@click.argument("journal_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="JOURNAL")
@click.option(
    "--context", shell_complete=complete_context, help="Kube context (default: the one recorded in the journal)."
)
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
@output_option(names="each provider put back (with --dry-run: that would be), as inferenceprovider.agn.dev/NAME")
def drain_restore(
    journal_path: Path, context: str | None, kubeconfig: str | None, dry_run: bool, concurrency: int, output: str
) -> None:
    """Put back every provider a provider-drain run changed, where nobody changed it since.

    JOURNAL is the file a run printed (drain-<operation>.jsonl). A write the journal shows as sent but not answered is
    treated as "may have been written" and decided from the provider itself. Exit 0 when
    everything is restored (or nothing needed it), 5 when some provider was changed by
    another writer or could not be restored.
    """
    request = RestoreRequest(
        journal_path, context=context, kubeconfig=kubeconfig, dry_run=dry_run, concurrency=concurrency
    )
    report = restore_journal(request, warn=lambda text: print(printable(text), file=sys.stderr, flush=True))
    if output in REPORT_FORMATS:
        emit_report(report.to_dict(), output, restored_names(report))
    else:
        _print(report)
    sys.stdout.flush()
    if report.exit_code != ExitCode.OK:
        raise click.exceptions.Exit(int(report.exit_code))


def restored_names(report: RestoreReport) -> list[str]:
    """``-o name``: the providers restored (in a dry run: that would be), as kubectl names them."""
    from agn.resources import PROVIDERS

    put_back = (RestoreOutcome.RESTORED, RestoreOutcome.WOULD_RESTORE)
    return [PROVIDERS.kubectl_name(r.provider) for r in report.restored.restorations if r.outcome in put_back]


def _print(report: RestoreReport) -> None:
    results = report.restored.restorations
    for r in results:
        print(printable(f"  {r.provider}: {r.outcome}{': ' + r.error if r.error else ''}"))
    if not results:
        print("nothing to restore")
    elif report.dry_run:
        print("dry run: nothing written" + ("; some providers need inspection" if not report.restored.ok else ""))
    else:
        print("restored" if report.restored.ok else "some providers need inspection")
