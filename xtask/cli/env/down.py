"""``xtask env down``."""

from __future__ import annotations

import click

from xtask.cli.env.options import env_option, output_option
from xtask.cli.formats import REPORT_FORMATS, emit_report
from xtask.cli.helptext import Example, HelpCommand
from xtask.cli.output import markup_safe, out_console, progress
from xtask.errors import ExitCode, XtaskError, exit_codes_epilog
from xtask.reports import ENV_DOWN, envelope
from xtask.runtime import registry
from xtask.state import EnvRecord, require_own_env_dir

EXIT_CODES = {
    ExitCode.OK: "done: the env is down, or was not up",
    ExitCode.ERROR: None,
    ExitCode.USAGE: None,
    ExitCode.REFUSED: None,
    ExitCode.INTERRUPTED: "interrupted (SIGINT/SIGTERM): stopped part-way; run env down again to finish",
}


@click.command(
    cls=HelpCommand,
    examples=(Example("Remove the example env, whichever runtime it is on.", "--env example"),),
    epilog=exit_codes_epilog(EXIT_CODES),
)
@env_option
@output_option(names="environment/ENV when there was something to tear down (nothing when it was not up)")
def down(env_name: str, output: str) -> None:
    """Tear an environment down: remove what `env up` made, its kube context and its state.

    What that is depends on the env's runtime: processes (stopped by pid), a cluster it created,
    or only the objects it applied to an existing cluster (docs/runtimes.md)."""
    # A folder that is not this env's own is refused before any process is stopped or file removed.
    require_own_env_dir(env_name)
    record = EnvRecord.load(env_name)
    runtime = registry.recorded(env_name, record.runtime if record else None)
    result = runtime.down(progress=progress)
    report = envelope(
        ENV_DOWN,
        {
            "env": env_name,
            "runtime": runtime.name,
            "wasUp": result["was_up"],
            "stopped": result["stopped"],
            "errors": result["errors"],
        },
    )
    if output in REPORT_FORMATS:
        emit_report(report, output, [f"environment/{env_name}"] if report["wasUp"] else [])
    elif report["wasUp"]:
        stopped = markup_safe(", ".join(report["stopped"]) or "nothing running")
        out_console().print(f"environment [bold]{markup_safe(env_name)}[/bold] is down (stopped: {stopped})")
    else:
        out_console().print(f"environment [bold]{markup_safe(env_name)}[/bold] was not up; nothing to do")
    if report["errors"]:
        raise XtaskError("teardown finished with errors: " + "; ".join(report["errors"]))
