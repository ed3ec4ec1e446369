"""Readers of XLA's output: pure text and bytes, no jax (tests/xla/test_hlo.py checks every module).

- :mod:`fieldmem.xla.hlo`: optimized HLO text -> a module model -> copies, aliases,
  loops, output producers and source lines;
- :mod:`fieldmem.xla.buffers`: the serialized buffer assignment -> allocations and
  logical buffers -> live ranges, the memory curve, ``live_peak_bytes``.

Callers import the two subpackages (``from fieldmem.xla import buffers, hlo``).
"""

__all__ = ["buffers", "hlo"]
