"""Choosing a runtime: ``auto`` picks kind when Docker and kind both work, else local."""

from __future__ import annotations

import shutil
from collections.abc import Callable

from xtask.errors import CommandFailed
from xtask.procs import CmdRunner, RealCmdRunner


def kind_problems(runner: CmdRunner | None = None, *, which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """What keeps the kind runtime from working here (empty when it can be used)."""
    runner = runner or RealCmdRunner()
    problems = []
    if which("kind") is None:
        problems.append("`kind` is not on PATH")
    if which("kubectl") is None:
        problems.append("`kubectl` is not on PATH")
    if which("docker") is None:
        problems.append("`docker` is not on PATH")
    else:
        try:
            runner.run(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=20)
        except CommandFailed:
            problems.append("`docker info` fails: no Docker engine is reachable")
    return problems


def choose_runtime(requested: str, *, recorded: str | None, runner: CmdRunner | None = None) -> str:
    if requested != "auto":
        return requested
    if recorded:
        return recorded
    return "kind" if not kind_problems(runner) else "local"
