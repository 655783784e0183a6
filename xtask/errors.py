"""The project's error types and the documented exit codes they map to.

Lower layers raise these; only ``xtask.__main__`` turns them into an exit status and a
message. Nothing here does I/O.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Exit statuses of ``python -m xtask``; documented in ``--help`` and the README."""

    OK = 0
    ERROR = 1  # environment or unexpected failure (message says what)
    USAGE = 2  # bad flags or arguments; nothing was read or written
    REFUSED = 3  # refused before any write: bad selection/target, dry-run rejection, capacity guard
    PARTIAL_RESTORED = 4  # some writes failed; what this run changed was restored
    NEEDS_INSPECTION = 5  # restoration incomplete or interrupted hard; see the journal
    TIMEOUT = 6  # stored, but convergence was not confirmed before --timeout
    NOT_ELIGIBLE = 7  # undrain stored, but a provider is kept out by a hard failure
    INTERRUPTED = 8  # SIGINT/SIGTERM; applied state kept or restored as reported
    NOT_IDLE = 9  # --wait-idle: drained and serving, but a provider was not idle before --idle-timeout


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


class KubeconfigError(XtaskError):
    """A kubeconfig file that xtask must write cannot be read, parsed or locked; names the file."""


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
