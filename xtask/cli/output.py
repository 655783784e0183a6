"""Terminal output: rich on a terminal, plain lines otherwise (pipes, CI, ``NO_COLOR``).

Every value that comes from outside (flags, files, journals, objects in the cluster, error
messages) is printed through one of the escaping helpers here: :func:`printable` for plain
text, :func:`markup_safe` for text handed to rich (``console.print``, table cells, progress
descriptions). Control characters (ESC, CR, C1, bidi overrides, ...) are shown escaped
(``\\x1b``), so input cannot move the cursor, recolour or rewrite the terminal; rich markup in
data (``[/]``, ``[link=...]``) is shown as text, never interpreted. JSON output needs neither:
``json.dumps`` escapes control characters itself.

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


def printable(value: object) -> str:
    """``str(value)`` with every character that is not printable shown as its escape (``\\x1b``)."""
    text = str(value)
    if text.isprintable():
        return text
    # repr() of one character escapes it exactly when it is not printable (e.g. '\x1b', '\u202e').
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def printable_lines(text: str) -> str:
    """Like :func:`printable`, but keeps line breaks and tabs: for messages of several lines."""
    return "\n".join("\t".join(printable(part) for part in line.split("\t")) for line in text.split("\n"))


def markup_safe(value: object) -> str:
    """:func:`printable`, with rich markup escaped: a value that rich will show as it is."""
    from rich.markup import escape

    return escape(printable(value))


def fancy() -> bool:
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


@functools.cache
def err_console() -> Console:
    from rich.console import Console

    # emoji=False: ":smile:" in a value is text; highlight=False: values are not recoloured.
    return Console(stderr=True, highlight=False, emoji=False, no_color=bool(os.environ.get("NO_COLOR")))


@functools.cache
def out_console() -> Console:
    from rich.console import Console

    # Off a terminal rich would assume 80 columns and squeeze tables; logs and pipes have room.
    return Console(
        highlight=False,
        emoji=False,
        no_color=bool(os.environ.get("NO_COLOR")),
        width=None if sys.stdout.isatty() else 200,
    )


def progress(message: str) -> None:
    """One progress line on stderr (stdout stays clean for results and JSON); ``message`` is text, not markup.

    Best effort: a reader that went away (``env down 2>&1 | head -1``) must not stop the work the
    line reports on half-way, such as a teardown; the result is still reported, or the failure to
    report it is, at the end (``xtask.__main__``)."""
    try:
        if fancy():
            err_console().print(f"[cyan]•[/cyan] {markup_safe(message)}")
        else:
            print(f"- {printable(message)}", file=sys.stderr, flush=True)
    except (BrokenPipeError, ValueError):  # ValueError: the stream was closed
        pass


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()
