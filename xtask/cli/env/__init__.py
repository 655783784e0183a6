"""``xtask env``: environment commands, one per module, each imported only when it runs.

A command's module imports what that command needs (the Kubernetes client, rich, the
runtimes); loading them all for every invocation would make ``provider-drain`` pay for
``up`` and ``status``. ``env --help`` imports them all to show their one-line help.

Every command, and ``env`` itself, takes ``-v/--verbose`` as the top group does (``xtask env up
-v`` is ``xtask -v env up``): the entry point reads it wherever it stands (``xtask.__main__``),
so the option only has to be accepted; :meth:`LazyGroup.get_command` adds it to each command.
"""

from __future__ import annotations

import importlib

import click

from xtask.errors import exit_codes_epilog

COMMANDS = {  # name: "module:attribute"
    "up": "xtask.cli.env.up:up",
    "status": "xtask.cli.env.status:status",
    "down": "xtask.cli.env.down:down",
    "provider-drain": "xtask.cli.env.provider_drain:provider_drain",
    "drain-restore": "xtask.cli.env.drain_restore:drain_restore",
    "drains": "xtask.cli.env.drains:drains",
    "render": "xtask.cli.env.render:render_cmd",
}


VERBOSE_HELP = "Show tracebacks and debug detail on errors (the same as -v before the command)."


def verbose_option() -> click.Option:
    """``-v/--verbose``: accepted here, read by the entry point (it sees the whole command line)."""
    return click.Option(["-v", "--verbose"], is_flag=True, expose_value=False, help=VERBOSE_HELP)


def with_verbose(command: click.Command) -> click.Command:
    """``command`` taking ``-v/--verbose`` (once: commands are loaded again by each group that asks)."""
    if not any(p.name == "verbose" for p in command.params):
        command.params.append(verbose_option())
    return command


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use (click's documented pattern)."""

    def __init__(self, *args, lazy: dict[str, str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self._lazy) + [n for n in super().list_commands(ctx) if n not in self._lazy]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self._lazy.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module, attr = target.split(":")
        return with_verbose(getattr(importlib.import_module(module), attr))


@click.group(name="env", cls=LazyGroup, lazy=COMMANDS, epilog=exit_codes_epilog())
@click.option("-v", "--verbose", is_flag=True, expose_value=False, help=VERBOSE_HELP)
def env_group() -> None:
    """Bring up, inspect and operate AGN environments (on any runtime of docs/runtimes.md)."""
