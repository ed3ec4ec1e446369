"""An optimizer-style update: ``params, opt_state = step(params, opt_state, grads)``.

Momentum SGD on a small MLP's parameters (a dict of arrays) written by hand,
already wrapped in ``jax.jit`` with ``donate_argnames``: fieldmem keeps the
jit object's own donation as the donated variant. ``grads`` is not donated:
no output could reuse it (params and opt_state already take every output).
"""

from functools import partial

import jax
import jax.numpy as jnp

import fieldmem

SIZES = (512, 1024, 1024, 256)


def init_params(key=None):
    key = jax.random.key(0) if key is None else key
    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        key, sub = jax.random.split(key)
        params[f"layer{i}"] = {
            "w": jax.random.normal(sub, (fan_in, fan_out), jnp.float32) / jnp.sqrt(fan_in),
            "b": jnp.zeros((fan_out,), jnp.float32),
        }
    return params


@partial(jax.jit, donate_argnames=("params", "opt_state"))
def sgd_step(params, opt_state, grads, lr=1e-2, momentum=0.9):
    velocity = jax.tree.map(lambda v, g: momentum * v + g, opt_state["velocity"], grads)
    params = jax.tree.map(lambda p, v: p - lr * v, params, velocity)
    return params, {"velocity": velocity, "count": opt_state["count"] + 1}


def step_args():
    params = init_params()
    opt_state = {"velocity": jax.tree.map(jnp.zeros_like, params), "count": jnp.int32(0)}
    grads = jax.tree.map(jnp.ones_like, params)
    return (params, opt_state, grads)


fieldmem.case(sgd_step, args=step_args, name="optimizer:sgd_step", expect="in-place")
