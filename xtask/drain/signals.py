"""Signal handling for long operations: handlers only set flags; cleanup runs in the caller.

First SIGINT/SIGTERM: ``interrupted`` is set; the fan-out stops issuing writes, lets
in-flight ones finish and restores; the waiter stops waiting. A second signal calls the
``on_second`` callback (which prints what may need inspection) and exits immediately.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType


class SignalLatch:
    def __init__(self, *, on_second: Callable[[int], None], second_exit_code: int) -> None:
        self.interrupted = threading.Event()
        self.signum: int | None = None
        self._on_second = on_second
        self._code = second_exit_code
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.interrupted.is_set():
            try:
                self._on_second(signum)
            finally:
                os._exit(self._code)
        self.signum = signum
        self.interrupted.set()

    def __enter__(self) -> SignalLatch:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""
