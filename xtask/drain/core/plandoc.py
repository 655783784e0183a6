"""What a drain plan fixes (``--plan-out`` writes it, ``--plan`` applies it): the flags it
fixes, declared once (:data:`PLANNED_FLAGS`: the CLI's refusal of them with ``--plan``, the
plan's ``arguments`` and ``spec.pacing``, and the request a plan gives are made from it), and a
loaded plan (:class:`LoadedPlan`). Pure; the file is :mod:`xtask.drain.edges.planfile`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from xtask.drain.core.amounts import Amount
from xtask.drain.core.defaults import (
    DEFAULT_CONCURRENCY,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_SESSIONS_TIMEOUT,
    DEFAULT_SOAK,
    DEFAULT_TIMEOUT,
    ON_BREACH,
)
from xtask.drain.gates import gate_flags
from xtask.drain.gates.base import GateFlag
from xtask.record import Record


def _always(spec: Mapping[str, Any]) -> bool:
    return True


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class PlannedFlag(Record):
    """A flag whose value a plan fixes: given with ``--plan`` it is a usage error."""

    key: str  # the command's keyword for it (a wave gate's: its key in the request's gate_options)
    flag: str
    unset: Any  # its value when not given
    from_request: Callable[[Any], Any]  # where a DrainRequest holds it
    from_spec: Callable[[Mapping[str, Any]], Any]  # where a plan's spec records it (unset: not recorded)
    # Whether a plan's spec records it: plans made before the pacing was recorded do not.
    recorded: Callable[[Mapping[str, Any]], bool] = _always
    field: str | None = None  # its field in spec.pacing (in spec.pacing.gates for a gate's)
    gate: bool = False  # a wave gate's flag (xtask.drain.gates declares it)
    default: Any = None  # the value the run takes when it is not given: left out of ``arguments``

    def given(self, flags: Mapping[str, Any]) -> bool:
        """Whether the command's keywords ``flags`` give it (a gate's: in ``gate_options``)."""
        where = (flags.get("gate_options") or {}) if self.gate else flags
        return bool(where.get(self.key, self.unset) != self.unset)


def _amount_or_none(text: str | None) -> Amount | None:
    return None if text is None else Amount.parse(text)


def _camel(key: str) -> str:
    first, *rest = key.split("_")
    return first + "".join(word.capitalize() for word in rest)


def _pacing_of(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    return spec.get("pacing") or {}


def _gates_of(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    return _pacing_of(spec).get("gates") or {}


def _from_json(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _to_json(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _pacing(
    key: str, flag: str, from_request: Callable[[Any], Any], *, unset: Any = None, default: Any = None
) -> PlannedFlag:
    """A flag of how the run goes, recorded in ``spec.pacing`` as the value the run takes."""
    field = _camel(key)
    return PlannedFlag(
        key,
        flag,
        unset,
        from_request,
        lambda s: _pacing_of(s).get(field, unset),
        lambda s: field in _pacing_of(s),
        field=field,
        default=default,
    )


def _gate(gate: GateFlag) -> PlannedFlag:
    """A wave gate's flag, as the gate declares it, recorded in ``spec.pacing.gates`` as given
    (null: not given, the gate's own default)."""
    field, unset = _camel(gate.key), (() if gate.multiple else None)
    return PlannedFlag(
        gate.key,
        gate.name,
        unset,
        lambda r: _from_json(r.gate_options.get(gate.key, unset)),
        lambda s: _from_json(_gates_of(s).get(field, unset)),
        lambda s: field in _gates_of(s),
        field=field,
        gate=True,
    )


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


# How the run goes, besides what it selects and writes: how fast it writes, how long it waits
# and for what, how each wave soaks, and what it does on a breach. A plan records the value the
# run takes (the default where not given; null where it does not apply), and the wave gates'
# flags as given, each gate's from its own declaration (xtask.drain.gates).
PACING_FLAGS = (
    _pacing("soak", "--soak", lambda r: r.soak_seconds if r.in_waves else None, default=DEFAULT_SOAK),
    _pacing(
        "on_breach", "--on-breach", lambda r: _or(r.on_breach, ON_BREACH[0]) if r.in_waves else None, default="hold"
    ),
    _pacing("concurrency", "--concurrency", lambda r: r.concurrency, default=DEFAULT_CONCURRENCY),
    _pacing("qps", "--qps", lambda r: r.qps),
    _pacing("timeout", "--timeout", lambda r: r.timeout, default=DEFAULT_TIMEOUT),
    _pacing("wait_idle", "--wait-idle", lambda r: r.wait_idle, unset=False),
    _pacing(
        "idle_timeout",
        "--idle-timeout",
        lambda r: _or(r.idle_timeout, DEFAULT_IDLE_TIMEOUT) if r.wait_idle else None,
        default=DEFAULT_IDLE_TIMEOUT,
    ),
    _pacing("wait_sessions", "--wait-sessions", lambda r: r.wait_sessions),
    _pacing(
        "sessions_timeout",
        "--sessions-timeout",
        lambda r: _or(r.sessions_timeout, DEFAULT_SESSIONS_TIMEOUT) if r.wait_sessions is not None else None,
        default=DEFAULT_SESSIONS_TIMEOUT,
    ),
    *(_gate(f) for f in gate_flags()),
)

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
    *PACING_FLAGS,
)


def _hold(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    return spec.get("hold") or {}


def _argument(flag: str, value: Any) -> list[str]:
    """``flag`` with ``value`` as a command line gives it (none for False, None or ())."""
    if value is True:
        return [flag]
    if value is False or value is None:
        return []
    if isinstance(value, tuple | list):
        return [a for v in value for a in (flag, str(v))]
    return [flag, f"{value:g}" if isinstance(value, float) else str(value)]


def planned_arguments(req: Any) -> list[str]:
    """The flags of ``req`` (a DrainRequest) that decide what the run does and how it goes (not
    where it runs), as a plan records them: those at their defaults are left out."""
    args: list[str] = []
    for planned in PLANNED_FLAGS:
        value = planned.from_request(req)
        if value != planned.unset and value != planned.default:
            args += _argument(planned.flag, value)
    return args


def pacing_doc(req: Any) -> dict[str, Any]:
    """``spec.pacing`` of a plan made from ``req`` (a DrainRequest): every pacing flag's value,
    the gates' under ``gates``."""
    doc: dict[str, Any] = {str(f.field): _to_json(f.from_request(req)) for f in PACING_FLAGS if not f.gate}
    doc["gates"] = {str(f.field): _to_json(f.from_request(req)) for f in PACING_FLAGS if f.gate}
    return doc


def pacing_arguments(pacing: Mapping[str, Any]) -> list[str]:
    """A ``spec.pacing`` as the flags it stands for (what a review shows), defaults included."""
    args: list[str] = []
    for f in PACING_FLAGS:
        args += _argument(f.flag, f.from_spec({"pacing": pacing}))
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
        """The request's flags the plan fixes (selection, operation and pacing), by keyword; the
        wave gates' as ``gate_options``. A flag the plan does not record is unset (the default)."""
        fields: dict[str, Any] = {"gate_options": {}}
        for flag in PLANNED_FLAGS:
            value = flag.from_spec(self.spec)
            if not flag.gate:
                fields[flag.key] = value
            elif value != flag.unset:
                fields["gate_options"][flag.key] = value
        return fields

    def not_recorded(self) -> list[str]:
        """The flags this plan does not record (it was made before plans recorded them): the
        run applying it takes their defaults."""
        return [flag.flag for flag in PLANNED_FLAGS if not flag.recorded(self.spec)]
