"""Write the golden buffer-assignment files that tests/xla/test_buffers.py decodes without compiling.

Run from anywhere with the pinned jax (0.10.2, CPU): ``make golden`` (which also
regenerates tests/golden), or ``.venv/bin/python tests/golden_buffers/regenerate.py``.

For each case it writes ``CASE.buffer_assignment.pb`` (the bytes of
``memory_analysis().serialized_buffer_assignment_proto``), ``CASE.hlo_module.pb``
(``runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()``),
``CASE.hlo.txt`` (``as_text()``) and ``CASE.memory.json`` (memory_analysis figures).
Source files are recorded relative to the repository root (jax's
``jax_hlo_source_file_canonicalization_regex``), in the text and in the module
proto alike, so the files do not depend on where the repository is checked out.
After regenerating, update the exact numbers asserted in tests/xla/test_buffers.py.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jax
import jax.numpy as jnp
from jax import lax

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def straight(x, y):
    a = jnp.sin(x) @ y
    return jnp.tanh(a) + x


def sparse(u, idx, row):
    return u.at[idx].set(row)


def scan(x):
    def body(c, _):
        c = jnp.sin(c) * 2.0 + 1.0
        return c, c.sum()

    return lax.scan(body, x, None, length=5)


def while_loop(x):
    return lax.while_loop(
        lambda c: c[1] < 3, lambda c: (jnp.cos(c[0]) + c[0] * 2, c[1] + 1), (x, 0)
    )[0]


def several(a, b):
    return a + b, a * b, (a - b).sum()


def cases():
    x = jnp.ones((32, 32), jnp.float32)
    u = jnp.zeros((64, 32), jnp.float32)
    row = jnp.ones((32,), jnp.float32)
    return {
        "straight": (straight, (x, x), ()),
        "sparse_plain": (sparse, (u, 3, row), ()),
        "sparse_donated": (sparse, (u, 3, row), (0,)),
        "scan": (scan, (x,), ()),
        "while": (while_loop, (x,), ()),
        "several": (several, (x, x), ()),
    }


def compile_case(fn, args, donate, compiler_options=None):
    return jax.jit(fn, donate_argnums=donate).lower(*args).compile(compiler_options=compiler_options)


def memory_figures(compiled) -> dict[str, int]:
    m = compiled.memory_analysis()
    return {
        "argument_bytes": int(m.argument_size_in_bytes),
        "output_bytes": int(m.output_size_in_bytes),
        "alias_bytes": int(m.alias_size_in_bytes),
        "temp_bytes": int(m.temp_size_in_bytes),
        "peak_bytes": int(m.peak_memory_in_bytes),
    }


def main() -> None:
    # "/path/to/checkout/tests/..." is recorded as "tests/..."
    jax.config.update("jax_hlo_source_file_canonicalization_regex", "^" + re.escape(str(ROOT) + os.sep))
    for name, (fn, args, donate) in cases().items():
        compiled = compile_case(fn, args, donate)
        m = compiled.memory_analysis()
        (HERE / f"{name}.buffer_assignment.pb").write_bytes(m.serialized_buffer_assignment_proto)
        module = compiled.runtime_executable().hlo_modules()[0]
        (HERE / f"{name}.hlo_module.pb").write_bytes(module.as_serialized_hlo_module_proto())
        (HERE / f"{name}.hlo.txt").write_text(compiled.as_text())
        (HERE / f"{name}.memory.json").write_text(json.dumps(memory_figures(compiled), indent=2) + "\n")
        print(name, "written")


if __name__ == "__main__":
    main()
    # the TPU and GPU compiles (tpu_v5e_*, gpu_h100_*), made without the device by
    # accelerators.py in a process of its own (the deviceless environment must hold before
    # jax starts); called here, below main(), so the CPU goldens' line numbers stay as they are
    import sys

    sys.path.insert(0, str(HERE))
    import accelerators

    accelerators.run("buffers")
