"""``--backend`` names: a backend this machine has (``cpu``, ``gpu``, ``tpu``) or a device kind compiled for
without the device (``tpu:v5e``, ``tpu:v5e:2x2``, ``gpu:h100``, ``gpu:h100:8``), and the environment the
command line's own process needs for them. Pure: no jax.

A deviceless name is ``PLATFORM:KIND[:TOPOLOGY]``. A TPU topology is the
chips along each axis (``2x2``; v4 and v5p have three axes, ``2x2x1``); a GPU
topology is the number of GPUs (``8``). The canonical name leaves out a
topology of one chip, so ``tpu:v5e:1x1`` and ``tpu:v5e`` are one backend (one
report, one baseline key). A topology stays within what the product is sold as
(:data:`TPU_PODS`, :data:`GPU_DOMAINS`), and each kind knows the memory a program
has on one of its chips (:func:`device_memory`).
"""

from __future__ import annotations

import importlib.util
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from fieldmem.model.errors import OptionError
from fieldmem.model.readings import DeviceMemory

__all__ = [
    "CUDA_PLUGINS",
    "DEVICELESS_ENV",
    "GPU_DOMAINS",
    "GPU_KINDS",
    "GPU_SPECS",
    "TPU_HBM",
    "TPU_KINDS",
    "TPU_PODS",
    "BackendName",
    "DeviceMemory",
    "TpuPod",
    "check_combination",
    "cuda_compilers",
    "device_memory",
    "deviceless_environment",
    "gpu_spec_text",
    "known_backends",
    "parse_backend",
    "require_extra",
]

# TPU kind -> (the name jax's topology wants, number of axes)
TPU_KINDS: Mapping[str, tuple[str, int]] = {
    "v4": ("v4", 3),
    "v5e": ("v5e", 2),
    "v5p": ("v5p", 3),
    "v6e": ("v6e", 2),
}
# GPU kind -> the target-config spec shipped in fieldmem/model/specs/gpu/ (XLA's per-GPU spec files)
GPU_KINDS: Mapping[str, str] = {
    "a100": "a100_sxm_80",
    "h100": "h100_sxm",
    "h200": "h200",
    "b200": "b200",
}
GPU_SPECS = Path(__file__).resolve().parent.parent / "model" / "specs" / "gpu"


@dataclass(frozen=True)
class TpuPod:
    """The slices of one TPU generation Google offers, as fieldmem bounds a ``tpu:KIND:TOPOLOGY``.

    ``largest``: the most chips along each axis (in increasing order): a topology's axes, sorted, may not
    exceed them, nor its chips ``chips``; ``source`` says so in words. ``fours``: Google's rule for the 3D
    generations ("AxBxC ... A, B and C are all <= 4 or all integer multiples of 4"); the 2D ones have none.
    """

    largest: tuple[int, ...]
    chips: int
    source: str
    fours: bool = False


# the slices of each generation, from Google's pages (cloud.google.com/tpu/docs/<kind>, .../types-topologies):
# v5e and v6e: a pod of 256 chips, a 2D torus 16x16, slices 1x1 up to 16x16; v4: a pod of 4096 chips (a
# 3D mesh/torus, 16x16x16; tori such as 12x12x24 too), axes all <= 4 or all multiples of 4; v5p: a pod of
# 8960 chips whose largest slice (the largest job one can schedule) is 16x16x24, 6144 chips, same axis rule.
# libtpu itself makes any topology asked for (v5e:100x100 included), so the bounds are fieldmem's
TPU_PODS: Mapping[str, TpuPod] = {
    "v4": TpuPod((16, 16, 24), 4096, "a v4 pod has 4096 chips (16x16x16; tori up to 12x12x24)", fours=True),
    "v5e": TpuPod((16, 16), 256, "a v5e pod is 16x16, 256 chips"),
    "v5p": TpuPod((16, 16, 24), 6144, "the largest v5p slice is 16x16x24, 6144 chips", fours=True),
    "v6e": TpuPod((16, 16), 256, "a v6e pod is 16x16, 256 chips"),
}

# GPU kind -> the most GPUs of it that one NVLink domain joins, and which product that is. jax compiles a
# gpu:KIND:N as one host of N GPUs (XLA's topology 1x1xN: every pair of GPUs a peer on one fabric), so N
# stops where NVIDIA's largest all-to-all NVLink fabric for that GPU stops: two HGX A100 8-GPU baseboards
# joined back to back by NVSwitch (16, NVIDIA's "Introducing HGX A100" post); the NVLink Switch System for
# Hopper (256 H100s or H200s, NVIDIA's H100 and H200 pages); GB200 NVL72 for Blackwell (72, the largest
# NVLink domain NVIDIA ships). XLA itself compiles for 100000 GPUs on one "host"
GPU_DOMAINS: Mapping[str, tuple[int, str]] = {
    "a100": (16, "two HGX A100 8-GPU baseboards joined by NVSwitch"),
    "h100": (256, "the NVLink Switch System"),
    "h200": (256, "the NVLink Switch System"),
    "b200": (72, "a GB200 NVL72 rack"),
}

# TPU kind -> the bytes of HBM libtpu lets one program use on a chip of it, as libtpu 0.0.42 says when a
# program needs more ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, ... exceeds available HBM (15.75G)",
# binary units, two decimals; tests/findings/test_capacity.py holds each figure to libtpu's message). The chips'
# HBM per Google's pages: v4 32 GiB, v5e 16 GiB, v5p 95 GB, v6e 32 GiB; libtpu keeps some of it for itself
TPU_HBM: Mapping[str, int] = {
    "v4": round(30.75 * 2**30),
    "v5e": round(15.75 * 2**30),
    "v5p": round(95.74 * 2**30),
    "v6e": round(31.25 * 2**30),
}

# what a process needs before jax starts to compile without the device (see deviceless_environment)
DEVICELESS_ENV: Mapping[str, str] = {
    "JAX_PLATFORMS": "cpu",
    "TPU_SKIP_MDS_QUERY": "1",
    # libtpu takes a lock on /tmp/libtpu_lockfile that keeps a second process off the TPU; without one there
    # is nothing to guard, and two fieldmem runs (or a run and a notebook) must both compile
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
}


@dataclass(frozen=True)
class BackendName:
    """One ``--backend`` name, parsed."""

    name: str  # canonical: "cpu", "gpu", "tpu:v5e", "tpu:v5e:2x2", "gpu:h100:8"
    platform: str  # "cpu", "gpu", "tpu" (or another name jax knows, for a local backend)
    kind: str | None = None  # "v5e", "h100"; None: a device this machine has
    topology: str | None = None  # "2x2", "8"; None: one chip

    @property
    def deviceless(self) -> bool:
        return self.kind is not None

    @property
    def chips(self) -> int:
        """The number of chips (GPUs) the backend compiles for (1 for a local backend)."""
        if self.topology is None:
            return 1
        return math.prod(int(n) for n in self.topology.split("x"))

    @property
    def axes(self) -> tuple[int, ...]:
        """The topology's chips per axis: TPU ``(2, 2)``/``(2, 2, 1)``, GPU ``(8,)``; one chip: all ones."""
        if self.platform == "tpu" and self.kind is not None:
            count = TPU_KINDS[self.kind][1]
            return tuple(int(n) for n in self.topology.split("x")) if self.topology else (1,) * count
        return (self.chips,)


def gpu_spec_text(kind: str) -> str:
    """The GpuTargetConfigProto text of GPU ``kind`` (``h100``), shipped in fieldmem/model/specs/gpu/."""
    return (GPU_SPECS / f"{GPU_KINDS[kind]}.txtpb").read_text()


_DEVICE_MEMORY_SIZE = re.compile(r"^\s*device_memory_size:\s*(\d+)\s*$", re.M)


def device_memory(backend: BackendName) -> DeviceMemory | None:
    """The memory a program has on one chip of deviceless ``backend`` (None: a backend of this machine, whose
    devices the driver asks). A GPU's is its target config's ``device_memory_size`` (what the GPU reports as
    its memory: 79.1 GiB for the H100 80GB), a TPU's what libtpu lets a program use (:data:`TPU_HBM`)."""
    if backend.kind is None:
        return None
    if backend.platform == "tpu":
        return DeviceMemory(
            TPU_HBM[backend.kind],
            f"a TPU {backend.kind} chip",
            "the HBM libtpu lets one program use on the chip (libtpu's RESOURCE_EXHAUSTED message)",
            " for a program (what libtpu leaves of its HBM)",
        )
    found = _DEVICE_MEMORY_SIZE.search(gpu_spec_text(backend.kind))
    if found is None:  # pragma: no cover - every shipped spec has it (tests/findings/test_capacity.py)
        return None
    article = "an" if backend.kind[0] in "aefhilmnorsx" else "a"  # as the letter is said: an H100, a B200
    return DeviceMemory(
        int(found.group(1)),
        f"{article} {backend.kind.upper()}",
        f"device_memory_size in XLA's target config for the {backend.kind.upper()} (fieldmem/model/specs/gpu/)",
    )


def known_backends() -> str:
    """The backend names fieldmem knows, in words, for an error message."""
    tpu = ", ".join(f"tpu:{k}" for k in TPU_KINDS)
    gpu = ", ".join(f"gpu:{k}" for k in GPU_KINDS)
    return (
        f"cpu, gpu, tpu (a device this machine has), or without the device: {tpu} "
        f"(topology e.g. tpu:v5e:2x2, tpu:v5p:2x2x1), {gpu} (GPU count e.g. gpu:h100:8)"
    )


_TPU_TOPOLOGY = re.compile(r"[1-9]\d*(x[1-9]\d*)+")
_GPU_TOPOLOGY = re.compile(r"[1-9]\d*")


def parse_backend(text: str) -> BackendName:
    """``tpu:v5e:2x2`` -> ``BackendName("tpu:v5e:2x2", "tpu", "v5e", "2x2")``.

    Raises:
        OptionError: an unknown platform, kind or topology, in one line that lists the known ones.
    """
    parts = text.strip().lower().split(":")
    platform = parts[0]
    if len(parts) == 1:  # a backend of this machine's jax (plugins may add others): the driver says if it has it
        return BackendName(platform, platform)
    if len(parts) > 3 or platform not in ("tpu", "gpu"):
        raise OptionError(f"--backend {text!r} is not a backend fieldmem knows: {known_backends()}")
    kind = parts[1]
    kinds = TPU_KINDS if platform == "tpu" else GPU_KINDS
    if kind not in kinds:
        known = ", ".join(f"{platform}:{k}" for k in kinds)
        raise OptionError(f"--backend {text!r}: no {platform.upper()} kind {kind!r}; fieldmem knows {known}")
    topology = parts[2] if len(parts) == 3 else None
    if topology is not None:
        topology = _topology(text, platform, kind, topology)
    name = f"{platform}:{kind}" + (f":{topology}" if topology else "")
    return BackendName(name, platform, kind, topology)


def _topology(text: str, platform: str, kind: str, topology: str) -> str | None:
    """The topology in canonical form (None: one chip), or an OptionError."""
    if platform == "gpu":
        if not _GPU_TOPOLOGY.fullmatch(topology):
            raise OptionError(
                f"--backend {text!r}: a GPU topology is the number of GPUs, e.g. gpu:{kind}:8 (got {topology!r})"
            )
        most, domain = GPU_DOMAINS[kind]
        if int(topology) > most:
            raise OptionError(
                f"--backend {text!r}: at most {most} GPUs: fieldmem compiles them as one host whose GPUs are all "
                f"NVLink peers, and the largest such set of {kind.upper()}s is {domain} ({most})"
            )
        return None if int(topology) == 1 else str(int(topology))
    axes = TPU_KINDS[kind][1]
    if not _TPU_TOPOLOGY.fullmatch(topology) or len(topology.split("x")) != axes:
        example = "2x2" if axes == 2 else "2x2x1"
        raise OptionError(
            f"--backend {text!r}: a tpu:{kind} topology is {axes} chip counts joined by x, "
            f"e.g. tpu:{kind}:{example} (got {topology!r})"
        )
    numbers = [int(n) for n in topology.split("x")]
    _within_pod(text, kind, numbers)
    return None if math.prod(numbers) == 1 else "x".join(map(str, numbers))


def _within_pod(text: str, kind: str, numbers: list[int]) -> None:
    """Refuse a TPU topology no slice of its generation has (:data:`TPU_PODS`), in one line."""
    pod = TPU_PODS[kind]
    if math.prod(numbers) > pod.chips or any(n > m for n, m in zip(sorted(numbers), pod.largest)):
        raise OptionError(f"--backend {text!r}: no tpu:{kind} slice is that large: {pod.source}")
    if pod.fours and not (all(n <= 4 for n in numbers) or all(n % 4 == 0 for n in numbers)):
        raise OptionError(
            f"--backend {text!r}: a tpu:{kind} slice has every axis at most 4 (2x2x1, 2x4x4) or every axis a "
            "multiple of 4 (4x4x8, 8x8x16), as Google sells them"
        )


def deviceless_environment(backends: Iterable[BackendName] | None) -> dict[str, str]:
    """The environment variables fieldmem's own process sets before jax starts, for ``backends``.

    Compiling without the device needs jax to start no accelerator backend
    (``JAX_PLATFORMS=cpu``: the CUDA plugin fails to start on a machine with
    no GPU) and libtpu not to query a cloud metadata server
    (``TPU_SKIP_MDS_QUERY=1``). Both are set only when every backend asked
    for is ``cpu`` or deviceless, and at least one is deviceless: a real
    ``gpu``/``tpu`` beside a deviceless one keeps the environment as it is
    (then jax starts the machine's accelerator too). ``None`` (jax's default
    backend) and the machine's own backends change nothing.
    """
    chosen = list(backends or ())
    if not any(b.deviceless for b in chosen):
        return {}
    if all(b.deviceless or b.platform == "cpu" for b in chosen):
        return dict(DEVICELESS_ENV)
    if any(b.platform == "tpu" and not b.deviceless for b in chosen):
        return {}
    return {k: v for k, v in DEVICELESS_ENV.items() if k != "JAX_PLATFORMS"}


# the module each deviceless platform's extra brings, and the extra's name
_EXTRA = {"tpu": ("libtpu", "tpu"), "gpu": ("jax_plugins.xla_cuda12", "gpu")}
# the CUDA plugins a GPU compile can use, each with the module of the nvidia-cuda-nvcc wheel of its CUDA
# (that wheel's bin/ptxas and nvvm/libdevice): fieldmem[gpu] brings CUDA 12's; a CUDA 13 install of jax
# (jax-cuda13-plugin with nvidia-cuda-nvcc 13, whose files are under nvidia/cu13) works as well
CUDA_PLUGINS: Mapping[str, str] = {
    "jax_plugins.xla_cuda12": "nvidia.cuda_nvcc",
    "jax_plugins.xla_cuda13": "nvidia.cu13",
}


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (the extras' packages; tests simulate a missing one here).
    Looks it up without importing it (``jax_plugins`` is a namespace package: no jax starts)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def cuda_compilers() -> list[tuple[str, str]]:
    """The installed CUDA plugins that have their nvidia-cuda-nvcc wheel, as (plugin, nvcc module) pairs,
    CUDA 12 (fieldmem[gpu]) first."""
    return [(plugin, nvcc) for plugin, nvcc in CUDA_PLUGINS.items() if _installed(plugin) and _installed(nvcc)]


def extra_installed(backend: BackendName) -> bool:
    """Whether the compiler a deviceless ``backend`` needs is installed here (True for every other)."""
    if not backend.deviceless:
        return True
    module, _ = _EXTRA[backend.platform]
    return bool(cuda_compilers()) if backend.platform == "gpu" else _installed(module)


def require_extra(backend: BackendName) -> None:
    """Stop when the extra a deviceless ``backend`` needs is not installed (nothing to do for others).

    The command line asks before it starts its worker, the driver before it compiles.

    Raises:
        OptionError: naming the ``pip install`` to run.
    """
    if not extra_installed(backend):
        _, extra = _EXTRA[backend.platform]
        raise OptionError(
            f"--backend {backend.name} needs the {backend.platform.upper()} compiler, which is not installed: "
            f'pip install "fieldmem[{extra}]"'
        )


def check_combination(backends: Iterable[BackendName]) -> None:
    """Refuse a machine's own accelerator beside a deviceless one of the same platform (``gpu,gpu:h100``).

    The real one needs jax to start its plugin, the deviceless one a jax
    started on the CPU alone (a GPU compile beside a started CUDA client was
    not tested against a real GPU): two commands, then ``fieldmem compare``.

    Raises:
        OptionError: such a pair, in one line.
    """
    chosen = list(backends)
    for real in (b for b in chosen if not b.deviceless and b.platform in ("gpu", "tpu")):
        twin = next((b for b in chosen if b.deviceless and b.platform == real.platform), None)
        if twin is not None:
            raise OptionError(
                f"--backend {real.name},{twin.name}: this machine's {real.name} and {twin.name} without the device "
                f"need jax started differently; check them in two runs (-f json -o FILE each), then fieldmem compare"
            )
