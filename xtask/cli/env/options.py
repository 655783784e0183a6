"""Options shared by several env commands.

``--env`` is checked here, at the edge, for every command that takes it: an env name is a
DNS-1123 label (it names the state folder and the kube context), so ``..``, ``.``, ``''`` or
300 characters are a usage error (exit 2) before any file or API access.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from xtask.cli.complete import complete_env
from xtask.cli.formats import TABLE, choices
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
F = TypeVar("F", bound=Callable[..., Any])


def object_name_type(kind: str) -> KubeName:
    """The type of an option naming one object of ``kind`` (e.g. ``provider``): a DNS-1123 subdomain."""
    return KubeName(f"{kind} name", subdomain=True)


def output_option(*, names: str, wide: bool = False) -> Callable[[F], F]:
    """``-o``/``--output``, as kubectl's: a value it does not know is a usage error (exit 2)
    naming the value and the choices (:mod:`xtask.cli.formats`). ``names`` says what ``-o name``
    lists for this command; ``wide``: its table has more columns to show."""
    table = "table for people" + ("; wide: the table with more columns" if wide else "")
    return click.option(
        "--output",
        "-o",
        type=click.Choice(choices(wide=wide)),
        default=TABLE,
        show_default=True,
        help=f"{table}; json: one versioned report on stdout, for scripts (progress goes to stderr); "
        f"yaml: the same document in YAML; name: {names}.",
    )
