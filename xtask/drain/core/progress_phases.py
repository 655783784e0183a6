"""Progress events of the phases a single drain does not run: a drain in waves and its gates
(:class:`WaveChanged`, :class:`Soaking`, :class:`GateRead`), ``--wait-idle``
(:class:`IdleChanged`, :class:`IdleTick`), a restoration (:class:`RestoreFinished`) and a wait
for another run's drain lock (:class:`LockWaiting`).

They are :data:`xtask.drain.core.progress.ProgressEvent` s like the others, kept apart so a single
drain does not create their classes at import (issue #44): what emits one imports this module
where it does, and so does the plain view's line for one. Pure: plain frozen values.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from xtask.drain.core.states import Restoration
from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class RestoreFinished(Record):
    restoration: Restoration


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class IdleChanged(Record):
    """One provider's idle state or reading changed (its entry of the report's ``idle``)."""

    provider: dict[str, Any]


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class IdleTick(Record):
    """Every awaited provider's last reading, about once a second (for a live view)."""

    providers: tuple[dict[str, Any], ...]


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class WaveChanged(Record):
    """A wave of a drain in waves reached ``state`` (:class:`~xtask.drain.core.states.WaveState`)."""

    wave: int
    of: int
    state: str


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Soaking(Record):
    """A converged wave has soaked ``elapsed`` of ``seconds``."""

    wave: int
    elapsed: float
    seconds: float


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class GateRead(Record):
    """A wave gate's reading at the end of a soak (``reading``: its JSON form)."""

    wave: int
    reading: dict[str, Any]


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class LockWaiting(Record):
    """Another run holds the drain lock of ``network`` (the Lease ``lease``): this run has waited
    ``waited`` of ``timeout`` seconds for it (said when the holder changes, and every few seconds)."""

    network: str
    lease: str
    holder: str
    waited: float
    timeout: float

    @property
    def text(self) -> str:
        return (
            f"waiting for the drain lock of network {self.network} held by {self.holder or 'nobody known'} "
            f"({self.waited:g}s of --lock-timeout {self.timeout:g}s)"
        )
