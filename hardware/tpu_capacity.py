"""Two programs near a TPU v5e's memory, for ``make tpu-check``: one fits only with donation, one by a hair.

- ``fits_with_donation``: ``u * 0.5 + f`` on two float32 arrays of 5.5 GiB, ``u`` donated. Donated, the
  chip holds 11.0 GiB; plain, 16.5 GiB, more than the 15.75 GiB libtpu lets a program use.
- ``by_a_hair``: the same on two arrays of 5.09 GiB: plain, 15.28 GiB (the arguments and the new output),
  which fits.

Registered as fieldmem cases (``fieldmem check hardware/tpu_capacity.py``); the arguments are shapes
for a static check and zeros for a run. Run as a script on the chip, it makes each program's call with
plain jax in this process, as a user's program does (``python hardware/tpu_capacity.py NAME VARIANT``),
and prints one JSON line: whether the call ran, its error's first line, and the device's memory figures;
``refusal`` prints libtpu's words for the plain program of ``fits_with_donation``.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp

import fieldmem

COLUMNS = 32768
ROWS = {"fits_with_donation": 45056, "by_a_hair": 41728}  # 5.5 GiB and 5.09 GiB of float32


def update(u: jax.Array, f: jax.Array) -> jax.Array:
    return u * 0.5 + f


def _shapes(rows: int) -> tuple[jax.ShapeDtypeStruct, jax.ShapeDtypeStruct]:
    shape = jax.ShapeDtypeStruct((rows, COLUMNS), jnp.float32)
    return shape, shape


def _zeros(rows: int) -> tuple[jax.Array, jax.Array]:
    return jnp.zeros((rows, COLUMNS), jnp.float32), jnp.zeros((rows, COLUMNS), jnp.float32)


def fits_with_donation_args() -> tuple:
    return _shapes(ROWS["fits_with_donation"])


def by_a_hair_args() -> tuple:
    return _shapes(ROWS["by_a_hair"])


def by_a_hair_values() -> tuple:
    return _zeros(ROWS["by_a_hair"])


def fits_with_donation_values() -> tuple:
    return _zeros(ROWS["fits_with_donation"])


def fits_with_donation(u: jax.Array, f: jax.Array) -> jax.Array:
    return update(u, f)


def by_a_hair(u: jax.Array, f: jax.Array) -> jax.Array:
    return update(u, f)


def fits_with_donation_run(u: jax.Array, f: jax.Array) -> jax.Array:
    return update(u, f)


def by_a_hair_run(u: jax.Array, f: jax.Array) -> jax.Array:
    return update(u, f)


fieldmem.case(fits_with_donation, args=fits_with_donation_args, donate="u", expect="fits")
fieldmem.case(by_a_hair, args=by_a_hair_args, donate="u", expect="fits")
# for --run: the arguments as values (a run calls the program on them)
fieldmem.case(fits_with_donation_run, args=fits_with_donation_values, donate="u")
fieldmem.case(by_a_hair_run, args=by_a_hair_values, donate="u")


def _stats() -> dict[str, int]:
    stats = jax.devices()[0].memory_stats() or {}
    return {k: int(v) for k, v in stats.items() if k in ("bytes_in_use", "peak_bytes_in_use", "bytes_limit")}


def _call(name: str, variant: str) -> dict[str, object]:
    """The user's own call of ``name``'s program (``variant``: plain or donated), in this process."""
    jitted = jax.jit(update, donate_argnums=(0,) if variant == "donated" else ())
    before = _stats()
    try:
        u, f = _zeros(ROWS[name])
        out = jitted(u, f)
        out.block_until_ready()
        ran, error = True, None
    except Exception as exc:  # the chip's out-of-memory error, as the user sees it
        ran, error = False, (str(exc).strip().splitlines() or [""])[0][:400]
    return {"name": name, "variant": variant, "ran": ran, "error": error, "before": before, "after": _stats()}


def _refusal() -> dict[str, object]:
    """libtpu's words when it refuses the plain program of ``fits_with_donation`` (compiled as jax does)."""
    u, f = _shapes(ROWS["fits_with_donation"])
    try:
        jax.jit(update).lower(u, f).compile()
        return {"refused": False}
    except Exception as exc:
        return {"refused": True, "type": type(exc).__name__, "message": str(exc)[:2000]}


if __name__ == "__main__":
    if sys.argv[1] == "refusal":
        print(json.dumps(_refusal()))
    else:
        print(json.dumps(_call(sys.argv[1], sys.argv[2])))
