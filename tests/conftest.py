"""Shared fixtures: the little user packages in tests/assets, and isolation.

Loading a target puts folders on ``sys.path``, imports user modules and
registers their cases; every test gets all three back as they were, so that
no test sees a module or a path another test left behind.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from _pytest.assertion import rewrite as assertion_rewrite

from fieldmem.gate.baseline import Baseline
from fieldmem.model.report import Report
from fieldmem.render.jsonout import document_text
from fieldmem.render.schema import SCHEMA_FOLDER
from fieldmem.request import registry
from fieldmem.request.backends import DEVICELESS_ENV

# before jax starts in this process: the deviceless tests (tests/driver/test_deviceless.py) compile for TPUs and
# GPUs without them, which needs jax started on the CPU alone (as the fieldmem command does for itself)
for _key, _value in DEVICELESS_ENV.items():
    os.environ.setdefault(_key, _value)

# Ctrl-C reaches the processes the tests interrupt (--watch, --save-baseline), however pytest was started: a
# job a non-interactive shell starts in the background (``sh -c '... &'``, as some CI runners start theirs)
# has SIGINT ignored, its children inherit that, and Python then raises no KeyboardInterrupt in them. A
# handled signal is back at its default in a child after exec, so handling it here is enough (a preexec_fn
# that reset it would fork a process running jax's threads, which jax warns against).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# One module rewritten at a time. pytest rewrites the asserts of every fieldmem module as it is imported
# (fieldmem is a pytest11 plugin's package), and an in-process check imports some lazily in its compile
# threads; CPython 3.11's AST conversion is not safe in two threads at once: "SystemError: AST constructor
# recursion depth mismatch" (seen in tests/model/test_report.py when driver.placement and request.fit were
# parsed together).
_rewrite_test = assertion_rewrite._rewrite_test
_rewriting = threading.Lock()


def _rewrite_one_at_a_time(fn: Path, config: pytest.Config) -> Any:
    with _rewriting:
        return _rewrite_test(fn, config)


assertion_rewrite._rewrite_test = _rewrite_one_at_a_time
# The tests are in one folder per layer (tests/model, tests/driver, ...). A few import helpers from a test module
# of another folder (``from test_peaks_truth import assert_adds_up``): every such folder is on sys.path, as pytest
# puts the folder of each module it collects there, so that such an import works whichever tests are run (the
# basenames are unique across the folders, as pytest's default import mode needs).
sys.path[:0] = [str(folder) for folder in sorted(Path(__file__).parent.glob("*/")) if any(folder.glob("test_*.py"))]

ASSETS = Path(__file__).parent / "assets"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _is_asset_module(name: str, module: object) -> bool:
    if name.startswith("_fieldmem_"):
        return True
    file = getattr(module, "__file__", None)
    try:
        return file is not None and any(
            Path(file).resolve().is_relative_to(folder.resolve()) for folder in (ASSETS, EXAMPLES)
        )
    except OSError:
        return False


@pytest.fixture(autouse=True)
def isolated_imports(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Restore sys.path, drop user modules (tests/assets, examples/) imported by the test, restore the case registry.

    Library modules a test happened to import first (jax and friends) stay
    imported: importing jax twice in one process does not work.
    """
    monkeypatch.setenv("COLUMNS", "120")
    for name in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE"):  # no colour unless a test asks (rich reads these)
        monkeypatch.delenv(name, raising=False)
    # no persistent compilation cache unless a test asks for one (subprocesses inherit this)
    monkeypatch.setenv("FIELDMEM_CACHE_DIR", "none")
    monkeypatch.setenv("LINES", "40")
    saved_path = list(sys.path)
    saved_modules = set(sys.modules)
    saved_registry = dict(registry._REGISTRY)
    yield
    sys.path[:] = saved_path
    for name in set(sys.modules) - saved_modules:
        if _is_asset_module(name, sys.modules[name]):
            del sys.modules[name]
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved_registry)


@pytest.fixture
def assets() -> Path:
    """The folder of little user modules and packages."""
    return ASSETS


@pytest.fixture
def in_assets(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from tests/assets, as a user runs fieldmem from their project folder."""
    monkeypatch.chdir(ASSETS)
    return ASSETS


# -- every report and baseline the suite writes matches the shipped JSON Schema (fieldmem/schemas) -------------

_KINDS = {
    "fieldmem.report/": "report",
    "fieldmem.baseline/": "baseline",
    "fieldmem.reports/": "reports",
    "fieldmem.fit/": "fit",
}


@functools.cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMA_FOLDER / f"{kind}.schema.json").read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def schema_violations(document: Any) -> list[str]:
    """What in ``document`` (a report or a baseline, by its ``schema``) the shipped schema refuses: one line
    each, the path first; [] for a valid one or a document of neither kind."""
    name = document.get("schema") if isinstance(document, dict) else None
    kind = next((k for prefix, k in _KINDS.items() if isinstance(name, str) and name.startswith(prefix)), None)
    if kind is None:
        return []
    return [f"{kind} {error.json_path}: {error.message[:300]}" for error in _validator(kind).iter_errors(document)]


def _written_by_fieldmem(text: str, document: Any) -> bool:
    """Whether ``text`` is laid out exactly as fieldmem writes a report or a baseline: what a fieldmem
    process wrote, not a file a test made by hand (hand-made ones are often wrong on purpose)."""
    name = str(document.get("schema", ""))
    if name.startswith("fieldmem.report/"):
        return document_text(document) == text
    if name.startswith("fieldmem.fit/"):
        from fieldmem.render.fit import fit_document_text

        return fit_document_text(document) == text
    return json.dumps(document, indent=2) + "\n" == text


@pytest.fixture(autouse=True)
def documents_match_their_schema(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail a test in which fieldmem wrote a report or a baseline that the shipped JSON Schema refuses.

    In this process, every ``Report.to_dict()`` and ``Baseline.to_dict()`` (the one way each document is
    written: ``-f json``, ``-o``, the plugin's report, ``--save-baseline``) is checked as it is made. What
    fieldmem processes the test started wrote into its ``tmp_path`` (or at the top of its pytester folder) is checked
    when the test ends: each ``*.json`` of either kind, laid out as fieldmem writes it, that the test did
    not write itself with ``Path.write_text``/``write_bytes``.
    """
    problems: list[str] = []
    by_test: set[Path] = set()

    def checked(to_dict: Callable[[Any], dict[str, Any]]) -> Callable[[Any], dict[str, Any]]:
        def to_dict_checked(self: Any) -> dict[str, Any]:
            document = to_dict(self)
            problems.extend(schema_violations(document))
            return document

        return to_dict_checked

    def noting(write: Callable[..., Any]) -> Callable[..., Any]:
        def write_noted(self: Path, *args: Any, **kwargs: Any) -> Any:
            by_test.add(Path(os.path.abspath(self)))
            return write(self, *args, **kwargs)

        return write_noted

    monkeypatch.setattr(Report, "to_dict", checked(Report.to_dict))
    monkeypatch.setattr(Baseline, "to_dict", checked(Baseline.to_dict))
    monkeypatch.setattr(Path, "write_text", noting(Path.write_text))
    monkeypatch.setattr(Path, "write_bytes", noting(Path.write_bytes))
    files: list[Callable[[], Iterator[Path]]] = []
    if "tmp_path" in request.fixturenames:
        files.append(functools.partial(request.getfixturevalue("tmp_path").rglob, "*.json"))
    if "pytester" in request.fixturenames:  # its own files: those of the tests it runs are theirs to check
        files.append(functools.partial(request.getfixturevalue("pytester").path.glob, "*.json"))
    yield
    for found in files:
        for path in sorted(found()):
            if Path(os.path.abspath(path)) in by_test or not path.is_file():
                continue
            try:
                text = path.read_text(encoding="utf-8")
                document = json.loads(text)
            except (OSError, ValueError):
                continue
            if isinstance(document, dict) and _written_by_fieldmem(text, document):
                problems.extend(f"{path}: {problem}" for problem in schema_violations(document))
    if problems:
        shown = "\n  ".join(problems[:20])
        pytest.fail(
            f"fieldmem wrote {len(problems)} thing(s) its JSON Schema refuses (fieldmem/schemas; make schema "
            f"regenerates it from the records):\n  {shown}",
            pytrace=False,
        )
