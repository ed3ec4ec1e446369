"""Shared fixtures: the little user packages in tests/assets, and isolation.

Loading a target puts folders on ``sys.path``, imports user modules and
registers their cases; every test gets all three back as they were, so that
no test sees a module or a path another test left behind.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fieldmem.request import registry
from fieldmem.request.backends import DEVICELESS_ENV

# before jax starts in this process: the deviceless tests (tests/test_deviceless.py) compile for TPUs and
# GPUs without them, which needs jax started on the CPU alone (as the fieldmem command does for itself)
for _key, _value in DEVICELESS_ENV.items():
    os.environ.setdefault(_key, _value)

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
