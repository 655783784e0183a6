"""What a ``provider-drain`` run and a ``drain-restore`` are asked to do, checked as a whole
before anything is read or written, and the names both write under. No I/O (:func:`actor` only
asks the system who and where).
"""

from __future__ import annotations

import dataclasses
import getpass
import socket
from pathlib import Path

from xtask.drain.selection import Selector
from xtask.errors import UsageError

FIELD_MANAGER = "agn-xtask-provider-drain"
MAX_CONCURRENCY = 64
DEFAULT_IDLE_TIMEOUT = 300.0


@dataclasses.dataclass(frozen=True)
class DrainRequest:
    """One ``provider-drain`` run; a combination of flags that makes no sense is a usage error here."""

    selector: Selector
    drain: bool
    context: str | None = None
    kubeconfig: str | None = None
    namespace: str | None = None
    dry_run: bool = False
    network: str | None = None
    consumers: tuple[str, ...] = ()
    concurrency: int = 8
    qps: float | None = None
    timeout: float = 120.0
    reason: str | None = None
    force: bool = False
    journal_dir: Path | None = None
    wait_idle: bool = False
    idle_timeout: float | None = None  # None: DEFAULT_IDLE_TIMEOUT (and not given on the command line)

    def __post_init__(self) -> None:
        if bool(self.network) != bool(self.consumers):
            raise UsageError("--network and --consumer go together: name the network and every consumer to wait for")
        if self.wait_idle and not self.drain:
            raise UsageError("--wait-idle waits for drained providers to go idle; it does not apply to --undrain")
        if self.wait_idle and not self.network:
            raise UsageError(
                "--wait-idle runs once the drain is serving: name --network and every --consumer to wait for"
            )
        if self.idle_timeout is not None and not self.wait_idle:
            raise UsageError("--idle-timeout bounds the wait of --wait-idle; it does nothing without it")
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise UsageError(f"--concurrency must be between 1 and {MAX_CONCURRENCY}")
        if self.reason and not self.drain:
            raise UsageError("--reason records why a provider is drained; it does not apply to --undrain")


@dataclasses.dataclass(frozen=True)
class RestoreRequest:
    """One ``drain-restore JOURNAL``."""

    journal: Path
    context: str | None = None  # None: the context the journal records
    kubeconfig: str | None = None
    dry_run: bool = False
    concurrency: int = 8


def actor() -> str:
    """Who runs this (``user@host``), as the ``agn.dev/drain-by`` annotation and the Events record it."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
