"""jax's persistent cache under ``fieldmem.driver.compilation_cache``: each check writes to the folder it names.

jax opens its cache folder once, at the first compile that uses it; a second check in the same process (the API,
a test session) naming another folder must not write its entries into the first one's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fieldmem.driver import compilation_cache, lowering

pytestmark = pytest.mark.compile


def _twice(v):  # type: ignore[no-untyped-def]
    return v * 2.0 + 1.0


def test_each_check_writes_to_the_cache_folder_it_names(tmp_path: Path) -> None:
    import jax
    import jax.numpy as jnp

    x = jnp.ones((4, 4))
    folders = [tmp_path / "first", tmp_path / "second"]
    for folder in folders:
        with compilation_cache(str(folder)):
            jax.clear_caches()
            lowering.compile_lowered(jax.jit(_twice).lower(x), fast=True)
    written = [len(list(f.glob("*-cache"))) for f in folders]
    assert written[0] == written[1] >= 1, written  # the same compiles, each in its own folder
