"""Options shared by several env commands.

``--env`` is checked here, at the edge, for every command that takes it: an env name is a
DNS-1123 label (it names the state folder and the kube context), so ``..``, ``.``, ``''`` or
300 characters are a usage error (exit 2) before any file or API access.
"""

from __future__ import annotations

import click

from xtask.cli.complete import complete_env
from xtask.params import KubeName

env_option = click.option(
    "--env",
    "env_name",
    type=KubeName("environment name"),
    default="example",
    show_default=True,
    metavar="NAME",
    shell_complete=complete_env,
    help="Environment definition to use (envs/NAME.yaml); lowercase letters, digits and '-'.",
)
namespace_type = KubeName("namespace")


def object_name_type(kind: str) -> KubeName:
    """The type of an option naming one object of ``kind`` (e.g. ``provider``): a DNS-1123 subdomain."""
    return KubeName(f"{kind} name", subdomain=True)


output_option = click.option(
    "--output",
    "-o",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json for scripts (one document on stdout).",
)
