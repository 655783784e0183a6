"""Test doubles for the project's small interfaces (next to the tests that use them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from xtask.errors import CommandFailed
from xtask.procs import CommandResult


@dataclasses.dataclass
class FakeCmdRunner:
    """Records commands and answers from a table of handlers; for unit tests.

    ``handlers`` maps an argv prefix (tuple) to a function returning (returncode, stdout).
    Unmatched commands succeed with empty output. ``envs[i]`` is the environment ``calls[i]``
    was given (None: the caller's own).
    """

    handlers: dict[tuple[str, ...], Callable[[list[str]], tuple[int, str]]] = dataclasses.field(default_factory=dict)
    calls: list[list[str]] = dataclasses.field(default_factory=list)
    envs: list[dict[str, str] | None] = dataclasses.field(default_factory=list)

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        argv = list(argv)
        self.calls.append(argv)
        self.envs.append(dict(env) if env is not None else None)
        code, out = 0, ""
        for prefix in sorted(self.handlers, key=len, reverse=True):
            if tuple(argv[: len(prefix)]) == prefix:
                code, out = self.handlers[prefix](argv)
                break
        if check and code != 0:
            raise CommandFailed(argv, code, out)
        return CommandResult(argv, code, out, "")
