"""Options shared by several env commands."""

from __future__ import annotations

import click

env_option = click.option(
    "--env",
    "env_name",
    default="example",
    show_default=True,
    metavar="NAME",
    help="Environment definition to use (envs/NAME.yaml).",
)
output_option = click.option(
    "--output",
    "-o",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json for scripts (one document on stdout).",
)
