"""argparse types shared by the AGN programs (operator, gateway): numbers that must be finite,
and Kubernetes names (checked whole, so a trailing newline or a '/' is refused at start-up)."""

from __future__ import annotations

import argparse
import math

from agn.names import label_problem, subdomain_problem


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


def namespace_name(value: str) -> str:
    """A namespace: a DNS-1123 label (``..`` or ``a/b`` would change the request path)."""
    problem = label_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(f"{problem}, got {value!r}")
    return value


def object_name(value: str) -> str:
    """An object's name (consumer, lease): a DNS-1123 subdomain."""
    problem = subdomain_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(f"{problem}, got {value!r}")
    return value
