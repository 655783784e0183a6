"""``env provider-drain``'s flags: the ones that make up a
:class:`~xtask.drain.core.request.DrainRequest`, in the groups and order ``--help`` lists them
(:func:`option_groups`; the wave gates' flags are declared by each gate, the session flags in
:mod:`xtask.cli.env.session_options`). Declarations only: click parses them, and
:mod:`xtask.cli.env.provider_drain` makes the request of their values.
"""

from __future__ import annotations

from pathlib import Path

import click

from agn.model import MAX_SLOW_START_SECONDS, MIN_SLOW_START_SECONDS
from xtask.cli.complete import complete_context, complete_gateway, complete_provider
from xtask.cli.env.gate_options import gate_options
from xtask.cli.env.option_groups import OptionGroup
from xtask.cli.env.options import namespace_type, object_name_type
from xtask.cli.env.session_options import SESSION_DEADLINE, WAIT_SESSIONS
from xtask.drain.core.defaults import (
    DEFAULT_CONCURRENCY,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_SOAK,
    DEFAULT_TIMEOUT,
    MAX_CONCURRENCY,
    MAX_LOCK_TIMEOUT,
    ON_BREACH,
)
from xtask.drain.core.holds import MAX_EXPIRES_SECONDS, holder_problem, override_problem, ticket_problem
from xtask.params import AmountType, CheckedText, DurationType, FiniteFloat, NonEmptyPath

# The flags that make up a DrainRequest, in the groups and order --help lists them (option_groups).
CLUSTER_SELECTION = (
    click.option(
        "--context",
        metavar="CTX",
        shell_complete=complete_context,
        help="Kube context (default: the kubeconfig's current context), e.g. local-example or kind-example.",
    ),
    click.option(
        "--kubeconfig",
        type=NonEmptyPath(dir_okay=False),
        help="Kubeconfig file, alone (default: every file of $KUBECONFIG merged as kubectl does, else ~/.kube/config).",
    ),
    click.option(
        "--namespace", "-n", type=namespace_type, metavar="NS", help="Namespace (default: the context's namespace)."
    ),
    click.option(
        "--provider",
        type=object_name_type("provider"),
        metavar="NAME",
        shell_complete=complete_provider,
        help="Select one InferenceProvider by name.",
    ),
    click.option(
        "--gateway",
        metavar="GW",
        shell_complete=complete_gateway,
        help="Select every InferenceProvider whose spec.providerGateway equals this, exactly.",
    ),
    click.option("--undrain", is_flag=True, help="Clear the drain (the operator re-evaluates health and metrics)."),
    click.option(
        "--slow-start",
        type=DurationType(minimum=MIN_SLOW_START_SECONDS, maximum=MAX_SLOW_START_SECONDS, whole=True),
        metavar="DURATION",
        help="With --undrain: each provider it returns gets a share of new sessions rising from 5% to its full share "
        "over DURATION (1s-1h: 60, 90s, 5m), judged by the gateways on the API server's clock; a later drain "
        "cancels it (docs/provider-drain.md).",
    ),
    SESSION_DEADLINE,
)

TARGETS = (
    click.option(
        "--network",
        type=object_name_type("network"),
        metavar="NET",
        help="Network of the consumers to wait for (with --consumer).",
    ),
    click.option(
        "--consumer",
        "consumers",
        type=object_name_type("consumer"),
        metavar="NAME",
        multiple=True,
        help="Consumer that must serve the change (repeatable; with --network).",
    ),
    click.option(
        "--timeout",
        type=DurationType(minimum=1),
        metavar="DURATION",
        help=f"How long to wait for convergence: seconds, or 90s, 5m, 1.5h (default: {DEFAULT_TIMEOUT:.0f}; "
        "docs/provider-drain.md).",
    ),
    click.option(
        "--wait-idle",
        is_flag=True,
        help="Drain only, with --network/--consumer: once the drain is serving, wait until every selected provider "
        "is idle (running 0 and waiting 0 in two consecutive fresh load readings of the operator, both after the "
        "wait began; the operator writes a reading only when it changes, and the probes heartbeat Lease agn-probes "
        "vouches that an unchanged one is current; a missing, expired or incomplete reading is not idle).",
    ),
    click.option(
        "--idle-timeout",
        type=DurationType(minimum=1),
        metavar="DURATION",
        help=f"How long to wait for idle with --wait-idle (default: {DEFAULT_IDLE_TIMEOUT:.0f}); then exit 9, drain kept.",
    ),
    *WAIT_SESSIONS,
)

SAFETY = (
    click.option(
        "--dry-run",
        is_flag=True,
        help="Print the selection and plan, check each patch with a server-side dry run; write nothing.",
    ),
    click.option(
        "--force",
        is_flag=True,
        help="Drain even if a named consumer's selection group would lose its last admitted provider, or the "
        "load-aware capacity guard refuses (the override is recorded in the journal, the Events and the report).",
    ),
    click.option(
        "--capacity-margin",
        type=AmountType(minimum=0),
        help="Drain only: requests held back from the headroom of the providers that stay admitted when the "
        "capacity guard weighs the load leaving (N requests, or P% of their declared spec.capacity.maxConcurrent, "
        "rounded up; default 0). Applies to selection groups where a provider declares a capacity.",
    ),
    click.option(
        "--max-unavailable",
        type=AmountType(minimum=0),
        help="Drain only: refuse (exit 3) when, in a network's selection group, more than N (or P% of the group) "
        "providers would be unavailable: drained by anyone, out for a hard failure, or drained by this run. "
        "A stricter bound for this run than the network's declared spec.disruptionBudget (the smaller binds).",
    ),
    click.option(
        "--override-budget",
        type=CheckedText("reason", override_problem),
        metavar="REASON",
        help="Drain only: set the networks' declared disruption budgets aside for this run, saying why; the reason "
        "is recorded in the journal, the holds, the Events and the report (--max-unavailable still binds).",
    ),
    click.option(
        "--lock-timeout",
        type=DurationType(maximum=MAX_LOCK_TIMEOUT),
        metavar="DURATION",
        default=DEFAULT_LOCK_TIMEOUT,
        show_default=True,
        help="How long to wait for the drain lock of each network (a Lease another run holds): seconds, or "
        "30s, 2m; then refuse (exit 3) naming the holder.",
    ),
    click.option(
        "--plan-out",
        type=NonEmptyPath(dir_okay=False, path_type=Path),
        metavar="FILE",
        help="Do every read-only step, then write the plan to FILE (.yaml/.yml: YAML, .json: JSON) "
        "instead of draining; review it, then apply it with --plan.",
    ),
    click.option(
        "--plan",
        type=NonEmptyPath(exists=True, dir_okay=False, path_type=Path),
        metavar="FILE",
        help="Apply exactly the plan in FILE (made with --plan-out): its selection, operation and pacing (soak, "
        "gates, --on-breach, --concurrency, --qps, the waits and their timeouts), refused (exit 3) if anything it "
        "records changed since. The flags it fixes are not allowed with it (exit 2).",
    ),
    click.option(
        "--max-plan-age",
        type=DurationType(whole=True),
        metavar="DURATION",
        help="With --plan: refuse a plan older than this (e.g. 90s, 30m, 1h; default 1h).",
    ),
)

WAVES = (
    click.option(
        "--wave-size",
        type=AmountType(minimum=1),
        metavar="N|P%",
        help="Drain in waves of N providers (or P% of the providers to change, rounded up), in selection order: "
        "each wave is written, converges on the targets and soaks while its gates are read; the next starts "
        "only if every gate held. Needs --network/--consumer. Default: one wave, no soak.",
    ),
    click.option(
        "--soak",
        type=DurationType(zero=True),
        metavar="DURATION",
        help=f"Waves: how long each converged wave soaks while its gates are read (default: {DEFAULT_SOAK:.0f}; "
        "0: no soak and no gates, waves paced by convergence alone).",
    ),
    click.option(
        "--on-breach",
        type=click.Choice(ON_BREACH),
        help="Waves: when a gate does not hold, keep the waves written so far (hold, the default) or restore "
        "them (restore). Either way the run stops before the next wave with exit 10.",
    ),
)

WAVES_LAST = (
    click.option(
        "--resume",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        metavar="JOURNAL",
        help="Continue the drain in waves of JOURNAL from its first unfinished wave, after checking that "
        "nothing changed underneath (give the same selection and targets).",
    ),
)

HOLDS = (
    click.option(
        "--reason", metavar="TEXT", help="Why (recorded with who and when as annotations on each drained provider)."
    ),
    click.option(
        "--holder",
        type=CheckedText("holder", holder_problem),
        metavar="WHO",
        help="Who holds the drain (default: user@host). A drain adds this holder's hold; --undrain removes only it "
        "and clears the drain only when no other hold remains. Draining again a provider you hold updates your "
        "hold with the --reason, --holder, --ticket and --expires-in given (the others keep their values).",
    ),
    click.option(
        "--ticket",
        type=CheckedText("ticket", ticket_problem),
        metavar="REF",
        help="A ticket or change reference recorded with the hold (drain only).",
    ),
    click.option(
        "--expires-in",
        type=DurationType(maximum=MAX_EXPIRES_SECONDS, whole=True),
        metavar="DURATION",
        help="When the hold is expected to end: seconds, or 30m, 2h, 1d (drain only). An expired hold is listed "
        "by `env drains --expired`; it still holds the provider.",
    ),
    click.option(
        "--release-all",
        is_flag=True,
        help="With --undrain: remove every holder's hold and clear the drain.",
    ),
)

WRITES = (
    click.option(
        "--concurrency",
        type=int,
        metavar="N",
        help=f"Patch requests in flight at most (1-{MAX_CONCURRENCY}; default: {DEFAULT_CONCURRENCY}).",
    ),
    click.option(
        "--qps", type=FiniteFloat(min=0.1), metavar="QPS", help="Limit patch requests per second (default: no limit)."
    ),
    click.option(
        "--journal-dir",
        type=NonEmptyPath(file_okay=False, path_type=Path),
        help="Where to write the operation journal (default: $AGN_XTASK_JOURNAL_DIR or ~/.local/state/agn-xtask/journal).",
    ),
)


def option_groups() -> list[OptionGroup]:
    """The request's flags as --help groups them: (title, what the group is for, options). The
    wave gates' flags (declared by each gate: xtask.drain.gates) sit among the waves' own."""
    return [
        ("Cluster and selection", "Which cluster, and which providers to change.", CLUSTER_SELECTION),
        ("Targets and waiting", "Whose overlays must serve the change, and how long to wait.", TARGETS),
        ("Safety and plans", "Checks before any write; a plan to review first.", SAFETY),
        (
            "Waves",
            "Drain in waves, each gated on metrics (docs/provider-drain.md).",
            (*WAVES, *gate_options(), *WAVES_LAST),
        ),
        ("Holds", "Who holds the drain, why, and until when.", HOLDS),
        ("Writes and journal", "How fast to write, and where the journal goes.", WRITES),
    ]
