"""Click parameter types shared by the commands."""

from __future__ import annotations

import math
from typing import Any

import click


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
