"""The Flax discussion that fieldmem grew out of: is ``field = update(field)`` in place?

A ``Field`` (a ``flax.struct.PyTreeNode``, as in the discussion) holds the
field ``u`` and a second array ``v`` that the update passes through unchanged;
the update is written exactly as asked there, with ``replace`` and ``.at``.

    fieldmem check examples/field.py -v

shows ``field.u -> out.u`` and ``field.v -> out.v`` aliased with donation, and
``field.v`` copied without it, because the caller may still read the old one.
"""

import jax
import jax.numpy as jnp
from flax import struct

import fieldmem


class Field(struct.PyTreeNode):
    u: jax.Array  # the field being updated
    v: jax.Array  # carried along unchanged


def update(field, f):
    return field.replace(u=field.u.at[:].add(f))


def make_field(n=512):
    u = jnp.zeros((n, n), jnp.float32)
    v = jnp.ones((n, n), jnp.float32)
    return Field(u=u, v=v)


def update_args():
    return (make_field(), jnp.float32(1.0))


fieldmem.case(update, args=update_args, name="field:update", expect="in-place")
