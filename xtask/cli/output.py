"""Terminal output: rich on a terminal, plain lines otherwise (pipes, CI, ``NO_COLOR``)."""
from __future__ import annotations

import json
import os
import sys
from typing import Any

from rich.console import Console


def fancy() -> bool:
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


_err = Console(stderr=True, highlight=False, no_color=bool(os.environ.get("NO_COLOR")))
# Off a terminal rich would assume 80 columns and squeeze tables; logs and pipes have room.
_out = Console(highlight=False, no_color=bool(os.environ.get("NO_COLOR")), width=None if sys.stdout.isatty() else 200)


def err_console() -> Console:
    return _err


def out_console() -> Console:
    return _out


def progress(message: str) -> None:
    """One progress line on stderr (stdout stays clean for results and JSON)."""
    if fancy():
        _err.print(f"[cyan]•[/cyan] {message}")
    else:
        print(f"- {message}", file=sys.stderr, flush=True)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()
