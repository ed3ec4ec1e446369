"""A chain whose step takes a per-step gradient: ``params, opt = step(params, opt, g)``.

``g`` does not come from the step before: the chain's ``step_args`` makes it.
``fieldmem check gradient_chain:step,step --expect in-place`` passes: the state
(``params``, ``opt``) is updated in place, ``g`` is neither donated nor state.
"""

import jax.numpy as jnp

import fieldmem

N = 64


def step(params, opt, g):
    opt = 0.9 * opt + g
    return params - 0.1 * opt, opt


def state():
    return jnp.ones((N, N)), jnp.zeros((N, N))


def gradient():
    return (jnp.full((N, N), 0.5),)


fieldmem.chain(step, step, args=state, step_args={"step": gradient}, name="gradient_chain:sgd")
