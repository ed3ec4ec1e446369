"""The naive baseline for a synthetic module: what a user would write by hand.

``python benchmarks/naive.py MODULE.py [TIMINGS.json]``: import the module,
and for every ``(fn, make_args, donate_argnums)`` in its ``CASES``,
sequentially: ``jax.jit(fn, donate_argnums=...).lower(*args).compile()``,
then ``memory_analysis()`` and ``as_text()`` — once without donation and once
with. fieldmem is hidden from the import so the module's registrations are
skipped and fieldmem costs nothing here.

With ``TIMINGS.json`` it also writes the seconds of each lowering and each
compile (XLA's default code generation: what a user's ``jit`` gets), read
with two clock reads around each call: ``bench_fast.py`` reports the
compile-heavy module's compile time from them.
"""

import importlib.util
import json
import sys
import time

start = time.perf_counter()
sys.modules["fieldmem"] = None  # type: ignore[assignment]  # `import fieldmem` raises ImportError

import jax  # noqa: E402

path = sys.argv[1]
spec = importlib.util.spec_from_file_location("synthetic_module", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)

timings = []
for fn, make_args, donate in module.CASES:
    args = make_args()
    for donate_argnums in ((), donate):
        t0 = time.perf_counter()
        lowered = jax.jit(fn, donate_argnums=donate_argnums).lower(*args)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        compiled.memory_analysis()
        compiled.as_text()
        timings.append(
            {
                "function": fn.__name__,
                "donated": bool(donate_argnums),
                "lower_seconds": t1 - t0,
                "compile_seconds": t2 - t1,
            }
        )
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as out:
        json.dump({"wall_in_process": time.perf_counter() - start, "variants": timings}, out)
print(f"{time.perf_counter() - start:.3f}")
