"""The API server's clock, as a process estimates it from an offset to its own clock.

Times the drain writes (holds' ``since``/``expiresAt``, a slow-start window's ``startTime``) are
on the API server's clock: the writer read it from the ``Date`` header of a request (a
``SelfSubjectReview``, which every authenticated identity may create). A reader that judges
them (the operator's hold expiry, a gateway's slow-start ramp) does the same now and then and
keeps the offset, so hosts whose clocks disagree still agree on the windows.

``Date`` has whole seconds (truncated), so the offset is taken to the middle of that second:
the estimate is within about half a second plus the request's round trip.
"""

from __future__ import annotations

import dataclasses
import threading
import time

from agn.kube import Kube, KubeError
from agn.logs import JsonLog

CLOCK_REFRESH_SECONDS = 30.0  # how often the API server's clock is read again


@dataclasses.dataclass
class ServerClock:
    """The API server's time, from an offset to this process's clock read now and then."""

    kube: Kube
    refresh: float = CLOCK_REFRESH_SECONDS
    offset: float | None = None
    read_at: float = 0.0

    def now(self) -> float:
        """The server's time; asks the server when the offset is unknown or old (may raise KubeError)."""
        if self.offset is None or time.monotonic() - self.read_at >= self.refresh:
            self.read()
        assert self.offset is not None
        return time.time() + self.offset

    def read(self) -> float:
        """Ask the server now; returns the new offset (server minus local, seconds)."""
        sent = time.time()
        _, server = self.kube.who_am_i()
        local = (sent + time.time()) / 2
        self.offset, self.read_at = server + 0.5 - local, time.monotonic()
        return self.offset

    def known_now(self) -> float | None:
        """The server's time as last known (None: never read); never asks."""
        return None if self.offset is None else time.time() + self.offset

    def estimate(self) -> float:
        """The server's time as last known, else this host's clock; never asks (for a request path)."""
        return time.time() + (self.offset or 0.0)

    def keep_reading(self, stop: threading.Event, log: JsonLog) -> None:
        """Read the server's clock every :attr:`refresh` seconds until ``stop`` (a thread's target);
        a failed read keeps the last offset (or none: this host's clock) and is logged."""
        while True:
            try:
                offset = self.read()
                log.debug("server clock read", offset_seconds=round(offset, 3))
            except KubeError as exc:
                log.warning("server clock not read; slow-start windows are judged on this host's clock", error=str(exc))
            if stop.wait(self.refresh):
                return
