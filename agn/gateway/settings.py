"""The gateway's settings: every flag of ``python -m agn.gateway``, declared once.

One frozen dataclass; each field is a flag (:func:`agn.flags.setting`) whose default, help and
type give ``--help``, the parser, the command lines the runtimes start a gateway with
(:mod:`xtask.components`) and the table in ``docs/settings.md``. To add a flag, add a field
here (and use it). No state, no I/O.
"""

from __future__ import annotations

import dataclasses

from agn.argtypes import namespace_name, object_name, positive
from agn.flags import parse, setting
from agn.logs import LEVELS

PROG = "python -m agn.gateway"


@dataclasses.dataclass(frozen=True, kw_only=True)
class GatewaySettings:
    kubeconfig: str | None = setting(None, help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
    context: str | None = setting(None, help="kube context (default: the current one)")
    namespace: str | None = setting(
        None, type=namespace_name, help="namespace of the consumer and its overlay (default: the context's)"
    )
    consumer: str = setting(type=object_name, help="InferenceConsumer name (its RoutingOverlay has the same name)")
    port: int = setting(0, type=int, help="port to serve on (0: pick a free one)")
    host: str = setting("127.0.0.1", help="address to bind (in a pod: 0.0.0.0)")
    upstream_timeout: float = setting(30.0, type=positive, help="seconds to wait for a provider")
    session_ttl: float = setting(
        600.0, type=positive, help="seconds a sticky session may stay idle before it is forgotten (status.sessions)"
    )
    sessions_report_interval: float = setting(
        1.0,
        type=positive,
        help="seconds between two looks at the sticky sessions for status.sessions (written only when it changed)",
    )
    log_level: str = setting(
        "info", choices=tuple(sorted(LEVELS, key=lambda name: LEVELS[name])), help="least severe log line written"
    )


def parse_settings(argv: list[str] | None) -> GatewaySettings:
    """The gateway's settings from its command line; a usage error exits 2 naming the flag."""
    return parse(GatewaySettings, argv, prog=PROG, description="Run one AGN consumer gateway.")
