"""The deviceless extras in the tests: skip without them, fail instead under FIELDMEM_REQUIRE_BACKENDS=1
(as .ci/run sets it, so CI never passes without having compiled for a TPU and a GPU)."""

from __future__ import annotations

import importlib.util
import os

import pytest

__all__ = ["EXTRAS", "installed", "require_extra"]

# what each extra installs, as modules (a dotted name: its parent packages are imported to find it)
EXTRAS = {"tpu": ["libtpu"], "gpu": ["jax_plugins.xla_cuda12", "nvidia.cuda_nvcc"]}


def _missing(platform: str) -> list[str]:
    missing = []
    for module in EXTRAS[platform]:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package is missing
            found = False
        if not found:
            missing.append(module)
    return missing


def installed(*platforms: str) -> bool:
    """Whether the extras of every one of ``platforms`` are installed."""
    return not any(_missing(p) for p in platforms)


def require_extra(platform: str) -> None:
    """Skip when the extra for ``platform`` is not installed; fail instead under FIELDMEM_REQUIRE_BACKENDS=1."""
    missing = _missing(platform)
    if not missing:
        return
    reason = f'fieldmem[{platform}] is not installed (no {", ".join(missing)}): pip install "fieldmem[{platform}]"'
    if os.environ.get("FIELDMEM_REQUIRE_BACKENDS") == "1":
        pytest.fail(f"FIELDMEM_REQUIRE_BACKENDS=1 but {reason}")
    pytest.skip(reason)
