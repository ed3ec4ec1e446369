"""Two targets, one of which meets a fault deep inside fieldmem, for the containment tests (tests/test_containment.py).

Importing this module patches :func:`fieldmem.findings.runcheck.run_check` so
that reading the run of ``internal:broken`` raises a RuntimeError, as a bug in
fieldmem would. It is patched here, at import, so that the fault also happens
in a ``--run`` worker process, which imports this module again; every other
target's run is read as before.
"""

import jax.numpy as jnp

import fieldmem
import fieldmem.findings.runcheck as runcheck

_real_run_check = getattr(runcheck.run_check, "__wrapped__", runcheck.run_check)


def _faulty_run_check(result, variant, reading):
    if result.name == "internal:broken":
        raise RuntimeError("injected fault while reading the run")
    return _real_run_check(result, variant, reading)


_faulty_run_check.__wrapped__ = _real_run_check
runcheck.run_check = _faulty_run_check


def broken(u):
    return u * 2.0


def fine(u):
    return u + 1.0


def _array():
    return (jnp.ones((32, 32), jnp.float32),)


fieldmem.case(broken, args=_array, name="internal:broken")
fieldmem.case(fine, args=_array, name="internal:fine")
