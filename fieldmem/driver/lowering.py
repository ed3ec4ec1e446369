"""Lowering and compiling a prepared call: the check's two variants (plain and donated) and the advisor's.

Lowering (tracing, Python-bound) stays on the calling thread: jax's
warnings are captured with ``warnings.catch_warnings``, which is not
thread-safe. XLA compiles release the GIL, so they may run in a pool
(:func:`start_variants`). A compile gives a :class:`Compiled`: the plain
:class:`~fieldmem.model.readings.CompiledVariant` that findings read, with the jax
objects the engine needs while it runs or chains it. Reads
``Lowered._lowering.compile_args["backend"]`` (the platform a fast compile
is for), tolerated when missing; jax is imported on first use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from fieldmem.driver import compile_memory, deviceless, dumps, quiet, variant
from fieldmem.driver.backends import read_libraries_meanwhile
from fieldmem.driver.deviceless import Target
from fieldmem.driver.jaxerrors import first_line
from fieldmem.driver.leaves import out_tree
from fieldmem.driver.prepare import PreparedCall, concretize, user_jit_info
from fieldmem.driver.variant import read_variant
from fieldmem.driver.wrappers import PMAP_KINDS
from fieldmem.model.errors import CompileError, DonationError, TargetError
from fieldmem.model.readings import CompiledVariant, OutputLeaf
from fieldmem.request import backends

__all__ = [
    "FAST_COMPILE_OPTIONS",
    "Compiled",
    "PendingVariants",
    "compile_donation",
    "compile_lowered",
    "fresh_function",
    "lower",
    "start_variants",
    "trace_error",
]

# --fast-compile: XLA:CPU debug options that make a compile cheaper without touching what
# fieldmem reads. xla_backend_optimization_level picks the LLVM code generation level
# (IrCompiler::GetCodeGenOptLevel), and that stage runs after the HLO passes, the
# schedule and the buffer assignment (CpuCompiler::CompileCpuExecutable); the HLO passes
# see it only through the target machine, whose features they query (register widths
# and counts, alignment) do not depend on it. benchmarks/bench_compile_options.py
# measured the optimized HLO, every memory_analysis() figure and the serialized buffer
# assignment identical on all 65 programs of the examples and synthetic modules, and
# the compile time it saves (benchmarks/results/compile-options.json); tests/frontends/test_cli.py checks the
# findings are identical.
FAST_COMPILE_OPTIONS: dict[str, Any] = {"xla_backend_optimization_level": 0}


@dataclass(frozen=True)
class Compiled:
    """One compiled variant: its plain reading, and the jax objects the engine holds while it runs or chains it.

    Only :attr:`variant` goes on to findings and the report; dropping the
    handle lets the executable go.
    """

    variant: CompiledVariant
    executable: Any  # the jax.stages.Compiled: what --run and --probe call
    # builds :attr:`outputs` (None for the plain variant)
    outputs_of: Callable[[], Any] | None = field(default=None, repr=False, compare=False)

    @cached_property
    def outputs(self) -> Any:
        """The donated variant's outputs as a pytree of ``jax.ShapeDtypeStruct`` with their shardings: a
        chain's next arguments (None for the plain one). Built when first asked for."""
        return self.outputs_of() if self.outputs_of is not None else None


def fresh_function(function: Callable[..., Any]) -> Callable[..., Any]:
    """A new function object that calls ``function``: jax traces and lowers it anew.

    jax caches traces by function object and lowerings by jaxpr, and a cached
    lowering does not repeat the "donated buffers were not usable" warning:
    checking the same function twice in one process would lose it.
    """

    @functools.wraps(function)
    def fresh(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    return fresh


def _jit(call: PreparedCall, donated: bool, function: Callable[..., Any] | None = None) -> Any:
    """The jit object to lower: the user's own when it is exactly the program asked for, else one built here."""
    import jax

    if call.user_jit is not None and donated and call.donation_source == "jit" and _own_statics(call):
        # exactly the user's program (a lowering jax cached from an earlier
        # lower of this jit object comes without jax's warnings)
        return call.user_jit
    # otherwise rebuilt: without donation, with a donation of fieldmem's, or
    # with static arguments added to the jit's own (then with its donation)
    positions = sorted(call.donated_positions) if donated else []
    names = sorted(call.donated_names) if donated else []
    return jax.jit(
        function if function is not None else call.function,
        static_argnums=tuple(sorted(call.static_positions)),
        static_argnames=tuple(sorted(call.static_names)),
        donate_argnums=tuple(positions),
        donate_argnames=tuple(names),
        **call.jit_options,
    )


def _own_statics(call: PreparedCall) -> bool:
    """Whether the call's static arguments are exactly those of the user's jit object."""
    info = user_jit_info(call.user_jit)
    if info is None:
        return False
    positions = set(getattr(info, "static_argnums", ()) or ())
    names = set(getattr(info, "static_argnames", ()) or ()) & set(call.kwargs)
    return positions == set(call.static_positions) and names == set(call.static_names)


def lower(
    call: PreparedCall, donated: bool, function: Callable[..., Any] | None = None
) -> tuple[Any, tuple[str, ...], float]:
    """Lower ``call`` without donation or with its donation: the ``Lowered``, the warnings jax gave
    while lowering (the "donated buffers were not usable" one among them) and the seconds it took.

    ``function``: what to trace instead of ``call.function`` (a :func:`fresh_function` of it).

    Raises:
        CompileError: tracing or lowering raised.
    """

    found = deviceless.active_target()
    if found is not None and call.wrapper in PMAP_KINDS:
        raise TargetError(
            f"--backend {found.backend.name}: {call.wrapper} builds its program for the devices jax runs on "
            "(its mesh is made when it is called), not for another backend's chips; check it here with --devices N"
        )
    if found is not None:  # compiled without the device: the arguments as ShapeDtypeStructs on its chips
        call = deviceless.place_call(call, found)
    jitted = _jit(call, donated, function)
    start = time.perf_counter()
    context = call.lowering_context() if call.lowering_context is not None else contextlib.nullcontext()
    with warnings.catch_warnings(record=True) as caught, context:
        warnings.simplefilter("always")
        try:
            lowered = jitted.lower(*call.args, **call.kwargs)
        except Exception as exc:
            refused = deviceless.callback_refused(exc, found) if found is not None else None
            if refused is not None:
                raise CompileError(refused) from exc
            raise CompileError(f"tracing/lowering failed: {first_line(exc)}") from exc
    messages = tuple(str(w.message) for w in caught)
    return lowered, messages, time.perf_counter() - start


def _platform(lowered: Any) -> str | None:
    """The platform ``lowered`` is compiled for (None where jax does not say)."""
    try:
        return str(lowered._lowering.compile_args["backend"].platform)
    except (AttributeError, KeyError, TypeError):
        return None


def _fast_options(platform: str | None) -> dict[str, Any] | None:
    """:data:`FAST_COMPILE_OPTIONS` for a program compiled for XLA:CPU, None for any other
    backend (not measured there) or when jax does not say which."""
    return dict(FAST_COMPILE_OPTIONS) if platform == "cpu" else None


def compile_lowered(lowered: Any, fast: bool = False, found: Target | None = None) -> tuple[Any, float, bool]:
    """Compile ``lowered``; with ``fast`` on XLA:CPU, with :data:`FAST_COMPILE_OPTIONS`. For the deviceless
    backend ``found``, and for a GPU or TPU of this machine, with XLA's dump on
    (:func:`fieldmem.driver.dumps.compile_dumped`: the buffer assignment is read from it, and a program that
    does not fit a TPU is compiled again without that check).

    Returns the executable, the seconds and whether the fast options were used.

    Raises:
        CompileError: XLA raised, or a deviceless compile came out for another platform.
    """
    from fieldmem.driver.early import (
        DEVICELESS_EARLY_PLATFORMS,
        EARLY_PLATFORMS,
        CacheKey,
        can_stop_early,
        kept_folder,
        persistent_cache_in_use,
    )

    platform = found.platform if found is not None else _platform(lowered)
    stops = DEVICELESS_EARLY_PLATFORMS if found is not None else EARLY_PLATFORMS
    early = fast and platform in stops and can_stop_early()
    # with jax's cache on, only where the dump is kept in it for a rerun (fieldmem.driver.kept)
    if early and (not persistent_cache_in_use() or kept_folder() is not None):
        if found is not None:
            return _compile_deviceless_early(lowered, found)
        return _compile_early(lowered, _fast_options(platform) or {})
    with compile_memory.GATE.compiling():  # waits while the memory left holds no other compile beside those running
        options = _fast_options(platform) if fast else None
        if found is not None:
            return _compile_deviceless(lowered, found)
        if platform is not None and platform not in dumps.IN_PROCESS_ASSIGNMENT:
            compiled, seconds = dumps.compile_dumped(
                lowered, platform, options=options, capacity=_capacity(lowered), keyed=CacheKey()
            )
            return compiled, seconds, options is not None
        start = time.perf_counter()
        try:
            compiled = lowered.compile(compiler_options=options) if options else lowered.compile()
        except Exception as exc:
            raise CompileError(f"XLA compilation failed: {first_line(exc)}") from exc
        return compiled, time.perf_counter() - start, options is not None


def _compile_early(lowered: Any, options: dict[str, Any]) -> tuple[Any, float, bool]:
    """Compile ``lowered`` with the fast ``options``, stopped once XLA has dumped what fieldmem reads
    (:mod:`fieldmem.driver.early`). The compile keeps its place at the memory gate until it ends, its code
    generation included; the seconds are those until its reading was ready."""

    try:
        compiled, seconds, _ = _until_assigned(lowered, options, "cpu")
    except Exception as exc:
        raise CompileError(f"XLA compilation failed: {first_line(exc)}") from exc
    return compiled, seconds, True


def _compile_deviceless_early(lowered: Any, found: Target) -> tuple[Any, float, bool]:
    """Compile ``lowered`` for ``found``'s chips (an XLA:GPU), stopped once XLA has dumped what fieldmem reads
    (:mod:`fieldmem.driver.early`), else to its end; either way its buffer assignment is read from its dump and
    what it said beside its program kept, as :func:`fieldmem.driver.dumps.compile_dumped` does. A program jax
    compiled for another platform is refused."""
    with quiet.quiet_stderr(take=dumps.XLA_DOUBTS) as log:
        try:
            compiled, seconds, _ = _until_assigned(
                lowered, deviceless.compile_options(found), found.platform, log.also_thread, keep_dump=True
            )
        except Exception as exc:
            raise CompileError(f"XLA compilation for {found.backend.name} failed: {first_line(exc)}") from exc
    dumps.remember_notes(compiled, dumps.CompileNotes(found, found.platform, None, tuple(log.taken)))
    deviceless.check_platform(compiled, found, variant.executable_devices(compiled))
    return compiled, seconds, False


def _until_assigned(
    lowered: Any,
    options: dict[str, Any],
    platform: str,
    started: Callable[[int], None] | None = None,
    keep_dump: bool = False,
) -> tuple[Any, float, bool]:
    """:func:`fieldmem.driver.early.compile_until_assigned` in a dump folder of its own under the dump root, at
    its place at the memory gate until the compile ends, its code generation included (and the folder removed
    then). ``keep_dump``: a compile awaited to its end keeps what it dumped, for its buffer assignment
    (:func:`fieldmem.driver.dumps.remember_dump`). Returns the executable, the seconds until its reading was
    ready and whether it stopped early."""
    from fieldmem.driver.early import compile_until_assigned, dump_options, scratch

    place = contextlib.ExitStack()
    place.enter_context(compile_memory.GATE.compiling())  # left when the compile ends, its code generation included
    folder, remove = scratch(dumps.DUMP_ROOT[0])
    lock = threading.Lock()
    state = {"ended": False, "returned": False}

    def end() -> None:  # the compile is over: at once when awaited, at the end of its code generation if not
        with lock:
            if state["ended"]:
                return
            state["ended"] = True
            place.close()
            if state["returned"]:  # else removed once the caller has read what it needs
                remove()

    def returned() -> None:
        with lock:
            state["returned"] = True
            if state["ended"]:
                remove()

    start = time.perf_counter()
    try:
        compiled, early = compile_until_assigned(lowered, {**dump_options(folder), **options}, end, platform, started)
    except BaseException:
        end()
        returned()
        raise
    seconds = time.perf_counter() - start
    try:
        if early:
            dumps.remember_dumped(compiled, compiled.runtime_executable().hlo_proto)
        elif keep_dump:
            dumps.remember_dump(compiled, folder)
    finally:
        returned()
    return compiled, seconds, early


def _capacity(lowered: Any) -> Any:
    """The memory of the device ``lowered`` is compiled for, as jax's allocator gives it (None: not given)."""

    try:
        devices = list(lowered._lowering.compile_args["backend"].local_devices())
    except Exception:
        return None
    return variant.allocator_memory(devices)


def dump_under(folder: str | None) -> None:
    """Dumped compiles (deviceless, and a GPU or TPU of this machine) dump under ``folder``
    (:func:`fieldmem.driver.dumps.dump_under`)."""

    dumps.dump_under(folder)


def _compile_deviceless(lowered: Any, found: Target) -> tuple[Any, float, bool]:
    """Compile ``lowered`` for ``found``'s chips through XLA's dump (:func:`fieldmem.driver.dumps.compile_dumped`),
    and refuse a program jax compiled for another platform."""

    compiled, seconds = dumps.compile_dumped(
        lowered, found.platform, found, deviceless.compile_options(found), backends.device_memory(found.backend)
    )
    deviceless.check_platform(compiled, found, variant.executable_devices(compiled))
    return compiled, seconds, False


def trace_error(call: PreparedCall) -> BaseException | None:
    """What tracing ``call`` as :func:`lower` traces it raises (None: it traces); nothing is lowered."""
    import jax

    jitted = jax.jit(
        fresh_function(call.function),
        static_argnums=tuple(sorted(call.static_positions)),
        static_argnames=tuple(sorted(call.static_names)),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            jitted.trace(*call.args, **call.kwargs)
        except Exception as exc:
            return exc
    return None


class PendingVariants:
    """Both variants of one call, lowered here and compiling (maybe in a pool): :meth:`result` waits.

    :attr:`call` is the call compiled: where tracing needs a traced Python
    scalar concrete, the call with it made static (:func:`~fieldmem.driver.prepare.concretize`).
    """

    def __init__(self, call: PreparedCall, pool: Executor | None, fast: bool = False, early: bool = False) -> None:

        self.fast = fast
        self.found = deviceless.active_target()  # read here: the compiles may run in a pool's threads
        function = fresh_function(call.function)  # one trace for both variants, none from an earlier check
        self._futures: list[Any] | None = None
        lowered: list[tuple[Any, tuple[str, ...], float]] = []
        for donated in (False, True):
            try:
                # both variants are lowered from this one line: jax records the Python stack, ours
                # included, in the HLO's source tables, and the parser shares the lines of two
                # programs only when their tables are the same
                lowered.append(lower(call, donated=donated, function=function))
            except CompileError as exc:
                concrete = None if donated else concretize(call, exc.__cause__ or exc, trace_error)
                if concrete is None:
                    raise
                call = concrete
                function = fresh_function(call.function)
                lowered.append(lower(call, donated=False, function=function))
            if pool is not None and early and not donated:  # the plain one compiles while the donated one is lowered
                self._futures = [pool.submit(compile_lowered, lowered[0][0], fast, self.found)]
        self.call = call
        self._plain, self._donated = lowered
        if pool is not None:
            if self._futures is None:
                self._futures = [pool.submit(compile_lowered, self._plain[0], fast, self.found)]
            self._futures.append(pool.submit(compile_lowered, self._donated[0], fast, self.found))
        self._plain_done: Compiled | None = None
        self._plain_tree: Any = None

    def _compile(self, lowering: tuple[Any, tuple[str, ...], float], index: int) -> tuple[Any, float, bool]:
        if self._futures is not None:
            future = self._futures[index]
            if not future.done():  # this thread waits: the installed libraries are read meanwhile (once)
                read_libraries_meanwhile()
            return future.result()
        return compile_lowered(lowering[0], self.fast, self.found)

    def plain(self) -> Compiled:
        """The plain variant, once its compile is done: the donated one may still be compiling (in a pool),
        so reading and analysing this one meanwhile costs no wall time. Raises CompileError as the compile did."""
        if self._plain_done is None:
            self._plain_done = _compiled("plain", self.call, self._plain, self._compile(self._plain, 0))
            self._plain_tree = out_tree(self._plain[0])
            self._plain = (None, (), 0.0)  # let the lowering go
        return self._plain_done

    def result(self) -> tuple[Compiled, Compiled]:
        """The plain and the donated variant (raises CompileError as the compile did)."""
        plain = self.plain()
        like = (plain.variant.outputs, self._plain_tree)  # one trace: the same outputs, unless compiled otherwise
        donated = _compiled(
            "donated", self.call, self._donated, self._compile(self._donated, 1), donated=True, like=like
        )
        self._donated = (None, (), 0.0)
        self._futures = None
        return plain, donated


def _compiled(
    name: str,
    call: PreparedCall,
    lowering: tuple[Any, tuple[str, ...], float],
    compiling: tuple[Any, float, bool],
    donated: bool = False,
    like: tuple[tuple[OutputLeaf, ...], Any] | None = None,
) -> Compiled:
    """The handle of one variant, from what :func:`lower` and :func:`compile_lowered` returned for it
    (``like``: the other variant's output leaves and tree, :func:`~fieldmem.driver.variant.read_variant`)."""
    lowered, lowering_warnings, lower_seconds = lowering
    executable, compile_seconds, fast = compiling
    variant, outputs = read_variant(
        name,
        call,
        lowered,
        executable,
        lowering_warnings,
        lower_seconds,
        compile_seconds,
        donated=donated,
        fast=fast,
        like=like,
    )
    return Compiled(variant, executable, outputs)


def start_variants(
    call: PreparedCall, pool: Executor | None, *, fast: bool = False, early: bool = False
) -> PendingVariants:
    """Lower ``call`` without donation (plain) and with it (donated) in this thread, and start the two XLA
    compiles in ``pool`` (None: at :meth:`~PendingVariants.result`).

    Lowering (tracing, Python-bound) must stay in one thread: jax's warnings
    are captured with ``warnings.catch_warnings``, which is not thread-safe.
    XLA compiles release the GIL, so several targets' compiles overlap in a
    pool while the next target is lowered. ``fast``: both compiled with
    :data:`FAST_COMPILE_OPTIONS` (on XLA:CPU; the figures they change are
    then unavailable). ``early``: the plain variant's compile starts before the
    donated one is lowered (with ``--jobs`` > 1); otherwise no compile overlaps
    a lowering, and the analysis of the plain variant is all that overlaps the
    donated compile.
    """
    return PendingVariants(call, pool, fast, early)


def compile_donation(
    call: PreparedCall,
    positions: Iterable[int],
    names: Iterable[str] = (),
    *,
    name: str = "suggested",
    fast: bool = False,
) -> CompiledVariant:
    """Lower and compile ``call`` donating exactly ``positions`` and ``names``.

    The advisor's verification compile: the same program as the check's two
    variants (static arguments, the user's jit options, a fresh trace so jax's
    warnings are not lost to its cache), with another donation. Positions are
    positional argument numbers, names keyword arguments of the call.
    ``fast``: compiled as :func:`start_variants` compiles with ``fast``.
    """
    positions = frozenset(positions)
    names = frozenset(names)
    bad = sorted(p for p in positions if not 0 <= p < len(call.args) or p in call.static_positions)
    bad_names = sorted(n for n in names if n not in call.kwargs or n in call.static_names)
    if bad or bad_names:
        raise DonationError(
            f"cannot donate {', '.join([*map(str, bad), *bad_names])}: not an array argument of this call"
        )
    variant_call = dataclasses.replace(call, donated_positions=positions, donated_names=names, donation_source="spec")

    lowering = lower(variant_call, donated=True, function=fresh_function(call.function))
    compiling = compile_lowered(lowering[0], fast, deviceless.active_target())
    return _compiled(name, variant_call, lowering, compiling, donated=True).variant
