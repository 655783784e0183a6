"""The values a ``provider-drain`` run takes for the flags of how it goes when they are not given:
read by the request (:mod:`xtask.drain.core.request`), the CLI's help, and the plan, which records
the value a run takes (:mod:`xtask.drain.core.plandoc`). Constants only."""

from __future__ import annotations

MAX_CONCURRENCY = 64
DEFAULT_CONCURRENCY = 8
DEFAULT_TIMEOUT = 120.0  # --timeout: seconds to wait for convergence
DEFAULT_IDLE_TIMEOUT = 300.0
DEFAULT_SESSIONS_TIMEOUT = 600.0
DEFAULT_SOAK = 30.0
ON_BREACH = ("hold", "restore")  # the first is the default
DEFAULT_LOCK_TIMEOUT = 30  # --lock-timeout: seconds a run waits for a network's drain lock
MAX_LOCK_TIMEOUT = 24 * 3600
