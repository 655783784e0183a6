"""What a drain guard is: one rule that may refuse a drain before its writes.

A guard is an object with a ``name``, the report ``field`` its section fills (None: none) and
``check(snapshot, look) -> Verdict``. It decides from the :class:`~xtask.drain.snapshot.Snapshot`
the conductor read (it never reads the cluster itself: the snapshot reads each part once, on
first use) and the :class:`Look` (which changes, where in the run, under the drain lock or not).
Every guard is listed once, in :data:`xtask.drain.guards.GUARDS`; the conductor runs them all,
in that order, through :func:`xtask.drain.guards.check_all`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from xtask.drain.core.changes import Change
from xtask.drain.core.request import DrainRequest
from xtask.record import Record

if TYPE_CHECKING:
    from xtask.drain.snapshot import Snapshot


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Look(Record):
    """What the guards are asked about: the changes of one wave (a drain without ``--wave-size``
    is one wave), ``where`` in the run (``before writing``, ``before wave 2 of 3``), and whether
    the conductor holds the drain locks (the snapshot is then fresh, and what it shows drained
    elsewhere counts as leaving)."""

    req: DrainRequest
    changes: tuple[Change, ...]
    hold_key: str
    where: str
    under_lock: bool
    # The report sections of the checks before this one (a --force over the capacity guard is
    # kept from one wave to the next).
    earlier: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # A plan file is being written (--plan-out): the last-provider guard counts for it.
    counting: bool = False
    # This run has written before this look (a later wave): its own writes are in the snapshot.
    written: bool = False

    @property
    def to_change(self) -> list[str]:
        return [c.provider for c in self.changes if not c.already]


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Verdict(Record):
    """One guard's answer: its refusals (empty: go ahead), its report section, what ``--force``
    set aside (``forced``, and ``forced_note`` for the Events), the lines it says, its timings."""

    guard: str
    refusals: tuple[str, ...] = ()
    section: Mapping[str, Any] | None = None
    forced: tuple[str, ...] = ()
    forced_note: str | None = None
    said: tuple[str, ...] = ()
    timings: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # Anything else the run keeps (the last-provider guard's group counts for a plan file).
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self, where: str) -> dict[str, Any]:
        """The guard's entry in the report's ``guards``."""
        return {"guard": self.guard, "checked": where, "refused": list(self.refusals), "forced": list(self.forced)}


class Guard(Protocol):
    """One rule a drain must pass before its writes."""

    @property
    def name(self) -> str: ...

    @property
    def field(self) -> str | None: ...

    def check(self, snapshot: Snapshot, look: Look) -> Verdict: ...


def refusals_of(verdicts: Sequence[Verdict]) -> list[str]:
    """Every refusal, in the guards' order."""
    return [r for v in verdicts for r in v.refusals]
