"""``xtask env status``."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from xtask.cli.env.options import env_option, output_option
from xtask.cli.formats import REPORT_FORMATS, WIDE, emit_report
from xtask.cli.helptext import Example, HelpCommand
from xtask.cli.output import markup_safe, out_console
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
@output_option(
    names="the env's AGN objects (inferencenetwork.agn.dev/NAME, inferenceprovider.agn.dev/NAME, "
    "inferenceconsumer.agn.dev/NAME; none when the env is down or they cannot be read)",
    wide=True,
)
def status(env_name: str, output: str) -> None:
    """Show an environment: runtime, context, process health and metrics addresses, providers and per-consumer overlays."""
    data = collect(env_name)
    if output in REPORT_FORMATS:
        emit_report(envelope(ENV_STATUS, data), output, object_names(data))
        return
    render_table(data, out_console(), wide=output == WIDE)


def object_names(data: dict) -> list[str]:
    """``-o name``: the env's networks, providers and consumers, as kubectl names them."""
    from agn.resources import CONSUMERS, NETWORKS, PROVIDERS

    objs = data.get("objects") or {}
    return [
        *(NETWORKS.kubectl_name(n) for n in objs.get("networks", [])),
        *(PROVIDERS.kubectl_name(p["name"]) for p in objs.get("providers", [])),
        *(CONSUMERS.kubectl_name(c["name"]) for c in objs.get("consumers", [])),
    ]


def render_table(data: dict, con: Console, *, wide: bool = False) -> None:
    """``env status`` for people (``wide``: also pids, metrics addresses, and each provider's
    selection group, rank and endpoint). Every value is data (from env.json, pid files, the
    cluster): shown through :func:`markup_safe`, never as markup or raw control characters."""
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
    _render_components(data, con, wide=wide)
    if data.get("error"):
        con.print(f"[red]cannot read AGN objects:[/red] {e(data['error'])}")
        return
    _render_objects(data["objects"], con, wide=wide)


# Columns only `-o wide` shows: (components, providers).
WIDE_ONLY = (("pid", "metrics"), ("group", "rank", "endpoint"))


def _table(title: str, rows: list[dict[str, str]], columns: tuple[str, ...], *, hidden: tuple[str, ...]) -> Table:
    """A table of ``rows`` (cells by column name), without the ``hidden`` columns."""
    shown = [c for c in columns if c not in hidden]
    table = Table(title=title, title_justify="left")
    for col in shown:
        table.add_column(col)
    for row in rows:
        table.add_row(*(row[c] for c in shown))
    return table


def _render_components(data: dict, con: Console, *, wide: bool) -> None:
    """The runtime's components, its Prometheus and what it says beyond them."""
    e = markup_safe
    rows = [
        {
            "name": e(c["name"]),
            "pid": e(c.get("pid") or "-"),
            "running": _yes(c["running"]),
            "healthy": _yes(c["healthy"]),
            "address": e(c.get("address", "")),
            "metrics": e(c.get("metricsUrl", "")),
            "detail": "" if c["healthy"] else e(c.get("detail", "")),
        }
        for c in data["components"]
    ]
    columns = ("name", "pid", "running", "healthy", "address", "metrics", "detail")
    con.print(_table("components", rows, columns, hidden=() if wide else WIDE_ONLY[0]))
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


def _render_objects(objs: dict, con: Console, *, wide: bool) -> None:
    """The env's providers and, per consumer, its overlays and each provider's admission state."""
    e = markup_safe
    rows = []
    for p in objs["providers"]:
        drain = str(p["drain"]).lower() + (f" ({p['drainReason']})" if p["drain"] and p.get("drainReason") else "")
        if p.get("slowStart"):
            drain += f" (slow start, {p['slowStart']['remainingSeconds']:.0f}s left)"
        rows.append(
            {
                "name": e(p["name"]),
                "gateway": e(p["providerGateway"] or "-"),
                "drain": e(drain),
                "available": e(p["available"]),
                "group": e(p["selectionGroup"] or "-"),
                "rank": e(p["rank"]),
                "endpoint": e(p["endpoint"] or ""),
            }
        )
    columns = ("name", "gateway", "drain", "available", "group", "rank", "endpoint")
    con.print(_table("providers", rows, columns, hidden=() if wide else WIDE_ONLY[1]))
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
        for line in sessions_lines(c.get("sessions")):
            con.print(f"consumer {e(c['name'])} sessions: {e(line)}")


def sessions_lines(report: dict | None) -> list[str]:
    """A consumer's ``status.sessions`` in words: one line per provider that is not admitted."""
    lines = [
        f"{p['provider']} {p['sessions']} session(s), last turn {p.get('lastTurn', '-')}, {p['rehomed']} rehomed"
        for p in (report or {}).get("providers", ())
    ]
    if (report or {}).get("omitted"):
        lines.append(f"and {report['omitted']} more provider(s)")  # type: ignore[index]
    return lines


def _yes(value: bool) -> str:
    return "yes" if value else "NO"


def _rev(value: int | None) -> str:
    return "-" if value is None else str(value)
