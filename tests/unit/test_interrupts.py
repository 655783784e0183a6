"""``xtask.interrupts``: SIGTERM raises KeyboardInterrupt like SIGINT (once), a deferred section
holds a signal until it ends, and the previous handlers come back afterwards."""

from __future__ import annotations

import os
import signal

import pytest

from xtask.interrupts import deferred, interruptible


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_first_signal_raises_and_later_ones_are_ignored(signum):
    before = signal.getsignal(signal.SIGTERM)
    reached_rollback_end = False
    with pytest.raises(KeyboardInterrupt):
        with interruptible():
            try:
                os.kill(os.getpid(), signum)  # the handler runs before the next line
                pytest.fail("the signal did not interrupt")
            except KeyboardInterrupt:
                os.kill(os.getpid(), signal.SIGTERM)  # during the "rollback": ignored
                os.kill(os.getpid(), signal.SIGINT)
                reached_rollback_end = True
                raise
    assert reached_rollback_end
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_signal_in_a_deferred_section_is_raised_when_it_ends():
    steps = []
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        with interruptible():
            with deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                steps.append("spawned")
                steps.append("recorded")
            steps.append("after")  # never reached
    assert steps == ["spawned", "recorded"]


def test_a_drain_is_interrupted_by_sighup_and_by_its_output_going_away():
    """SIGHUP (a dropped SSH session) interrupts a drain as SIGTERM does; so does a progress
    stream that can no longer be written, which raises SIGHUP once at the process itself."""
    import time

    from xtask.drain.signals import SignalLatch

    def interrupted(latch: SignalLatch) -> bool:
        deadline = time.monotonic() + 5
        while not latch.interrupted.is_set() and time.monotonic() < deadline:
            latch.interrupted.wait(0.05)  # the handler runs on the main thread between bytecodes
        return latch.interrupted.is_set()

    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as a terminal session starts it
    try:
        _sighup_interrupts(interrupted)
    finally:
        signal.signal(signal.SIGHUP, before)


def _sighup_interrupts(interrupted) -> None:
    import io

    from xtask.cli.env.drain_view import PlainReporter
    from xtask.drain.core.progress import Said
    from xtask.drain.signals import SignalLatch

    with SignalLatch(on_second=lambda signum: None, second_exit_code=5) as latch:
        os.kill(os.getpid(), signal.SIGHUP)
        assert interrupted(latch) and latch.name == "SIGHUP"

    closed = io.StringIO()
    closed.close()
    reporter = PlainReporter(closed)
    with SignalLatch(on_second=lambda signum: None, second_exit_code=5) as latch:
        reporter(Said("selection: p-one"))  # the stream is gone: one SIGHUP, never a traceback
        assert interrupted(latch) and latch.name == "SIGHUP"
        reporter(Said("journal: /tmp/x"))  # nothing more is tried (a second signal would exit at once)
    assert reporter.lost
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL


def test_under_nohup_a_hangup_does_not_interrupt_the_run():
    """SIGHUP ignored when the run starts (``nohup``): the latch leaves it ignored, so a dropped
    terminal does not end the run; SIGTERM still does."""
    import time

    from xtask.drain.signals import SignalLatch

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with SignalLatch(on_second=lambda signum: None, second_exit_code=5) as latch:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + 5
            while not latch.interrupted.is_set() and time.monotonic() < deadline:
                latch.interrupted.wait(0.05)
            assert latch.name == "SIGTERM"
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
