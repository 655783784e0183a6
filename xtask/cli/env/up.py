"""``xtask env up``."""

from __future__ import annotations

import click

from xtask.cli.env.options import env_option, output_option
from xtask.cli.output import emit_json, markup_safe, out_console, progress
from xtask.cli.params import FiniteFloat
from xtask.envdef import load_env
from xtask.reports import ENV_UP, envelope
from xtask.runtime.select import choose_runtime
from xtask.state import EnvRecord, require_own_env_dir


@click.command()
@env_option
@click.option(
    "--runtime",
    type=click.Choice(["auto", "kind", "local"]),
    default="auto",
    show_default=True,
    help="auto: kind when Docker, kind and kubectl work, else the embedded local control plane.",
)
@click.option(
    "--retain", is_flag=True, help="On failure, keep what was started (for debugging) instead of rolling back."
)
@click.option(
    "--timeout",
    type=FiniteFloat(min=1),
    default=90.0,
    show_default=True,
    help="Seconds to wait for consumers to serve their first overlays.",
)
@output_option
def up(env_name: str, runtime: str, retain: bool, timeout: float, output: str) -> None:
    """Bring up an environment (idempotent: repairs dead parts, starts nothing twice)."""
    envdef = load_env(env_name)
    require_own_env_dir(env_name)  # a folder in its place that is not the env's own: refused, left alone
    record = EnvRecord.load(env_name)
    chosen = choose_runtime(runtime, recorded=record.runtime if record else None)
    if chosen == "kind":
        from xtask.runtime.kind import KindEnv

        result = KindEnv(env_name).up(envdef, progress=progress, retain=retain, wait_timeout=timeout)
    else:
        from xtask.runtime.local import LocalEnv

        result = LocalEnv(env_name).up(envdef, progress=progress, retain=retain, wait_timeout=timeout)
    result = {"env": env_name, "runtime": chosen, "namespace": envdef.namespace, **result}
    if output == "json":
        emit_json(envelope(ENV_UP, result))
        return
    con = out_console()
    e = markup_safe  # names and paths are data: shown as text, never as markup
    env, started = e(env_name), result["started"]
    if started:
        con.print(f"environment [bold]{env}[/bold] is up on the {chosen} runtime (started: {e(', '.join(started))})")
    else:
        con.print(f"environment [bold]{env}[/bold] was already up on the {chosen} runtime; nothing started")
    con.print(f"  context:    {e(result['context'])}  (kubeconfig {e(result['kubeconfig'])})")
    con.print(f"  namespace:  {e(envdef.namespace)}")
    for consumer, revision in sorted(result.get("served", {}).items()):
        con.print(f"  {e(consumer)}: serving overlay revision {e(revision)}")
    for line in result.get("excluded", []):
        con.print(f"  [yellow]kept out by a hard failure[/yellow]: {e(line)}")
    con.print(f"next: python -m xtask env status --env {env}")
