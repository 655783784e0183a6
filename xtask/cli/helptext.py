"""``--help`` beyond click's: examples, and the command's exit codes.

A command made with ``cls=HelpCommand`` (or a class with :class:`HelpMixin`) takes
``examples=[Example(...), ...]``; its help shows them after the options, each with the command
path it was invoked by (``xtask env up``, ``python -m xtask env up``, ``kubectl agn up``), then
its epilog (the exit codes, from :func:`xtask.errors.exit_codes_epilog`). The examples are data,
so tests read them from the help text and run them as shown.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap
from collections.abc import Sequence
from typing import Any

import click

from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Example(Record):
    """One example: what it does (a sentence) and the arguments after the command's path."""

    what: str
    args: str


class HelpMixin:
    """Renders ``examples`` before the epilog (for click's and cloup's command classes)."""

    examples: Sequence[Example]

    def __init__(self, *args: Any, examples: Sequence[Example] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.examples = tuple(examples)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Examples, then the epilog, each a section of its own like click's "Options:" (no indent)."""
        blocks = [example_lines(ctx.command_path, e, width=formatter.width) for e in self.examples]
        if blocks:  # one paragraph per example, each kept as it is by click's \\b
            formatter.write_paragraph()
            formatter.write_text("\n\n".join("\b\n" + "\n".join(b) for b in [["Examples:", *blocks[0]], *blocks[1:]]))
        epilog = getattr(self, "epilog", None)
        if epilog:
            formatter.write_paragraph()
            formatter.write_text(inspect.cleandoc(epilog))


def example_lines(command_path: str, example: Example, width: int) -> list[str]:
    """``example`` as ``#`` comment lines and its command line, a long one continued with ``\\``
    between arguments (a flag stays with its value): copied as shown, it runs."""
    import shlex  # only to show --help

    lines = textwrap.wrap(example.what, width, initial_indent="  # ", subsequent_indent="  # ")
    line = f"  {command_path}"
    for word in _words(shlex.split(example.args)):
        if len(line) + 1 + len(word) > width - 2 and line.strip() != command_path:
            lines.append(line + " \\")
            line = "     "
        line += " " + word
    return [*lines, line]


def _words(tokens: list[str]) -> list[str]:
    """``tokens`` shell-quoted, each flag joined with the value after it."""
    words: list[str] = []
    for token in tokens:
        if words and words[-1].startswith("-") and " " not in words[-1] and not token.startswith("-"):
            words[-1] += " " + _quoted(token)
        else:
            words.append(_quoted(token))
    return words


def _quoted(token: str) -> str:
    """``token`` as a shell word: quoted only when it must be (``~/x`` stays unquoted, so it expands)."""
    import shlex

    return token if re.fullmatch(r"[\w@%+=:,./~-]+", token) else shlex.quote(token)


class HelpCommand(HelpMixin, click.Command):
    """A click command whose help shows examples (``examples=``) before its exit codes (``epilog=``)."""
