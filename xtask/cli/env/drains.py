"""``xtask env drains``: every drained provider with its holders, reasons, tickets, since and expiry.

Read-only: one LIST of the providers. Expired holds are reported, never removed (they still
hold the provider until their holder, or ``provider-drain --undrain --release-all``, removes them).
"""

from __future__ import annotations

import datetime as dt

import click
from rich.console import Console
from rich.table import Table

from xtask.cli.complete import complete_context
from xtask.cli.env.options import namespace_type, output_option
from xtask.cli.formats import REPORT_FORMATS, WIDE, emit_report
from xtask.cli.helptext import Example, HelpCommand
from xtask.cli.output import markup_safe, out_console
from xtask.drain.core.holds import drain_entries, rfc3339
from xtask.errors import ExitCode, XtaskError, exit_codes_epilog
from xtask.params import NonEmptyPath
from xtask.reports import ENV_DRAINS, envelope


def collect(*, context: str | None, kubeconfig: str | None, namespace: str | None, expired: bool) -> dict:
    from agn.kube import PROVIDERS, Kube
    from agn.names import label_problem
    from agn.yamltext import show

    kube = Kube.from_kubeconfig(kubeconfig=kubeconfig, context=context, field_manager="agn-xtask-drains")
    try:
        ns = namespace or kube.namespace
        problem = label_problem(ns)
        if problem:  # --namespace is checked by click; this one comes from the kubeconfig's context
            raise XtaskError(
                f"the namespace {show(ns)} of context {kube.context!r} is not a namespace name: it {problem}",
                hint="fix the context's namespace, or pass --namespace",
            )
        objs = kube.list(PROVIDERS, ns)[0]
        # Expiry is judged on the API server's clock (the Date header of a SelfSubjectReview).
        now = dt.datetime.fromtimestamp(kube.who_am_i()[1], dt.UTC)
    finally:
        kube.close()
    return {
        "context": context,
        "namespace": ns,
        "now": rfc3339(now),
        "expiredOnly": expired,
        "providers": drain_entries(objs, now=now, expired_only=expired),
    }


EXAMPLES = (
    Example("Every drained provider of the example env, with its holds.", "--context local-example"),
    Example("Only those with an expired hold, as JSON.", "--context local-example --expired -o json"),
)
EXIT_CODES = {
    ExitCode.OK: "done: the drained providers were listed (none is not an error)",
    ExitCode.ERROR: None,
    ExitCode.USAGE: None,
}


@click.command(name="drains", cls=HelpCommand, examples=EXAMPLES, epilog=exit_codes_epilog(EXIT_CODES))
@click.option(
    "--context",
    metavar="CTX",
    shell_complete=complete_context,
    help="Kube context (default: the kubeconfig's current context), e.g. local-example or kind-example.",
)
@click.option(
    "--kubeconfig",
    type=NonEmptyPath(dir_okay=False),
    help="Kubeconfig file, alone (default: every file of $KUBECONFIG merged as kubectl does, else ~/.kube/config).",
)
@click.option(
    "--namespace", "-n", type=namespace_type, metavar="NS", help="Namespace (default: the context's namespace)."
)
@click.option("--expired", is_flag=True, help="Only providers with an expired hold (reported, never removed).")
@output_option(names="each drained provider listed (inferenceprovider.agn.dev/NAME)", wide=True)
def drains(context: str | None, kubeconfig: str | None, namespace: str | None, expired: bool, output: str) -> None:
    """List every drained provider with its holds: owner, holder, reason, ticket, since and expiry of each.

    A drained provider without holds is shown as held by nobody known (drained by an older
    xtask, kubectl or a hand edit). Read-only.
    """
    data = collect(context=context, kubeconfig=kubeconfig, namespace=namespace, expired=expired)
    if output in REPORT_FORMATS:
        emit_report(envelope(ENV_DRAINS, data), output, provider_names(data))
        return
    render_table(data, out_console(), wide=output == WIDE)


def provider_names(data: dict) -> list[str]:
    """``-o name``: every provider the report lists, as kubectl names it."""
    from agn.resources import PROVIDERS

    return [PROVIDERS.kubectl_name(p["provider"]) for p in data["providers"]]


# Columns only `-o wide` shows.
WIDE_ONLY = ("ticket", "since")


def render_table(data: dict, con: Console, *, wide: bool = False) -> None:
    """One row per hold (a drained provider without holds: one row, held by nobody known);
    ``wide`` adds each hold's ticket and since. Every value is data from the cluster:
    shown through :func:`markup_safe`."""
    e = markup_safe
    what = "providers with an expired hold" if data["expiredOnly"] else "drained providers"
    if not data["providers"]:
        con.print(f"no {what} in namespace {e(data['namespace'])}")
        return
    table = Table(title=f"{what} in namespace {e(data['namespace'])} (now {e(data['now'])})", title_justify="left")
    columns = ("provider", "gateway", "drain", "owner", "holder", "reason", "ticket", "since", "expires")
    shown = [i for i, col in enumerate(columns) if wide or col not in WIDE_ONLY]
    for i in shown:
        table.add_column(columns[i])

    def add_row(*cells: str) -> None:
        table.add_row(*(cells[i] for i in shown))

    for p in data["providers"]:
        head = (e(p["provider"]), e(p["providerGateway"] or "-"), "true" if p["drain"] else "[yellow]false[/yellow]")
        if not p["holds"]:
            by = f" (drained by {p['drainedBy']})" if p["drainedBy"] else ""
            add_row(
                *head,
                "-",
                f"[yellow]nobody known[/yellow]{e(by)}",
                e(p["drainReason"] or "-"),
                "-",
                e(p["drainedAt"] or "-"),
                "-",
            )
            continue
        for h in p["holds"]:
            # The owner (a Kubernetes username) is who may release the hold; unknown: a hold
            # written before holds had owners (only a user allowed release-holds removes it).
            owner = e(h["owner"]) if h["owner"] else "[yellow]unknown[/yellow]"
            if h["invalid"]:
                add_row(*head, owner, f"[red]unreadable[/red] {e(h['key'])}", "-", "-", "-", "-")
            else:
                expires = e(h["expiresAt"] or "never")
                if h["expired"]:
                    expires = f"[red]EXPIRED[/red] {expires}"
                add_row(
                    *head,
                    owner,
                    e(h["holder"]),
                    e(h["reason"] or "-"),
                    e(h["ticket"] or "-"),
                    e(h["since"] or "-"),
                    expires,
                )
            head = ("", "", "")
    con.print(table)
    held = sum(1 for p in data["providers"] if p["holds"])
    con.print(f"{len(data['providers'])} provider(s), {held} with holds")
