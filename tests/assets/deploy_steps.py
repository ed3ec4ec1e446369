"""Steps users ship, as a CI gate meets them on a CPU runner (tests/gate/test_deploy_gate.py).

A flax linen + optax AdamW train step and a KV-cache decode step, each jitted with the donation users
write, and each once more with one state argument left out of ``donate_argnums``. On XLA:CPU the AdamW
step keeps a copy of a kernel, and the decode writes each cache through a temporary: both by the
compiler's own choice, in place on ``tpu:v5e``. Arrays are small: each compile takes well under a second.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(64)(x))
        return nn.Dense(32)(x)


model = MLP()
tx = optax.adamw(1e-3, weight_decay=1e-4)


def train_args():
    params = model.init(jax.random.PRNGKey(0), jnp.ones((4, 32)))
    return params, tx.init(params), (jnp.ones((4, 32)), jnp.ones((4, 32)))


def train_step(params, opt_state, batch):
    x, y = batch

    def loss(p):
        return jnp.mean((model.apply(p, x) - y) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value


adamw_step = jax.jit(train_step, donate_argnums=(0, 1))
adamw_step_forgets_opt_state = jax.jit(train_step, donate_argnums=(0,))


def decode_args():
    cache = jnp.zeros((2, 128, 4, 32), jnp.bfloat16)
    new = jnp.ones((2, 4, 32), jnp.bfloat16)
    return cache, cache + 1, new, new, jnp.int32(3)


def decode(k_cache, v_cache, k_new, v_new, pos):
    k_cache = k_cache.at[:, pos].set(k_new)
    v_cache = v_cache.at[:, pos].set(v_new)
    return k_cache, v_cache


kv_decode = jax.jit(decode, donate_argnums=(0, 1))
kv_decode_forgets_v_cache = jax.jit(decode, donate_argnums=(0,))
