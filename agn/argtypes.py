"""argparse types shared by the AGN programs (operator, gateway): numbers that must be finite."""

from __future__ import annotations

import argparse
import math


def finite(value: str) -> float:
    """A finite number: ``nan`` passes every comparison below and ``inf`` would mean "never"."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {value!r}")
    return number


def positive(value: str) -> float:
    number = finite(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return number


def non_negative(value: str) -> float:
    number = finite(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return number
