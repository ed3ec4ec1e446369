"""The Flax discussion that fieldmem grew out of: is ``field = update(field)`` in place?

A ``Field`` dataclass holds the field ``u`` and a second array ``v`` that the
update passes through unchanged. (``jax.tree_util.register_dataclass`` plus a
``replace`` method is what ``flax.struct.PyTreeNode`` gives you; it is used
here so that the example needs only jax.)

    fieldmem check examples/field.py -v

shows ``field.u -> out.u`` and ``field.v -> out.v`` aliased with donation, and
``field.v`` copied without it, because the caller may still read the old one.
"""

import dataclasses

import jax
import jax.numpy as jnp

import fieldmem


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Field:
    u: jax.Array  # the field being updated
    v: jax.Array  # carried along unchanged

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


def update(field, f):
    return field.replace(u=field.u.at[:].add(f))


def make_field(n=512):
    u = jnp.zeros((n, n), jnp.float32)
    v = jnp.ones((n, n), jnp.float32)
    return Field(u=u, v=v)


def update_args():
    return (make_field(), jnp.float32(1.0))


fieldmem.case(update, args=update_args, name="field:update", expect="in-place")
