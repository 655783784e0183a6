"""ARCHITECTURE.md states only what the code shows: each registry it names is a module-level list
(or name -> module mapping) in the file it names, and the pure cores it names call no clock."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARCHITECTURE = REPO / "ARCHITECTURE.md"
# "the registry `NAME` in `path.py`", as ARCHITECTURE.md names each one.
REGISTRY = re.compile(r"registry\s+`([A-Z][A-Z0-9_]*)`\s+in\s+`([\w/.]+\.py)`")
# The layers ARCHITECTURE.md says take `now` from their callers.
CLOCKLESS = ("xtask/drain/core", "agn/model.py", "agn/shards.py", "agn/objects.py", "agn/names.py", "agn/engines.py")
CLOCKS = {
    "time": {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "localtime", "gmtime"},
    "datetime": {"now", "utcnow", "today"},
    "date": {"today"},
}


def named_registries() -> list[tuple[str, str]]:
    return REGISTRY.findall(" ".join(ARCHITECTURE.read_text(encoding="utf-8").split()))


def module_level_value(path: Path, name: str) -> ast.expr | None:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node.value
    return None


def test_architecture_names_its_registries():
    assert ("GATES", "xtask/drain/gates/__init__.py") in named_registries()
    assert ("RUNTIMES", "xtask/runtime/registry.py") in named_registries()


def test_each_registry_architecture_names_is_a_module_level_list():
    wrong = []
    for name, where in named_registries():
        path = REPO / where
        value = module_level_value(path, name) if path.is_file() else None
        if not isinstance(value, ast.List | ast.Dict):
            wrong.append(f"{where}: {name} is not a module-level list or mapping")
    assert not wrong, wrong


def clock_calls(source: str) -> list[str]:
    """Every clock the source reads: ``time.time()``, ``dt.datetime.now()``, ``from time import
    monotonic`` and the like, as ``line: name``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in CLOCKS:
            found += [f"{node.lineno}: {node.module}.{a.name}" for a in node.names if a.name in CLOCKS[node.module]]
        elif isinstance(node, ast.Attribute) and node.attr in CLOCKS.get(_last_name(node.value), ()):
            found.append(f"{node.lineno}: {_last_name(node.value)}.{node.attr}")
    return sorted(found, key=lambda f: int(f.split(":")[0]))


def _last_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def clockless_sources() -> list[Path]:
    out: list[Path] = []
    for where in CLOCKLESS:
        path = REPO / where
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def test_the_pure_cores_call_no_clock():
    calls = {str(p.relative_to(REPO)): clock_calls(p.read_text(encoding="utf-8")) for p in clockless_sources()}
    assert len(calls) > 10
    assert not {p: c for p, c in calls.items() if c}


def test_the_clock_finder_finds_each_form():
    source = (
        "import time\nimport datetime as dt\nfrom time import monotonic\n"
        "a = time.time()\nb = dt.datetime.now(dt.UTC)\nc = time.monotonic\nd = datetime.date.today()\n"
        "e = dt.timedelta(seconds=1)\n"
    )
    assert clock_calls(source) == [
        "3: time.monotonic",
        "4: time.time",
        "5: datetime.now",
        "6: time.monotonic",
        "7: date.today",
    ]
