"""The jax releases fieldmem's worker supports (issue 33, item 4).

- :func:`fieldmem.model.versions.check_supported` takes a release inside the range and refuses one outside it,
  or one that is not a release number, with one line naming the range (exit code 2);
- the driver reads an element's bit width where jax 0.7 has no ``jax.dtypes.itemsize_bits``;
- ``examples/upgrade/loop_update.py`` (openxla/xla#45912) shows, under this jax (0.7.2 or later), the
  temporary copy of the array at the line of ``jnp.exp``, live at the peak.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from fieldmem.model.errors import FieldmemError, UnsupportedJaxError
from fieldmem.model.versions import NEWEST_JAX, OLDEST_JAX, check_supported

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("version", [OLDEST_JAX, NEWEST_JAX, "0.8.3", f"{NEWEST_JAX}.dev20260101"])
def test_a_release_in_the_range_is_supported(version: str) -> None:
    check_supported(version)


@pytest.mark.parametrize(
    ("version", "said"),
    [("0.6.2", "older"), ("0.4.38", "older"), ("0.11.0", "newer"), ("1.0.0", "newer"), ("latest", "not a release")],
)
def test_a_release_outside_the_range_is_one_line_naming_it(version: str, said: str) -> None:
    with pytest.raises(UnsupportedJaxError) as raised:
        check_supported(version)
    error = raised.value
    assert isinstance(error, FieldmemError) and error.exit_code == 2
    assert said in error.message and "\n" not in error.message
    assert f"{OLDEST_JAX} to {NEWEST_JAX}" in error.message


def test_the_range_is_in_order() -> None:
    def release(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split("."))

    assert release(OLDEST_JAX) <= release(NEWEST_JAX)


def test_the_bit_width_is_read_where_jax_dtypes_lacks_itemsize_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """jax 0.7 has ``bit_width`` in its private dtypes module only; with neither, ml_dtypes' or numpy's."""
    import jax._src.dtypes as private
    import jax.numpy as jnp
    import ml_dtypes
    import numpy as np

    from fieldmem.driver.shapes import _bit_width

    now = types.SimpleNamespace(dtypes=types.SimpleNamespace(itemsize_bits=lambda d: 7))
    assert _bit_width(now, np.dtype(np.float32)) == 7
    older = types.SimpleNamespace(dtypes=types.SimpleNamespace())
    monkeypatch.setattr(private, "bit_width", lambda d: 5, raising=False)
    assert _bit_width(older, np.dtype(np.float32)) == 5
    monkeypatch.delattr(private, "bit_width")
    assert _bit_width(older, np.dtype(ml_dtypes.int4)) == 4
    assert _bit_width(older, np.dtype(jnp.bfloat16)) == 16
    assert _bit_width(older, np.dtype(np.bool_)) == 8
    assert _bit_width(older, np.dtype(np.complex64)) == 64
    with pytest.raises(ValueError, match="no bit width"):
        _bit_width(older, np.dtype("V4"))


@pytest.mark.compile
def test_the_published_regression_shows_its_temporary_at_the_users_line() -> None:
    import jax

    from fieldmem.parent.checker import check
    from fieldmem.request.options import CheckOptions

    if tuple(int(p) for p in jax.__version__.split(".")[:3]) < (0, 7, 2):
        pytest.skip("before jaxlib 0.7.2 the program is in place: benchmarks/results/versions.md")
    example = ROOT / "examples" / "upgrade" / "loop_update.py"
    (result,) = check([str(example)], options=CheckOptions(cache_dir=None, isolate=False)).results
    donated = result.variants["donated"]
    line = next(n for n, text in enumerate(example.read_text().splitlines(), 1) if "jnp.exp(x)" in text)
    array = (1 << 16) * 4
    assert donated.memory.temp_bytes is not None and donated.memory.temp_bytes >= array
    temporaries = [b for b in donated.live_at_peak if b.kind == "temporary" and b.bytes == array]
    assert [b.source for b in temporaries] == [f"examples/upgrade/loop_update.py:{line}"], donated.live_at_peak
    assert donated.memory.live_peak_bytes is not None and donated.memory.live_peak_bytes >= 2 * array


def test_the_range_is_the_one_pyproject_declares() -> None:
    """pyproject.toml's jax and jaxlib dependencies are the worker's supported range, both ends."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    for name in ("jax", "jaxlib"):
        (spec,) = [d for d in project["dependencies"] if d.split(">")[0].split("=")[0].strip() == name]
        assert spec == f"{name}>={OLDEST_JAX},<={NEWEST_JAX}", spec
