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


def test_a_program_loaded_from_the_cache_reads_the_dump_kept_by_the_run_that_compiled_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TPU's or GPU's buffer assignment comes from XLA's dump, and XLA dumps none of a program jax loads from
    its cache: on the chip, a rerun with the cache on lost the live peak (measured on a TPU v5e). The compile that
    writes jax's entry keeps its dump under jax's key; the rerun reads it. XLA:CPU read through the dump here, as
    an accelerator's is (``IN_PROCESS_ASSIGNMENT`` emptied)."""
    import jax
    import jax.numpy as jnp

    from fieldmem.driver import dumps, kept

    monkeypatch.setattr(dumps, "IN_PROCESS_ASSIGNMENT", frozenset())
    x = jnp.ones((64, 64))
    folder = tmp_path / "cache"
    readings = []
    for attempt in range(3):  # one line: jax keys the program with its Python stack
        if attempt == 2:  # a cache entry no check kept a reading of
            for path in (folder / kept.FOLDER).iterdir():
                path.unlink()
        with compilation_cache(str(folder)):
            jax.clear_caches()
            executable, _, _ = lowering.compile_lowered(jax.jit(_twice).lower(x), fast=True)
        notes = dumps.compile_notes(executable)
        assert notes is not None
        readings.append((dumps.dumped(executable), notes.loaded))
        if attempt == 0:
            assert len(list((folder / kept.FOLDER).iterdir())) == 1  # kept under jax's key
    (first, compiled), (again, loaded), (missing, loaded_too) = readings
    assert first is not None and not compiled
    assert loaded and again == first  # jax loaded it: the reading is the one kept
    assert loaded_too and missing is None  # none kept: said, never read as zeros
