"""Reading a ``--help`` text back: its sections and the example command lines it shows (as
:mod:`xtask.cli.helptext` writes them), for the tests that check and run the examples."""

from __future__ import annotations

import re
import shlex


def section(text: str, heading: str) -> list[str]:
    """The lines of one section of a help text: after ``heading:``, up to the next heading."""
    lines = text.splitlines()
    start = lines.index(f"{heading}:") + 1
    end = next((i for i in range(start, len(lines)) if re.match(r"^\S.*:$", lines[i])), len(lines))
    return lines[start:end]


def shown_examples(text: str) -> list[list[str]]:
    """Each example command line of a help text, its ``\\`` continuations joined, as argv."""
    out: list[list[str]] = []
    joined = ""
    for line in section(text, "Examples"):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        joined += line
        if joined.endswith("\\"):
            joined = joined[:-1]
            continue
        out.append(shlex.split(joined))
        joined = ""
    return out
