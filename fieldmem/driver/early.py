"""A static check's XLA:CPU compile, stopped where what fieldmem reads is ready.

fieldmem reads a compile's optimized module, its text and its buffer
assignment, and ``memory_analysis()``, which XLA:CPU derives from that
assignment. XLA dumps all of them when its HLO passes and buffer assignment
are done (``*after_optimizations.hlo.pb`` and ``*after_optimizations.txt``),
after 45-50% of the compile-heavy step's compile; the rest is code generation
(``benchmarks/results/compile-stages.md``), which a static check never reads.

Here the compile runs in a thread of its own with the dump on; inotify says
when XLA has closed both files after writing them (a file still being written
is never read), and jax then builds its ``Compiled`` around a stand-in for
the executable that answers from the dump (:class:`_FromDump`): jax's own
code derives the shardings, formats and devices as it does from a finished
compile, and :mod:`fieldmem.driver.dumped` gives ``as_text()`` and
``memory_analysis()`` exactly as the finished executable gives them (rules held
to it on every bundled example and on flax, optax and equinox steps by
``tests/driver/test_early_stop.py``). The size of the generated code, which does not
exist yet, is unavailable, as it already is for a fast compile.

Where it is done:

- only where it is asked (:func:`stop_early`): a worker process of a static
  check (no ``--run``, no ``--probe``) on XLA:CPU, with the fast options, and
  only while jax's persistent compilation cache is off (``--no-cache``): an
  abandoned compile writes no entry to it, and a rerun is promised to load
  unchanged functions from it (:func:`persistent_cache_in_use`). A
  compile thread cannot be cancelled: the abandoned code generation goes on at
  the lowest priority (``setpriority`` of its thread, Linux) and ends with the
  worker, which leaves by ``os._exit`` once its answers are sent. In-process
  checks and the API keep the full compile, whose thread would outlive them.
- only where the reading can be had exactly, decided before the dump is read:
  one device, arguments not passed as one tuple, no profile-guided compile,
  Linux (inotify), and no entry parameter or result in another memory space
  than the default one (else jax's memory kinds would be guessed). Elsewhere the
  compile is awaited as before.

An abandoned compile keeps its place at :data:`fieldmem.driver.compile_memory.GATE`
until it ends: compiles still generating code count against the memory a new one
needs, so their number is bounded as that of running compiles is.

Reads ``jax._src.interpreters.pxla._cached_compilation`` (wrapped, for the compiles
of a thread that asks, while it asks); where jax has none, every compile is full.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import shutil
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fieldmem.driver import dumped, dumps
from fieldmem.request.options import EARLY_STOP_ENV, user_dumps

__all__ = [
    "EARLY_PLATFORMS",
    "EARLY_STOP_ENV",
    "abandoned",
    "can_stop_early",
    "compile_until_assigned",
    "persistent_cache_in_use",
    "stop_early",
    "wait_abandoned",
]

#: the platforms whose compiles may stop once the buffer assignment is dumped: XLA:CPU, where every figure is
#: had exactly from the dump (on a GPU the executable's text and peak are not, measured; a TPU's temp is not)
EARLY_PLATFORMS: frozenset[str] = frozenset({"cpu"})


#: what XLA writes once its HLO passes and buffer assignment are done (``cpu_after_optimizations.hlo.pb``)
MODULE_SUFFIX = "after_optimizations.hlo.pb"
TEXT_SUFFIX = "after_optimizations.txt"

_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_TO = 0x00000080
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)
_POLL_SECONDS = 0.05  # how often the wait looks whether the compile ended first

_asked = [False]
_local = threading.local()
_original: list[Callable[..., Any] | None] = [None]
_install_lock = threading.Lock()
_abandoned: set[threading.Thread] = set()
_abandoned_lock = threading.Lock()


def stop_early(on: bool) -> None:
    """Let this process's static XLA:CPU compiles stop once their reading is dumped (a worker asks; see the
    module), or not."""
    _asked[0] = on


def can_stop_early() -> bool:
    """Whether compiles of this process may stop early: asked for, on Linux (inotify), with jax's compile
    reachable, and no dump of the user's own asked for (:func:`user_dumps`)."""
    return _asked[0] and sys.platform.startswith("linux") and not user_dumps(os.environ) and _install()


def persistent_cache_in_use() -> bool:
    """Whether jax's persistent compilation cache is on for this process's compiles (a folder set and the cache
    enabled). A compile stopped early writes no entry to it unless its code generation ends while the process
    lives, and a rerun is promised to load unchanged functions from it: with it on, compiles run to their end."""
    import jax

    enabled = bool(getattr(jax.config, "jax_enable_compilation_cache", True))
    return enabled and bool(getattr(jax.config, "jax_compilation_cache_dir", None))


def abandoned() -> int:
    """How many compiles stopped early are still generating their code."""
    with _abandoned_lock:
        return sum(t.is_alive() for t in _abandoned)


def wait_abandoned(timeout: float | None = None) -> bool:
    """Wait until every compile stopped early has ended (tests, and a process that ends otherwise than by
    ``os._exit``); whether they all have."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with _abandoned_lock:
        threads = list(_abandoned)
    for thread in threads:
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    return abandoned() == 0


def _install() -> bool:
    """Wrap jax's ``_cached_compilation`` once (False: this jax has none)."""
    with _install_lock:
        if _original[0] is not None:
            return True
        try:
            from jax._src.interpreters import pxla
        except ImportError:  # pragma: no cover - jax always has it
            return False
        original = getattr(pxla, "_cached_compilation", None)
        if original is None or not callable(original):
            return False
        _original[0] = original
        setattr(pxla, "_cached_compilation", _Wrapped(original))  # noqa: B010 - jax's own name, wrapped
        return True


class _Wrapped:
    """jax's ``_cached_compilation``, stopped early for the thread that asks (:func:`compile_until_assigned`);
    its other attributes (``cache_clear``, which ``jax.clear_caches`` calls) are jax's."""

    def __init__(self, original: Callable[..., Any]) -> None:
        self.original = original

    def __call__(self, *args: Any) -> Any:
        request: _Request | None = getattr(_local, "request", None)
        if request is None:
            return self.original(*args)
        _local.request = None  # one compile per request
        return request.compile(self.original, args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.original, name)


class _Request:
    """One compile that may stop early: its dump ``folder``, and ``ended`` (called once, when the compile is
    over: at its end, or when it is abandoned, at the end of its code generation)."""

    def __init__(self, folder: str, ended: Callable[[], None]) -> None:
        self.folder = folder
        self.ended = ended
        self.started = False
        self.stopped = False

    def compile(self, original: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        self.started = True
        # jax's arguments: computation, name, tuple_args, allow_prop_to_inputs, allow_prop_to_outputs,
        # host_callbacks, backend, device assignment, compiler_options_kvs, pgle_profiler
        tuple_args, devices, pgle = args[2], args[7], args[9]
        if tuple_args or len(devices) != 1 or pgle is not None:
            try:
                return original(*args)
            finally:
                self.ended()
        try:
            watch = _Watch(self.folder)
        except OSError:
            try:
                return original(*args)
            finally:
                self.ended()
        done = threading.Event()
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["executable"] = original(*args)
            except BaseException as exc:  # SystemExit too: raised again in the caller's thread
                box["error"] = exc
            finally:
                done.set()
                self.ended()

        thread = threading.Thread(target=run, name="fieldmem-compile", daemon=True)
        thread.start()
        try:
            ready = watch.wait(done)
        finally:
            watch.close()
        if ready and not done.is_set():
            stand_in = _from_dump(self.folder, devices)
            if stand_in is not None:
                self.stopped = True
                _lowest_priority(thread)
                with _abandoned_lock:
                    _abandoned.difference_update([t for t in _abandoned if not t.is_alive()])
                    _abandoned.add(thread)
                return stand_in
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["executable"]


def compile_until_assigned(lowered: Any, options: dict[str, Any], ended: Callable[[], None]) -> tuple[Any, bool]:
    """Compile ``lowered`` with ``options`` (which dump to a folder of its own, as :func:`dump_options` asks),
    stopping once the reading is dumped where that is exact (see the module). ``ended`` is called once the
    compile is over: at once when it was awaited, at the end of its code generation when it was abandoned.

    Returns jax's ``Compiled`` and whether the compile was stopped early.

    Raises:
        Exception: as ``lowered.compile`` raises.
    """
    request = _Request(str(options["xla_dump_to"]), ended)
    _local.request = request
    try:
        compiled = lowered.compile(compiler_options=options)
    finally:
        _local.request = None
        if not request.started:  # compiled without jax's _cached_compilation (another path of jax's)
            ended()
    return compiled, request.stopped


def dump_options(folder: str) -> dict[str, Any]:
    """XLA options that dump the optimized module with its buffer assignment, and its text, to ``folder``."""

    return {**dumps.dump_options(folder), "xla_dump_hlo_as_text": True}


def scratch(root: str | None) -> tuple[str, Callable[[], None]]:
    """A folder for one compile's dump under ``root`` (None: the temporary directory), and what removes it."""
    import tempfile

    if root is not None:
        os.makedirs(root, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="fieldmem-xla-", dir=root)
    return folder, lambda: shutil.rmtree(folder, ignore_errors=True)


def _lowest_priority(thread: threading.Thread) -> None:
    """Run ``thread`` (an abandoned compile) only where nothing else wants the cores: nice 19 (Linux gives
    each thread its own)."""
    native = thread.native_id
    if native is None:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, native, 19)
    except (OSError, AttributeError):  # pragma: no cover - not Linux, or the thread already ended
        pass


class _Watch:
    """inotify on a dump folder: :meth:`wait` returns once XLA has closed both the optimized module and its
    text after writing them (or moved them in)."""

    def __init__(self, folder: str) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        Path(folder).mkdir(parents=True, exist_ok=True)
        if libc.inotify_add_watch(self._fd, os.fsencode(folder), _IN_CLOSE_WRITE | _IN_MOVED_TO) < 0:
            number = ctypes.get_errno()
            os.close(self._fd)
            raise OSError(number, f"inotify_add_watch failed on {folder}")
        self._module = False
        self._text = False

    def wait(self, done: threading.Event) -> bool:
        """Wait until both files are complete (True) or ``done`` is set first (False)."""
        pending = b""
        while not (self._module and self._text):
            if done.is_set():
                return False
            readable, _, _ = select.select([self._fd], [], [], _POLL_SECONDS)
            if not readable:
                continue
            try:
                pending += os.read(self._fd, 65536)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EINTR):
                    continue
                return False
            while len(pending) >= _EVENT.size:
                _, _, _, length = _EVENT.unpack_from(pending)
                if len(pending) < _EVENT.size + length:
                    break
                name = pending[_EVENT.size : _EVENT.size + length].rstrip(b"\0").decode(errors="replace")
                pending = pending[_EVENT.size + length :]
                self._module |= name.endswith(MODULE_SUFFIX)
                self._text |= name.endswith(TEXT_SUFFIX)
        return True

    def close(self) -> None:
        os.close(self._fd)


def _from_dump(folder: str, devices: Any) -> _FromDump | None:
    """The stand-in for the executable whose compile dumped to ``folder`` (None: the dump is not one module
    and its text, or the reading cannot be had exactly from it)."""
    modules = sorted(Path(folder).glob("*" + MODULE_SUFFIX))
    texts = sorted(Path(folder).glob("*" + TEXT_SUFFIX))
    if len(modules) != 1 or len(texts) != 1:
        return None
    try:
        stand_in = _FromDump(modules[0].read_bytes(), texts[0].read_text(), list(devices))
    except Exception:  # unreadable: the finished compile answers instead
        return None
    return stand_in if stand_in.exact() else None


class _Layout:
    """What jax reads of a ``PjRtLayout`` (``Layout.from_pjrt_layout``): the XLA layout."""

    def __init__(self, layout: Any) -> None:
        self._layout = layout

    def _xla_layout(self) -> Any:
        return self._layout


class _FromDump:
    """What jax and fieldmem ask of an XLA:CPU executable, answered from its compile's dump (see the module)."""

    def __init__(self, hlo_proto: bytes, text: str, devices: list[Any]) -> None:
        from jax._src.lib import xla_client

        self.hlo_proto = hlo_proto
        self._text = text
        self._devices = devices
        module = dumped.module_of(hlo_proto)
        if not module:
            raise ValueError("the dump has no module")
        self._module = module
        # read from the proto here, not through an XlaComputation of the module: building one holds the GIL
        # while the other variant compiles (benchmarks/results/early-stop-profile.md)
        shapes = dumped.entry_shapes(module)
        if shapes is None:
            raise ValueError("the dump's entry has a tuple parameter, or no program shape")
        parameters, results = shapes
        self._plain = all(s.plain for s in (*parameters, *results))

        def built(shape: dumped.EntryShape) -> Any:
            kind = xla_client.PrimitiveType(shape.element_type)
            return xla_client.Shape.array_shape(kind, shape.dimensions, shape.minor_to_major)

        self._parameters = [built(s) for s in parameters] if self._plain else []
        self._results = [built(s) for s in results] if self._plain else []

    def exact(self) -> bool:
        """Whether every answer is the finished executable's: arrays only, each with a layout that is its
        dimension order alone, in the default memory space (one that names another, ``S(n)``, would make jax's
        memory kinds a guess)."""
        return self._plain

    def get_hlo_text(self) -> str:

        return dumped.executable_text(self._text)

    def hlo_modules(self) -> list[Any]:
        from jax._src.lib import xla_client

        return [xla_client.hlo.HloModule.from_serialized_hlo_module_proto(self._module)]

    def get_compiled_memory_stats(self) -> Any:

        return dumped.dumped_stats(self.hlo_proto)

    def get_parameter_layouts(self) -> list[_Layout]:
        return [_Layout(s.layout()) for s in self._parameters]

    def get_output_layouts(self) -> list[_Layout]:
        return [_Layout(s.layout()) for s in self._results]

    def get_output_memory_kinds(self) -> list[list[str]]:
        kind = self._devices[0].default_memory().kind
        return [[kind] * len(self._results)]

    def local_devices(self) -> list[Any]:
        return list(self._devices)

    def execute_sharded(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("fieldmem stopped this compile before its code generation: it cannot be run")

    execute = execute_sharded
