"""``make bench``'s harness (benchmarks/bench_fast.py): fresh constants, the fairness check, missing pieces.

The measurements themselves are the benchmark's; what is tested here is
what makes them fair: two salts give the same program up to its constants
(so neither tool is timed on a different program and no cache can serve a
salted module), the unsalted module is unchanged, and the HLO normalisation
the fairness check compares by hides only who called jax.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
from helpers_bench import load_benchmark as _load

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _import_file(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _hlo(module: Any) -> list[str]:
    import jax

    return [jax.jit(fn, donate_argnums=d).lower(*make()).as_text() for fn, make, d in module.CASES]


CONSTANT = re.compile(r"dense<[^>]*>")


def test_unsalted_module_is_the_one_earlier_results_measured(tmp_path: Path) -> None:
    synth = _load("synth")
    unsalted = synth.write_module(tmp_path / "plain.py", functions=1, chain=1, size=8).read_text()
    assert "SALT" not in unsalted
    assert "return x * 0.5 + k\n" in unsalted
    assert "return jnp.tanh(x @ w)\n" in unsalted
    assert "set(x[(k + 1) % SIZE] * 2.0)" in unsalted
    salted = synth.write_module(tmp_path / "salted.py", functions=1, chain=1, size=8, salt=5).read_text()
    assert "SALT = 0.0048828125" in salted


@pytest.mark.compile
def test_two_salts_give_the_same_program_up_to_its_constants(tmp_path: Path) -> None:
    synth = _load("synth")
    programs = []
    for salt in (3, 4):
        path = synth.write_module(tmp_path / f"salted_{salt}.py", functions=5, chain=5, size=8, salt=salt)
        programs.append(_hlo(_import_file(path)))
    for a, b in zip(*programs):
        assert a != b  # every function has a constant that depends on the salt
        assert CONSTANT.sub("C", a) == CONSTANT.sub("C", b)  # and nothing else differs


@pytest.mark.compile
def test_salted_constants_differ_for_neighbouring_salts_in_float32(tmp_path: Path) -> None:
    import numpy as np

    synth = _load("synth")
    # k + SALT with k up to a few hundred must still tell salt 1000 from 1001 in float32
    assert np.float32(300 + synth.salt_value(1000)) != np.float32(300 + synth.salt_value(1001))
    with pytest.raises(ValueError, match="salt"):
        synth.write_module(tmp_path / "bad.py", salt=2**20)


def test_normalised_dump_hides_the_caller_not_the_program(tmp_path: Path) -> None:
    fast = _load("bench_fast")
    body = 'ENTRY main {\n  p = f32[2]{0} parameter(0), metadata={op_name="a" stack_frame_id=1}\n  ROOT n = f32[2]{0} negate(p)\n}'
    naive = 'HloModule jit_f, entry_computation_layout={(f32[2]{0})->f32[2]{0}}\n\nFileNames\n1 "naive.py"\n\n' + body
    other = 'HloModule jit_f, entry_computation_layout={(f32[2]{0})->f32[2]{0}}\n\nFileNames\n1 "worker.py"\n\n' + body
    changed = naive.replace("negate", "abs")
    files = {}
    for name, text in (("naive", naive), ("other", other), ("changed", changed)):
        files[name] = tmp_path / f"{name}.txt"
        files[name].write_text(text)
    assert fast._normalised(files["naive"]) == fast._normalised(files["other"])
    assert fast._normalised(files["naive"]) != fast._normalised(files["changed"])


def test_a_missing_watch_benchmark_stops_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _load("bench_fast")
    monkeypatch.setattr(fast, "BENCH", tmp_path)  # a benchmarks folder without bench_watch.py
    with pytest.raises(fast.BenchError, match=r"bench_watch\.py is missing"):
        fast.watch_module()


def test_watch_result_without_a_verdict_is_an_error(tmp_path: Path) -> None:
    fast = _load("bench_fast")

    class Watch:
        @staticmethod
        def run(quick: bool) -> dict:
            return {"recheck_seconds": 1.0}

    with pytest.raises(fast.BenchError, match="nothing to judge"):
        fast.watch(Watch, True, tmp_path, {})

    class Judged:
        @staticmethod
        def run(quick: bool) -> dict:
            return {"ratio": 1.2, "quick": quick}

    result = fast.watch(Judged, True, tmp_path, {})
    assert result["pass"] is False and result["result"] == {"ratio": 1.2, "quick": True}

    class Repeats:  # bench_watch.py's interface: run(repeat=...), a ratio and its own verdict
        @staticmethod
        def run(repeat: int = 11) -> dict:
            return {"ratio": 1.05, "within_10_percent": True, "repeat": repeat}

    result = fast.watch(Repeats, True, tmp_path, {})
    assert result["pass"] is True and result["result"]["repeat"] == fast.WATCH_QUICK_REPEAT
    assert fast.watch(Repeats, False, tmp_path, {})["result"]["repeat"] == 11


def test_a_quick_run_replaces_no_watch_result(tmp_path: Path) -> None:
    fast = _load("bench_fast")
    written: list[Path] = []

    class Writes:
        RESULTS = BENCH / "results"

        @classmethod
        def run(cls, repeat: int = 11) -> dict:
            written.append(cls.RESULTS)
            return {"ratio": 1.0, "within_10_percent": True}

    fast.watch(Writes, True, tmp_path, {}, BENCH / "results")
    fast.watch(Writes, False, tmp_path, {}, tmp_path / "out")
    assert written == [tmp_path / "watch-results", tmp_path / "out"]
