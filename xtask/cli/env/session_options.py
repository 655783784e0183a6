"""provider-drain's flags for sessions that end on purpose (docs/provider-drain.md):
``--session-deadline`` (with the selection) and ``--wait-sessions``/``--sessions-timeout`` (with
the targets). Declared here so the command's module stays small; no state, no I/O."""

from __future__ import annotations

import click

from agn.model import MAX_SESSION_DEADLINE_SECONDS, MIN_SESSION_DEADLINE_SECONDS
from xtask.drain.core.defaults import DEFAULT_SESSIONS_TIMEOUT
from xtask.params import DurationType

SESSION_DEADLINE = click.option(
    "--session-deadline",
    type=DurationType(minimum=MIN_SESSION_DEADLINE_SECONDS, maximum=MAX_SESSION_DEADLINE_SECONDS, whole=True),
    metavar="DURATION",
    help="Drain only: DURATION after the write (1s-24h, on the API server's clock) the gateways move each drained "
    "provider's sticky sessions to an admitted provider of the same selection group at their next turn; kept in "
    "the cluster, so it holds if this command exits; an undrain clears it (docs/provider-drain.md).",
)

WAIT_SESSIONS = (
    click.option(
        "--wait-sessions",
        type=DurationType(minimum=1, maximum=3600),
        metavar="QUIET",
        help="Drain only, with --network/--consumer: once the drain is serving, wait until no named consumer has "
        "routed a turn to a drained provider for QUIET seconds (the gateways' status.sessions; a consumer that has "
        "not reported is not quiet); before --wait-idle when both are given.",
    ),
    click.option(
        "--sessions-timeout",
        type=DurationType(minimum=1),
        metavar="DURATION",
        help=f"How long --wait-sessions waits (default: {DEFAULT_SESSIONS_TIMEOUT:.0f}); then exit 11 naming the "
        "providers and their sessions, drain kept.",
    ),
)
