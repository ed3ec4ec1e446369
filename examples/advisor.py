"""An Adam update written without any donation: what should it donate?

``params, opt_state = adam_step(params, opt_state, grads)`` is a plain
function, the way it often starts out. Ask fieldmem:

    fieldmem check examples/advisor.py --suggest

It proposes donating ``params`` and ``opt_state`` (each of their leaves has an
output of its own to reuse) but not ``grads`` (every output of its size is
then taken), verifies that spec with one extra compile, and prints the line
to write: ``jax.jit(adam_step, donate_argnums=(0, 1))``.
"""

import jax
import jax.numpy as jnp

import fieldmem

SIZES = (256, 1024, 256)
B1, B2, EPS, LR = 0.9, 0.999, 1e-8, 1e-3


def adam_step(params, opt_state, grads):
    count = opt_state["count"] + 1
    mu = jax.tree.map(lambda m, g: B1 * m + (1 - B1) * g, opt_state["mu"], grads)
    nu = jax.tree.map(lambda v, g: B2 * v + (1 - B2) * g * g, opt_state["nu"], grads)
    scale = jnp.sqrt(1 - B2**count) / (1 - B1**count)
    params = jax.tree.map(lambda p, m, v: p - LR * scale * m / (jnp.sqrt(v) + EPS), params, mu, nu)
    return params, {"mu": mu, "nu": nu, "count": count}


def adam_args():
    key = jax.random.key(0)
    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        key, sub = jax.random.split(key)
        params[f"layer{i}"] = {
            "w": jax.random.normal(sub, (fan_in, fan_out), jnp.float32) / jnp.sqrt(fan_in),
            "b": jnp.zeros((fan_out,), jnp.float32),
        }
    # mu and nu are distinct arrays: one buffer donated twice is an error at run time
    opt_state = {
        "mu": jax.tree.map(jnp.zeros_like, params),
        "nu": jax.tree.map(jnp.zeros_like, params),
        "count": jnp.int32(0),
    }
    grads = jax.tree.map(jnp.ones_like, params)
    return (params, opt_state, grads)


fieldmem.case(adam_step, args=adam_args, name="advisor:adam_step")
