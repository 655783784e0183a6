"""The drain guards: the rules a drain must pass before its writes, one module each, each found
through one line in :data:`GUARDS` (the :class:`~xtask.drain.guards.base.Guard` shape:
``name``, the report ``field`` its section fills, ``check(snapshot, look) -> Verdict``).

The conductor runs every guard on one :class:`~xtask.drain.snapshot.Snapshot` with
:func:`check_all`: under the drain locks before each wave's writes (a drain without
``--wave-size`` is one wave), and, for a dry run, a plan, an undrain and a drain in waves, once
before (a first look without the lock). Adding a guard is its module and its line here; the
conductor knows only this interface. Their refusals are reported in this order: the plan's
first (a stale plan is the first thing to say), then the rules of the drain itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xtask.drain.guards import budget, capacity, holds, plan, targets
from xtask.drain.guards.base import Guard, Look, Verdict

if TYPE_CHECKING:
    from xtask.drain.snapshot import Snapshot

GUARDS: list[Guard] = [plan.GUARD, holds.GUARD, budget.GUARD, capacity.GUARD, targets.GUARD]


def check_all(snapshot: Snapshot, look: Look) -> list[Verdict]:
    """Every registered guard's verdict on ``snapshot``, in registry order."""
    return [guard.check(snapshot, look) for guard in GUARDS]
