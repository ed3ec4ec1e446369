"""The verdict corpus's cases: user-style functions, their arguments, their donation and the verdict each
must get (tests/findings/test_verdict_corpus.py holds them to jax, tests/findings/test_suggest_brute_force.py to brute force)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

MIN = 1024
N = 64  # a 64x64 float32 array: 16 KiB, over the 1 KiB threshold


def _a(*shape: int, dtype: Any = jnp.float32, seed: int = 0) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype=dtype)


class State(NamedTuple):
    u: jax.Array
    v: jax.Array


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., Any]
    args: Callable[[], tuple[Any, ...]]
    donate: tuple[int, ...] | None  # None: fieldmem's default (a jit's own donation, else every array argument)
    kind: str
    static: tuple[int, ...] = ()
    jitted: Any = None  # the target is this jax.jit object (its own donation)
    jit_donates: tuple[int, ...] = ()  # what that object donates
    new: tuple[str, ...] = field(default_factory=tuple)


def _loop_in_place(u):
    return jax.lax.fori_loop(0, 8, lambda i, u: u.at[i].add(1.0), u)


def _scan_in_place(u):
    return jax.lax.scan(lambda c, _: (c * 0.5 + 1.0, None), u, None, length=5)[0]


def _stencil(u):
    def body(i, u):
        return u + 0.1 * (jnp.roll(u, 1, axis=0) + jnp.roll(u, -1, axis=0) - 2 * u)

    return jax.lax.fori_loop(0, 6, body, u)


def _cond(u, p):
    return jax.lax.cond(p > 0, lambda u: u + 1.0, lambda u: u - 1.0, u)


def _loss(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def _decode(cache, x):
    logits = jnp.tile(jnp.tanh(x), 1024 // x.shape[0])  # 4 KiB: a new output, smaller than the cache
    return cache.at[0].set(x), logits


def _adam(params, mu, nu, g):
    mu = 0.9 * mu + 0.1 * g
    nu = 0.99 * nu + 0.01 * g * g
    return params - 1e-3 * mu / (jnp.sqrt(nu) + 1e-8), mu, nu


def _kv_write(cache, pos, kv):
    return cache.at[:, pos].set(kv)


def _mlp_loss(params, x):
    h = jnp.tanh(x @ params["dense1"]["kernel"] + params["dense1"]["bias"])
    return jnp.mean((h @ params["dense2"]["kernel"] + params["dense2"]["bias"]) ** 2)


def _adamw_case() -> Case:
    """An optax AdamW step over a dict MLP, donating what users donate: on XLA:CPU a kernel is still copied
    although every read of its old value could come first (the compiler's choice)."""
    import optax

    tx = optax.adamw(1e-3, weight_decay=1e-4)

    def step(params, opt_state, x):
        loss, grads = jax.value_and_grad(_mlp_loss)(params, x)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def args():
        params = {
            "dense1": {"kernel": _a(32, 64), "bias": jnp.zeros(64)},
            "dense2": {"kernel": _a(64, 8, seed=1), "bias": jnp.zeros(8)},
        }
        return params, tx.init(params), jnp.ones((4, 32))

    return Case("optax_adamw_cpu", step, args, (0, 1), "in-place-as-written")


_jit_own = jax.jit(lambda x: x * 3.0 + 1.0, donate_argnums=(0,))
_jit_none = jax.jit(lambda x: x * 3.0 + 1.0)

CASES = (
    # in place
    Case("scale", lambda x: x * 2.0, lambda: (_a(N, N),), (0,), "in-place"),
    Case("axpy", lambda x, y: x + 0.5 * y, lambda: (_a(N, N), _a(N, N, seed=1)), (0,), "in-place"),
    Case("set_row", lambda u, i, r: u.at[i].set(r), lambda: (_a(N, N), jnp.int32(3), _a(N)), (0,), "in-place"),
    Case(
        "sgd_tree",
        lambda p, g: jax.tree.map(lambda a, b: a - 0.1 * b, p, g),
        lambda: ({"w": _a(N, N), "b": _a(N * 4)}, {"w": _a(N, N, seed=1), "b": _a(N * 4, seed=1)}),
        (0,),
        "in-place",
    ),
    Case(
        "adam", _adam, lambda: (_a(N, N), _a(N, N, seed=1), _a(N, N, seed=2), _a(N, N, seed=3)), (0, 1, 2), "in-place"
    ),
    Case("decode_logits", _decode, lambda: (_a(4, N, N), _a(N, N)), (0,), "in-place"),
    Case("fori_row_add", _loop_in_place, lambda: (_a(N, N),), (0,), "in-place"),
    Case("scan_carry", _scan_in_place, lambda: (_a(N, N),), (0,), "in-place"),
    # XLA:CPU computes a branch into a temporary and copies it into the carried buffer
    Case("cond_update", _cond, lambda: (_a(N, N), jnp.float32(1.0)), (0,), "not-in-place"),
    Case(
        "swap_in_place",  # each output reuses its own argument's buffer
        lambda a, b: (a * 2.0, b * 3.0),
        lambda: (_a(N, N), _a(N, N, seed=1)),
        (0, 1),
        "in-place",
    ),
    Case(
        "struct_field",
        lambda s: State(u=s.u + s.v, v=s.v),
        lambda: (State(_a(N, N), _a(N, N, seed=1)),),
        (0,),
        "in-place",
    ),
    Case("jit_own_donation", _jit_own, lambda: (_a(N, N),), None, "in-place", jitted=_jit_own, jit_donates=(0,)),
    Case(
        "mixed_dtypes",
        lambda x, y: (x + 1.0, y * 2),
        lambda: (_a(N, N), _a(N, N, dtype=jnp.bfloat16)),
        (0, 1),
        "in-place",
    ),
    Case("relu", lambda x: jnp.maximum(x, 0.0), lambda: (_a(N, N),), (0,), "in-place"),
    Case("ema", lambda avg, x: 0.9 * avg + 0.1 * x, lambda: (_a(N, N), _a(N, N, seed=1)), (0,), "in-place"),
    Case(
        "sgd_default_donation",  # fieldmem donates the grads too by default: unusable, but not the user's choice
        lambda p, g: p - 0.1 * g,
        lambda: (_a(N, N), _a(N, N, seed=1)),
        None,
        "in-place",
    ),
    # in place as written: XLA:CPU keeps a copy no line asks for
    Case(
        "kv_write_cpu",  # XLA:CPU writes the new cache through a temporary
        _kv_write,
        lambda: (jnp.zeros((4, 256, 64), jnp.bfloat16), jnp.int32(3), jnp.ones((4, 64), jnp.bfloat16)),
        (0,),
        "in-place-as-written",
    ),
    _adamw_case(),
    # not in place
    Case("not_donated", lambda x: x + 1.0, lambda: (_a(N, N),), (), "not-in-place"),
    Case("jit_without_donation", _jit_none, lambda: (_a(N, N),), None, "not-in-place", jitted=_jit_none),
    Case(
        "forgotten_momentum",
        lambda p, m, g: (p - 0.1 * (0.9 * m + g), 0.9 * m + g),
        lambda: (_a(N, N), _a(N, N, seed=1), _a(N, N, seed=2)),
        (0,),
        "not-in-place",
    ),
    Case("dtype_change", lambda x: (x * 2.0).astype(jnp.bfloat16), lambda: (_a(N, N),), (0,), "not-in-place"),
    Case("grows", lambda x: jnp.concatenate([x, x * 2.0]), lambda: (_a(N, N),), (0,), "not-in-place"),
    Case(
        "batch_donated",
        lambda p, batch: p - 0.01 * batch.mean(axis=0),
        lambda: (_a(N, N), _a(8, N, N, seed=1)),
        (0, 1),
        "not-in-place",
    ),
    Case("stencil_loop", _stencil, lambda: (_a(N, N),), (0,), "not-in-place"),
    # the two outputs trade buffers: XLA moves each value through a temporary
    Case("swap", lambda a, b: (b, a), lambda: (_a(N, N), _a(N, N, seed=1)), (0, 1), "not-in-place"),
    Case("returned_twice", lambda x: (x.at[0].set(1.0), x), lambda: (_a(N, N),), (0,), "not-in-place"),
    Case("unused_donated", lambda x, y: x + 1.0, lambda: (_a(N, N), _a(2 * N, N, seed=1)), (0, 1), "not-in-place"),
    Case(
        "concat_state",
        lambda a, b: jnp.concatenate([a, b]),
        lambda: (_a(N, N), _a(N, N, seed=1)),
        (0, 1),
        "not-in-place",
    ),
    # nothing to update in place
    Case("shrink", lambda x: x.sum(axis=0), lambda: (_a(N, N),), (0,), "nothing-to-update"),
    Case(
        "loss",
        _loss,
        lambda: ({"w": _a(N, N), "b": _a(N)}, _a(N, N, seed=1), _a(N, N, seed=2)),
        (0,),
        "nothing-to-update",
    ),
    Case("norm", lambda x: jnp.linalg.norm(x), lambda: (_a(N, N),), (0,), "nothing-to-update"),
    Case("argmax", lambda x: x.argmax(axis=1), lambda: (_a(N, N),), (0,), "nothing-to-update"),
    Case("sum_default_donation", lambda x: jnp.sum(x * x), lambda: (_a(N, N),), None, "nothing-to-update"),
    Case("mean_pool", lambda x: x.reshape(N // 2, 2, N).mean(axis=1), lambda: (_a(N, N),), (0,), "nothing-to-update"),
)


def leaves(tree: Any) -> list[jax.Array]:
    """The array leaves of ``tree``."""
    return [leaf for leaf in jax.tree.leaves(tree) if isinstance(leaf, jax.Array)]
