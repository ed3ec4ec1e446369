"""Sparse updates: one row of a big array, and one position of a KV cache.

Without donation XLA must keep the caller's array intact, so it copies the
whole array first and then writes the row into the copy. With donation the
copy disappears and the output reuses the input's buffer.

The arguments are ``jax.ShapeDtypeStruct``s: nothing is allocated, so the
same check works for arrays larger than this machine's memory.
"""

import jax
import jax.numpy as jnp

import fieldmem


def set_row(u, idx, row):
    return u.at[idx].set(row)


def write_kv(cache, pos, kv):
    # cache: [layers, max_len, heads * head_dim]; write one position of every layer
    return cache.at[:, pos].set(kv)


def set_row_args():
    return (
        jax.ShapeDtypeStruct((4096, 1024), jnp.float32),  # u: 16 MiB
        jax.ShapeDtypeStruct((), jnp.int32),  # idx, traced
        jax.ShapeDtypeStruct((1024,), jnp.float32),  # row
    )


def write_kv_args():
    return (
        jax.ShapeDtypeStruct((4, 2048, 512), jnp.bfloat16),  # cache: 8 MiB
        jax.ShapeDtypeStruct((), jnp.int32),
        jax.ShapeDtypeStruct((4, 512), jnp.bfloat16),
    )


fieldmem.case(set_row, args=set_row_args, name="sparse_row:set_row", donate="u", expect="in-place")
fieldmem.case(write_kv, args=write_kv_args, name="sparse_row:write_kv", donate="cache")
