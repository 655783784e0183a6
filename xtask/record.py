"""The base of xtask's frozen records: ``repr``, ``==`` and ``hash`` written once, here.

Python 3.11's :mod:`dataclasses` compiles each method it generates, one ``exec`` per method and
class; a frozen dataclass gets six (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__``, ``__delattr__``). Every command pays that at import, and a single drain imports
about seventy of xtask's records before its first request: compiling their repr, == and hash
was about a sixth of its own import time (85 -> 72 ms of CPU without them, docs/benchmarks.md).
So xtask declares its records as::

    @dataclasses.dataclass(frozen=True, repr=False, eq=False)
    class Planned(Record):
        ...

and they behave as ``@dataclasses.dataclass(frozen=True)`` would make them: the same repr,
equality between instances of the same class over the fields that compare, and the hash of
those fields' values (``tests/unit/test_record.py`` holds them to it field by field).
The same test checks that every frozen dataclass of xtask is declared so.

The system's own processes (:mod:`agn`: the operator, the gateways) keep the generated methods:
they start once and compare records in loops over whole fleets, where generated code is faster.
"""

from __future__ import annotations

import dataclasses
import reprlib

_Names = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]
_NAMES: dict[type, _Names] = {}  # per class, filled on first use (a race only computes it twice)


def _names(cls: type) -> _Names:
    """``cls``'s fields as its generated methods would use them: (shown by repr, compared, hashed)."""
    names = _NAMES.get(cls)
    if names is None:
        fields = dataclasses.fields(cls)
        shown = tuple(f.name for f in fields if f.repr)
        compared = tuple(f.name for f in fields if f.compare)
        hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
        names = _NAMES[cls] = (shown, compared, hashed)
    return names


class Record:
    """A frozen dataclass's ``__repr__``, ``__eq__`` and ``__hash__``, as :mod:`dataclasses`
    generates them for ``frozen=True`` (eq on, no ``unsafe_hash``), shared by every subclass."""

    __slots__ = ()

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        shown = _names(type(self))[0]
        return f"{type(self).__qualname__}({', '.join(f'{name}={getattr(self, name)!r}' for name in shown)})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        compared = _names(type(self))[1]
        return tuple(getattr(self, n) for n in compared) == tuple(getattr(other, n) for n in compared)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, n) for n in _names(type(self))[2]))
