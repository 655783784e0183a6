"""The soak of one wave: begin every gate, let ``--soak`` seconds pass (saying how far it got),
then read every gate over the window that passed (:mod:`.base` says what a gate is).

The conductor (:mod:`xtask.drain.run`) decides what a reading means for the run (pass, breach,
``--on-breach``); this module only keeps the time and takes the readings.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from xtask.drain.core.progress import Progress
from xtask.drain.core.progress_phases import GateRead, Soaking
from xtask.drain.gates.base import Gate, GateReading

SOAK_PROGRESS_SECONDS = 5.0  # a soak says how far it got this often


def soak(
    number: int, gates: Sequence[Gate], seconds: float, *, interrupted: threading.Event, progress: Progress
) -> tuple[float, list[GateReading]] | None:
    """Soak wave ``number`` for ``seconds`` between each gate's begin and read: the window that
    passed and the readings, or None when ``interrupted`` ends it early (nothing is read then)."""
    for gate in gates:
        gate.begin()
    start = time.monotonic()
    while (remaining := start + seconds - time.monotonic()) > 0:
        if interrupted.wait(min(remaining, SOAK_PROGRESS_SECONDS)):
            return None
        progress(Soaking(number, round(min(time.monotonic() - start, seconds), 1), seconds))
    window = time.monotonic() - start
    readings = [gate.read(window) for gate in gates]
    for r in readings:
        progress(GateRead(number, r.to_json()))
    return window, readings
