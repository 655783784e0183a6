"""The shape of ``agn/`` that keeps it readable, checked from the source (no imports):

- no module over 500 lines, no function over 60 lines (nested functions count inside their
  parent too), none with more than 8 parameters (``self``/``cls`` not counted);
- no import circle between ``agn`` modules (``from x import y`` where ``x.y`` is a module is an
  edge to it; imports inside functions count too, since they run sooner or later);
- only ``agn/kube.py`` imports the ``kubernetes`` client.

A long module or function is split by responsibility; many parameters become a small frozen
dataclass of options (``FollowOptions``, ``FollowerTimings``, ``Reporter``, ...).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
AGN = REPO / "agn"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 8


def _modules() -> dict[str, tuple[Path, ast.Module]]:
    out = {}
    for path in sorted(AGN.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = (path, ast.parse(path.read_text(), filename=str(path)))
    return out


MODULES = _modules()


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    return [
        (f"{path.relative_to(REPO)}:{node.lineno} {node.name}", node)
        for path, tree in MODULES.values()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    count = len(positional) + len(args.kwonlyargs) + (args.vararg is not None) + (args.kwarg is not None)
    return count - (1 if positional and positional[0].arg in ("self", "cls") else 0)


def _imports(name: str, tree: ast.Module, *, package: bool) -> set[str]:
    """The ``agn`` modules ``name`` imports."""
    here = name if package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = here
                for _ in range(node.level - 1):
                    up = up.rpartition(".")[0]
                base = f"{up}.{base}" if base else up
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m in MODULES and m != name}


def test_no_module_is_over_500_lines():
    long = {
        str(p.relative_to(REPO)): n
        for p, _ in MODULES.values()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these by responsibility: {long}"


def test_no_function_is_over_60_lines():
    long = {
        where: n for where, f in _functions() if (n := (f.end_lineno or f.lineno) - f.lineno + 1) > MAX_FUNCTION_LINES
    }
    assert not long, f"split these into well-named helpers: {long}"


def test_no_function_takes_more_than_8_parameters():
    many = {where: n for where, f in _functions() if (n := _parameters(f)) > MAX_PARAMETERS}
    assert not many, f"group options into a small frozen dataclass: {many}"


def test_agn_modules_import_no_circle():
    graph = {name: _imports(name, tree, package=path.name == "__init__.py") for name, (path, tree) in MODULES.items()}
    circles = []
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            circles.append(path[path.index(name) :] + [name])
            return
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_only_agn_kube_imports_kubernetes():
    importers = set()
    for name, (_, tree) in MODULES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            if "kubernetes" in roots:
                importers.add(name)
    assert importers <= {"agn.kube"}, f"only agn/kube.py may import kubernetes: {sorted(importers - {'agn.kube'})}"
