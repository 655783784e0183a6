"""The drain journal's records and their replay: what each line of a journal says, and the
state a journal's text describes (:func:`replay`). The format is described in
:mod:`xtask.drain.edges.journal`, which owns the file.

Pure: text and records in, :class:`JournalReplay` out; no file, no API request. A torn last line
(a crash mid-append) is ignored; a bad line anywhere else is a :class:`JournalError` naming the
line.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from agn.names import label_problem, subdomain_problem
from agn.yamltext import show
from xtask.drain.core.changes import OUR_ANNOTATIONS, Change, with_owners
from xtask.drain.core.holds import is_hold_key
from xtask.drain.core.states import RunState, WaveState, settled
from xtask.errors import XtaskError

FORMAT = "agn.dev/drain-journal/v2"


class JournalError(XtaskError):
    """A journal that cannot be read or written; the message names the file and the problem."""


@dataclasses.dataclass
class Entry:
    """What the journal says about one provider."""

    change: Change  # the plan as of the last intent (a 409 re-plan updates it)
    write: str = "planned"  # planned | intended | written | failed
    written_generation: int | None = None
    restored: str | None = None

    @property
    def maybe_written(self) -> bool:
        """Whether our PATCH may have landed: it was sent and not answered with a definite error."""
        return self.write in ("intended", "written")

    @property
    def expected_generation(self) -> int:
        """The generation our write produced (or would have): the spec changes exactly once per write."""
        if self.written_generation is not None:
            return self.written_generation
        return self.change.generation + (1 if self.change.flag_changes else 0)  # annotations alone keep it


@dataclasses.dataclass
class JournalReplay:
    """What a journal says once replayed (:func:`replay`): the run, each provider's entry, its
    run state and each wave's state."""

    operation: str
    context: str | None
    namespace: str
    requested: bool
    reason: str | None
    started_at: str
    entries: dict[str, Entry]
    state: str = RunState.APPLYING  # a RunState, or whatever word an older journal holds
    torn_tail: bool = False
    plan_digest: str | None = None  # the digest of the plan applied (``provider-drain --plan``)
    budget_override: str | None = None  # --override-budget REASON
    waves: list[list[str]] = dataclasses.field(default_factory=list)  # a drain in waves: each wave's providers
    selection: list[str] = dataclasses.field(default_factory=list)  # a drain in waves: every provider selected
    wave_states: dict[int, str] = dataclasses.field(default_factory=dict)  # wave number (from 1) -> its WaveState

    def first_unfinished_wave(self) -> int:
        """The number (from 1) of the first wave not held; ``len(waves) + 1`` when all are."""
        for number in range(1, len(self.waves) + 1):
            if self.wave_states.get(number) != WaveState.PASSED:
                return number
        return len(self.waves) + 1

    @property
    def request(self) -> str:
        return "drain" if self.requested else "undrain"

    def to_restore(self) -> list[tuple[Change, int]]:
        """Providers this run may have changed and that are not yet put back, sorted by name."""
        return [
            (e.change, e.expected_generation)
            for name, e in sorted(self.entries.items())
            if e.maybe_written and not settled(e.restored)
        ]

    def to_dict(self) -> dict[str, Any]:
        """A summary of the journal: its waves, its request and every provider's entry."""
        waves = (
            {
                "waves": [
                    {"wave": k, "providers": names, "state": self.wave_states.get(k, WaveState.PENDING)}
                    for k, names in enumerate(self.waves, start=1)
                ]
            }
            if self.waves
            else {}
        )
        return {
            **waves,
            "operation": self.operation,
            "context": self.context,
            "namespace": self.namespace,
            "request": self.request,
            "reason": self.reason,
            "state": self.state,
            "startedAt": self.started_at,
            "providers": {
                name: {
                    "previous": e.change.previous,
                    "previousAnnotations": dict(e.change.previous_annotations),
                    "resourceVersion": e.change.resource_version,
                    "generation": e.change.generation,
                    "write": e.write,
                    "written": e.write == "written",
                    "writtenGeneration": e.written_generation,
                    "restored": e.restored,
                }
                for name, e in sorted(self.entries.items())
            },
        }


# Generations and HTTP statuses are Kubernetes int64s; nothing larger or non-finite is a journal's.
_MAX_COUNT = 2**63 - 1


class _BadNumber(ValueError):
    """A number JSON allows but no journal holds: NaN, Infinity, or one out of range (1e400)."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadNumber(f"the number {text} is out of range")
    return value


def _no_constant(text: str) -> float:
    raise _BadNumber(f"{text} is not a number a journal may hold")


def _loads(text: str) -> Any:
    """``json.loads`` refusing NaN, Infinity and numbers beyond a float (:class:`_BadNumber`), and
    nesting too deep for the parser (ValueError instead of RecursionError)."""
    try:
        return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _is_json(line: str) -> bool:
    try:
        _loads(line)
    except _BadNumber:
        return True
    except ValueError:
        return False
    return True


def _count(value: Any, field: str) -> int:
    """A generation or status: ``int(value)`` (missing or null is 0), finite and in int64's range."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{field} must be a whole number, got {value!r}")
    number = int(value or 0)
    if not 0 <= number <= _MAX_COUNT:
        raise ValueError(f"{field} must be between 0 and {_MAX_COUNT}, got {number}")
    return number


def _change_from(provider: str, requested: bool, rec: Mapping[str, Any]) -> Change:
    annotations = rec.get("previousAnnotations") or {}
    if not isinstance(annotations, Mapping):
        raise ValueError("previousAnnotations must be an object")
    previous = rec.get("previous")
    if previous is not None and not isinstance(previous, bool):
        raise ValueError("previous must be true, false or null")
    holds = rec.get("holds") or {}
    if not isinstance(holds, Mapping):
        raise ValueError("holds must be an object")
    writes = holds.get("writes") or {}
    others = holds.get("others") or []
    if not isinstance(writes, Mapping) or not all(is_hold_key(k) and isinstance(v, bool) for k, v in writes.items()):
        raise ValueError("holds.writes must map hold annotation keys to true or false")
    if not isinstance(others, list) or not all(isinstance(k, str) and is_hold_key(k) for k in others):
        raise ValueError("holds.others must be a list of hold annotation keys")
    key = holds.get("key")
    if key is not None and not (isinstance(key, str) and is_hold_key(key)):
        raise ValueError("holds.key must be a hold annotation key")
    slow_start, previous_slow_start = _slow_start_from(rec)
    return Change(
        provider=provider,
        previous=previous,
        requested=requested,
        resource_version=str(rec.get("resourceVersion") or ""),
        generation=_count(rec.get("generation"), "generation"),
        previous_annotations={k: annotations.get(k) for k in (*OUR_ANNOTATIONS, *with_owners(writes))},
        hold_writes=dict(writes),
        keep_drain=holds.get("keepDrain") is True,
        other_holds=tuple(others),
        hold_key=key,
        release_all=holds.get("releaseAll") is True,
        slow_start=slow_start,
        previous_slow_start=previous_slow_start,
        session_deadline=_positive_int(rec.get("sessionDeadline"), "sessionDeadline"),
        previous_session_deadline=_optional_text(rec.get("previousSessionDeadline"), "previousSessionDeadline"),
    )


def _slow_start_from(rec: Mapping[str, Any]) -> tuple[int | None, Mapping[str, Any] | None]:
    """A plan item's ``slowStart`` (seconds) and ``previousSlowStart`` (the field as it was);
    absent in journals written before slow start: none, and nothing to put back."""
    seconds = rec.get("slowStart")
    if seconds is not None and (not isinstance(seconds, int) or isinstance(seconds, bool) or seconds <= 0):
        raise ValueError(f"slowStart must be a positive whole number of seconds, got {seconds!r}")
    previous = rec.get("previousSlowStart")
    if previous is not None and not isinstance(previous, Mapping):
        raise ValueError("previousSlowStart must be an object")
    return seconds, previous


def _positive_int(value: Any, key: str) -> int | None:
    """A plan item's whole number of seconds (absent in older journals: None)."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
        raise ValueError(f"{key} must be a positive whole number of seconds, got {value!r}")
    return value


def _optional_text(value: Any, key: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value


def _check_namespace(value: str, where: str) -> None:
    """A journal's namespace goes into request paths: ``..`` would reach another resource."""
    problem = label_problem(value)
    if problem:
        raise ValueError(f"{where} {problem}, got {show(value)}")


_OPERATION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _check_header_words(operation: str, context: Any, where: str) -> None:
    """The operation id is written into providers' annotations and Events and decides which
    drains are this run's; a context is looked up in kubeconfigs. Ids xtask makes are tokens
    (``20261204T103745Z-a770f0``); a hand-edited one with control characters or spaces is not."""
    if not _OPERATION.fullmatch(operation):
        raise ValueError(
            f"{where}.operation must be a token of letters, digits, '.', '_' and '-', got {show(operation)}"
        )
    if isinstance(context, str) and not context.isprintable():  # its type: preflight.journal_context
        raise ValueError(f"{where}.context must be a printable string, got {show(context)}")


def _check_provider_name(value: str, where: str) -> None:
    """A provider name goes into request paths: ``p/status`` would reach a subresource."""
    problem = subdomain_problem(value)
    if problem:
        raise ValueError(f"{where} names provider {show(value)}, which is not a provider name: it {problem}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class JournalHeader:
    """What a journal's first line records: the operation, where, what was asked, and the plan."""

    operation: str
    context: str | None
    namespace: str
    requested: bool
    reason: str | None
    changes: list[Change]
    plan_digest: str | None = None
    waves: list[list[str]] | None = None  # a drain in waves: each wave's providers
    selection: list[str] | None = None  # a drain in waves: every provider selected
    budget_override: str | None = None  # --override-budget REASON: the declared budget set aside
    capacity_override: list[str] | None = None  # the capacity guard's refusals --force set aside

    def record(self, *, now: str) -> dict[str, Any]:
        """The header line, started at ``now`` (the caller's clock: UTC, ISO 8601)."""
        return {
            **({"waves": self.waves, "selection": list(self.selection or [])} if self.waves else {}),
            "type": "header",
            "format": FORMAT,
            "operation": self.operation,
            "context": self.context,
            "namespace": self.namespace,
            "request": "drain" if self.requested else "undrain",
            "reason": self.reason,
            "startedAt": now,
            "plan": [_plan_item(c) for c in self.changes],
            **({"planDigest": self.plan_digest} if self.plan_digest is not None else {}),
            **({"budgetOverride": self.budget_override} if self.budget_override is not None else {}),
            **({"capacityOverride": list(self.capacity_override)} if self.capacity_override else {}),
        }


def _plan_item(c: Change) -> dict[str, Any]:
    item: dict[str, Any] = {
        "provider": c.provider,
        "previous": c.previous,
        "previousAnnotations": dict(c.previous_annotations),
        "resourceVersion": c.resource_version,
        "generation": c.generation,
    }
    if c.slow_start is not None:
        item["slowStart"] = c.slow_start
    if c.previous_slow_start is not None:
        item["previousSlowStart"] = dict(c.previous_slow_start)
    if c.session_deadline is not None:
        item["sessionDeadline"] = c.session_deadline
    if c.previous_session_deadline is not None:
        item["previousSessionDeadline"] = c.previous_session_deadline
    if c.hold_key is not None:
        item["holds"] = {
            "key": c.hold_key,
            "writes": dict(c.hold_writes),
            "keepDrain": c.keep_drain,
            "others": list(c.other_holds),
            "releaseAll": c.release_all,
        }
    return item


def intent_record(change: Change, *, replanned: bool = False) -> dict[str, Any]:
    if replanned:
        return {"type": "intent", **_plan_item(change)}
    return {
        "type": "intent",
        "provider": change.provider,
        "resourceVersion": change.resource_version,
        "generation": change.generation,
    }


def state_from_header(rec: Mapping[str, Any]) -> JournalReplay:
    if rec.get("type") != "header" or rec.get("format") != FORMAT:
        raise ValueError(f"the first line is not a {FORMAT} header")
    if rec.get("request") not in ("drain", "undrain"):
        raise ValueError("header.request must be drain or undrain")
    requested = rec["request"] == "drain"
    plan = rec.get("plan")
    if not isinstance(plan, list):
        raise ValueError("header.plan must be a list")
    entries = {}
    for item in plan:
        if not isinstance(item, Mapping) or not isinstance(item.get("provider"), str):
            raise ValueError("every header.plan item needs a provider name")
        _check_provider_name(item["provider"], "header.plan")
        entries[item["provider"]] = Entry(_change_from(item["provider"], requested, item))
    for key in ("operation", "namespace"):
        if not isinstance(rec.get(key), str) or not rec[key]:
            raise ValueError(f"header.{key} must be a non-empty string")
    _check_namespace(rec["namespace"], "header.namespace")
    _check_header_words(rec["operation"], rec.get("context"), "header")
    return JournalReplay(
        operation=rec["operation"],
        context=rec.get("context"),
        namespace=rec["namespace"],
        requested=requested,
        reason=rec.get("reason"),
        started_at=str(rec.get("startedAt") or ""),
        entries=entries,
        plan_digest=rec["planDigest"] if isinstance(rec.get("planDigest"), str) else None,
        budget_override=rec["budgetOverride"] if isinstance(rec.get("budgetOverride"), str) else None,
        waves=_waves_from(rec.get("waves"), entries),
        selection=_selection_from(rec.get("selection")),
    )


def _selection_from(value: Any) -> list[str]:
    """``header.selection`` (a drain in waves): every provider selected, already-in-state ones too."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise ValueError("header.selection must be a list of provider names")
    for name in value:
        _check_provider_name(name, "header.selection")
    return list(value)


def _waves_from(value: Any, entries: Mapping[str, Entry]) -> list[list[str]]:
    """``header.waves``: a list of non-empty lists of provider names, each name once, every
    planned provider in one of them (a wave may also hold providers already in state)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(w, list) and w for w in value):
        raise ValueError("header.waves must be a list of non-empty lists of provider names")
    seen: set[str] = set()
    for wave in value:
        for name in wave:
            if not isinstance(name, str):
                raise ValueError("header.waves must be a list of non-empty lists of provider names")
            _check_provider_name(name, "header.waves")
            if name in seen:
                raise ValueError(f"header.waves names provider {name} twice")
            seen.add(name)
    missing = sorted(set(entries) - seen)
    if missing:
        raise ValueError(f"header.waves leaves out planned provider(s) {', '.join(missing)}")
    return [list(w) for w in value]


def apply_record(state: JournalReplay, rec: Mapping[str, Any]) -> None:
    """Fold one non-header record into ``state`` (used by replay and by the live writer alike)."""
    kind = rec.get("type")
    if kind == "state":
        state.state = str(rec["state"])
        return
    if kind == "wave":
        number = rec.get("wave")
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= len(state.waves):
            raise ValueError(f"a wave record names wave {number!r}, which is not one of the header's waves")
        state.wave_states[number] = WaveState(str(rec["state"]))
        return
    name = rec.get("provider")
    entry = state.entries.get(name) if isinstance(name, str) else None
    if entry is None:
        raise ValueError(f"a {kind} record names provider {name!r}, which is not in the plan")
    assert isinstance(name, str)
    if kind == "intent":
        if "previous" in rec:
            entry.change = _change_from(name, state.requested, rec)
        else:
            entry.change = dataclasses.replace(
                entry.change,
                resource_version=str(rec.get("resourceVersion") or ""),
                generation=_count(rec.get("generation"), "generation"),
            )
        entry.write, entry.written_generation = "intended", None
    elif kind == "done":
        entry.write, entry.written_generation = "written", _count(rec["generation"], "generation")
    elif kind == "failed":
        # An answer in 400..499 means the API server refused the write: it did not land. Anything
        # else (no answer, a 5xx) may have landed; the intent stands.
        if 400 <= _count(rec.get("status"), "status") < 500:
            entry.write = "failed"
    elif kind == "restore":
        entry.restored = str(rec["outcome"])
    else:
        raise ValueError(f"unknown record type {kind!r}")


def replay(text: str, *, source: str) -> JournalReplay:
    """The state a journal's text describes. Raises :class:`JournalError` naming ``source``."""
    try:
        whole = _loads(text)
    except _BadNumber as exc:
        whole = None  # in JSON Lines, the line-by-line reading below names the line
        if not _is_json(text.split("\n", 1)[0]):
            raise JournalError(f"{source}: not a drain journal: {exc}") from exc
    except ValueError:
        whole = None  # JSON Lines (or garbage): read line by line below
    if whole is not None and not (isinstance(whole, Mapping) and whole.get("type") == "header"):
        raise JournalError(f"{source}: not a drain journal: expected JSON lines starting with a header object")
    lines = text.split("\n")
    complete, tail = lines[:-1], lines[-1]
    state: JournalReplay | None = None
    for number, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        try:
            rec = _loads(line)
            if not isinstance(rec, Mapping):
                raise ValueError("not a JSON object")
            if state is None:
                state = state_from_header(rec)
            else:
                apply_record(state, rec)
        except (ValueError, KeyError, TypeError, OverflowError) as exc:  # OverflowError: int(1e400)
            raise JournalError(f"{source}: not a drain journal: line {number}: {exc}") from exc
    if state is None:
        raise JournalError(f"{source}: not a drain journal: no complete header line")
    if tail.strip():
        # The last append was cut short (the process or host died mid-write). Everything before
        # it is intact; the torn record is at most one intent whose PATCH was never sent.
        state.torn_tail = True
    return state
