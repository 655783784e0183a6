"""The click command tree. Commands are thin: parse flags, call one library function, render."""

from __future__ import annotations

import click

from xtask.cli.env import env_group
from xtask.errors import ExitCode

EXIT_CODES_HELP = "\b\nExit codes:\n" + "\n".join(
    f"  {code.value}  {code.name.lower().replace('_', '-')}" for code in ExitCode
)


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_CODES_HELP,
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    expose_value=False,
    help="Show tracebacks and debug detail on errors (read by the entry point, which reports errors).",
)
def cli() -> None:
    """AGN xtask: bring up AGN environments and operate them (cargo-xtask style).

    Run `python -m xtask env --help` for the environment commands.
    """


cli.add_command(env_group)
