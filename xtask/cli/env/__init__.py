"""``xtask env``: environment commands, one per module, each imported only when it runs.

A command's module imports what that command needs (the Kubernetes client, rich, the
runtimes); loading them all for every invocation would make ``provider-drain`` pay for
``up`` and ``status``. ``env --help`` imports them all to show their one-line help.
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
        return getattr(importlib.import_module(module), attr)


@click.group(name="env", cls=LazyGroup, lazy=COMMANDS, epilog=exit_codes_epilog())
def env_group() -> None:
    """Bring up, inspect and operate AGN environments (on any runtime of docs/runtimes.md)."""
