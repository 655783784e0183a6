"""``xtask env up``."""

from __future__ import annotations

import click

from xtask.cli.env.options import env_option, output_option
from xtask.cli.output import emit_json, markup_safe, out_console, progress
from xtask.cli.params import FiniteFloat
from xtask.envdef import load_env
from xtask.reports import ENV_UP, envelope
from xtask.runtime import registry
from xtask.runtime.base import Options
from xtask.state import EnvRecord, require_own_env_dir


@click.command()
@env_option
@click.option(
    "--runtime",
    type=click.Choice([registry.AUTO, *registry.names()]),
    default=registry.AUTO,
    show_default=True,
    help="auto: the env's recorded runtime, else the first runtime that auto may choose and that can run "
    "here, in registry order (docs/runtimes.md).",
)
@click.option(
    "--retain", is_flag=True, help="On failure, keep what was started (for debugging) instead of rolling back."
)
@click.option(
    "--timeout",
    type=FiniteFloat(min=1),
    default=90.0,
    show_default=True,
    help="Seconds to wait for rollouts and for consumers to serve their first overlays.",
)
@click.option("--context", metavar="CONTEXT", help="The kube context of an existing cluster to deploy into.")
@click.option(
    "--kubeconfig", metavar="FILE", help="The kubeconfig file holding --context (default: as kubectl finds it)."
)
@click.option("--image", metavar="IMAGE", help="The image the Deployments run (default: agn:dev).")
@click.option("--dry-run", is_flag=True, help="Send every object as a server-side dry run; change nothing.")
@click.option("--no-wait", "no_wait", is_flag=True, help="Return once applied; do not wait for rollouts or overlays.")
@output_option
def up(
    env_name: str,
    runtime: str,
    retain: bool,
    timeout: float,
    context: str | None,
    kubeconfig: str | None,
    image: str | None,
    dry_run: bool,
    no_wait: bool,
    output: str,
) -> None:
    """Bring up an environment (idempotent: repairs dead parts, starts nothing twice)."""
    envdef = load_env(env_name)
    require_own_env_dir(env_name)  # a folder in its place that is not the env's own: refused, left alone
    record = EnvRecord.load(env_name)
    options = Options(context=context, kubeconfig=kubeconfig, image=image, dry_run=dry_run, wait=not no_wait)
    chosen = registry.choose(env_name, runtime, recorded=record.runtime if record else None, options=options)
    result = chosen.up(envdef, progress=progress, retain=retain, wait_timeout=timeout)
    result = {"env": env_name, "runtime": chosen.name, "namespace": envdef.namespace, **result}
    if output == "json":
        emit_json(envelope(ENV_UP, result))
        return
    con = out_console()
    e = markup_safe  # names and paths are data: shown as text, never as markup
    env, started = e(env_name), result["started"]
    name = e(chosen.name)
    if result.get("dryRun"):
        con.print(
            f"dry run: {len(result.get('applied', []))} objects of environment [bold]{env}[/bold] accepted by "
            f"the API server (context {e(result['context'])}, {name} runtime); nothing was changed"
        )
        for line in result.get("skipped", []):
            con.print(f"  [yellow]not validated[/yellow]: {e(line)}")
        return
    if started:
        con.print(f"environment [bold]{env}[/bold] is up on the {name} runtime (started: {e(', '.join(started))})")
    else:
        con.print(f"environment [bold]{env}[/bold] was already up on the {name} runtime; nothing started")
    con.print(f"  context:    {e(result['context'])}  (kubeconfig {e(result['kubeconfig'])})")
    con.print(f"  namespace:  {e(envdef.namespace)}")
    for consumer, revision in sorted(result.get("served", {}).items()):
        con.print(f"  {e(consumer)}: serving overlay revision {e(revision)}")
    for line in result.get("excluded", []):
        con.print(f"  [yellow]kept out by a hard failure[/yellow]: {e(line)}")
    con.print(f"next: python -m xtask env status --env {env}")
