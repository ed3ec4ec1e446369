"""The layers hold: the whiteboard below is the architecture, and every import in the package obeys it.

:data:`LAYERS` names each layer and the modules in it; :data:`ALLOWED` the
arrows between layers. Every import is read (at the top, inside functions,
under ``if TYPE_CHECKING:``); jax, jaxlib and the libraries a user's program
is written with are imported only by the driver; and no fieldmem modules import
each other in a circle. The tests read the package as it is (every module
pkgutil finds), so a module added later is covered without touching this file
(one no layer claims fails). None compiles.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import fieldmem

PACKAGE = Path(fieldmem.__file__).resolve().parent
JAX_PACKAGE = "fieldmem.driver"

#: The whiteboard: each layer is one package, named for what it holds. The package's own top-level modules
#: (``fieldmem``, ``__main__``, and ``pytest_plugin``, the name pytest registers) are what users type, so
#: they are the front ends' (:data:`TOP_LEVEL`).
LAYERS: dict[str, str] = {
    # what users call: one module per command, the Python API, the pytest plugin, the --watch loop (the
    # parent's side) and writing a run's outputs and exit code
    "frontends": "fieldmem.frontends",
    # the parent process: scheduling targets, deciding each one's result from its readings, supervising the
    # workers, the Python they run under (cached environments with another jax), fit's search
    "parent": "fieldmem.parent",
    # what runs where jax and the user's code run (the worker, or a check in this process): loading specs,
    # reading through the driver, answering the parent over the pipe, --watch's fingerprints and module
    # reloading. Never findings or xla: a worker needs no analysis
    "worker": "fieldmem.worker",
    "request": "fieldmem.request",  # what the user asked for
    "driver": "fieldmem.driver",  # the only layer that drives jax
    "xla": "fieldmem.xla",  # pure readers of XLA's text and protos
    "findings": "fieldmem.findings",  # readings -> report pieces
    "gate": "fieldmem.gate",  # diffs, baselines, comparisons
    "render": "fieldmem.render",  # formatting a report; the JSON Schemas made from its records
    # the records every layer shares: the report, readings, words, codec, errors, units, files, escaping,
    # libraries, versions, the machine as the speed rules read it, bundled specs
    "model": "fieldmem.model",
}

#: The layer of the package's own top-level modules, and how many it may have besides ``__init__`` and
#: ``__main__`` (a newcomer finds everything else in a layer's package).
TOP_LEVEL = "frontends"
MOST_TOP_LEVEL_MODULES = 4

#: The arrows: the layers each layer may import (its own always). The core never prints (frontends and
#: render do), the front ends never compute (no findings, no xla), requests never reach into the driver,
#: and the readers of XLA's output import nothing outside themselves.
ALLOWED: dict[str, frozenset[str]] = {
    "frontends": frozenset({"parent", "worker", "request", "driver", "gate", "render", "model"}),
    "parent": frozenset({"worker", "request", "xla", "findings", "model"}),
    "worker": frozenset({"request", "driver", "model"}),
    "driver": frozenset({"request", "model"}),
    "findings": frozenset({"request", "xla", "model"}),
    "render": frozenset({"gate", "request", "model"}),
    "gate": frozenset({"request", "model"}),
    "request": frozenset({"model"}),
    "xla": frozenset(),
    "model": frozenset(),
}

#: Top-level packages only the driver imports: jax itself, and the libraries user programs are written with
#: (the driver recognises their wrappers).
JAX_WORLD = frozenset({"jax", "jaxlib", "flax", "optax", "equinox"})


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every fieldmem module under ``package`` by dotted name, with its file (a package's is its
    ``__init__.py``). Read from the files (nothing is imported), so a scratch copy is read as it is."""
    found: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        folders = path.relative_to(package).parts[:-1]
        if not all((package.joinpath(*folders[: n + 1]) / "__init__.py").is_file() for n in range(len(folders))):
            continue  # not in a package (a script in a data folder)
        parts = ["fieldmem", *folders] + ([] if path.name == "__init__.py" else [path.stem])
        found[".".join(parts)] = path
    return found


def layer_of(module: str, is_package: bool = False) -> str | None:
    """The layer ``module`` belongs to (None: no layer claims it); a top-level module is the front ends'."""
    for layer, package in LAYERS.items():
        if module == package or module.startswith(package + "."):
            return layer
    if module == "fieldmem" or (module.count(".") == 1 and not is_package):
        return TOP_LEVEL
    return None


def every_import(module: str, is_package: bool, tree: ast.AST) -> list[tuple[str, int]]:
    """Every module ``module`` imports, with the line: top level, in functions and under ``TYPE_CHECKING``
    alike. ``from package import name`` names ``package.name`` (a module or not; the caller resolves it)."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.append((base, node.lineno))
            found.extend((f"{base}.{alias.name}", node.lineno) for alias in node.names)
    return found


def forbidden_arrows(package: Path = PACKAGE) -> list[str]:
    """Each import of ``package`` (a fieldmem tree) the whiteboard forbids, as ``file:line: why``; and each
    module no layer claims."""
    modules = _modules(package)
    problems: list[str] = []
    for module, path in sorted(modules.items()):
        here = layer_of(module, path.name == "__init__.py")
        where = path.relative_to(package.parent)
        if here is None:
            problems.append(f"{where}: {module} is in no layer of tests/project/test_layers.py's LAYERS")
            continue
        seen: set[tuple[str, int]] = set()
        for imported, line in every_import(module, path.name == "__init__.py", ast.parse(path.read_text())):
            top = imported.split(".")[0]
            if top in JAX_WORLD and here != "driver" and (top, line) not in seen:
                seen.add((top, line))
                problems.append(f"{where}:{line}: {module} ({here}) imports {top}: only the driver may")
                continue
            if imported not in modules:
                continue
            there = layer_of(imported, modules[imported].name == "__init__.py")
            if there is None or there == here or there in ALLOWED[here]:
                continue
            problems.append(f"{where}:{line}: {module} ({here}) imports {imported} ({there}): {here} -> {there}")
    return problems


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


def test_the_whiteboard_names_every_layer_it_allows_and_no_layer_twice() -> None:
    assert set(ALLOWED) == set(LAYERS)
    assert all(allowed <= set(LAYERS) for allowed in ALLOWED.values())
    assert len(set(LAYERS.values())) == len(LAYERS)
    assert all(package.count(".") == 1 for package in LAYERS.values())  # packages only, one per layer


def test_every_import_follows_the_whiteboard() -> None:
    problems = forbidden_arrows()
    assert problems == [], "imports the layer table forbids:\n" + "\n".join(problems)


def _scratch_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "fieldmem"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_an_arrow_the_table_forbids_is_found_with_its_file_and_line(tmp_path: Path) -> None:
    """In a scratch copy of the package: an import inside a function, one under TYPE_CHECKING, and jaxlib
    outside the driver are each found, by file and line."""
    copy = _scratch_copy(tmp_path)
    table = copy / "render" / "table.py"
    lines = table.read_text().splitlines()
    lines += [
        "",
        "",
        "def _reach_into_the_driver() -> None:",
        "    from fieldmem.driver import prepare_call  # noqa: F401",
    ]
    table.write_text("\n".join(lines) + "\n")
    in_function = len(lines)
    target = copy / "request" / "target.py"
    text = target.read_text()
    target.write_text(text + "\nif TYPE_CHECKING:\n    from fieldmem.findings.analysis import ProgramLeaves\n")
    checked_line = len((text + "\nif TYPE_CHECKING:").splitlines()) + 1
    worker = copy / "worker" / "main.py"
    worker.write_text(worker.read_text() + "\n\ndef _warm() -> None:\n    import jaxlib.xla_client  # noqa: F401\n")
    jaxlib_line = len(worker.read_text().splitlines())

    problems = forbidden_arrows(copy)
    assert (
        f"fieldmem/render/table.py:{in_function}: fieldmem.render.table (render) imports fieldmem.driver "
        in "\n".join(problems)
    )
    assert any(
        p.startswith(f"fieldmem/request/target.py:{checked_line}: ") and "request -> findings" in p for p in problems
    )
    assert (
        f"fieldmem/worker/main.py:{jaxlib_line}: fieldmem.worker.main (worker) imports jaxlib: only the driver may"
        in problems
    )
    assert len(problems) == 3, problems
    assert forbidden_arrows(_scratch_copy(tmp_path / "clean")) == []  # the copy alone: nothing found


def test_a_package_no_layer_claims_is_found(tmp_path: Path) -> None:
    copy = _scratch_copy(tmp_path)
    (copy / "helpers").mkdir()
    (copy / "helpers" / "__init__.py").write_text('"""A grab-bag nobody placed on the whiteboard."""\n')
    (copy / "helpers" / "misc.py").write_text('"""More of it."""\n')
    assert forbidden_arrows(copy) == [
        "fieldmem/helpers/__init__.py: fieldmem.helpers is in no layer of tests/project/test_layers.py's LAYERS",
        "fieldmem/helpers/misc.py: fieldmem.helpers.misc is in no layer of tests/project/test_layers.py's LAYERS",
    ]


def top_level_modules(package: Path = PACKAGE) -> list[str]:
    """The package's own top-level modules besides ``__init__`` and ``__main__``."""
    return sorted(p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__"))


def test_few_modules_live_at_the_top_level() -> None:
    found = top_level_modules()
    assert 1 <= len(found) <= MOST_TOP_LEVEL_MODULES, f"top-level modules: {found}; move them into a layer"


def test_a_top_level_module_is_the_front_ends_and_obeys_their_arrows(tmp_path: Path) -> None:
    copy = _scratch_copy(tmp_path)
    (copy / "helpers.py").write_text("import fieldmem.findings.analysis  # noqa: F401\n")
    assert forbidden_arrows(copy) == [
        "fieldmem/helpers.py:1: fieldmem.helpers (frontends) imports fieldmem.findings.analysis (findings): "
        "frontends -> findings"
    ]


def test_every_module_outside_the_driver_imports_without_jax() -> None:
    names = _outside_the_driver()
    assert "fieldmem.findings.analysis" in names and "fieldmem.parent.checker" in names  # the walk found them
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
    """What the rest of fieldmem, the tests, the benchmarks and the hardware checks use of the driver is its
    declared surface."""
    import fieldmem.driver

    root = PACKAGE.parent
    outside = [
        path
        for path in [
            *PACKAGE.rglob("*.py"),
            *(root / "tests").glob("*.py"),
            *(root / "tests").glob("*/test_*.py"),
            *(root / "benchmarks").glob("*.py"),
            *(root / "hardware").glob("*.py"),
        ]
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


def _architecture_rows() -> dict[str, str]:
    """ARCHITECTURE.md's layer table: each package (``model``) and the text of its row."""
    page = (PACKAGE.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    rows: dict[str, str] = {}
    for line in page.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 3 and cells[0].startswith("`") and cells[0].endswith("/`"):
            rows[cells[0].strip("`/")] = cells[1]
    return rows


def test_the_architecture_page_has_a_row_for_each_layer_naming_each_of_its_modules() -> None:
    """ARCHITECTURE.md is the page a newcomer reads: its table has one row per layer, and each row names
    every module of its package (and only modules that exist), so a module added or moved shows there."""
    rows = _architecture_rows()
    assert sorted(rows) == sorted(package.removeprefix("fieldmem.") for package in LAYERS.values())
    for package, text in rows.items():
        folder = PACKAGE / package
        # its modules and subpackages (a private one, ``_proto``, aside); a subpackage's modules are its own
        here = {path.stem for path in folder.glob("*.py") if path.name != "__init__.py"}
        here |= {path.parent.name for path in folder.glob("*/__init__.py") if not path.parent.name.startswith("_")}
        named = set(re.findall(r"`([a-z_]+)/?`", text))
        inner = {path.stem for path in folder.glob("*/*.py")} | {
            path.name for path in folder.iterdir() if path.is_dir()
        }
        top = {"fieldmem", *top_level_modules()} if package == LAYERS[TOP_LEVEL].removeprefix("fieldmem.") else set()
        missing = sorted(here - named)
        unknown = sorted(named - here - inner - top)
        assert not missing, f"ARCHITECTURE.md's {package}/ row does not name {missing}"
        assert not unknown, f"ARCHITECTURE.md's {package}/ row names {unknown}, which {package}/ does not hold"


#: The most lines a module may have: one a newcomer can hold in mind (issue 51).
MOST_LINES = 700


def test_no_module_is_longer_than_a_newcomer_can_hold_in_mind() -> None:
    long = {
        str(path.relative_to(PACKAGE.parent)): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MOST_LINES
    }
    assert not long, f"modules over {MOST_LINES} lines (split them by what they hold): {long}"
