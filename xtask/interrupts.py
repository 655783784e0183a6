"""SIGTERM handled like SIGINT while something is being brought up, and no signal between
spawning a process and recording it.

``env up`` rolls back what it started when it is interrupted: its steps' undos run in a
``finally``-style handler of :class:`KeyboardInterrupt`. Python raises that for SIGINT only;
SIGTERM (``kill``, a CI job's cancel, systemd) would end the process on the spot and orphan
what it had started. Inside :func:`interruptible`, the first SIGINT or SIGTERM raises
:class:`KeyboardInterrupt` wherever the main thread is; signals after it are ignored, so the
rollback the first one started is not itself cut short.

:func:`deferred` marks a section a signal must not split — between ``Popen`` and the pid file
that lets rollback and ``env down`` stop the process: a signal arriving there is held and
raised when the section ends. Outside :func:`interruptible` (tests, other commands) both are
no-ops and Python's own SIGINT behaviour applies.

The handler only sets state and raises; it prints nothing and stops nothing itself.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Latch:
    def __init__(self) -> None:
        self.raised = False  # the first signal was turned into KeyboardInterrupt
        self.deferring = 0  # depth of deferred() sections
        self.pending: int | None = None  # a signal that arrived in a deferred section

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.raised:
            return  # a rollback is running: let it finish
        if self.deferring:
            self.pending = signum
            return
        self.raised = True
        raise KeyboardInterrupt(signal.Signals(signum).name)

    def release(self) -> None:
        if self.pending is not None and not self.raised and not self.deferring:
            signum, self.pending = self.pending, None
            self.raised = True
            raise KeyboardInterrupt(signal.Signals(signum).name)


_active: _Latch | None = None


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """While the block runs in the main thread, SIGINT and SIGTERM both raise KeyboardInterrupt (once)."""
    global _active
    if threading.current_thread() is not threading.main_thread() or _active is not None:
        yield
        return
    latch = _Latch()
    previous = {sig: signal.signal(sig, latch.handle) for sig in SIGNALS}
    _active = latch
    try:
        yield
    finally:
        _active = None
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A signal arriving inside the block is raised when the block ends (inside :func:`interruptible`)."""
    latch = _active
    if latch is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    latch.deferring += 1
    try:
        yield
    finally:
        latch.deferring -= 1
    latch.release()
