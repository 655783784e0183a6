"""xtask's records (:class:`xtask.record.Record`) behave as ``@dataclasses.dataclass(frozen=True)``
would make them, and every frozen dataclass of xtask is declared as one (its repr, == and hash
are the shared ones, not generated per class: what a command's start-up saves)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path
from typing import Any

import pytest

from xtask.record import Record

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Shared(Record):
    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    note: str = dataclasses.field(default="", compare=False)
    secret: str = dataclasses.field(default="", repr=False)
    cached: Any = dataclasses.field(default=None, hash=False)
    items: list[int] = dataclasses.field(default_factory=list, compare=False)


@dataclasses.dataclass(frozen=True)
class Generated:
    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    note: str = dataclasses.field(default="", compare=False)
    secret: str = dataclasses.field(default="", repr=False)
    cached: Any = dataclasses.field(default=None, hash=False)
    items: list[int] = dataclasses.field(default_factory=list, compare=False)


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class SharedChild(Shared):
    extra: int = 0


KWARGS = [
    {"name": "a"},
    {"name": "a", "count": 2, "tags": ("x", "y"), "note": "n", "secret": "s", "cached": 5, "items": [1]},
    {"name": "a", "count": 2, "tags": ("x", "y"), "note": "other", "secret": "s", "cached": 5},
    {"name": "a", "count": 2, "tags": ("x", "y"), "secret": "t", "cached": 6},
    {"name": "b'\n", "count": -1},
]


@pytest.mark.parametrize("kw", KWARGS)
def test_repr_and_hash_are_the_generated_ones(kw):
    shared, generated = Shared(**kw), Generated(**kw)
    assert repr(shared) == repr(generated).replace("Generated(", "Shared(", 1)
    assert hash(shared) == hash(generated)


def test_equality_is_the_generated_ones():
    for a in KWARGS:
        for b in KWARGS:
            assert (Shared(**a) == Shared(**b)) == (Generated(**a) == Generated(**b)), (a, b)
    # Another class never equals, even with the same fields (the generated __eq__ checks the class).
    assert Shared("a") != Generated("a")
    assert Shared("a") != SharedChild("a")
    assert SharedChild("a", extra=1) != SharedChild("a", extra=2)  # the subclass's own field compares
    assert repr(SharedChild("a", extra=1)).startswith("SharedChild(name='a', count=0") and "extra=1" in repr(
        SharedChild("a", extra=1)
    )


def test_it_stays_frozen_and_replaceable():
    shared = Shared("a", items=[1])
    with pytest.raises(dataclasses.FrozenInstanceError):
        shared.name = "b"
    assert dataclasses.replace(shared, count=3) == Shared("a", count=3)
    assert {Shared("a"), Shared("a", note="x")} == {Shared("a")}  # note does not compare, nor hash


def test_a_record_holding_itself_shows_without_recursing():
    @dataclasses.dataclass(frozen=True, repr=False, eq=False)
    class Box(Record):
        items: list[Any]

    box = Box([])
    box.items.append(box)
    assert repr(box) == "test_a_record_holding_itself_shows_without_recursing.<locals>.Box(items=[...])"


def _frozen_dataclass_declarations() -> list[tuple[str, str, set[str], list[str]]]:
    """(file, class, the decorator's keywords set to a literal, the class's bases) of every
    ``dataclasses.dataclass(frozen=True, ...)`` under xtask/."""
    found = []
    for path in sorted((ROOT / "xtask").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            for deco in node.decorator_list:
                if not (isinstance(deco, ast.Call) and ast.unparse(deco.func) == "dataclasses.dataclass"):
                    continue
                kws = {k.arg: ast.literal_eval(k.value) for k in deco.keywords if k.arg}
                if kws.get("frozen"):
                    false = {name for name, value in kws.items() if value is False}
                    found.append((str(path.relative_to(ROOT)), node.name, false, [ast.unparse(b) for b in node.bases]))
    return found


def test_every_frozen_dataclass_of_xtask_is_a_record():
    found = _frozen_dataclass_declarations()
    assert len(found) > 100  # the scan sees them
    wrong = [
        f"{path}: {name}"
        for path, name, false, bases in found
        if not ({"repr", "eq"} <= false and bases)  # a Record (or a subclass of one), nothing generated
        and not ("eq" in false and "repr" not in false and not bases)  # eq=False alone: compared by identity
    ]
    assert wrong == [], "declare them @dataclasses.dataclass(frozen=True, repr=False, eq=False) on Record"


def test_the_records_a_drain_imports_use_the_shared_methods():
    for module in ("xtask.drain.run", "xtask.drain.finish", "xtask.drain.restore", "xtask.cli.env.provider_drain"):
        importlib.import_module(module)
    seen, todo = [], list(Record.__subclasses__())
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    assert len(seen) > 60  # the drain path alone declares about seventy
    for cls in seen:
        # A dataclass (frozen), or a plain base of some (results.Step) that adds no field.
        assert cls.__dataclass_params__.frozen if dataclasses.is_dataclass(cls) else not cls.__annotations__, cls
        for method in ("__repr__", "__eq__", "__hash__"):
            assert getattr(cls, method) is getattr(Record, method), f"{cls.__qualname__} has its own {method}"
