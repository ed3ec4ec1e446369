"""What a report was made on: the devices, a device kind compiled for without the device
(``--backend tpu:v5e:2x2``), and what the targets' modules set for jax. Records of the report, no computation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "DeviceInfo",
    "Deviceless",
    "ModuleSettings",
]


@dataclass(frozen=True)
class DeviceInfo:
    id: int
    platform: str
    kind: str | None = None


@dataclass(frozen=True)
class Deviceless:
    """What a report compiled for without the device (``--backend tpu:v5e:2x2``, ``gpu:h100``).

    ``note`` says what compiling without the device changes (GPU: XLA's
    autotuning did not run, so gemm and convolution choices and their
    workspace may differ from a compile on the GPU).
    """

    backend: str  # the --backend name: "tpu:v5e:2x2"
    platform: str  # "tpu", "gpu"
    kind: str  # "v5e", "h100"
    device_kind: str | None = None  # jax's device_kind: "TPU v5 lite", "NVIDIA H100 80GB HBM3"
    topology: str | None = None  # "2x2", "8"; None: one chip
    chips: int = 1
    compiled_without_device: bool = True
    note: str = ""
    # the memory a program has on one chip (GPU: its target config's device_memory_size; TPU: what libtpu
    # leaves a program of the chip's HBM); None in reports written before it was recorded
    device_memory_bytes: int | None = None


@dataclass(frozen=True)
class ModuleSettings:
    """What a target's module set for jax when it was imported, in force while its targets were checked:
    the ``XLA_*`` and ``JAX_*`` variables it changed from fieldmem's environment (None: removed) and the
    ``jax.config.update`` calls it made (name to the value as Python writes it). ``note``: what fieldmem did
    not take of it, in one line (``--devices 8 wins over its own count of 4 CPU devices``). ``replaced``:
    what it replaced in jax's public modules (``jax.jit`` to what holds it now, ``patch.my_jit``), in force
    for its own targets only (empty in reports written before issue 49)."""

    target: str  # the spec as typed
    environment: dict[str, str | None] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)
    note: str | None = None
    replaced: dict[str, str] = field(default_factory=dict)
