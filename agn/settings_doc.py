"""``docs/settings.md``: every flag of the operator, the gateway and the fake provider, rendered
from their settings dataclasses (:mod:`agn.flags`).

The page is generated, never edited: ``tests/unit/test_settings_doc.py`` fails when the
committed page differs from :func:`render` and writes the new one, to be committed. Pure.
"""

from __future__ import annotations

from agn.flags import markdown_table
from agn.gateway.settings import GatewaySettings
from agn.operator.settings import Settings
from agn.provider.settings import ProviderSettings

PROGRAMS = (
    ("The operator", "python -m agn.operator", "agn/operator/settings.py", Settings),
    ("The consumer gateway", "python -m agn.gateway", "agn/gateway/settings.py", GatewaySettings),
    ("The fake provider", "python -m agn.provider", "agn/provider/settings.py", ProviderSettings),
)


def render() -> str:
    parts = [
        "# Settings of the AGN programs\n",
        "<!-- Generated from the settings dataclasses by agn/settings_doc.py; do not edit by hand. -->\n",
        "Every flag of the three programs the runtimes start, with its default. Each program's flags "
        "are one dataclass: to add or change a flag, edit that file; `--help`, the parser, the "
        "command lines of `xtask/components.py` and this page follow from it. "
        "`pytest tests/unit/test_settings_doc.py` rewrites this page when it is out of date.\n",
    ]
    for title, command, source, cls in PROGRAMS:
        parts.append(f"## {title}: `{command}`\n")
        parts.append(f"Declared in `{source}`.\n")
        parts.append(markdown_table(cls))
    return "\n".join(parts)
