"""``xtask env provider-drain``."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from xtask.cli.env.drain_view import PlainReporter, plain_final
from xtask.cli.env.options import namespace_type, object_name_type
from xtask.cli.output import emit_json, fancy, out_console, printable
from xtask.cli.params import FiniteFloat, NonEmptyPath
from xtask.drain.journal import journal_dir as default_journal_dir
from xtask.drain.preflight import usable_journal_dir
from xtask.drain.request import DEFAULT_IDLE_TIMEOUT, MAX_CONCURRENCY, DrainRequest
from xtask.drain.run import run_drain
from xtask.drain.selection import Selector
from xtask.errors import ExitCode, UsageError, exit_codes_epilog

EPILOG = exit_codes_epilog()


@click.command(name="provider-drain", epilog=EPILOG)
@click.option(
    "--context",
    metavar="CTX",
    help="Kube context (default: the kubeconfig's current context), e.g. local-example or kind-example.",
)
@click.option(
    "--kubeconfig",
    type=NonEmptyPath(dir_okay=False),
    help="Kubeconfig file, alone (default: every file of $KUBECONFIG merged as kubectl does, else ~/.kube/config).",
)
@click.option(
    "--provider", type=object_name_type("provider"), metavar="NAME", help="Select one InferenceProvider by name."
)
@click.option(
    "--gateway", metavar="GW", help="Select every InferenceProvider whose spec.providerGateway equals this, exactly."
)
@click.option("--undrain", is_flag=True, help="Clear the drain (the operator re-evaluates health and metrics).")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the selection and plan, check each patch with a server-side dry run; write nothing.",
)
@click.option(
    "--network",
    type=object_name_type("network"),
    metavar="NET",
    help="Network of the consumers to wait for (with --consumer).",
)
@click.option(
    "--consumer",
    "consumers",
    type=object_name_type("consumer"),
    metavar="NAME",
    multiple=True,
    help="Consumer that must serve the change (repeatable; with --network).",
)
@click.option(
    "--namespace", "-n", type=namespace_type, metavar="NS", help="Namespace (default: the context's namespace)."
)
@click.option(
    "--concurrency",
    type=int,
    metavar="N",
    default=8,
    show_default=True,
    help=f"Patch requests in flight at most (1-{MAX_CONCURRENCY}).",
)
@click.option(
    "--qps", type=FiniteFloat(min=0.1), metavar="QPS", help="Limit patch requests per second (default: no limit)."
)
@click.option(
    "--timeout",
    type=FiniteFloat(min=1),
    metavar="SECONDS",
    default=120.0,
    show_default=True,
    help="Seconds to wait for convergence.",
)
@click.option(
    "--wait-idle",
    is_flag=True,
    help="Drain only, with --network/--consumer: once the drain is serving, wait until every selected provider "
    "is idle (running 0 and waiting 0 in two consecutive fresh load readings of the operator; a missing, "
    "expired or incomplete reading is not idle).",
)
@click.option(
    "--idle-timeout",
    type=FiniteFloat(min=1),
    metavar="SECONDS",
    help=f"Seconds to wait for idle with --wait-idle (default: {DEFAULT_IDLE_TIMEOUT:.0f}); then exit 9, drain kept.",
)
@click.option(
    "--reason", metavar="TEXT", help="Why (recorded with who and when as annotations on each drained provider)."
)
@click.option(
    "--force",
    is_flag=True,
    help="Drain even if a named consumer's selection group would lose its last admitted provider.",
)
@click.option(
    "--journal-dir",
    type=NonEmptyPath(file_okay=False, path_type=Path),
    help="Where to write the operation journal (default: $AGN_XTASK_JOURNAL_DIR or ~/.local/state/agn-xtask/journal).",
)
@click.option(
    "--output",
    "-o",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="json: one final report on stdout for runbooks (progress goes to stderr).",
)
def provider_drain(
    context,
    kubeconfig,
    provider,
    gateway,
    undrain,
    dry_run,
    network,
    consumers,
    namespace,
    concurrency,
    qps,
    timeout,
    wait_idle,
    idle_timeout,
    reason,
    force,
    journal_dir,
    output,
) -> None:
    """Administratively drain (or --undrain) one provider or a whole providerGateway.

    Prints the sorted selection and the plan, checks every patch with a server-side dry
    run, then patches only spec.trafficPolicy.drain with bounded concurrency. Any failure
    restores what this run changed. Without --network/--consumer it reports the stored
    state; with them it waits until every consumer serves the change (two agreeing
    observations); with --wait-idle it then waits until every drained provider is idle.
    A journal file records every write so an interrupted run can be undone with
    `env drain-restore`.
    """
    if (provider is None) == (gateway is None):
        raise UsageError("exactly one of --provider or --gateway is required")
    request = DrainRequest(
        selector=Selector(provider=provider, gateway=gateway),
        drain=not undrain,
        context=context,
        kubeconfig=kubeconfig,
        namespace=namespace,
        dry_run=dry_run,
        network=network,
        consumers=tuple(consumers),
        concurrency=concurrency,
        qps=qps,
        timeout=timeout,
        wait_idle=wait_idle,
        idle_timeout=idle_timeout,
        reason=reason,
        force=force,
        journal_dir=journal_dir,
    )
    if not dry_run:
        # Before the first API request: a run that cannot keep a journal must not start writing.
        request = dataclasses.replace(request, journal_dir=usable_journal_dir(journal_dir or default_journal_dir()))
    live = output != "json" and fancy() and sys.stdout.isatty()
    if live:
        from xtask.cli.env.drain_live import RichReporter, render_final

        reporter: PlainReporter = RichReporter(out_console())
    else:
        reporter = PlainReporter(sys.stderr if output == "json" else sys.stdout)
    try:
        report = run_drain(request, reporter=reporter)
    finally:
        if live:
            reporter.close()
    if output == "json":
        emit_json(report.to_dict())
    else:
        if live:
            render_final(report, out_console())
        else:
            plain_final(report, sys.stdout)
        if report.journal and report.exit_code not in (ExitCode.OK,):
            print(printable(f"journal: {report.journal}"), file=sys.stdout)
        print(
            ("ok: " if report.exit_code == ExitCode.OK else f"exit {int(report.exit_code)}: ")
            + printable(report.summary),
            flush=True,
        )
    sys.stdout.flush()
    if report.exit_code != ExitCode.OK:
        raise click.exceptions.Exit(int(report.exit_code))
