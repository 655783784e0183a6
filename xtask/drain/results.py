"""What the phases of one drain run return, and the one place it is kept. Pure.

Each phase returns a frozen result (a :class:`Step`): what :mod:`~xtask.drain.prepare` found
(:class:`Selected`, :class:`DryRun`, :class:`PlanFile`, :class:`LocksSeen`), what a look of the
guards decided (:class:`Looked`), a refusal (:class:`Refused`), what the drain locks did
(:class:`LocksSeen`), the journal (:class:`Journaled`), what the writes did (:class:`Written`),
what a restoration did (:class:`RestoredAll`), what a wait saw (:class:`Waited`), how a wave
stands (:class:`WaveStep`), and what the last phase read (:class:`Finished`). The conductor
(:mod:`xtask.drain.run`) folds each into the run's :class:`RunResults` with :func:`fold`, the
one function that makes a new one; the report is built from the last
(:func:`xtask.drain.report.build_report`) and its exit code read off it
(:func:`xtask.drain.report.exit_code`).

A step's fields are named after the :class:`RunResults` fields they fill (None: says nothing);
how each is folded in is decided once, here: timings add up, the lists and maps of every wave
grow (:data:`_APPENDED`, :data:`_MERGED`), every wave's convergence is kept in one section
(:func:`fold_convergence`: a wave not eligible is not hidden by a later wave that converged),
anything else is replaced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from xtask.drain.core.progress import Planned
from xtask.drain.core.states import Outcome, WaveState
from xtask.record import Record

if TYPE_CHECKING:
    from xtask.drain.guards.base import Verdict


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class WaveResult(Record):
    """One wave of a drain in waves: its providers, how far it got, and what was measured."""

    number: int
    providers: tuple[str, ...]
    state: WaveState = WaveState.PENDING
    earlier: bool = False  # finished by the run this one resumes
    convergence_seconds: float | None = None
    soak_seconds: float | None = None
    gates: tuple[Mapping[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "wave": self.number,
            "providers": list(self.providers),
            "state": self.state,
            "gates": [dict(g) for g in self.gates],
        }
        if self.earlier:
            out["earlier"] = True
        if self.convergence_seconds is not None:
            out["convergenceSeconds"] = round(self.convergence_seconds, 3)
        if self.soak_seconds is not None:
            out["soakSeconds"] = round(self.soak_seconds, 3)
        return out


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class RunResults(Record):
    """What the phases of one run returned, folded in order (:func:`fold`) until the report is built."""

    context: str | None
    namespace: str
    request: str  # drain | undrain
    selector: str
    dry_run: bool
    holder: str | None
    operation: str | None = None  # set once every check before the writes passed
    selection: tuple[str, ...] = ()
    plan: tuple[Planned, ...] = ()
    refused: tuple[str, ...] = ()
    dry_run_outcomes: tuple[Outcome, ...] = ()
    plan_file: Mapping[str, Any] | None = None
    budget: Mapping[str, Any] | None = None
    capacity: Mapping[str, Any] | None = None  # the load-aware capacity guard (xtask.drain.guards.capacity)
    guards: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)  # each guard's last verdict
    forced_notes: Mapping[str, str] = dataclasses.field(default_factory=dict)  # guard -> what --force set aside
    waves: tuple[WaveResult, ...] | None = None
    lock: Mapping[str, Any] | None = None  # the drain locks taken (xtask.drain.locked)
    outcomes: tuple[Outcome, ...] = ()
    restorations: tuple[Mapping[str, Any], ...] = ()
    stored: Mapping[str, Any] | None = None
    still_held: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    convergence: Mapping[str, Any] | None = None
    idle: Mapping[str, Any] | None = None
    sessions: Mapping[str, Any] | None = None  # --wait-sessions
    interrupted: str | None = None
    journal: str | None = None
    timings: Mapping[str, float] = dataclasses.field(default_factory=dict)

    @property
    def capacity_override(self) -> str | None:
        """What ``--force`` set aside of the capacity guard, for the Events' note."""
        return self.forced_notes.get("capacity")


# How a step's field is folded in: appended (every wave's), merged (by key), else replaced;
# ``timings`` are added up (waves add their apply and wait times) and ``wave`` replaces one wave.
_APPENDED = frozenset({"plan", "refused", "outcomes"})
_MERGED = frozenset({"guards", "forced_notes", "still_held"})


class Step(Record):
    """A phase's frozen result: the :class:`RunResults` fields it fills (:meth:`items`)."""

    def items(self) -> Iterator[tuple[str, Any]]:
        """Each field this step says something about, with its value (None says nothing)."""
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is not None:
                yield f.name, value


def fold(results: RunResults, step: Step) -> RunResults:
    """``results`` with ``step`` kept: the one place a run's results change."""
    new: dict[str, Any] = {}
    for name, value in step.items():
        old: Any = new.get(name, getattr(results, name, None))
        if name == "timings":
            value = {**old, **{k: round(old.get(k, 0.0) + v, 3) for k, v in value.items()}}
        elif name == "wave":
            name, old = "waves", new.get("waves", results.waves)
            value = None if old is None else tuple(value.applied_to(w) for w in old)
        elif name in _APPENDED:
            value = (*old, *value)
        elif name in _MERGED:
            value = {**old, **value}
        elif name == "convergence":
            value = fold_convergence(old, value)
        new[name] = value
    return dataclasses.replace(results, **new)


# How far from served a wait ended: the folded state is the worst any wave's wait saw.
_WAIT_RANK = {"converged": 0, "not-eligible": 1}


def fold_convergence(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> Mapping[str, Any]:
    """The report's ``convergence`` after one more wave's wait (``new``) over the earlier waves'
    (``old``): the worst state any wave ended in, every wave's not-eligible findings, and each
    consumer and provider as its own wave's wait last saw it; the rest (observations, seconds,
    lagging, the consumers' revisions) is the last wait's."""
    if old is None:
        return new
    out = dict(new)
    if _WAIT_RANK.get(str(old["state"]), 2) > _WAIT_RANK.get(str(new["state"]), 2):
        out["state"] = old["state"]
    found = [*old.get("notEligible", ()), *new.get("notEligible", ())]
    if found:
        out["notEligible"] = list(dict.fromkeys(found))
    rows = {(p["consumer"], p["provider"]): p for p in [*old.get("providers", ()), *new.get("providers", ())]}
    if rows:
        out["providers"] = [rows[key] for key in sorted(rows)]
    return out


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Selected(Step):
    """What the first phase found: the selection, the plan's rows, the plan file applied."""

    selection: tuple[str, ...] | None = None
    plan: tuple[Planned, ...] | None = None
    plan_file: Mapping[str, Any] | None = None
    waves: tuple[WaveResult, ...] | None = None


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Refused(Step):
    """Why the run must not write (each reason one entry of the report's ``refused``)."""

    refused: tuple[str, ...]


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class DryRun(Step):
    """The server-side dry run's outcomes; ``operation`` once every check before it passed."""

    dry_run_outcomes: tuple[Outcome, ...]
    operation: str | None = None


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class PlanFile(Step):
    """The plan file written (``--plan-out``)."""

    plan_file: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class LocksSeen(Step):
    """The report's ``lock``: the locks a run took, or, for a dry run or a plan, who holds them."""

    lock: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Looked(Step):
    """One look of every guard (:mod:`xtask.drain.look`): their verdicts and ``where`` it was."""

    verdicts: tuple[Verdict, ...]
    where: str

    def items(self) -> Iterator[tuple[str, Any]]:
        """Each guard's section in its report field, its verdict in ``guards``, what ``--force``
        set aside, their timings added up."""
        timings: dict[str, float] = {}
        for v in self.verdicts:
            if v.guard in _GUARD_FIELDS and v.section is not None:
                yield _GUARD_FIELDS[v.guard], dict(v.section)
            for key, seconds in v.timings.items():
                timings[key] = timings.get(key, 0.0) + seconds
        yield "guards", {v.guard: v.to_dict(self.where) for v in self.verdicts}
        yield "forced_notes", {v.guard: v.forced_note for v in self.verdicts if v.forced_note}
        if timings:
            yield "timings", timings

    def section(self, guard: str) -> Mapping[str, Any] | None:
        """The report section of ``guard`` in this look."""
        return next((v.section for v in self.verdicts if v.guard == guard), None)


# The guards whose section is a field of the report of its own (any other guard's verdict is in
# ``guards`` only).
_GUARD_FIELDS = {"budget": "budget", "capacity": "capacity"}


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Journaled(Step):
    journal: str | None


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Interrupted(Step):
    """A signal (its name, or the loss of the drain lock) stopped the run."""

    interrupted: str | None


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Written(Step):
    """What one wave's writes did."""

    outcomes: tuple[Outcome, ...]
    timings: Mapping[str, float]
    interrupted: str | None = None


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class RestoredAll(Step):
    """What the one restoration of a run did (after a failed write, a signal or a breach)."""

    restorations: tuple[Mapping[str, Any], ...]


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Waited(Step):
    """What a wave's convergence wait saw."""

    convergence: Mapping[str, Any]
    timings: Mapping[str, float]
    interrupted: str | None = None


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class WaveStep(Step):
    """Wave ``number`` moved on: the fields of it that changed (None: as it was)."""

    number: int
    state: WaveState | None = None
    earlier: bool | None = None
    convergence_seconds: float | None = None
    soak_seconds: float | None = None
    gates: tuple[Mapping[str, Any], ...] | None = None

    def items(self) -> Iterator[tuple[str, Any]]:
        yield "wave", self

    def applied_to(self, wave: WaveResult) -> WaveResult:
        if wave.number != self.number:
            return wave
        changed = {k: v for k, v in super().items() if k != "number"}
        return dataclasses.replace(wave, **changed)


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Finished(Step):
    """What the last phase read: the stored state read back, who still holds what an undrain
    released, the idle and sessions waits."""

    stored: Mapping[str, Any] | None = None
    still_held: Mapping[str, Sequence[str]] | None = None
    idle: Mapping[str, Any] | None = None
    sessions: Mapping[str, Any] | None = None
    timings: Mapping[str, float] | None = None
    interrupted: str | None = None
