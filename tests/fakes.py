"""Test doubles for the project's small interfaces (next to the tests that use them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from agn.model import ProviderView, candidate_id
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


def provider_fleet(
    n: int, *, now: float, drained: frozenset[int] = frozenset(), unhealthy: frozenset[int] = frozenset()
) -> list[ProviderView]:
    """``n`` provider views ``p0 …`` in three selection groups and five ranks, metrics read at
    ``now``; the indexes in ``drained`` are drained, those in ``unhealthy`` fail their health."""
    return [
        ProviderView(
            name=f"p{i}",
            endpoint=f"http://127.0.0.1:9000/pool/p{i}/",
            candidate_id=candidate_id(f"uid-{i}"),
            selection_group=f"g{i % 3}",
            rank=i % 5,
            drain=i in drained,
            healthy=i not in unhealthy,
            metrics_observed_at=now,
        )
        for i in range(n)
    ]
