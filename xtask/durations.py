"""Durations as every time flag of xtask takes them: ``90`` (a bare number is seconds), ``90s``,
``500ms``, ``5m``, ``1.5h``, ``1d``, or units in a row as Go and kubectl write them (``1h30m``).

A bare number is read as ``float()`` reads it (``120``, ``2.5``, ``1e3``), as the flags that took
seconds always did; a number with a unit is digits with at most one decimal point. Never
negative, never ``nan`` or infinite, never longer than :data:`MAX_SECONDS` (a wait of 1e300
seconds overflows the clocks and locks it reaches). Pure: no click, no I/O.
"""

from __future__ import annotations

import math
import re

from agn.yamltext import show

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MAX_SECONDS = 10 * 366 * 86400  # ten years: longer is a typo, not a plan
_NUMBER = r"(?:[0-9]{1,12}(?:\.[0-9]{0,9})?|\.[0-9]{1,9})"
_WITH_UNITS = re.compile(rf"(?:{_NUMBER}(?:ms|s|m|h|d))+")
_PART = re.compile(rf"({_NUMBER})(ms|s|m|h|d)")
FORMS = "seconds, or a number with ms, s, m, h or d (90, 90s, 500ms, 5m, 1.5h, 1h30m, 1d)"


def parse_seconds(text: str) -> float:
    """The seconds ``text`` names (>= 0); ValueError naming the text otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{show(text)} is not a duration: give {FORMS}")
    if _WITH_UNITS.fullmatch(text):
        seconds = sum(float(n) * UNITS[u] for n, u in _PART.findall(text))
    else:
        try:
            seconds = float(text)
        except ValueError:
            raise ValueError(f"{show(text)} is not a duration: give {FORMS}") from None
    if math.isnan(seconds):
        raise ValueError(f"{show(text)} is not a duration: give {FORMS}")
    if seconds > MAX_SECONDS:  # infinity too
        raise ValueError(f"{show(text)} is too long a duration (at most {MAX_SECONDS // 86400} days)")
    if seconds < 0 or text.lstrip().startswith("-"):
        raise ValueError(f"{show(text)} is a negative duration")
    return seconds


def describe(seconds: float) -> str:
    """``seconds`` as a person reads a limit: ``366 days``, ``1 hour``, ``90 seconds``."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} second{'s' if seconds != 1 else ''}"
