"""The click command tree. Commands are thin: parse flags, call one library function, render."""

from __future__ import annotations

import click

from xtask.cli.env import env_group
from xtask.errors import exit_codes_epilog


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=exit_codes_epilog(),
)
@click.version_option(package_name="agn-xtask", prog_name="xtask", message="%(prog)s %(version)s")
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    expose_value=False,
    help="Show tracebacks and debug detail on errors (read by the entry point, which reports errors).",
)
def cli() -> None:
    """AGN xtask: bring up AGN environments and operate them (cargo-xtask style).

    Run `xtask env --help` (or `python -m xtask env --help`) for the environment commands.
    Shell completion: eval "$(_XTASK_COMPLETE=bash_source xtask)" (zsh_source, fish_source).
    """


cli.add_command(env_group)
