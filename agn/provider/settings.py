"""The fake provider's settings: every flag of ``python -m agn.provider``, declared once
(:func:`agn.flags.setting`), as the operator's and the gateway's are. No state, no I/O."""

from __future__ import annotations

import dataclasses

from agn.engines import FORMATS
from agn.flags import parse, setting

PROG = "python -m agn.provider"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProviderSettings:
    name: str = setting(help="provider name, echoed in every completion")
    port: int = setting(0, type=int, help="port (0: pick a free one)")
    host: str = setting("127.0.0.1", help="address to bind (in a pod: 0.0.0.0)")
    unhealthy: bool = setting(False, help="start with /healthz failing")
    no_metrics: bool = setting(False, help="start with /metrics disabled")
    metrics_format: str = setting(
        "agn",
        choices=tuple(FORMATS),
        help="serve /metrics as this engine does, and health where it does "
        "(agn: /healthz; sglang: /get_model_info; the others: /health)",
    )
    api_key_file: str = setting(
        "",
        help="require an API key as the engine of --metrics-format does with --api-key (llama.cpp's "
        "--api-key-file: one key per line of this file), on the paths that engine guards "
        "(llama.cpp: all but its health path; 401 otherwise); /admin/state never needs one",
    )


def parse_settings(argv: list[str] | None, *, description: str | None = None) -> ProviderSettings:
    return parse(ProviderSettings, argv, prog=PROG, description=description)
