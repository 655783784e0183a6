"""``xtask env provider-drain``: its flags become one :class:`~xtask.drain.core.request.DrainRequest`
(:func:`drain_request`, applied by the :func:`request_options` decorator), one call runs it
(:func:`xtask.drain.run.run_drain`), and the report is shown.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from xtask.cli.env import VERBOSE_HELP
from xtask.cli.env.drain_options import option_groups
from xtask.cli.env.gate_options import gate_values
from xtask.cli.env.option_groups import GroupedCommand, grouped_options
from xtask.cli.env.options import output_option
from xtask.cli.formats import REPORT_FORMATS, TABLE, emit_report
from xtask.cli.helptext import Example
from xtask.cli.output import err_console, fancy, out_console, printable
from xtask.errors import ExitCode, RefusedError, UsageError, exit_codes_epilog

if TYPE_CHECKING:  # the run's modules load once click has parsed the flags (_run, drain_request)
    from xtask.drain.core.request import DrainRequest
    from xtask.drain.report import Report

EPILOG = exit_codes_epilog()


def drain_request(*, plan: Path | None = None, **flags: Any) -> DrainRequest:
    """The run the flags ask for: a usage error when they contradict one another, and (unless a
    dry run) an error when the journal folder cannot hold a journal. With ``--plan``, the plan
    gives the selection, the operation and the pacing (read and checked here, before any API
    request): a flag it fixes given with it is a usage error naming the flag."""
    if plan is None:
        return _request(**flags)
    from xtask.drain.core.plandoc import PLANNED_FLAGS

    given = [f.flag for f in PLANNED_FLAGS if f.given(flags)]
    if given:
        raise UsageError(
            f"--plan applies the plan's selection, operation and pacing: do not give {', '.join(given)} with it",
            hint="make a new plan with --plan-out to change them",
        )
    if flags.get("plan_out") is not None:
        raise UsageError("--plan-out makes a plan and --plan applies one: give one of them")
    from xtask.drain.edges.planfile import load_plan  # plans load when a flag names one

    loaded = load_plan(plan)
    namespace = flags.pop("namespace", None)
    if namespace is not None and namespace != loaded.namespace:
        raise RefusedError(f"plan {plan} is for namespace {loaded.namespace}, not {namespace}")
    flags.update(loaded.request_fields())
    return _request(**flags, namespace=loaded.namespace, plan=loaded)


# Flags whose default the request holds: the command line leaves them None when not given, so
# that --plan can tell a flag given from one at its default.
_REQUEST_DEFAULTS = ("concurrency", "timeout")


def _request(
    *,
    provider: str | None,
    gateway: str | None,
    undrain: bool,
    consumers: tuple[str, ...],
    dry_run: bool,
    journal_dir: Path | None,
    **flags: Any,
) -> DrainRequest:
    from xtask.drain.core.request import DrainRequest
    from xtask.drain.core.selection import Selector

    for key in _REQUEST_DEFAULTS:  # not given (or not recorded by the plan): the request's default
        if flags.get(key) is None:
            flags.pop(key, None)
    if flags.get("plan_out") is not None:
        from xtask.drain.edges.planfile import plan_format

        plan_format(flags["plan_out"])
        folder = flags["plan_out"].parent
        if not folder.is_dir():
            raise UsageError(f"--plan-out {flags['plan_out']}: the folder {folder} does not exist")
    request = DrainRequest(
        selector=Selector(provider=provider, gateway=gateway),
        drain=not undrain,
        consumers=tuple(consumers),
        dry_run=dry_run,
        journal_dir=journal_dir,
        **flags,
    )
    if not dry_run and request.plan_out is None:
        from xtask.drain.edges.journal import journal_dir as default_journal_dir
        from xtask.drain.edges.preflight import usable_journal_dir

        # Before the first API request: a run that cannot keep a journal must not start writing.
        request = dataclasses.replace(request, journal_dir=usable_journal_dir(journal_dir or default_journal_dir()))
    return request


def request_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give ``command`` the flags of :func:`option_groups`, in their groups, as one ``request`` argument."""

    @functools.wraps(command)
    def with_request(**flags: Any) -> None:
        from xtask.drain.core.request import DrainRequest

        fields = {f.name for f in dataclasses.fields(DrainRequest)} | {"provider", "gateway", "undrain"}
        gates = gate_values(flags)
        request = drain_request(**{k: flags.pop(k) for k in list(flags) if k in fields}, gate_options=gates)
        command(request, **flags)

    return grouped_options(option_groups())(with_request)


class DrainCommand(GroupedCommand):
    """provider-drain's command: its flags in named groups, examples and exit codes; the flags
    of no group (--output, --help) under "Output"."""

    default_group = "Output"


# Each runs as shown against the example env (tests/integration/test_help_examples.py).
TARGETS_EXAMPLE = "--network production --consumer consumer-a --consumer consumer-b"
EXAMPLES = (
    Example(
        "See what draining gateway provider-a would do: the selection, the plan and the API server's "
        "dry run of each patch; nothing is written.",
        "--context local-example --gateway provider-a --dry-run",
    ),
    Example(
        "Drain provider-one, saying why, and wait until both consumers serve the change.",
        f"--context local-example --provider provider-one --reason 'kernel upgrade' {TARGETS_EXAMPLE}",
    ),
    Example(
        "Undrain it: your hold is removed, and the drain cleared once no other hold remains.",
        f"--context local-example --provider provider-one --undrain {TARGETS_EXAMPLE}",
    ),
    Example(
        "Drain the whole gateway provider-b one provider at a time, each wave converged before the next "
        "(--soak 0: no soak, no metric gates).",
        f"--context local-example --gateway provider-b --wave-size 1 --soak 0 {TARGETS_EXAMPLE}",
    ),
)


@click.command(name="provider-drain", cls=DrainCommand, examples=EXAMPLES, epilog=EPILOG)
@request_options
@output_option(names="each provider selected (changed or already as asked), as inferenceprovider.agn.dev/NAME")
@click.option("-v", "--verbose", is_flag=True, expose_value=False, help=VERBOSE_HELP)  # shown under Output
def provider_drain(request: DrainRequest, output: str) -> None:
    """Administratively drain (or --undrain) one provider or a whole providerGateway.

    Prints the sorted selection and the plan, checks every patch with a server-side dry
    run, then patches only spec.trafficPolicy.drain with bounded concurrency. Any failure
    restores what this run changed. Without --network/--consumer it reports the stored
    state; with them it waits until every consumer serves the change (two agreeing
    observations); with --wait-idle it then waits until every drained provider is idle.
    A journal file records every write so an interrupted run can be undone with
    `env drain-restore`.
    """
    report = _run(request, output=output)
    if output in REPORT_FORMATS:
        emit_report(report.to_dict(), output, selected_names(report))
    else:
        _print_final(report)
    sys.stdout.flush()
    if report.exit_code != ExitCode.OK:
        raise click.exceptions.Exit(int(report.exit_code))


def selected_names(report: Report) -> list[str]:
    """``-o name``: the providers the run selected, as kubectl names them (none when refused before selecting)."""
    from agn.resources import PROVIDERS

    return [PROVIDERS.kubectl_name(name) for name in report.selection]


def _stdout_fancy() -> bool:
    """Final tables with rich: stdout is a terminal without NO_COLOR (else plain lines)."""
    return fancy() and sys.stdout.isatty()


def _run(request: DrainRequest, *, output: str) -> Report:
    """Run the drain, showing progress on stderr, always: live when stderr is a terminal and the
    output is the table, else as lines. stdout carries only the result (:func:`_print_final`,
    or the report), so ``provider-drain ... | tee`` or ``> file`` keeps the result alone."""
    from xtask.cli.env.drain_view import PlainReporter

    if output == TABLE and fancy():
        from xtask.cli.env.drain_live import RichReporter

        reporter: PlainReporter = RichReporter(err_console())
    else:
        reporter = PlainReporter(sys.stderr)
    try:
        return run_drain(request, progress=reporter)
    finally:
        reporter.close()


def run_drain(request: DrainRequest, *, progress: Callable[..., None]) -> Report:
    """:func:`xtask.drain.run.run_drain`, its modules loaded only once click has parsed the flags."""
    from xtask.drain.run import run_drain as run

    return run(request, progress=progress)


def _print_final(report: Report) -> None:
    if _stdout_fancy():
        from xtask.cli.env.drain_live import render_final

        render_final(report, out_console())
    else:
        from xtask.cli.env.drain_view import plain_final

        plain_final(report, sys.stdout)
    if report.journal and report.exit_code not in (ExitCode.OK,):
        print(printable(f"journal: {report.journal}"), file=sys.stdout)
    print(
        ("ok: " if report.exit_code == ExitCode.OK else f"exit {int(report.exit_code)}: ") + printable(report.summary),
        flush=True,
    )
