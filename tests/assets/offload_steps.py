"""An Adam step (optax) whose optimizer state lives in host memory, for tests/findings/test_transfers.py (issue 28).

The pattern of jax's host-offloading guide: the state is put in ``pinned_host`` once, the step brings it
to the device, updates it there and sends it back, so the compiled program takes and returns the state's
leaves in ``pinned_host`` and donates them to itself. ``adam_offload`` is the step, ``_args`` its arguments
(the parameters and gradients on the device, the state in host memory), ``init_state`` the state as
``optax.adam(...).init`` makes it (the test counts its bytes itself).
"""

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import fieldmem

OPTIMIZER = optax.adam(1e-3)


def _params():
    return {"w": jnp.ones((32, 64), jnp.float32), "b": jnp.zeros((64,), jnp.float32)}  # 8.25 KiB


def init_state():
    return OPTIMIZER.init(_params())


def _host():
    return NamedSharding(jax.make_mesh((1,), ("x",)), P(), memory_kind="pinned_host")


def adam_offload(params, state, grads):
    state = jax.device_put(state, jax.memory.Space.Device)
    updates, state = OPTIMIZER.update(grads, state, params)
    return optax.apply_updates(params, updates), jax.device_put(state, jax.memory.Space.Host)


def _args():
    params = _params()
    return params, jax.device_put(init_state(), _host()), jax.tree.map(jnp.ones_like, params)


fieldmem.case(adam_offload, args=_args, name="offload:adam", donate="params,state")
