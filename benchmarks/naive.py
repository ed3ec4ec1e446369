"""The naive baseline for a synthetic module: what a user would write by hand.

``python benchmarks/naive.py MODULE.py``: import the module, and for every
``(fn, make_args, donate_argnums)`` in its ``CASES``, sequentially:
``jax.jit(fn, donate_argnums=...).lower(*args).compile()``, then
``memory_analysis()`` and ``as_text()`` — once without donation and once
with. fieldmem is hidden from the import so the module's registrations are
skipped and fieldmem costs nothing here.
"""

import importlib.util
import sys
import time

start = time.perf_counter()
sys.modules["fieldmem"] = None  # type: ignore[assignment]  # `import fieldmem` raises ImportError

import jax  # noqa: E402

path = sys.argv[1]
spec = importlib.util.spec_from_file_location("synthetic_module", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)

for fn, make_args, donate in module.CASES:
    args = make_args()
    for donate_argnums in ((), donate):
        compiled = jax.jit(fn, donate_argnums=donate_argnums).lower(*args).compile()
        compiled.memory_analysis()
        compiled.as_text()
print(f"{time.perf_counter() - start:.3f}")
