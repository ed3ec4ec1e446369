"""Update steps shaped the way libraries shape them, for tests/driver/test_wrappers.py and the CLI.

A ``flax.nnx.jit`` adam step over an ``nnx.Linear`` model and an ``nnx.Optimizer``; an
``equinox.filter_jit`` step over a tiny ``eqx.nn.MLP`` (its ``activation`` is a function leaf);
a ``jax.jit`` method reached through an instance, xlb-style (``self`` static, the field donated);
a ``functools.partial`` of a jitted function; wrappers fieldmem cannot analyse. Arrays are tiny.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from flax import nnx

# ---- flax nnx ----------------------------------------------------------------------------------------


class Model(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(4, 8, rngs=rngs)
        self.l2 = nnx.Linear(8, 2, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(jax.nn.relu(self.l1(x)))


@nnx.jit(donate_argnums=(0, 1))
def nnx_step(model: Model, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
    def loss_fn(m: Model) -> jax.Array:
        return jnp.mean((m(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


@nnx.jit
def nnx_step_undonated(model: Model, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
    return nnx_step.fun(model, optimizer, x, y)


def nnx_args() -> tuple:
    model = Model(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    return model, optimizer, jnp.ones((3, 4)), jnp.zeros((3, 2))


class Wide(nnx.Module):
    """The issue's adamw step: XLA:CPU copies l2.kernel although every read of its old value could come first."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(64, 128, rngs=rngs)
        self.l2 = nnx.Linear(128, 64, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(jax.nn.relu(self.l1(x)))


@nnx.jit(donate_argnums=(0, 1))
def nnx_adamw_step(model: Wide, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
    def loss_fn(m: Wide) -> jax.Array:
        return jnp.mean((m(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def nnx_adamw_args() -> tuple:
    model = Wide(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    return model, optimizer, jnp.ones((32, 64)), jnp.ones((32, 64))


# ---- equinox -----------------------------------------------------------------------------------------

OPTIMIZER = optax.adam(1e-2)


def _eqx_update(opt_state, model, x, y):
    def loss(m):
        return jnp.mean((jax.vmap(m)(x) - y) ** 2)

    grads = eqx.filter_grad(loss)(model)
    updates, opt_state = OPTIMIZER.update(grads, opt_state)
    return eqx.apply_updates(model, updates), opt_state


EQX_MODES = ("all", "all-except-first", "warn", "warn-except-first", "none")
eqx_steps = {mode: eqx.filter_jit(_eqx_update, donate=mode) for mode in EQX_MODES}
eqx_step = eqx_steps["all-except-first"]
eqx_step_all = eqx_steps["all"]
eqx_step_none = eqx_steps["none"]


def eqx_args() -> tuple:
    model = eqx.nn.MLP(4, 2, 8, 1, key=jax.random.PRNGKey(0))
    opt_state = OPTIMIZER.init(eqx.filter(model, eqx.is_array))
    return opt_state, model, jnp.ones((3, 4)), jnp.zeros((3, 2))


# ---- a jitted method reached through an instance (xlb's stepper shape) ------------------------------


class Stepper:
    def __init__(self, omega: float) -> None:
        self.omega = omega

    def _advance(self, f: jax.Array, timestep: jax.Array) -> jax.Array:
        return f.at[1:-1].add(self.omega * timestep)

    advance = jax.jit(_advance, static_argnums=0, donate_argnums=1)

    @functools.partial(jax.jit, static_argnums=0, donate_argnums=1)
    def relax(self, state: tuple) -> tuple:
        return tuple(s * self.omega for s in state)


solver = Stepper(0.6)


def stepper_args() -> tuple:
    return jnp.ones((64, 32)), jnp.float32(0.5)


@functools.partial(jax.jit, donate_argnums=1)
def _scaled_update(rate: jax.Array, u: jax.Array, v: jax.Array) -> jax.Array:
    return u.at[:4].add(rate * v[:4])


scaled_update = functools.partial(_scaled_update, jnp.float32(0.1))


def scaled_args() -> tuple:
    return jnp.ones((64, 32)), jnp.ones((64, 32))


# ---- wrappers fieldmem cannot analyse (the pmap family it can: tests/assets/pmapped_steps.py) ---------


def _double(x: jax.Array) -> jax.Array:
    return x * 2


@functools.wraps(_double)
def logged(x: jax.Array) -> jax.Array:
    return _jitted_double(x)


_jitted_double = jax.jit(_double, donate_argnums=0)
logged.__wrapped__ = _jitted_double  # a decorator's wrapper around a jit


class Custom:
    """A callable that compiles by itself, of a kind fieldmem does not know."""

    def __call__(self, x: jax.Array) -> jax.Array:
        return x * 2

    def lower(self, x: jax.Array) -> object:
        return jax.jit(self.__call__).lower(x)


custom = Custom()


def one_array() -> tuple:
    return (jnp.ones((1, 8)),)


def _decorate(fn):
    helper = jax.jit(jnp.sum)

    @functools.wraps(fn)
    def decorated(x: jax.Array) -> jax.Array:
        return fn(x) + helper(x)

    return decorated


@_decorate
def decorated_update(x: jax.Array) -> jax.Array:
    """A user's own decorator around a plain function (it closes over a jitted helper): analysed under jax.jit."""
    return x.at[0].set(1.0)


sharded = jax.shard_map(
    _jitted_double,
    mesh=jax.make_mesh((1,), ("x",)),
    in_specs=jax.sharding.PartitionSpec(),
    out_specs=jax.sharding.PartitionSpec(),
)
nnx_tree_jit = nnx.jit(_double, graph=False)
