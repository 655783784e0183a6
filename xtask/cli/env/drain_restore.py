"""``xtask env drain-restore JOURNAL``: undo what an interrupted or crashed drain run changed."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from agn.kube import Kube
from xtask.cli.output import emit_json
from xtask.drain import apply as fanout
from xtask.drain.journal import Journal
from xtask.drain.run import FIELD_MANAGER
from xtask.errors import ExitCode, XtaskError


@click.command(name="drain-restore")
@click.argument("journal_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="JOURNAL")
@click.option("--context", help="Kube context (default: the one recorded in the journal).")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="Kubeconfig file.")
@click.option("--dry-run", is_flag=True, help="Show what would be restored; write nothing.")
@click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True)
def drain_restore(journal_path: Path, context, kubeconfig, dry_run: bool, output: str) -> None:
    """Put back every provider a provider-drain run changed, where nobody changed it since.

    Exit 0 when everything is restored (or nothing needed it), 5 when some provider was
    changed by another writer or could not be restored.
    """
    try:
        journal = Journal.load(journal_path)
    except (OSError, ValueError, KeyError) as exc:
        raise XtaskError(f"{journal_path}: not a readable drain journal: {exc}") from exc
    written = journal.written()
    ctx = context or journal.data.get("context")
    namespace = journal.data["namespace"]
    if dry_run:
        data = {"journal": str(journal_path), "wouldRestore": [c.provider for c, _ in written]}
        if output == "json":
            emit_json(data)
        else:
            print(f"would restore: {', '.join(data['wouldRestore']) or 'nothing'}")
        return
    kube = Kube.from_kubeconfig(kubeconfig=kubeconfig, context=ctx, field_manager=FIELD_MANAGER)
    try:
        results = fanout.restore(kube, namespace, written, journal=journal, notify=lambda *a: None)
    finally:
        kube.close()
    bad = [r for r in results if r.outcome not in ("restored", "already-at-previous-value")]
    journal.set_state("restored" if not bad else "needs-inspection")
    if output == "json":
        emit_json({"journal": str(journal_path), "restorations": [r.to_dict() for r in results],
                   "exit": int(ExitCode.NEEDS_INSPECTION if bad else ExitCode.OK)})
    else:
        for r in results:
            print(f"  {r.provider}: {r.outcome}{': ' + r.error if r.error else ''}")
        print("nothing to restore" if not results else ("restored" if not bad else "some providers need inspection"))
    sys.stdout.flush()
    if bad:
        raise click.exceptions.Exit(int(ExitCode.NEEDS_INSPECTION))
