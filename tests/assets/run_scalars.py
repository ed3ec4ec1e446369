"""Targets whose state carries Python scalars or uncommitted arrays, for the --run tests (tests/findings/test_run.py).

``counter`` updates a dict state whose ``step`` is a Python int (jax makes
its device buffer inside the call, so a run cannot read it); ``train_step``
is a flax ``TrainState`` step, whose ``step`` ``TrainState.create`` sets to
the Python int 0; ``write_row`` writes a row of a cache sharded over every
device at ``pos``, an uncommitted ``jnp.int32`` (``--devices 2``).
"""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import fieldmem


def counter(state):
    return {"w": state["w"] * 0.5 + 1.0, "step": state["step"] + 1}


def _counter_state():
    return ({"w": jnp.ones((32, 32), jnp.float32), "step": 0},)


def train_step(state, x):
    import optax  # noqa: F401  (the state's tx)

    def loss(params):
        return jnp.mean((x @ params["w"] + params["b"]) ** 2)

    grads = jax.grad(loss)(state.params)
    return state.apply_gradients(grads=grads)


def _train_state():
    import optax
    from flax.training.train_state import TrainState

    params = {"w": jnp.ones((32, 32), jnp.float32), "b": jnp.zeros((32,), jnp.float32)}
    state = TrainState.create(apply_fn=None, params=params, tx=optax.adam(1e-3))
    return state, jnp.ones((8, 32), jnp.float32)


def write_row(cache, pos, row):
    return cache.at[:, pos].set(row)


def _sharded_cache():
    mesh = jax.make_mesh((len(jax.devices()),), ("x",))
    cache = jax.device_put(jnp.zeros((4, 16, 8), jnp.float32), NamedSharding(mesh, P("x")))
    row = jax.device_put(jnp.ones((4, 8), jnp.float32), NamedSharding(mesh, P("x")))
    return cache, jnp.int32(7), row  # pos is uncommitted, as jnp.int32(7) is


fieldmem.case(counter, args=_counter_state, name="scalars:counter")
fieldmem.case(train_step, args=_train_state, name="scalars:train_step")
fieldmem.case(write_row, args=_sharded_cache, name="scalars:write_row")
