"""The project's error types and the documented exit codes they map to.

Lower layers raise these; only ``xtask.__main__`` turns them into an exit status and a
message. Nothing here does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class ExitCode(enum.IntEnum):
    """Exit statuses of ``python -m xtask``.

    This enum and :data:`EXIT_CODE_MEANINGS` are the one source of truth: ``--help`` is
    generated from them, and tests check the README table and the report schemas against them.
    """

    OK = 0
    ERROR = 1
    USAGE = 2
    REFUSED = 3
    PARTIAL_RESTORED = 4
    NEEDS_INSPECTION = 5
    TIMEOUT = 6
    NOT_ELIGIBLE = 7
    INTERRUPTED = 8
    NOT_IDLE = 9
    GATE_BREACHED = 10
    SESSIONS_ACTIVE = 11

    @property
    def label(self) -> str:
        """The name reports carry (``exit.name``), e.g. ``needs-inspection``."""
        return self.name.lower().replace("_", "-")

    @property
    def meaning(self) -> str:
        return EXIT_CODE_MEANINGS[self]


EXIT_CODE_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "done: stored (patch-only), or converged on every named consumer",
    ExitCode.ERROR: "error: env/kubeconfig/context unusable, API server unreachable, a component failed to start",
    ExitCode.USAGE: "usage error; nothing was read or written",
    ExitCode.REFUSED: "refused before any write: unknown provider/gateway/target, server-side dry-run rejection, capacity guard, a disruption budget (declared or --max-unavailable), a drain lock held past --lock-timeout, a plan that is invalid or no longer matches (--plan), a state folder that is not the env's own; or a write the API server refused on its merits (RBAC or an admission policy changed after the dry run, or the one write of a single drain, which sends none) with everything else this run wrote restored",
    ExitCode.PARTIAL_RESTORED: "partial failure: some writes failed, everything this run changed was restored",
    ExitCode.NEEDS_INSPECTION: "needs inspection: restoration incomplete (e.g. changed by another writer), or a second signal",
    ExitCode.TIMEOUT: "convergence timeout: stored, not confirmed serving; the lagging targets are named",
    ExitCode.NOT_ELIGIBLE: "undrain stored, but a provider is kept out by a hard failure (not eligible until healthy)",
    ExitCode.INTERRUPTED: "interrupted (SIGINT/SIGTERM/SIGHUP, or its output went away): restored if during writes; applied state kept if during the wait (convergence or idle)",
    ExitCode.NOT_IDLE: "--wait-idle: drained and serving, not idle before --idle-timeout; each busy or unknown provider is named with its last reading and its age; the drain stays applied",
    ExitCode.GATE_BREACHED: "--wave-size: a wave's gate did not hold over its soak (breached, or no reading); stopped before the next wave; the wave, gate, value and threshold are named; the finished waves kept (--on-breach hold) or restored (--on-breach restore)",
    ExitCode.SESSIONS_ACTIVE: "--wait-sessions: drained and serving, but a consumer routed a turn to a drained provider within QUIET seconds (or did not report its sessions) until --sessions-timeout; each provider is named with its session counts; the drain stays applied",
}


def exit_codes_epilog(codes: Mapping[ExitCode, str | None] | None = None) -> str:
    """The ``Exit codes:`` block of ``--help`` (``\\b`` keeps click from rewrapping it).

    Every code, or only ``codes``: the ones a command can end with, each with its meaning above,
    or with the words given for it where the table's (written for a drain) would mislead, such as
    what "done" means for ``env up``."""
    shown = codes if codes is not None else dict.fromkeys(ExitCode)
    return "\b\nExit codes:\n" + "\n".join(
        f"  {code.value}  {words or code.meaning}" for code, words in sorted(shown.items())
    )


class XtaskError(Exception):
    """Base error: a message for the user and the exit code it maps to."""

    exit_code: ExitCode = ExitCode.ERROR

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class UsageError(XtaskError):
    exit_code = ExitCode.USAGE


class EnvDefinitionError(XtaskError):
    """An environment file is missing or malformed."""


class RuntimeUnavailable(XtaskError):
    """A runtime (kind, local) cannot be used here; the message says why and what to use."""


class ComponentFailed(XtaskError):
    """A process the project started did not come up; carries its log tail."""

    def __init__(self, message: str, *, log_tail: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.log_tail = log_tail


class RefusedError(XtaskError):
    exit_code = ExitCode.REFUSED


class CommandFailed(XtaskError):
    """A subprocess exited non-zero; carries its captured output."""

    def __init__(self, argv: list[str], returncode: int, output: str) -> None:
        super().__init__(f"command failed ({returncode}): {' '.join(argv)}")
        self.argv = argv
        self.returncode = returncode
        self.output = output
