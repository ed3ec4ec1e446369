"""One array given twice in a call (``update(x, x)``), donated where an output reuses it.

jax refuses such a call (``INVALID_ARGUMENT``: a buffer donated and also read by the same call), so the
donated call fails with these arguments. The static check says so (``shared-donation``, an error: not in
place), and ``--run`` makes the same call and fails as the user's does. Each case is checked against jax
itself: the finding is there exactly where calling the jitted step with the same arguments raises.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fieldmem.frontends.api import check_function
from fieldmem.model.target import TargetResult

pytestmark = pytest.mark.compile
pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
N = 64  # f32[64,64]: 16 KiB, at fieldmem's default min_bytes


def _x() -> jax.Array:
    return jnp.ones((N, N), jnp.float32)


def _add(x: Any, batch: Any) -> Any:
    return x + batch


def _pair(x: Any, y: Any) -> Any:
    return x * 2, y + 1


def _tree(p: dict[str, Any]) -> dict[str, Any]:
    return {"u": p["u"] + p["v"]}


def _first_only(x: Any, unused: Any) -> Any:
    return x * 2


def _reduce(x: Any, batch: Any) -> Any:
    return (x + batch).sum()


def _twice() -> tuple[jax.Array, jax.Array]:
    x = _x()
    return x, x


def _put_again() -> tuple[jax.Array, jax.Array]:
    x = jax.device_put(_x(), jax.devices()[0])
    return x, jax.device_put(x, jax.devices()[0])  # another array object, the same buffer


def _tree_twice() -> tuple[dict[str, jax.Array]]:
    x = _x()
    return ({"u": x, "v": x},)


def _copied() -> tuple[jax.Array, jax.Array]:
    x = _x()
    return x, jnp.copy(x)


def _numpy_twice() -> tuple[np.ndarray, np.ndarray]:
    x = np.ones((N, N), np.float32)
    return x, x


# (id, step, its arguments, donate_argnums, whether jax refuses the donated call)
CASES: list[tuple[str, Callable[..., Any], Callable[[], tuple], tuple[int, ...], bool]] = [
    ("x-x, the first donated", _add, _twice, (0,), True),
    ("x-x, the second donated", _add, _twice, (1,), True),
    ("x-x, both donated, two outputs", _pair, _twice, (0, 1), True),
    ("x and device_put of it", _add, _put_again, (0,), True),
    ("one pytree holding x twice", _tree, _tree_twice, (0,), True),
    ("x-x, the second unused", _first_only, _twice, (0,), False),
    ("x-x, nothing can reuse it", _reduce, _twice, (0,), False),
    ("x and a copy of it", _add, _copied, (0,), False),
    ("a NumPy array twice", _add, _numpy_twice, (0,), False),
]


def _jax_refuses(step: Callable[..., Any], args: tuple, donate: tuple[int, ...]) -> bool:
    """Whether jax's own call of ``step`` with ``args``, ``donate`` donated, raises jax's refusal."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Some donated buffers were not usable": the reduction's
        try:
            jax.block_until_ready(jax.jit(step, donate_argnums=donate)(*args))
        except Exception as exc:
            refusal = str(exc)
        else:
            return False
    if "INVALID_ARGUMENT" not in refusal or "donate" not in refusal:
        pytest.fail(f"jax raised something else: {refusal}")
    return True


def _shared(result: TargetResult) -> list[Any]:
    assert result.status == "ok", result.error
    assert result.verdict is not None
    return [f for f in result.verdict.findings if f.code == "shared-donation"]


@pytest.mark.parametrize(("step", "make_args", "donate", "refused"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_finding_is_where_jax_refuses_the_call(
    step: Callable[..., Any], make_args: Callable[[], tuple], donate: tuple[int, ...], refused: bool
) -> None:
    assert _jax_refuses(step, make_args(), donate) == refused  # what jax does, in this process
    (result,) = check_function(step, *make_args(), donate=donate).results
    shared = _shared(result)
    assert bool(shared) == refused
    if refused:
        (finding,) = shared
        assert finding.severity == "error" and finding.bytes == N * N * 4
        assert result.verdict is not None and result.verdict.kind == "not-in-place"
        assert result.verdict.summary.startswith(f"not in place: {finding.input} is donated")
        assert "jax refuses a call that donates a buffer it also reads" in finding.message


def test_the_message_names_the_donated_leaf_and_where_it_is_given_again() -> None:
    (result,) = check_function(_add, *_twice(), donate=0).results
    (finding,) = _shared(result)
    assert (finding.input, finding.output) == ("x", "out")
    assert "the call gives the same array again as batch" in finding.message
    assert "pass a copy (jnp.copy)" in finding.message
    (result,) = check_function(_tree, *_tree_twice(), donate=0).results
    (finding,) = _shared(result)
    assert finding.input == "p['u']" and "again as p['v']" in finding.message


def test_a_shape_given_twice_is_not_one_buffer() -> None:
    """A ShapeDtypeStruct describes a shape: two arguments may share one without sharing a buffer."""
    spec = jax.ShapeDtypeStruct((N, N), jnp.float32)
    (result,) = check_function(_add, spec, spec, donate=0).results
    assert _shared(result) == []
    assert result.verdict is not None and result.verdict.kind == "in-place"


MODULE = f"""
import jax.numpy as jnp
import fieldmem


def update(x, batch):
    return x + batch


def make_args():  # traced, not run: the one traced array stays one object
    x = jnp.zeros(({N}, {N}), jnp.float32) + 1
    return x, x


fieldmem.case(update, args=make_args, donate=0, name="twice")
"""


def _fieldmem(folder: Path, *options: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", COLUMNS="200", PYTHONPATH=str(ROOT))
    env.pop("XLA_FLAGS", None)
    return subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", "twice.py", "--no-cache", *options],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_module_whose_factory_returns_one_array_twice(tmp_path: Path) -> None:
    """``fieldmem check``: the traced factory's array, returned twice, is one buffer (not in place, exit 1
    under ``--expect in-place``); with ``--run`` the run makes the same call and fails as jax refuses it."""
    (tmp_path / "twice.py").write_text(MODULE)
    done = _fieldmem(tmp_path, "-f", "json", "-o", "report.json", "--expect", "in-place")
    assert done.returncode == 1, done.stderr
    (result,) = json.loads((tmp_path / "report.json").read_text())["results"]
    assert result["verdict"]["kind"] == "not-in-place"
    assert [f["code"] for f in result["verdict"]["findings"] if f["severity"] == "error"] == ["shared-donation"]

    done = _fieldmem(tmp_path, "--run")
    assert "running the donated variant failed" in done.stderr, done.stderr
    assert "INVALID_ARGUMENT" in done.stderr
    assert "static analysis: not in place: x is donated" in done.stderr
    # one line for the error: XLA's own log line of it ("E… ExecutePrepareWithOomRetries failed: …") is not echoed
    assert [line for line in done.stderr.splitlines() if line.strip()] == [
        line for line in done.stderr.splitlines() if line.startswith("fieldmem: error: ")
    ], done.stderr


SHARDED_MODULE = f"""
import jax, jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import fieldmem


def update(x, batch):
    return x + batch


def make_args():
    x = jax.device_put(jnp.ones(({N}, {N}), jnp.float32), NamedSharding(Mesh(np.array(jax.devices()), ("x",)), P("x")))
    return x, x


fieldmem.case(update, args=make_args, donate=0, name="twice")
"""


def test_over_several_devices_the_run_does_not_make_a_call_that_can_kill_it(tmp_path: Path) -> None:
    """Over 4 devices jax 0.10.2 kills the process on the refused call (the test above): ``--run`` does not
    make it, and says why beside the static verdict, where it used to report a worker killed by SIGSEGV."""
    (tmp_path / "twice.py").write_text(SHARDED_MODULE)
    done = _fieldmem(tmp_path, "--devices", "4", "--run")
    assert done.returncode == 2, done.stderr  # the target is an error: its run failed
    assert "the donated variant is not run: x is donated and also given as batch, one array" in done.stderr
    assert "over 4 devices it can kill the process instead of refusing" in done.stderr
    assert "static analysis: not in place: x is donated" in done.stderr
    assert "SIGSEGV" not in done.stderr + done.stdout and "crash" not in done.stderr


def test_over_several_devices_a_call_whose_donation_nothing_reuses_is_left_out_with_a_note(tmp_path: Path) -> None:
    """The same array given twice, donated, where no output reuses it (a sum): jax makes that call over 4
    devices (checked below), so leaving it out is no error: the static verdict stands, the exit code is 0, and a
    note says the run did not make the call and that jax would."""
    (tmp_path / "twice.py").write_text(SHARDED_MODULE.replace("return x + batch", "return (x + batch).sum()"))
    done = _fieldmem(tmp_path, "--devices", "4", "--run", "-f", "json", "-o", "report.json")
    assert done.returncode == 0, done.stderr
    assert "fieldmem: error" not in done.stderr, done.stderr
    (result,) = json.loads((tmp_path / "report.json").read_text())["results"]
    assert result["status"] == "ok" and result["variants"]["donated"].get("run") is None
    (note,) = [f for f in result["verdict"]["findings"] if f["code"] == "run-not-made"]
    assert note["severity"] == "info" and "shared-donation" not in [f["code"] for f in result["verdict"]["findings"]]
    assert note["message"].startswith("the donated variant is not run: x is donated and also given as batch")
    assert "Here no output reuses the donation, so jax would make the call" in note["message"]
    # jax's own call of it, over the same 4 devices: made
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    called = subprocess.run(
        [sys.executable, "-c", "import jax, twice; print(jax.jit(twice.update, donate_argnums=0)(*twice.make_args()))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert called.returncode == 0, called.stderr


PLUGIN_TESTS = f"""
import jax
import jax.numpy as jnp


def update(x, batch):
    return x + batch


def test_twice(fieldmem_check):
    x = jnp.ones(({N}, {N}), jnp.float32)
    fieldmem_check(update, x, x, donate=0)


def test_a_copy(fieldmem_check):
    x = jnp.ones(({N}, {N}), jnp.float32)
    fieldmem_check(update, x, jnp.copy(x), donate=0)


def test_put_again(fieldmem_check):  # another array object, the same buffer: one array in jax's call too
    x = jax.device_put(jnp.ones(({N}, {N}), jnp.float32), jax.devices()[0])
    fieldmem_check(update, x, jax.device_put(x, jax.devices()[0]), donate=0)
"""


def test_the_pytest_plugin_sends_one_array_given_twice_as_one(pytester: pytest.Pytester) -> None:
    """The fixture checks in a worker, its arguments sent as shapes: one array given twice arrives as one, and so
    do two array objects with one buffer (``jax.device_put`` of an array already there), as jax's call finds
    (``put again`` in the cases above)."""
    pytester.makepyfile(test_twice=PLUGIN_TESTS)
    result = pytester.runpytest_subprocess("-v")
    result.assert_outcomes(passed=1, failed=2)
    text = result.stdout.str()
    assert "test_twice.py::test_twice FAILED" in text and "test_twice.py::test_a_copy PASSED" in text
    assert "test_twice.py::test_put_again FAILED" in text
    assert "not in place: x is donated and out reuses its buffer, but the call gives the same array again" in text


def _noted(result: TargetResult) -> list[Any]:
    assert result.verdict is not None
    return [f for f in result.verdict.findings if f.code == "shared-argument"]


def test_one_array_given_twice_undonated_is_counted_twice_by_xla_and_noted() -> None:
    """No donation of it: jax makes the call, the devices hold one buffer, and XLA's argument bytes count
    two; a note says so with the difference. Where jit drops the second leaf, nothing is counted twice."""
    x = _x()
    plain = jax.jit(_add).lower(x, x).compile().memory_analysis()
    assert plain.argument_size_in_bytes == 2 * N * N * 4  # XLA's: one per parameter
    (result,) = check_function(_add, x, x, donate="none").results
    (note,) = _noted(result)
    assert note.severity == "info" and note.bytes == N * N * 4
    assert note.message.startswith("x and batch are one array in this call: the devices hold it once")
    assert "16.0 KiB more than this call holds" in note.message
    assert result.verdict is not None and not _shared(result)

    (reduced,) = check_function(_reduce, x, x, donate=0).results  # a donation nothing reuses is not made
    assert len(_noted(reduced)) == 1 and not _shared(reduced)
    (pruned,) = check_function(_first_only, x, x, donate=0).results
    assert _noted(pruned) == [] and _shared(pruned) == []
    (refused,) = check_function(_add, x, x, donate=0).results  # the error says it: no note beside it
    assert _noted(refused) == [] and len(_shared(refused)) == 1


def test_a_small_array_given_twice_is_below_the_note() -> None:
    small = jnp.ones((4, 4), jnp.float32)
    (result,) = check_function(_add, small, small, donate="none").results
    assert _noted(result) == []
    (result,) = check_function(_add, small, small, donate=0).results  # the refusal is any size
    assert len(_shared(result)) == 1


def test_the_advice_to_donate_says_the_array_must_be_given_once_first() -> None:
    """Not donated, ``x`` written to a new buffer: "donate x" alone would make a call jax refuses, since the
    call gives ``x`` again as ``batch``: the finding says to give it once first (``--suggest``'s summary says
    it too: tests/findings/test_advisor.py)."""
    x = _x()
    (result,) = check_function(_add, x, x, donate="none").results
    assert result.verdict is not None
    (new,) = [f for f in result.verdict.findings if f.code == "new-buffer"]
    assert "x has its size but is not donated, and the call gives the same array again as batch" in new.message
    assert "give it once, then donate x" in new.message
    (result,) = check_function(_add, x, jnp.copy(x), donate="none").results  # two arrays
    assert result.verdict is not None
    (new,) = [f for f in result.verdict.findings if f.code == "new-buffer"]
    assert "given again" not in new.message and "donate x" in new.message


SHARDED = f"""
import json, sys, warnings
import jax, jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from fieldmem.frontends.api import check_function

warnings.simplefilter("ignore")
sharding = NamedSharding(Mesh(np.array(jax.devices()), ("x",)), P("x"))
CASES = {{
    "twice": lambda x: (x, x),
    "put again": lambda x: (x, jax.device_put(x, sharding)),
    "a copy": lambda x: (x, jnp.copy(x)),
}}


def add(x, batch):
    return x + batch


def args(name):
    return CASES[name](jax.device_put(jnp.ones(({N}, {N}), jnp.float32), sharding))


if sys.argv[1] == "fieldmem":  # every case's static check, in one process: nothing runs
    found = {{}}
    for name in CASES:
        (result,) = check_function(add, *args(name), donate=0).results
        shared = [f.message for f in result.verdict.findings if f.code == "shared-donation"]
        assert all("over several devices it can kill the process instead" in m for m in shared), shared
        found[name] = [result.devices, bool(shared)]
    print(json.dumps(found))
else:  # jax's own call of one case
    jax.block_until_ready(jax.jit(add, donate_argnums=0)(*args(sys.argv[1])))
    print("called")
"""


def _sharded(folder: Path, what: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", SHARDED, what], env=env, capture_output=True, text=True, timeout=300, cwd=folder
    )


def test_arrays_sharded_over_four_devices_are_one_buffer_by_every_shard(tmp_path: Path) -> None:
    """An array split over 4 (simulated) devices has one buffer per device: the same array given twice is one
    buffer on every shard, and a copy is not, as jax's own call finds. There jax 0.10.2 does not raise: the
    refused call kills the process (SIGSEGV), which is why ``--run`` does not make it there (the test after)."""
    done = _sharded(tmp_path, "fieldmem")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"twice": [[0, 1, 2, 3], True], "put again": [[0, 1, 2, 3], True], "a copy": [[0, 1, 2, 3], False]}
    for name, refused in found.items():
        called = _sharded(tmp_path, name)
        if refused[1]:  # refused: an error, or the process killed
            assert called.returncode != 0 and "called" not in called.stdout, called.stderr
            assert called.returncode < 0 or "INVALID_ARGUMENT" in called.stderr, called.stderr
        else:
            assert called.returncode == 0 and "called" in called.stdout, called.stderr
