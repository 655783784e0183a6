"""``xtask env``: environment commands, one per module."""
from __future__ import annotations

import click

from xtask.cli.env.down import down
from xtask.cli.env.drain_restore import drain_restore
from xtask.cli.env.provider_drain import provider_drain
from xtask.cli.env.render import render_cmd
from xtask.cli.env.status import status
from xtask.cli.env.up import up


@click.group(name="env")
def env_group() -> None:
    """Bring up, inspect and operate AGN environments (kind or the embedded local control plane)."""


env_group.add_command(up)
env_group.add_command(status)
env_group.add_command(down)
env_group.add_command(provider_drain)
env_group.add_command(drain_restore)
env_group.add_command(render_cmd)
