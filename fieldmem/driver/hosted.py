"""Example arguments kept on the host for ``--run`` on an accelerator: the device holds only the call's own.

A run measures what one call of the user's program takes of the device's
memory, against what the compile planned for it, and it must run wherever the
user's own program runs: a step that fits with 95% of the chip's HBM in use
must fit under ``--run`` too. fieldmem's own arrays cannot be on the device
beside it. So on a backend with memory statistics (a TPU or GPU):

- the args factory runs with the host's CPU as the default device
  (:func:`made_on_host`): an array it makes without a device is made in host
  memory (one it places on a device or sharding itself is made there, as
  written);
- every array leaf is then kept as a host copy (:func:`hosted`) and handed to
  the check as a ``jax.ShapeDtypeStruct`` that stands for the array the user's
  program would have (:func:`fieldmem.driver.placement.stand_in`: uncommitted
  on the default device, or committed where the factory placed it), so the two
  variants are lowered and compiled for the placement the user's call has, and
  the report says what it would say of it;
- each call's arguments are put on the device from those host copies right
  before the call (:func:`fieldmem.driver.execute.fresh_argument`) and dropped
  with its outputs after it: one variant's arguments exist at a time, and
  nothing fieldmem made survives into the next call.

A leaf kept as it is: a weakly typed array (a Python number made an array: a
host copy would lose the weak type, and the compiled program refuses the
call), a key array or another extended dtype, an array not on this process's
devices alone. Those are small or rare, and stay where the factory put them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["hosted", "keeps_on_host", "made_on_host"]


def keeps_on_host(backend: str | None) -> bool:
    """Whether a run on ``backend`` (None: jax's default) keeps the example arguments on the host: where the
    device has memory statistics (a TPU or GPU), so that fieldmem's arrays are not in its memory."""
    from fieldmem.driver.execute import has_memory_stats

    return has_memory_stats(backend)


@contextlib.contextmanager
def _host_default() -> Iterator[None]:
    """The host CPU as jax's default device while inside (nothing changes where jax has no CPU backend)."""
    import jax

    try:
        cpu = jax.devices("cpu")[0]
    except Exception:
        yield
        return
    with jax.default_device(cpu):
        yield


def made_on_host(make: Callable[[], tuple[tuple, dict]]) -> tuple[tuple, dict]:
    """``make()`` (an args factory) with the host CPU as the default device, its arrays then kept on the host
    (:func:`hosted`)."""
    with _host_default():
        args, kwargs = make()
    return hosted(args, kwargs)


def hosted(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with each array leaf that can be kept on the host (see the module) a stand-in
    ``ShapeDtypeStruct`` with its host copy (:func:`fieldmem.driver.placement.stand_in`), which a run puts on
    the device; the others as they are. An
    array given twice stays one stand-in, so the call still gives one buffer twice."""
    import jax

    from fieldmem.driver.placement import stand_in
    from fieldmem.driver.traced import default_sharding

    default = default_sharding()
    made: dict[int, Any] = {}

    def host(leaf: Any) -> Any:
        if not _hostable(leaf):
            return leaf
        if id(leaf) in made:
            return made[id(leaf)]
        committed = bool(getattr(leaf, "committed", True))
        sharding = leaf.sharding if committed else default
        struct = jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding if committed else None)
        stand_in(struct, committed, sharding, host=jax.device_get(leaf))
        made[id(leaf)] = struct
        return struct

    args, kwargs = jax.tree_util.tree_map(host, (args, kwargs))
    return tuple(args), dict(kwargs)


def _hostable(leaf: Any) -> bool:
    import jax
    import numpy as np

    if not isinstance(leaf, jax.Array) or getattr(leaf, "weak_type", False):
        return False
    try:
        return isinstance(leaf.dtype, np.dtype) and leaf.is_fully_addressable and not leaf.is_deleted()
    except Exception:
        return False
