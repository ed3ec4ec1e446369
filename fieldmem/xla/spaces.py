"""What each memory space of a compiled program is, per platform: device memory, on-chip memory or the host's.

XLA colours every allocation of the buffer assignment and every array shape
with a memory space (``S(1)`` in a layout; 0 when unsaid). Which are device
memory depends on the platform, and is read here only:

- 0 is the device's default memory everywhere: HBM on a TPU or GPU, the host's
  RAM on XLA:CPU. XLA's argument, output and temp figures count it, and so do
  fieldmem's footprint and live peak.
- On a TPU, 1 is VMEM and 2 SMEM, the core's own scratch memories (named so by
  the memory-usage report libtpu dumps: ``Memory Space: vmem (color=1)``); other
  colours it dumps unnamed (``color_6``, seen on a flax step) are on the chip as
  well. A value moved there and back never takes a second buffer in HBM, and
  ``temp_size_in_bytes`` leaves it out, while ``peak_memory_in_bytes`` counts it
  (a 64 MiB ``S(1)`` prefetch raised it by 64 MiB on a TPU v5e).
- On a GPU, 1 is collective memory: buffers XLA puts aside for NCCL, in the
  GPU's own memory, counted as device memory.
- 5 is host memory on every accelerator (``Layout::kHostMemorySpace``: an
  offloaded array, ``pinned_host``), counted in XLA's ``host_*`` figures.

Pure (no jax): imports nothing outside the package.
"""

from __future__ import annotations

__all__ = ["HOST_SPACE", "device_spaces", "is_on_chip", "space_name"]

#: XLA's memory space of host memory on an accelerator (``Layout::kHostMemorySpace``)
HOST_SPACE = 5

_DEVICE_SPACES: dict[str, frozenset[int]] = {"gpu": frozenset({0, 1}), "cuda": frozenset({0, 1})}
_NAMES: dict[str, dict[int, str]] = {
    "tpu": {0: "HBM", 1: "VMEM", 2: "SMEM", HOST_SPACE: "host memory"},
    "gpu": {0: "device memory", 1: "collective memory (device memory)", HOST_SPACE: "host memory"},
    "cpu": {0: "memory"},
}
_NAMES["cuda"] = _NAMES["gpu"]


def device_spaces(platform: str | None) -> frozenset[int]:
    """The memory spaces that are the device's own memory on ``platform`` (None: not known, 0 alone)."""
    return _DEVICE_SPACES.get(platform or "", frozenset({0}))


def is_on_chip(platform: str | None, space: int) -> bool:
    """Whether ``space`` is memory on the chip itself (a TPU's VMEM or SMEM), neither the device's memory
    nor the host's."""
    return platform == "tpu" and space not in device_spaces(platform) and space != HOST_SPACE


def space_name(platform: str | None, space: int) -> str | None:
    """What memory space ``space`` is on ``platform``, in a few words (None: not known)."""
    named = _NAMES.get(platform or "", {}).get(space)
    if named is not None:
        return named
    if is_on_chip(platform, space):
        return "on-chip memory"
    return None
