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
