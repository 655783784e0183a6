"""Selecting providers for a drain: by exact name or by exact ``spec.providerGateway``.

Pure. Gateway membership is the explicit field only — never inferred from endpoints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from xtask.errors import RefusedError, UsageError
from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Selector(Record):
    provider: str | None = None
    gateway: str | None = None

    def __post_init__(self) -> None:
        if (self.provider is None) == (self.gateway is None):
            raise UsageError("exactly one of --provider or --gateway is required")
        value = self.provider if self.provider is not None else self.gateway
        if not value:
            raise UsageError("--provider/--gateway needs a non-empty value")

    def describe(self) -> str:
        return f"provider {self.provider}" if self.provider is not None else f"providerGateway {self.gateway}"


def select(providers: Iterable[Mapping[str, Any]], selector: Selector, *, namespace: str) -> list[Mapping[str, Any]]:
    """The selected provider objects, sorted by name; a clear error when nothing matches."""
    items = list(providers)
    if selector.provider is not None:
        chosen = [p for p in items if p.get("metadata", {}).get("name") == selector.provider]
        if not chosen:
            raise RefusedError(f"provider {selector.provider!r} not found in namespace {namespace}")
    else:
        chosen = [p for p in items if (p.get("spec") or {}).get("providerGateway") == selector.gateway]
        if not chosen:
            known = sorted({str(g) for p in items if (g := (p.get("spec") or {}).get("providerGateway"))})
            raise RefusedError(
                f"no provider in namespace {namespace} has spec.providerGateway == {selector.gateway!r}",
                hint=f"gateways present: {', '.join(known) or 'none'}",
            )
    return sorted(chosen, key=lambda p: p["metadata"]["name"])
