"""``xtask env up``: parse, one :meth:`xtask.runtime.base.Runtime.up` call, render.

The runtime flags are not written here: each runtime declares the ones it takes, and
:func:`runtime_flags` makes the options from the declarations (docs/runtimes.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from xtask.cli.complete import complete_context
from xtask.cli.env.options import env_option, output_option
from xtask.cli.formats import REPORT_FORMATS, emit_report
from xtask.cli.helptext import Example, HelpCommand
from xtask.cli.output import err_console, fancy, markup_safe, out_console, progress
from xtask.envdef import load_env
from xtask.errors import ExitCode, exit_codes_epilog
from xtask.params import DurationType
from xtask.progress import StepReporter
from xtask.reports import ENV_UP, envelope
from xtask.runtime import registry
from xtask.runtime.base import Options
from xtask.state import EnvRecord, require_own_env_dir

F = TypeVar("F", bound=Callable[..., Any])
COMPLETERS = {"--context": complete_context}  # shell completion of a runtime flag's value, by its name


def runtime_flags(command: F) -> F:
    """The click options of every runtime's declared flags (:attr:`xtask.runtime.base.Runtime.flags`),
    each saying which runtimes take it; ``up`` receives them as ``**flags``."""
    for flag in reversed(registry.flags()):
        command = click.option(
            flag.name,
            flag.key,
            is_flag=flag.type is bool,
            default=False if flag.type is bool else None,
            metavar=flag.metavar,
            shell_complete=COMPLETERS.get(flag.name),
            help=f"{flag.help} [{', '.join(registry.takers(flag))}]",
        )(command)
    return command


EXAMPLES = (  # none names a runtime: each runtime's flags say which runtimes take them
    Example("Bring up the example env, or repair it, on the runtime auto picks (docs/runtimes.md).", "--env example"),
    Example(
        "On failure keep what was started, to look at it, and wait up to 5 minutes for the consumers.",
        "--env example --retain --timeout 5m",
    ),
    Example("Print the result as one JSON document, for scripts.", "--env example -o json"),
)
EXIT_CODES = {
    ExitCode.OK: "done: the env is up and every consumer serves an overlay (--dry-run: every object was accepted)",
    ExitCode.ERROR: None,
    ExitCode.USAGE: None,
    ExitCode.REFUSED: None,
    ExitCode.INTERRUPTED: "interrupted (SIGINT/SIGTERM): what this run started is rolled back, unless --retain",
}


def step_progress() -> StepReporter:
    """Where the steps are shown, always on stderr: live (a spinner, ✓/✗ and times) on a terminal,
    else the plain lines scripts and tests read (``- TITLE``, ``- TITLE: already done``)."""
    if fancy():
        from xtask.cli.env.up_live import LiveSteps

        return LiveSteps(err_console())
    return StepReporter(progress)


@click.command(cls=HelpCommand, examples=EXAMPLES, epilog=exit_codes_epilog(EXIT_CODES))
@env_option
@click.option(
    "--runtime",
    type=click.Choice([registry.AUTO, *registry.names()]),
    default=registry.AUTO,
    show_default=True,
    help="auto: the env's recorded runtime, else the first runtime that auto may choose and that can run "
    "here, in registry order (docs/runtimes.md).",
)
@click.option(
    "--retain", is_flag=True, help="On failure, keep what was started (for debugging) instead of rolling back."
)
@click.option(
    "--timeout",
    type=DurationType(minimum=1),
    metavar="DURATION",
    default=90.0,
    show_default=True,
    help="How long to wait for rollouts and for consumers to serve their first overlays (seconds, or 90s, 5m).",
)
@runtime_flags
@output_option(names="environment/ENV, the environment brought up")
def up(env_name: str, runtime: str, retain: bool, timeout: float, output: str, **flags: str | bool | None) -> None:
    """Bring up an environment (idempotent: repairs dead parts, starts nothing twice)."""
    envdef = load_env(env_name)
    require_own_env_dir(env_name)  # a folder in its place that is not the env's own: refused, left alone
    record = EnvRecord.load(env_name)
    options = Options(**flags)
    chosen = registry.choose(env_name, runtime, recorded=record.runtime if record else None, options=options)
    steps = step_progress()
    try:
        result = chosen.up(envdef, progress=steps, retain=retain, wait_timeout=timeout)
    finally:
        steps.close()
    result = {"env": env_name, "runtime": chosen.name, "namespace": envdef.namespace, **result}
    if output in REPORT_FORMATS:
        emit_report(envelope(ENV_UP, result), output, [f"environment/{env_name}"])
        return
    con = out_console()
    e = markup_safe  # names and paths are data: shown as text, never as markup
    env, started = e(env_name), result["started"]
    name = e(chosen.name)
    if result.get("dryRun"):
        con.print(
            f"dry run: {len(result.get('applied', []))} objects of environment [bold]{env}[/bold] accepted by "
            f"the API server (context {e(result['context'])}, {name} runtime); nothing was changed"
        )
        for line in result.get("skipped", []):
            con.print(f"  [yellow]not validated[/yellow]: {e(line)}")
        return
    if started:
        con.print(f"environment [bold]{env}[/bold] is up on the {name} runtime (started: {e(', '.join(started))})")
    else:
        con.print(f"environment [bold]{env}[/bold] was already up on the {name} runtime; nothing started")
    con.print(f"  context:    {e(result['context'])}  (kubeconfig {e(result['kubeconfig'])})")
    con.print(f"  namespace:  {e(envdef.namespace)}")
    for consumer, revision in sorted(result.get("served", {}).items()):
        con.print(f"  {e(consumer)}: serving overlay revision {e(revision)}")
    for line in result.get("excluded", []):
        con.print(f"  [yellow]kept out by a hard failure[/yellow]: {e(line)}")
    con.print(f"next: python -m xtask env status --env {env}")
