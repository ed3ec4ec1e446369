"""Two targets, one of which meets a fault deep inside fieldmem, for the containment tests (tests/parent/test_containment.py).

Importing this module patches :func:`fieldmem.driver.run_variant` so that running
``internal:broken`` raises a RuntimeError, as a bug in fieldmem would. It is patched
here, at import, so that the fault happens in the ``--run`` worker process, which
imports this module (the process that writes the report never does); every other
target runs as before.
"""

import jax.numpy as jnp

import fieldmem
import fieldmem.driver as driver

_real_run_variant = getattr(driver.run_variant, "__wrapped__", driver.run_variant)


def _faulty_run_variant(call, compiled):
    if getattr(call.function, "__name__", "") == "broken":
        raise RuntimeError("injected fault while reading the run")
    return _real_run_variant(call, compiled)


_faulty_run_variant.__wrapped__ = _real_run_variant
driver.run_variant = _faulty_run_variant


def broken(u):
    return u * 2.0


def fine(u):
    return u + 1.0


def _array():
    return (jnp.ones((32, 32), jnp.float32),)


fieldmem.case(broken, args=_array, name="internal:broken")
fieldmem.case(fine, args=_array, name="internal:fine")
