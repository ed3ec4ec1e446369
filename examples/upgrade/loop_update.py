"""A donated array read by a loop: in place up to jaxlib 0.7.1, a full temporary copy from 0.7.2.

Reported in openxla/xla#45912 ("Regression in jaxlib 0.7.2, CPU and GPU:
donated buffer no longer updated in place when a loop reads the intermediate
value"): for the chain

    donated x -> elementwise update A -> while loop reads A -> elementwise update B -> output (aliased to x)

XLA up to jaxlib 0.7.1 computes the whole chain in the donated allocation
(``temp_size_in_bytes`` about zero); from 0.7.2 the fusion that makes the
intermediate value gets a fresh temporary allocation the size of the array,
so the peak is about twice the working set. The report says the cause is a
limitation of XLA's buffer assignment that two commits exposed (one for CPU,
one for GPU), still present in jax 0.11.0. ``exp`` is there so that XLA does
not recompute the intermediate value inside the final fusion.

    fieldmem check examples/upgrade/loop_update.py --jax 0.7.1,0.7.2

shows the temporary bytes that 0.7.2 adds at the line of ``jnp.exp``; 0.7.0
against 0.7.1, or 0.7.2 against 0.10.2, shows no difference
(benchmarks/results/versions.md). The argument is a ``jax.ShapeDtypeStruct``:
nothing is allocated.
"""

import jax
import jax.numpy as jnp
from jax import lax

import fieldmem

N = 1 << 16  # float32: 256 KiB
READS = 8  # the loop reads the intermediate value this many times


def loop_update(x):
    intermediate = jnp.exp(x)  # an expensive elementwise update: not recomputed in the last fusion

    def body(i, total):
        return total + intermediate[i * (N // READS)]

    total = lax.fori_loop(0, READS, body, 0.0)  # a loop that only reads the intermediate value
    return intermediate * total


def loop_args():
    return (jax.ShapeDtypeStruct((N,), jnp.float32),)


fieldmem.case(loop_update, args=loop_args, name="upgrade:loop_update", donate="x", expect="in-place")
