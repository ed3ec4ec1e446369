"""The layers hold: only fieldmem.driver imports jax, and no fieldmem modules import each other in a circle.

Both read the package as it is (every module pkgutil finds), so a module
added later is covered without touching this file. Neither compiles.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import fieldmem

PACKAGE = Path(fieldmem.__file__).resolve().parent
JAX_PACKAGE = "fieldmem.driver"


def _modules() -> dict[str, Path]:
    """Every fieldmem module by dotted name, with its file (a package's is its ``__init__.py``)."""
    found = {"fieldmem": PACKAGE / "__init__.py"}
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="fieldmem."):
        folder = Path(info.module_finder.path)  # type: ignore[union-attr]
        leaf = info.name.rsplit(".", 1)[-1]
        found[info.name] = folder / leaf / "__init__.py" if info.ispkg else folder / f"{leaf}.py"
    return found


def _outside_the_driver() -> list[str]:
    return sorted(m for m in _modules() if m != JAX_PACKAGE and not m.startswith(JAX_PACKAGE + "."))


# Run in a fresh interpreter: jax (and jaxlib) cannot be imported there, whoever asks.
_BLOCKED_IMPORT = """
import importlib, json, sys

class NoJax:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("jax", "jaxlib"):
            raise ImportError(f"{name} is blocked: only fieldmem.driver may import jax")
        return None

sys.meta_path.insert(0, NoJax())
failed = {}
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"failed": failed, "jax_loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib"))}))
"""


def test_every_module_outside_the_driver_imports_without_jax() -> None:
    names = _outside_the_driver()
    assert "fieldmem.findings.analysis" in names and "fieldmem.engine.checker" in names  # the walk found them
    done = subprocess.run(
        [sys.executable, "-c", _BLOCKED_IMPORT, json.dumps(names)],
        capture_output=True,
        text=True,
        cwd=PACKAGE.parent,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["failed"] == {}, "\n".join(f"{name}: {why}" for name, why in outcome["failed"].items())
    assert outcome["jax_loaded"] == []


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(module: str, is_package: bool, tree: ast.AST, known: set[str]) -> set[str]:
    """The fieldmem modules ``module`` imports, at the top or in a function, leaving out ``if TYPE_CHECKING:``.

    ``from package import name`` counts as importing ``package.name`` when
    that is a module, else ``package`` itself.
    """
    found: set[str] = set()
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names)
        todo.extend(ast.iter_child_nodes(node))
    return {name for name in found if name in known and name != module}


def import_graph() -> dict[str, set[str]]:
    """Each fieldmem module and the fieldmem modules it imports."""
    modules = _modules()
    known = set(modules)
    return {
        name: _imported(name, path.name == "__init__.py", ast.parse(path.read_text(), str(path)), known)
        for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: in each strongly connected group of modules, a shortest cycle through
    each member (each cycle once, as a path from its smallest module back to it)."""
    found: set[tuple[str, ...]] = set()
    for group in _strongly_connected(graph):
        for member in group:
            cycle = _shortest_cycle(member, set(group), graph)
            turn = cycle.index(min(cycle[:-1]))
            found.add(tuple(cycle[turn:-1] + cycle[:turn] + [cycle[turn]]))
    return [list(cycle) for cycle in sorted(found)]


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of two or more modules that all reach each other (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def _shortest_cycle(start: str, members: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest path from ``start`` back to it through ``members`` (breadth first)."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & members):
                if target == start:
                    return paths[node] + [start]
                if target not in paths:
                    paths[target] = paths[node] + [target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"{start} is in a strongly connected group but no path leads back to it")


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    # two cycles sharing a module: both reported
    assert cycles({"a": {"b", "c"}, "b": {"a"}, "c": {"a"}}) == [["a", "b", "a"], ["a", "c", "a"]]


def test_the_graph_reads_function_level_imports_and_skips_type_checking_blocks() -> None:
    known = {"fieldmem.x", "fieldmem.y", "fieldmem.z", "fieldmem.pkg", "fieldmem.pkg.w"}
    source = (
        "from typing import TYPE_CHECKING\n"
        "from fieldmem.pkg import w\n"
        "if TYPE_CHECKING:\n    from fieldmem.z import Z\n"
        "def f():\n    from fieldmem.y import g\n    import fieldmem.x\n"
    )
    assert _imported("fieldmem.a", False, ast.parse(source), known) == {"fieldmem.pkg.w", "fieldmem.x", "fieldmem.y"}


def test_no_import_cycle_between_fieldmem_modules() -> None:
    found = cycles(import_graph())
    assert found == [], "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in found)


def _names_taken_from(package: str, files: list[Path]) -> dict[str, set[str]]:
    """Each name that ``from <package> import NAME`` takes, with the files that take it."""
    taken: dict[str, set[str]] = {}
    for file in files:
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if isinstance(node, ast.ImportFrom) and node.module == package and node.level == 0:
                for alias in node.names:
                    taken.setdefault(alias.name, set()).add(file.name)
    return taken


def test_the_driver_exports_every_name_others_import_from_it() -> None:
    """What the rest of fieldmem, the tests and the benchmarks use of the driver is its declared surface."""
    import fieldmem.driver

    root = PACKAGE.parent
    outside = [
        path
        for path in [*PACKAGE.rglob("*.py"), *(root / "tests").glob("*.py"), *(root / "benchmarks").glob("*.py")]
        if (PACKAGE / "driver") not in path.parents
    ]
    taken = _names_taken_from(JAX_PACKAGE, outside)
    assert "prepare_call" in taken  # the scan found the engine's imports
    submodules = {m.rsplit(".", 1)[-1] for m in _modules() if m.startswith(JAX_PACKAGE + ".")}  # monkeypatched in tests
    missing = {
        name: sorted(files)
        for name, files in taken.items()
        if name not in fieldmem.driver.__all__ and name not in submodules
    }
    assert not missing, f"imported from fieldmem.driver but not in its __all__: {missing}"
    private = sorted(name for name in taken if name.startswith("_"))
    assert not private, f"private driver names imported from outside it: {private}"
