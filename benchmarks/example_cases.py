"""The bundled examples' targets as a user would jit them by hand: ``(function, make_args, jit options)``.

The naive baselines (``naive_examples.py``, ``naive_backends.py``) compile
these; ``fieldmem check`` of the same four example files checks the same
five targets. Importing it imports the examples (and jax); ``examples/``
must be on ``sys.path``.
"""

import field
import optimizer
import sparse_row
import stencil_scan

CASES = [
    (field.update, field.update_args, dict(donate_argnums=(0, 1))),
    (sparse_row.set_row, sparse_row.set_row_args, dict(donate_argnums=(0,))),
    (sparse_row.write_kv, sparse_row.write_kv_args, dict(donate_argnums=(0,))),
    (stencil_scan.diffuse, stencil_scan.diffuse_args, dict(static_argnums=(1,), donate_argnums=(0,))),
    (optimizer.sgd_step._fun, optimizer.step_args, dict(donate_argnums=(0, 1))),
]
