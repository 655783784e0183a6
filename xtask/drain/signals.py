"""Signal handling for long operations: handlers only set flags; cleanup runs in the caller.

First SIGINT, SIGTERM or SIGHUP (the terminal of an SSH session that dropped): ``interrupted``
is set; the fan-out stops issuing writes, lets in-flight ones finish and restores; the waiter
stops waiting. A second signal calls the ``on_second`` callback (which prints what may need
inspection) and exits immediately. A progress stream that can no longer be written (a closed
terminal or pipe) raises SIGHUP at the process itself, once (:func:`stream_lost`), so it ends the
run the same way; a drain lock whose renewal failed trips the latch (:meth:`SignalLatch.trip`).

A signal the process was started ignoring stays ignored: under ``nohup`` (SIGHUP ignored) a
dropped terminal must not end the run, and a background job of a non-interactive shell (SIGINT
ignored) is not interrupted by the terminal's Ctrl-C, as Python itself leaves such a SIGINT.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

# The signals that interrupt a run, handled alike.
INTERRUPTING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def stream_lost() -> None:
    """The run's output went away: interrupt the run as a dropped terminal does."""
    os.kill(os.getpid(), signal.SIGHUP)


class SignalLatch:
    def __init__(self, *, on_second: Callable[[int], None], second_exit_code: int) -> None:
        self.interrupted = threading.Event()
        self.signum: int | None = None
        self._on_second = on_second
        self._code = second_exit_code
        self._previous: dict[int, object] = {}
        self._tripped: str | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.interrupted.is_set():
            try:
                self._on_second(signum)
            finally:
                os._exit(self._code)
        self.signum = signum
        self.interrupted.set()

    def __enter__(self) -> SignalLatch:
        for sig in INTERRUPTING:
            if signal.getsignal(sig) is signal.SIG_IGN:
                continue  # nohup, or a background job: the caller asked to survive it
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def trip(self, name: str) -> None:
        """Interrupt the run as a first signal does, for a cause that is not a signal (``name``:
        how the run says it, e.g. the drain lock lost); a later signal is then the second one."""
        if not self.interrupted.is_set():
            self._tripped = name
            self.interrupted.set()

    @property
    def name(self) -> str:
        if self.signum:
            return signal.Signals(self.signum).name
        return self._tripped or ""
