"""A count of providers given as ``N`` or ``P%`` (``--wave-size``, ``--max-unavailable``), the
split of a selection into waves, and durations (``--max-plan-age``, ``--expires-in``).

``P%`` of a total is rounded up (``10%`` of 15 is 2, as Kubernetes rounds ``maxUnavailable``
of a rolling update), and never less than 1 for a positive percentage, so a percentage
always makes progress. ``0`` and ``0%`` are valid amounts (a budget of none); a wave size must
be at least 1 and is checked by its option.
"""

from __future__ import annotations

import dataclasses
import math
import re

from xtask.record import Record

_AMOUNT = re.compile(r"(0|[1-9][0-9]{0,8})(%?)")


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Amount(Record):
    value: int
    percent: bool = False

    @classmethod
    def parse(cls, text: str) -> Amount:
        """``"12"`` or ``"25%"``; raises ValueError naming the text for anything else (signs,
        spaces, fractions, ``101%``)."""
        m = _AMOUNT.fullmatch(text)
        if m is None:
            raise ValueError(f"{text!r} is not a count (N) or a percentage (P%)")
        amount = cls(int(m.group(1)), bool(m.group(2)))
        if amount.percent and amount.value > 100:
            raise ValueError(f"{text!r} is more than 100%")
        return amount

    def of(self, total: int) -> int:
        """How many of ``total``: a percentage rounded up, a count as given."""
        if not self.percent:
            return self.value
        return math.ceil(total * self.value / 100)

    def __str__(self) -> str:
        return f"{self.value}%" if self.percent else str(self.value)


def split_waves(names: list[str], size: Amount) -> list[list[str]]:
    """``names`` (already in selection order) in consecutive waves of ``size.of(len(names))``
    (at least 1); the last wave holds the remainder. No names, no waves."""
    per_wave = max(1, size.of(len(names)))
    return [names[i : i + per_wave] for i in range(0, len(names), per_wave)]
