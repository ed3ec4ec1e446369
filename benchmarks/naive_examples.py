"""The naive baseline: what a user would write to get the same raw facts by hand.

For each bundled example: jit without and with donation, lower, compile,
memory_analysis() and as_text(), sequentially. No fieldmem import.
"""

import sys
import time
from pathlib import Path

start = time.perf_counter()
import jax  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import field  # noqa: E402
import optimizer  # noqa: E402
import sparse_row  # noqa: E402
import stencil_scan  # noqa: E402

CASES = [
    (field.update, field.update_args, dict(donate_argnums=(0, 1))),
    (sparse_row.set_row, sparse_row.set_row_args, dict(donate_argnums=(0,))),
    (sparse_row.write_kv, sparse_row.write_kv_args, dict(donate_argnums=(0,))),
    (stencil_scan.diffuse, stencil_scan.diffuse_args, dict(static_argnums=(1,), donate_argnums=(0,))),
    (optimizer.sgd_step._fun, optimizer.step_args, dict(donate_argnums=(0, 1))),
]
for fn, make_args, options in CASES:
    args = make_args()
    static = options.get("static_argnums", ())
    for donate in ((), options["donate_argnums"]):
        compiled = jax.jit(fn, static_argnums=static, donate_argnums=donate).lower(*args).compile()
        compiled.memory_analysis()
        compiled.as_text()
print(f"{time.perf_counter() - start:.3f}")
