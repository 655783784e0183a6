"""What a drain plan fixes (``--plan-out`` writes it, ``--plan`` applies it): the flags it
fixes, declared once (:data:`PLANNED_FLAGS`: the CLI's check, the plan's ``arguments`` and the
request a plan gives are made from it), and a loaded plan (:class:`LoadedPlan`). Pure; the
file is :mod:`xtask.drain.edges.planfile`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from xtask.drain.core.amounts import Amount


@dataclasses.dataclass(frozen=True)
class PlannedFlag:
    """A flag whose value a plan fixes: given with ``--plan`` it is a usage error."""

    key: str  # the command's keyword for it
    flag: str
    unset: Any  # its value when not given
    from_request: Callable[[Any], Any]  # where a DrainRequest holds it
    from_spec: Callable[[Mapping[str, Any]], Any]  # where a plan's spec records it


def _amount_or_none(text: str | None) -> Amount | None:
    return None if text is None else Amount.parse(text)


# The flags a plan fixes, in the order a plan's ``metadata.arguments`` lists them: the one
# declaration the CLI's check, the plan's arguments and the request a plan gives are made from.
PLANNED_FLAGS = (
    PlannedFlag("provider", "--provider", None, lambda r: r.selector.provider, lambda s: s["selector"]["provider"]),
    PlannedFlag("gateway", "--gateway", None, lambda r: r.selector.gateway, lambda s: s["selector"]["gateway"]),
    PlannedFlag("undrain", "--undrain", False, lambda r: not r.drain, lambda s: s["operation"]["request"] == "undrain"),
    PlannedFlag("reason", "--reason", None, lambda r: r.reason or None, lambda s: s["operation"]["reason"]),
    PlannedFlag("network", "--network", None, lambda r: r.network, lambda s: s["targets"]["network"]),
    PlannedFlag("consumers", "--consumer", (), lambda r: r.consumers, lambda s: tuple(s["targets"]["consumers"])),
    PlannedFlag("force", "--force", False, lambda r: r.force, lambda s: s["operation"]["force"]),
    PlannedFlag(
        "slow_start", "--slow-start", None, lambda r: r.slow_start, lambda s: s["operation"].get("slowStartSeconds")
    ),
    PlannedFlag(
        "session_deadline",
        "--session-deadline",
        None,
        lambda r: r.session_deadline,
        lambda s: s["operation"].get("sessionDeadlineSeconds"),
    ),
    PlannedFlag(
        "max_unavailable",
        "--max-unavailable",
        None,
        lambda r: r.max_unavailable,
        lambda s: _amount_or_none(s["budget"] and s["budget"]["maxUnavailable"]),
    ),
    PlannedFlag(
        "capacity_margin",
        "--capacity-margin",
        None,
        lambda r: r.capacity_margin,
        lambda s: _amount_or_none((s.get("capacity") or {}).get("margin")),
    ),
    PlannedFlag("wave_size", "--wave-size", None, lambda r: r.wave_size, lambda s: _amount_or_none(s["waves"]["size"])),
    # The hold a plan writes or releases: who holds it (the planner's user@host unless --holder
    # named someone), its ticket and expiry, and whether every hold is released.
    PlannedFlag("holder", "--holder", None, lambda r: r.holder, lambda s: _hold(s).get("holder")),
    PlannedFlag("ticket", "--ticket", None, lambda r: r.ticket, lambda s: _hold(s).get("ticket")),
    PlannedFlag("expires_in", "--expires-in", None, lambda r: r.expires_in, lambda s: _hold(s).get("expiresIn")),
    PlannedFlag(
        "release_all", "--release-all", False, lambda r: r.release_all, lambda s: _hold(s).get("releaseAll", False)
    ),
)


def _hold(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    return spec.get("hold") or {}


def planned_arguments(req: Any) -> list[str]:
    """The flags of ``req`` (a DrainRequest) that decide what the run does (not how it runs or
    where), as a plan records them."""
    args: list[str] = []
    for planned in PLANNED_FLAGS:
        value = planned.from_request(req)
        if value == planned.unset:
            continue
        if value is True:
            args.append(planned.flag)
        elif isinstance(value, tuple):
            args += [a for v in value for a in (planned.flag, str(v))]
        else:
            args += [planned.flag, str(value)]
    return args


@dataclasses.dataclass(frozen=True, eq=False)
class LoadedPlan:
    path: Path
    doc: Mapping[str, Any]

    @property
    def digest(self) -> str:
        return str(self.doc["metadata"]["digest"])

    @property
    def namespace(self) -> str:
        return str(self.doc["metadata"]["namespace"])

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.doc["spec"]

    def request_fields(self) -> dict[str, Any]:
        """The request's flags the plan fixes (selection and operation), by keyword."""
        return {flag.key: flag.from_spec(self.spec) for flag in PLANNED_FLAGS}
