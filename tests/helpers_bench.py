"""Loading a benchmark script (benchmarks/NAME.py) as a module, for the tests of the benchmarks' harnesses."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str) -> Any:
    """``benchmarks/NAME.py`` loaded afresh, the folder on ``sys.path`` while it loads (for its own imports)."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(name, module)  # a dataclass looks its module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))
