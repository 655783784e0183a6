"""The drain journal's records and their replay: what each line of a journal says, and the
state a journal's text describes (:func:`replay`). The format is described in
:mod:`xtask.drain.edges.journal`, which owns the file; each field is written and checked as it
is read back in :mod:`xtask.drain.core.journal_fields`.

Pure: text and records in, :class:`JournalReplay` out; no file, no API request. A torn last line
(a crash mid-append) is ignored; a bad line anywhere else is a :class:`JournalError` naming the
line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from xtask.drain.core.changes import Change
from xtask.drain.core.journal_fields import (
    BadNumber,
    change_from,
    check_header_words,
    check_namespace,
    check_provider_name,
    checked_count,
    is_json,
    loads,
    plan_item,
    selection_from,
    waves_from,
)
from xtask.drain.core.states import RunState, WaveState, settled
from xtask.errors import XtaskError
from xtask.record import Record

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


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class JournalHeader(Record):
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
            "plan": [plan_item(c) for c in self.changes],
            **({"planDigest": self.plan_digest} if self.plan_digest is not None else {}),
            **({"budgetOverride": self.budget_override} if self.budget_override is not None else {}),
            **({"capacityOverride": list(self.capacity_override)} if self.capacity_override else {}),
        }


def intent_record(change: Change, *, replanned: bool = False) -> dict[str, Any]:
    if replanned:
        return {"type": "intent", **plan_item(change)}
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
        check_provider_name(item["provider"], "header.plan")
        entries[item["provider"]] = Entry(change_from(item["provider"], requested, item))
    for key in ("operation", "namespace"):
        if not isinstance(rec.get(key), str) or not rec[key]:
            raise ValueError(f"header.{key} must be a non-empty string")
    check_namespace(rec["namespace"], "header.namespace")
    check_header_words(rec["operation"], rec.get("context"), "header")
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
        waves=waves_from(rec.get("waves"), entries),
        selection=selection_from(rec.get("selection")),
    )


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
            entry.change = change_from(name, state.requested, rec)
        else:
            entry.change = dataclasses.replace(
                entry.change,
                resource_version=str(rec.get("resourceVersion") or ""),
                generation=checked_count(rec.get("generation"), "generation"),
            )
        entry.write, entry.written_generation = "intended", None
    elif kind == "done":
        entry.write, entry.written_generation = "written", checked_count(rec["generation"], "generation")
    elif kind == "failed":
        # An answer in 400..499 means the API server refused the write: it did not land. Anything
        # else (no answer, a 5xx) may have landed; the intent stands.
        if 400 <= checked_count(rec.get("status"), "status") < 500:
            entry.write = "failed"
    elif kind == "restore":
        entry.restored = str(rec["outcome"])
    else:
        raise ValueError(f"unknown record type {kind!r}")


def replay(text: str, *, source: str) -> JournalReplay:
    """The state a journal's text describes. Raises :class:`JournalError` naming ``source``."""
    try:
        whole = loads(text)
    except BadNumber as exc:
        whole = None  # in JSON Lines, the line-by-line reading below names the line
        if not is_json(text.split("\n", 1)[0]):
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
            rec = loads(line)
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
