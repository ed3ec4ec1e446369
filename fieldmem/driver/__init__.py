"""The only package that drives jax: backends, preparing a call, lowering and compiling, running, probing, chains.

Everything else in fieldmem works on what it returns as plain data
(:mod:`fieldmem.model.readings`): the optimized HLO text, XLA's memory figures, the
mapping between HLO parameters and the user's pytree leaves, run and probe
readings. The jax objects a check needs while it runs (an executable, the
outputs as ``ShapeDtypeStruct``s) stay on a :class:`Compiled` handle that the
engine holds and drops. jax is imported on first use, so ``fieldmem --help``
stays instant and importing this package does not import jax.

Every module here imports jax (jaxlib, numpy) inside the functions that use it, on purpose, and they stay
there (issue 51, item 3): the worker imports the driver before jax may start, since the user's first module
may still set what jax starts with (:mod:`~fieldmem.driver.settings`, :mod:`~fieldmem.driver.quiet`).

Modules, in the order a check uses them:

- :mod:`~fieldmem.driver.backends`: backends and devices, simulated CPU devices, the compilation cache.
- :mod:`~fieldmem.driver.wrappers`: library jit wrappers (``flax.nnx.jit``, ``equinox.filter_jit``, jitted
  methods, partials) as the jit they compile through, its arguments and the user's leaf names;
  :mod:`~fieldmem.driver.refusals`: what compiles by itself, and the wrappers refused in one line.
- :mod:`~fieldmem.driver.prepare`: static and donated arguments, a user's jit options.
- :mod:`~fieldmem.driver.lowering`: lowering and compiling both variants, the advisor's compile.
- :mod:`~fieldmem.driver.compile_memory`: how many compiles run at once, by the memory left and measured.
- :mod:`~fieldmem.driver.early`: a worker's static XLA:CPU compile, stopped once XLA has dumped what fieldmem
  reads; :mod:`~fieldmem.driver.dumped`: the figures and text of the finished compile, from that dump;
  :mod:`~fieldmem.driver.kept`: that dump, kept under jax's cache key for a rerun.
- :mod:`~fieldmem.driver.variant`: a compiled program read into a plain ``CompiledVariant``.
- :mod:`~fieldmem.driver.leaves`: its argument and output leaves, numbered as the report numbers them.
- :mod:`~fieldmem.driver.placement`: where each example argument is against where the program takes it.
- :mod:`~fieldmem.driver.execute`: ``--run``, one call and its buffers and device memory.
- :mod:`~fieldmem.driver.probe`: ``--probe``, an update timed at two buffer sizes.
- :mod:`~fieldmem.driver.chain`: a step's outputs as the next step's arguments; the fused chain.
- :mod:`~fieldmem.driver.shapes`: ``--shapes`` as abstract arguments; the bytes of a shape.
- :mod:`~fieldmem.driver.paths`: pytree paths in words, the names of argument and output leaves.
- :mod:`~fieldmem.driver.quiet`: jax's start without the accelerator plugins' known start-up noise on stderr.
- :mod:`~fieldmem.driver.settings`: what a user's module sets for jax at import (``XLA_*``, ``JAX_*``,
  ``jax.config.update``), and whether it is what the worker's jax runs with.
- :mod:`~fieldmem.driver.jaxerrors`: a jax exception in one line, for fieldmem's error messages.

JAX internals are read each in one place and tolerated when missing:
``Lowered._lowering.compile_args["kept_var_idx"]`` (which arguments jit kept,
in variant), ``PjitFunction._jit_info`` (a user's own jit options, in
prepare), the wrappers' own internals (``JitWrapped.jitted_fn``, ``equinox._jit._preprocess``, in
wrappers), ``Lowered._lowering.compile_args["backend"]`` (the platform a fast
compile is for, in lowering), ``jax._src.xla_bridge._backends`` (whether jax
started, for ``--devices``, in backends) and ``Compiled.memory_analysis()``
(documented as unstable, in variant), ``jax._src.interpreters.pxla._cached_compilation`` and
``jax._src.compiler._cache_read`` (wrapped for the compiles a worker stops early, in early); ``Config.update`` is wrapped in the worker to record a module's
``jax.config.update`` calls (in settings).
"""

from __future__ import annotations

from fieldmem.driver.backends import (
    backend_devices,
    backend_scope,
    cache_folder,
    compilation_cache,
    default_cache_folder,
    environment,
    simulate_cpu_devices,
)
from fieldmem.driver.chain import STEP_ARGS, compose, extra_names, spread, state_donation, step_key
from fieldmem.driver.execute import has_memory_stats, run_variant
from fieldmem.driver.lowering import Compiled, PendingVariants, compile_donation, start_variants
from fieldmem.driver.prepare import PreparedCall, call_shape, prepare_call
from fieldmem.driver.probe import probe_update
from fieldmem.driver.quiet import start_jax
from fieldmem.driver.shapes import shape_structs
from fieldmem.driver.variant import FAST_COMPILE_UNAVAILABLE, MEMORY_FIELDS, read_memory

__all__ = [
    "FAST_COMPILE_UNAVAILABLE",
    "MEMORY_FIELDS",
    "STEP_ARGS",
    "Compiled",
    "PendingVariants",
    "PreparedCall",
    "backend_devices",
    "backend_scope",
    "cache_folder",
    "call_shape",
    "compilation_cache",
    "compile_donation",
    "compose",
    "default_cache_folder",
    "environment",
    "extra_names",
    "has_memory_stats",
    "prepare_call",
    "probe_update",
    "read_memory",
    "run_variant",
    "shape_structs",
    "simulate_cpu_devices",
    "spread",
    "start_jax",
    "start_variants",
    "state_donation",
    "step_key",
]
