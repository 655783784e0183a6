"""``xtask env down``."""

from __future__ import annotations

import click

from xtask.cli.env.options import env_option, output_option
from xtask.cli.helptext import Example, HelpCommand
from xtask.cli.output import emit_json, markup_safe, out_console, progress
from xtask.errors import ExitCode, XtaskError, exit_codes_epilog
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
@output_option
def down(env_name: str, output: str) -> None:
    """Tear an environment down: remove what `env up` made, its kube context and its state.

    What that is depends on the env's runtime: processes (stopped by pid), a cluster it created,
    or only the objects it applied to an existing cluster (docs/runtimes.md)."""
    # A folder that is not this env's own is refused before any process is stopped or file removed.
    require_own_env_dir(env_name)
    record = EnvRecord.load(env_name)
    result = registry.recorded(env_name, record.runtime if record else None).down(progress=progress)
    result = {"env": env_name, **result}
    if output == "json":
        emit_json(result)
    elif result["was_up"]:
        stopped = markup_safe(", ".join(result["stopped"]) or "nothing running")
        out_console().print(f"environment [bold]{markup_safe(env_name)}[/bold] is down (stopped: {stopped})")
    else:
        out_console().print(f"environment [bold]{markup_safe(env_name)}[/bold] was not up; nothing to do")
    if result["errors"]:
        raise XtaskError("teardown finished with errors: " + "; ".join(result["errors"]))
