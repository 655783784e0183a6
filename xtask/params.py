"""Click parameter types shared by the commands and by what declares flags for them (a wave
gate, a runtime): finite numbers, Kubernetes names, non-empty paths. Knows no command."""

from __future__ import annotations

import math
import os
import stat
from typing import Any

import click

from agn.inputfile import kind_of
from agn.names import label_problem, subdomain_problem


def show(value: Any) -> str:
    """``value`` for a usage error (:func:`agn.yamltext.show`), loaded with YAML only when a flag is refused."""
    from agn.yamltext import show as shown

    return shown(value)


class FiniteFloat(click.FloatRange):
    """A float in an optional range that must also be finite.

    ``float()`` accepts ``nan``, ``inf`` and ``1e999`` (= inf), and ``nan`` passes every range
    check because it compares false with everything: ``--qps nan`` would mean "no pacing" and
    ``--timeout nan`` "wait nans". They are usage errors (exit 2) instead.
    """

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


class KubeName(click.ParamType):
    """A name checked as Kubernetes checks it, before anything is read: a DNS-1123 label
    (namespaces, env names) or subdomain (object names). Anything else is a usage error (exit 2)
    naming the value, its control characters escaped: a name becomes a file name or a URL path
    segment, where ``..``, ``/`` or ``%2F`` would reach something else."""

    def __init__(self, what: str, *, subdomain: bool = False) -> None:
        self.what = what
        self.problem = subdomain_problem if subdomain else label_problem
        self.name = what

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        problem = self.problem(value)
        if problem:
            size = f" ({len(value)} characters)" if isinstance(value, str) and len(value) > 60 else ""
            self.fail(f"{show(value)}{size} is not a valid {self.what}: it {problem}.", param, ctx)
        return value


class NonEmptyPath(click.Path):
    """A path that must not be empty: ``''`` would mean the current folder to ``Path``."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value:
            self.fail("an empty path names nothing; give a path.", param, ctx)
        if not self.file_okay and isinstance(value, str | os.PathLike):
            # click refuses a regular file where a folder is wanted, not a FIFO or a device.
            try:
                mode = os.stat(value).st_mode
            except OSError:
                mode = None
            if mode is not None and not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
                self.fail(f"{click.format_filename(value)!r} is {kind_of(mode)}, not a folder.", param, ctx)
        return super().convert(value, param, ctx)


class AmountType(click.ParamType):
    """``N`` or ``P%`` (:class:`xtask.drain.core.amounts.Amount`); ``minimum`` bounds the count."""

    name = "N|P%"

    def __init__(self, *, minimum: int = 0) -> None:
        self.minimum = minimum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from xtask.drain.core.amounts import Amount

        if isinstance(value, Amount):
            return value
        try:
            amount = Amount.parse(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)
        if amount.value < self.minimum:
            self.fail(f"{show(str(value))} is less than {self.minimum}{'%' if amount.percent else ''}.", param, ctx)
        return amount


class CheckedText(click.ParamType):
    """Free text checked by ``problem`` (None when fine): a usage error naming the value, escaped."""

    def __init__(self, name: str, problem: Any) -> None:
        self.name = name
        self.problem = problem

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        problem = self.problem(value)
        if problem:
            self.fail(f"{show(value)} {problem}.", param, ctx)
        return value


class DurationType(click.ParamType):
    """A duration (:mod:`xtask.durations`: ``90``, ``90s``, ``500ms``, ``5m``, ``1.5h``, ``1d``; a
    bare number is seconds), the one type of every time flag. Seconds as a float, or as an int
    when ``whole`` (a fractional second is then refused). More than 0 (at least 0 with ``zero``),
    at least ``minimum`` and at most ``maximum`` when given; anything else is a usage error
    (exit 2) naming the flag and the value."""

    name = "DURATION"

    def __init__(
        self, *, minimum: float | None = None, maximum: float | None = None, zero: bool = False, whole: bool = False
    ) -> None:
        self.minimum = minimum
        self.maximum = maximum
        self.zero = zero
        self.whole = whole

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from xtask.durations import describe, parse_seconds

        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            seconds = float(value)  # a default, or a value already converted
            text = str(value)
        else:
            text = str(value) if not isinstance(value, str) else value
            try:
                seconds = parse_seconds(text)
            except ValueError as e:
                self.fail(f"{e}.", param, ctx)
        if seconds == 0 and not self.zero:
            self.fail(f"{show(text)} is not a positive duration.", param, ctx)
        if self.minimum is not None and seconds < self.minimum:
            self.fail(f"{show(text)} is shorter than {describe(self.minimum)}.", param, ctx)
        if self.maximum is not None and seconds > self.maximum:
            self.fail(f"{show(text)} is longer than {describe(self.maximum)}.", param, ctx)
        if self.whole:
            if seconds != int(seconds):
                self.fail(f"{show(text)} is not a whole number of seconds.", param, ctx)
            return int(seconds)
        return seconds
