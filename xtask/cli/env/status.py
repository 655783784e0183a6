"""``xtask env status``."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from xtask.cli.env.options import env_option, output_option
from xtask.cli.helptext import Example, HelpCommand
from xtask.cli.output import emit_json, markup_safe, out_console
from xtask.envstatus import agn_objects
from xtask.errors import ExitCode, exit_codes_epilog
from xtask.reports import ENV_STATUS, envelope
from xtask.runtime import registry
from xtask.state import EnvRecord

# Components whose ill health means the API server cannot answer reads (the local runtime's).
API_COMPONENTS = ("etcd", "kube-apiserver")
QUICK_READ_TIMEOUT = 3.0  # seconds: reads of an API server its own runtime reports unhealthy


def read_timeout(components: list[dict]) -> tuple[float, float] | None:
    """The (connect, read) timeout for reading the env's objects: short when the runtime already
    reports its API server or etcd unhealthy (a paused etcd would hold every read for the full
    read timeout), else the client's default (None)."""
    from agn.kube import CONNECT_TIMEOUT

    if any(c["name"] in API_COMPONENTS and not c["healthy"] for c in components):
        return (CONNECT_TIMEOUT, QUICK_READ_TIMEOUT)
    return None


def collect(env_name: str) -> dict:
    record = EnvRecord.load(env_name)
    if record is None:
        return {
            "env": env_name,
            "state": "down",
            "runtime": None,
            "context": None,
            "kubeconfig": None,
            "namespace": None,
            "components": [],
            "objects": None,
        }
    runtime = registry.recorded(env_name, record.runtime)
    components = runtime.status()
    detail = runtime.describe()  # beyond the components (kind: engine, node image, pods)
    prometheus = runtime.prometheus()
    objects, error = None, None
    try:
        from agn.kube import Kube, KubeError

        kube = Kube.from_kubeconfig(
            kubeconfig=record.kubeconfig,
            context=record.context,
            field_manager="agn-xtask-status",
            request_timeout=read_timeout(components),
        )
        try:
            objects = agn_objects(kube, record.namespace)
        finally:
            kube.close()
    except KubeError as exc:
        error = str(exc)
    healthy = all(c["healthy"] for c in components) and objects is not None
    return {
        "env": env_name,
        "state": "up" if healthy else "degraded",
        "runtime": record.runtime,
        "context": record.context,
        "kubeconfig": record.kubeconfig,
        "namespace": record.namespace,
        "components": components,
        "objects": objects,
        "prometheus": prometheus,
        **({"runtimeDetail": detail} if detail else {}),
        **({"error": error} if error else {}),
    }


EXAMPLES = (
    Example("Show the example env: components, providers and what each consumer serves.", "--env example"),
    Example("The same as one JSON document, for scripts (schemas/).", "--env example -o json"),
)
EXIT_CODES = {
    ExitCode.OK: "done: the env was read and shown, up, degraded or down",
    ExitCode.ERROR: None,
    ExitCode.USAGE: None,
}


@click.command(cls=HelpCommand, examples=EXAMPLES, epilog=exit_codes_epilog(EXIT_CODES))
@env_option
@output_option
def status(env_name: str, output: str) -> None:
    """Show an environment: runtime, context, process health and metrics addresses, providers and per-consumer overlays."""
    data = collect(env_name)
    if output == "json":
        emit_json(envelope(ENV_STATUS, data))
        return
    render_table(data, out_console())


def render_table(data: dict, con: Console) -> None:
    """``env status`` for people. Every value is data (from env.json, pid files, the cluster):
    shown through :func:`markup_safe`, never as markup or raw control characters."""
    e = markup_safe
    env = e(data["env"])
    if data["state"] == "down":
        con.print(f"environment [bold]{env}[/bold] is down (run `python -m xtask env up --env {env}`)")
        return
    color = "green" if data["state"] == "up" else "yellow"
    con.print(
        f"environment [bold]{env}[/bold]: [{color}]{data['state']}[/{color}]  runtime={e(data['runtime'])}  "
        f"context={e(data['context'])}  namespace={e(data['namespace'])}"
    )
    con.print(f"kubeconfig: {e(data['kubeconfig'])}")
    _render_components(data, con)
    if data.get("error"):
        con.print(f"[red]cannot read AGN objects:[/red] {e(data['error'])}")
        return
    _render_objects(data["objects"], con)


def _render_components(data: dict, con: Console) -> None:
    """The runtime's components, its Prometheus and what it says beyond them."""
    e = markup_safe
    comps = Table(title="components", title_justify="left")
    for col in ("name", "pid", "running", "healthy", "address", "metrics", "detail"):
        comps.add_column(col)
    for c in data["components"]:
        comps.add_row(
            e(c["name"]),
            e(c.get("pid") or "-"),
            _yes(c["running"]),
            _yes(c["healthy"]),
            e(c.get("address", "")),
            e(c.get("metricsUrl", "")),
            "" if c["healthy"] else e(c.get("detail", "")),
        )
    con.print(comps)
    prom = data.get("prometheus")
    if prom:
        where = e(prom["url"]) if prom["url"] else "not running"
        con.print(f"prometheus: {where}" + (f" ({e(prom['detail'])})" if prom.get("detail") else ""))
    detail = data.get("runtimeDetail")
    if detail:
        con.print(f"engine={e(detail.get('engine'))}  node image={e(detail.get('nodeImage'))}")
        if detail.get("pods") is not None:
            pods = Table(title="pods", title_justify="left")
            for col in ("name", "ready", "status", "restarts", "node"):
                pods.add_column(col)
            for p in detail["pods"]:
                pods.add_row(e(p["name"]), e(p["ready"]), e(p["phase"]), e(p["restarts"]), e(p.get("node") or "-"))
            con.print(pods)


def _render_objects(objs: dict, con: Console) -> None:
    """The env's providers and, per consumer, its overlays and each provider's admission state."""
    e = markup_safe
    provs = Table(title="providers", title_justify="left")
    for col in ("name", "gateway", "drain", "available", "group", "rank", "endpoint"):
        provs.add_column(col)
    for p in objs["providers"]:
        drain = str(p["drain"]).lower() + (f" ({p['drainReason']})" if p["drain"] and p.get("drainReason") else "")
        provs.add_row(
            e(p["name"]),
            e(p["providerGateway"] or "-"),
            e(drain),
            e(p["available"]),
            e(p["selectionGroup"] or "-"),
            e(p["rank"]),
            e(p["endpoint"] or ""),
        )
    con.print(provs)
    names = [p["name"] for p in objs["providers"]]
    cons = Table(title="consumers (admission state per provider)", title_justify="left")
    for col in ("consumer", "overlay", "accepted", "serving", *names):
        cons.add_column(e(col))
    for c in objs["consumers"]:
        cons.add_row(
            e(c["name"]),
            _rev(c["overlayRevision"]) + (" (assembling)" if c.get("overlayPending") else ""),
            _rev(c["acceptedRevision"]),
            _rev(c["servingRevision"]),
            *(e(c["candidates"].get(n, "-")) for n in names),
        )
    con.print(cons)
    for c in objs["consumers"]:
        if c.get("overlayPending"):
            con.print(f"[yellow]consumer {e(c['name'])}:[/yellow] {e(c['overlayPending'])}")


def _yes(value: bool) -> str:
    return "yes" if value else "NO"


def _rev(value: int | None) -> str:
    return "-" if value is None else str(value)
