"""The code's shape, checked by the repo (rust-analyzer's ``tidy.rs``): files a reader can read
in one sitting, functions that fit on a screen, parameters that fit in a head, and no import
circle anywhere in ``xtask/`` and ``agn/``.

The limits are ARCHITECTURE.md's: a file of ``xtask/`` or ``agn/`` has at most 500 lines, a
function at most 60 (its ``def`` to its last line, nested functions included) and at most 8
parameters (``self``/``cls`` not counted; a function that needs more takes a keyword-only
dataclass). An import is an edge from the importing module to the module it names (``from a
import b`` names ``a.b`` when that is a module, else ``a``), wherever it stands: at the top,
inside a function, or under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("xtask", "agn")
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 8


def sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def parameter_count(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    count = len(names) + (a.vararg is not None) + (a.kwarg is not None)
    if names and names[0].arg in ("self", "cls"):
        count -= 1
    return count


def test_no_file_over_the_limit():
    long = [f"{p.relative_to(REPO)}: {n}" for p in sources() if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES]
    assert long == [], f"files over {MAX_FILE_LINES} lines"


def test_no_function_over_the_limit():
    long = [
        f"{p.relative_to(REPO)}:{fn.lineno} {fn.name}: {fn.end_lineno - fn.lineno + 1} lines"
        for p in sources()
        for fn in functions(ast.parse(p.read_text()))
        if fn.end_lineno is not None and fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == [], f"functions over {MAX_FUNCTION_LINES} lines"


def test_no_function_with_too_many_parameters():
    wide = [
        f"{p.relative_to(REPO)}:{fn.lineno} {fn.name}: {parameter_count(fn)} parameters"
        for p in sources()
        for fn in functions(ast.parse(p.read_text()))
        if parameter_count(fn) > MAX_PARAMETERS
    ]
    assert wide == [], f"functions with more than {MAX_PARAMETERS} parameters"


def import_graph() -> dict[str, set[str]]:
    """Each module of xtask/ and agn/ and the modules of xtask/ and agn/ it imports."""
    paths = {module_name(p): p for p in sources()}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names]
            for target in targets:
                while target and target not in paths:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    assert circles(import_graph()) == []


def test_the_circle_finder_finds_a_circle():
    """The check above can fail: a graph with a circle through three modules is found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]


def test_the_import_graph_sees_relative_function_and_type_checking_imports():
    graph = import_graph()
    assert "xtask.drain.core.changes" in graph["xtask.drain.core.guard"]  # a top-level absolute import
    assert "xtask.drain.gates" in graph["xtask.drain.core.request"]  # an import inside a function


def importers_of(root: str) -> set[str]:
    """The modules of xtask/ and agn/ that import the package ``root`` (top level or in a function)."""
    found = set()
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            if any(n == root or n.startswith(root + ".") for n in names):
                found.add(module_name(path))
    return found


def test_only_agn_kube_imports_kubernetes():
    assert importers_of("kubernetes") == {"agn.kube"}


def test_only_xtask_procs_imports_subprocess():
    assert importers_of("subprocess") == {"xtask.procs"}


def test_nothing_below_the_cli_imports_it():
    """The library never reaches up into the click commands (only the entry point starts them)."""
    outside = {m for m in importers_of("xtask.cli") if not m.startswith("xtask.cli")}
    assert outside == {"xtask.__main__"}


def test_agn_imports_nothing_of_xtask():
    assert {m for m in importers_of("xtask") if m.startswith("agn")} == set()


def test_the_drain_core_imports_no_edge_and_no_conductor():
    """xtask/drain/core/ is pure: it never imports what talks to the cluster or conducts a run."""
    graph = import_graph()
    core = [m for m in graph if m.startswith("xtask.drain.core")]
    reaching = {
        m: sorted(
            d
            for d in graph[m]
            if d.startswith("xtask.drain.") and not d.startswith(("xtask.drain.core", "xtask.drain.gates"))
        )
        for m in core
    }
    assert {m: d for m, d in reaching.items() if d} == {}
    assert not any("agn.kube" in graph[m] for m in core), "the core never imports the Kubernetes client's module"


def test_no_two_test_files_share_a_name():
    """pytest imports each test file by its bare name (the suites have no ``__init__.py``): a
    second file of the same name anywhere under tests/ stops the whole run at collection."""
    seen: dict[str, list[str]] = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
