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
sys.path.insert(0, str(Path(__file__).resolve().parent))
from example_cases import CASES  # noqa: E402

for fn, make_args, options in CASES:
    args = make_args()
    static = options.get("static_argnums", ())
    for donate in ((), options["donate_argnums"]):
        compiled = jax.jit(fn, static_argnums=static, donate_argnums=donate).lower(*args).compile()
        compiled.memory_analysis()
        compiled.as_text()
print(f"{time.perf_counter() - start:.3f}")
