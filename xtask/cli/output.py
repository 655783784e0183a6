"""Terminal output: rich on a terminal, plain lines otherwise (pipes, CI, ``NO_COLOR``).

rich is imported on first use only: a command that prints JSON or plain lines does not pay
for it at start-up.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def fancy() -> bool:
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


@functools.cache
def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, no_color=bool(os.environ.get("NO_COLOR")))


@functools.cache
def out_console() -> Console:
    from rich.console import Console

    # Off a terminal rich would assume 80 columns and squeeze tables; logs and pipes have room.
    return Console(
        highlight=False, no_color=bool(os.environ.get("NO_COLOR")), width=None if sys.stdout.isatty() else 200
    )


def progress(message: str) -> None:
    """One progress line on stderr (stdout stays clean for results and JSON)."""
    if fancy():
        err_console().print(f"[cyan]•[/cyan] {message}")
    else:
        print(f"- {message}", file=sys.stderr, flush=True)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()
