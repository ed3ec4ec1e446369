"""A static check's XLA:CPU compile, and its XLA:GPU compile without the device, stopped where what fieldmem
reads is ready.

fieldmem reads a compile's optimized module, its text and its buffer
assignment, and ``memory_analysis()``, which XLA:CPU derives from that
assignment. XLA dumps all of them when its HLO passes and buffer assignment
are done (``*after_optimizations.hlo.pb`` and ``*after_optimizations.txt``),
after 45-50% of the compile-heavy step's compile on XLA:CPU, after 5-22% of small
programs' H100 compiles made without the device; the rest is code generation
(``benchmarks/results/compile-stages.md``, ``early-stop-gpu.md``), which a
static check never reads. On XLA:GPU ``memory_analysis()`` is derived from the
same assignment by another rule, and its text from the module rebuilt from its
proto (:mod:`fieldmem.driver.dumped`); on a TPU the temporaries are not those of
the dump, so TPU compiles run to their end.

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
  check (no ``--run``, no ``--probe``) on XLA:CPU, with the fast options, or for
  a GPU compiled without the device (a GPU of this machine keeps the full
  compile: nothing here was measured on one). A
  compile thread cannot be cancelled: the abandoned code generation goes on at
  the lowest priority (``setpriority`` of its thread, Linux) and ends with the
  worker, which leaves by ``os._exit`` once its answers are sent. In-process
  checks and the API keep the full compile, whose thread would outlive them.
- with jax's persistent compilation cache on (the default), only where the dump
  can be kept in its folder for a rerun (:func:`kept_folder`): an abandoned
  compile writes no entry of jax's, and a rerun is promised to load unchanged
  functions from the cache. jax's cache read is wrapped for the compile's thread
  (:class:`_CacheRead`): on a miss of jax's own entry it learns jax's key for the
  compile, answers from a dump kept under that key without compiling
  (:mod:`fieldmem.driver.kept`), and otherwise the dump of the compile stopped
  early is kept under it. A cache folder that is not local, or a key that leaves
  the source locations out, keeps the full compile.
- only from a compile's own dump: one with the buffer assignment. Where jax's
  cache has the executable, XLA:CPU dumps the module it loads under the same
  suffix, without an assignment (every figure would read as 0): that is never
  read, and the loaded executable answers.
- only where the reading can be had exactly, decided before the dump is read:
  one device, arguments not passed as one tuple, no profile-guided compile,
  Linux (inotify), and no entry parameter or result in another memory space
  than the default one (else jax's memory kinds would be guessed). Elsewhere the
  compile is awaited as before.

An abandoned compile keeps its place at :data:`fieldmem.driver.compile_memory.GATE`
until it ends: compiles still generating code count against the memory a new one
needs, so their number is bounded as that of running compiles is.

Reads ``jax._src.interpreters.pxla._cached_compilation`` (wrapped, for the compiles
of a thread that asks, while it asks); where jax has none, every compile is full. Reads
``jax._src.compiler._cache_read(module_name, cache_key, ...)`` (wrapped, for the compile threads
of those compiles); where jax has none, compiles run to their end while the cache is on.
"""

from __future__ import annotations

import ctypes
import errno
import importlib
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

from fieldmem.driver import dumped, dumps, kept
from fieldmem.request.options import EARLY_STOP_ENV, user_dumps

__all__ = [
    "DEVICELESS_EARLY_PLATFORMS",
    "EARLY_PLATFORMS",
    "EARLY_STOP_ENV",
    "CacheKey",
    "abandoned",
    "can_stop_early",
    "compile_until_assigned",
    "kept_folder",
    "persistent_cache_in_use",
    "stood_in",
    "stop_early",
    "wait_abandoned",
]

#: the platforms whose compiles on this machine's devices may stop once the buffer assignment is dumped: XLA:CPU,
#: where every figure is had exactly from the dump (a TPU's temp is not; a GPU of this machine was never measured)
EARLY_PLATFORMS: frozenset[str] = frozenset({"cpu"})
#: the platforms whose compiles without the device may stop so: XLA:GPU, every figure had exactly from the dump
#: (:mod:`fieldmem.driver.dumped`; a TPU's temp is not, so a TPU compile runs to its end)
DEVICELESS_EARLY_PLATFORMS: frozenset[str] = frozenset({"gpu"})


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
_local = threading.local()  # the request of the thread that asks for a compile
_compiling = threading.local()  # the request of the thread that compiles for it
_wrapped: dict[tuple[str, str], Callable[..., Any]] = {}  # jax's functions wrapped here, as jax had them
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
    enabled). A compile stopped early writes no entry of jax's to it unless its code generation ends while the
    process lives; a rerun is promised to load unchanged functions from it, so with it on a compile stops early
    only where its dump is kept there for that rerun (:func:`kept_folder`)."""
    import jax

    enabled = bool(getattr(jax.config, "jax_enable_compilation_cache", True))
    return enabled and bool(getattr(jax.config, "jax_compilation_cache_dir", None))


def kept_folder() -> Path | None:
    """Where this process's compiles stopped early keep their dump under jax's cache key, and look for one
    before compiling (:mod:`fieldmem.driver.kept`); None: jax's persistent cache is off, not a local folder, its
    key leaves the source locations out (a cache folder of the user's own, without
    ``jax_compilation_cache_include_metadata_in_key``: a kept dump could bring another checkout's lines), or this
    jax's cache read cannot be wrapped. A compile then runs to its end while the cache is on."""
    import jax

    if not persistent_cache_in_use() or not getattr(jax.config, "jax_compilation_cache_include_metadata_in_key", False):
        return None
    if not _install_cache_read():
        return None
    return kept.folder_of(str(getattr(jax.config, "jax_compilation_cache_dir", None) or ""))


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
    return _wrap("jax._src.interpreters.pxla", "_cached_compilation", _Wrapped)


def _install_cache_read() -> bool:
    """Wrap jax's ``compiler._cache_read`` once (False: this jax has none), so that a compile that may stop
    early learns its cache key and finds a kept dump (:class:`_CacheRead`); and ``_cache_write`` where jax has
    it (where it has not, an abandoned compile writes its entry)."""
    if not _wrap("jax._src.compiler", "_cache_read", _CacheRead):
        return False
    _wrap("jax._src.compiler", "_cache_write", _CacheWrite)
    return True


def _wrap(module: str, name: str, wrapper: Callable[[Callable[..., Any]], Any]) -> bool:
    """Replace jax's function ``module.name`` by ``wrapper(it)``, once (False: jax has no such function)."""
    with _install_lock:
        if (module, name) in _wrapped:
            return True
        try:
            found = importlib.import_module(module)
        except ImportError:  # pragma: no cover - jax always has them
            return False
        original = getattr(found, name, None)
        if original is None or not callable(original):
            return False
        _wrapped[(module, name)] = original
        setattr(found, name, wrapper(original))
        return True


class _Kept(Exception):
    """Raised inside jax's compile, in the compile's own thread, where a dump kept under its key answers it:
    the compile does not start (caught by :meth:`_Request.compile`)."""

    def __init__(self, module: bytes, text: str) -> None:
        super().__init__("a kept dump answers this compile")
        self.module = module
        self.text = text


class _CacheRead:
    """jax's ``_cache_read(module_name, cache_key, ...)``, which runs once jax has the compile's key and
    before it compiles: for a compile that may stop early (its thread's request), a miss of jax's own cache
    records the key on the request and, where a dump is kept under it, raises :class:`_Kept`."""

    def __init__(self, original: Callable[..., Any]) -> None:
        self.original = original

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        found = self.original(*args, **kwargs)
        request: _Request | CacheKey | None = getattr(_compiling, "request", None)
        if request is None:
            return found
        key = args[1] if len(args) > 1 else kwargs.get("cache_key")
        if _hit(found):
            request.loaded = True  # what XLA dumps as it loads the executable is no compile's dump
        if isinstance(request, CacheKey):  # a compile awaited to its end: its key, hit or miss
            request.key = key if isinstance(key, str) else None
            return found
        if _hit(found) or request.kept is None or not isinstance(key, str):
            return found
        request.key = key
        dump = kept.load(request.kept, key)
        if dump is not None:
            raise _Kept(*dump)
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.original, name)


class CacheKey:
    """jax's persistent-cache key of the one compile this thread makes inside the block, and whether jax's cache
    held its executable (:attr:`loaded`): a compile whose buffer assignment comes from XLA's dump (a TPU or GPU
    of this machine, :func:`fieldmem.driver.dumps.compile_dumped`) keeps that dump under the key
    (:mod:`fieldmem.driver.kept`), for a rerun whose executable jax loads from its cache, of which XLA dumps no
    assignment. Where nothing is kept (:func:`kept_folder` is None: the cache off, not a local folder, a key
    without the source lines), the block does nothing and :attr:`folder` is None."""

    kept = None  # never answers a compile in place of XLA (that is the early stop's :class:`_Request`)
    stopped = False

    def __init__(self) -> None:
        self.folder = kept_folder()
        self.key: str | None = None
        self.loaded = False
        self._before: Any = None

    def __enter__(self) -> CacheKey:
        self._before = getattr(_compiling, "request", None)
        if self.folder is not None:
            _compiling.request = self
        return self

    def __exit__(self, *exc: object) -> None:
        _compiling.request = self._before

    def load(self) -> bytes | None:
        """The dump kept under this compile's key (None: none was kept, or nothing is)."""
        if self.folder is None or self.key is None:
            return None
        found = kept.load(self.folder, self.key)
        return found[0] if found is not None else None

    def save(self, hlo_proto: bytes) -> bool:
        """Keep ``hlo_proto`` (what this compile dumped) under its key, for a rerun; whether it was kept."""
        if self.folder is None or self.key is None:
            return False
        return kept.save(self.folder, self.key, hlo_proto, "")


class _CacheWrite:
    """jax's ``_cache_write``, which a compile calls once its executable exists: skipped for a compile stopped
    early whose dump was kept for a rerun (its abandoned code generation ended). Serializing and writing the
    executable nobody asked for would only take the cores and the GIL from the check still running, and
    double the entries a static check leaves; ``--run`` compiles (and writes) in full when it needs one."""

    def __init__(self, original: Callable[..., Any]) -> None:
        self.original = original

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request: _Request | None = getattr(_compiling, "request", None)
        if request is not None and request.stopped and request.kept is not None and request.key is not None:
            return None
        return self.original(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.original, name)


def _hit(found: Any) -> bool:
    """Whether jax's ``_cache_read`` found an executable (it returns the executable, or None, and a time)."""
    return isinstance(found, tuple) and bool(found) and found[0] is not None


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
    """One compile that may stop early: its dump ``folder``, ``ended`` (called once, when the compile is
    over: at its end, or when it is abandoned, at the end of its code generation) and where dumps are kept
    under jax's cache key (``kept``; None: jax's persistent cache is off). :attr:`key` is jax's key for the
    compile once jax's cache missed; :attr:`answered` says a kept dump answered it; :attr:`loaded` that jax's
    cache had the executable (XLA then dumps the module it loads, without a buffer assignment: never read)."""

    def __init__(
        self,
        folder: str,
        ended: Callable[[], None],
        kept_in: Path | None = None,
        platform: str = "cpu",
        started: Callable[[int], None] | None = None,
    ) -> None:
        self.folder = folder
        self.ended = ended
        self.kept = kept_in
        self.platform = platform
        self.thread_started = started
        self.key: str | None = None
        self.started = False
        self.stopped = False
        self.answered = False
        self.loaded = False

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
            _compiling.request = self
            if self.thread_started is not None:
                self.thread_started(threading.get_native_id())
            try:
                box["executable"] = original(*args)
            except _Kept as found:
                box["kept"] = found
            except BaseException as exc:  # SystemExit too: raised again in the caller's thread
                box["error"] = exc
            finally:
                _compiling.request = None
                done.set()
                watch.wake()  # the wait below returns now, not at its next look
                self.ended()

        thread = threading.Thread(target=run, name="fieldmem-compile", daemon=True)
        thread.start()
        try:
            ready = watch.wait(done)
        finally:
            watch.close()
        if ready and not done.is_set() and not self.loaded:
            stand_in = _from_dump(self.folder, devices, self.platform)
            if stand_in is not None:
                self.stopped = True
                _lowest_priority(thread)
                with _abandoned_lock:
                    _abandoned.difference_update([t for t in _abandoned if not t.is_alive()])
                    _abandoned.add(thread)
                if self.kept is not None and self.key is not None:  # for a rerun, in place of jax's entry
                    kept.save(self.kept, self.key, stand_in.hlo_proto, stand_in.text)
                return stand_in
        done.wait()
        if "kept" in box:
            found: _Kept = box["kept"]
            stand_in = _stand_in(found.module, found.text, devices, self.platform)
            if stand_in is not None:
                self.stopped = self.answered = True
                return stand_in
            return original(*args)  # not answerable after all: compiled in full (the request is not this thread's)
        if "error" in box:
            raise box["error"]
        return box["executable"]


def compile_until_assigned(
    lowered: Any,
    options: dict[str, Any],
    ended: Callable[[], None],
    platform: str = "cpu",
    started: Callable[[int], None] | None = None,
) -> tuple[Any, bool]:
    """Compile ``lowered`` for ``platform`` with ``options`` (which dump to a folder of its own, as
    :func:`dump_options` asks), stopping once the reading is dumped where that is exact (see the module).
    ``ended`` is called once the compile is over: at once when it was awaited, at the end of its code
    generation when it was abandoned; ``started`` with the native id of the thread the compile runs in (what
    XLA logs there is the compile's).

    Returns jax's ``Compiled`` and whether the compile was stopped early.

    Raises:
        Exception: as ``lowered.compile`` raises.
    """
    request = _Request(str(options["xla_dump_to"]), ended, kept_folder(), platform, started)
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
        # written by :meth:`wake` when the compile ends first, so that the wait returns at once: a small
        # program's compile ends before its dump is whole, and the look every _POLL_SECONDS would add up to
        # that much to each
        self._wake_read, self._wake_write = os.pipe()
        self._closed = False
        self._lock = threading.Lock()

    def wake(self) -> None:
        """End a :meth:`wait` now (the compile ended); nothing once the watch is closed."""
        with self._lock:
            if not self._closed:
                os.write(self._wake_write, b"x")

    def wait(self, done: threading.Event) -> bool:
        """Wait until both files are complete (True) or ``done`` is set first (False)."""
        pending = b""
        while not (self._module and self._text):
            if done.is_set():
                return False
            readable, _, _ = select.select([self._fd, self._wake_read], [], [], _POLL_SECONDS)
            if self._fd not in readable:
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
        with self._lock:
            self._closed = True
            for fd in (self._fd, self._wake_read, self._wake_write):
                os.close(fd)


def _from_dump(folder: str, devices: Any, platform: str = "cpu") -> _FromDump | None:
    """The stand-in for the executable whose compile dumped to ``folder`` (None: the dump is not one module
    and its text, or the reading cannot be had exactly from it)."""
    # the compile may end (and its folder be removed) while it is read here: then the finished compile answers
    try:
        modules = sorted(Path(folder).glob("*" + MODULE_SUFFIX))
        texts = sorted(Path(folder).glob("*" + TEXT_SUFFIX))
        if len(modules) != 1 or len(texts) != 1:
            return None
        module, text = modules[0].read_bytes(), texts[0].read_text()
    except OSError:
        return None
    return _stand_in(module, text, devices, platform)


def _stand_in(module: bytes, text: str, devices: Any, platform: str = "cpu") -> _FromDump | None:
    """The stand-in answering from the optimized ``module`` (a serialized ``HloProto``) and its ``text`` (None:
    unreadable, or the reading cannot be had exactly from it)."""
    try:
        stand_in = _FromDump(module, text, list(devices), platform)
    except Exception:  # unreadable: the finished compile answers instead
        return None
    return stand_in if stand_in.exact() else None


def stood_in(compiled: Any) -> bool:
    """Whether ``compiled`` (jax's ``Compiled``) was stopped early: its executable is a stand-in that answers
    from its compile's dump, in Python."""
    try:
        return isinstance(compiled.runtime_executable(), _FromDump)
    except Exception:  # not jax's Compiled, or none of its executables
        return False


class _Layout:
    """What jax reads of a ``PjRtLayout`` (``Layout.from_pjrt_layout``): the XLA layout."""

    def __init__(self, layout: Any) -> None:
        self._layout = layout

    def _xla_layout(self) -> Any:
        return self._layout


#: the memory kind of an output in the default memory, where the device cannot say (a GPU without the device:
#: its topology's device has no ``default_memory()``; the finished executable says ``device``)
_DEFAULT_KINDS = {"gpu": "device"}


class _FromDump:
    """What jax and fieldmem ask of an XLA:CPU executable, or of an XLA:GPU one compiled without the device,
    answered from its compile's dump (see the module)."""

    def __init__(self, hlo_proto: bytes, text: str, devices: list[Any], platform: str = "cpu") -> None:
        from jax._src.lib import xla_client

        self.hlo_proto = hlo_proto
        self.text = text
        self.platform = platform
        self._devices = devices
        module = dumped.module_of(hlo_proto)
        if not module:
            raise ValueError("the dump has no module")
        if not dumped.has_assignment(hlo_proto):  # not a compile's dump: every figure would read as 0
            raise ValueError("the dump has no buffer assignment")
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
        # read here, where a dump that does not decide them (XLA:GPU's peak) makes no stand-in: raises
        self._stats = dumped.dumped_stats(hlo_proto, platform) if self._plain else None

    def exact(self) -> bool:
        """Whether every answer is the finished executable's: arrays only, each with a layout that is its
        dimension order alone, in the default memory space (one that names another, ``S(n)``, would make jax's
        memory kinds a guess); and, on XLA:GPU, a peak the dump decides (:func:`fieldmem.driver.dumped.gpu_peak`:
        a stand-in whose peak it does not is never made)."""
        return self._plain

    def get_hlo_text(self) -> str:
        if self.platform != "gpu":
            return dumped.executable_text(self.text)
        # XLA:GPU's executable prints the module it keeps, built again from its proto (its source tables keep
        # only what is used, in another order), under the first line the compile dumped (the module's settings)
        from jax._src.lib import xla_client

        rebuilt = xla_client.hlo.HloModule.from_serialized_hlo_module_proto(self._module).to_string()
        first = self.text.split("\n", 1)[0]
        rest = rebuilt.split("\n", 1)[1] if "\n" in rebuilt else ""
        return first + "\n" + rest

    def hlo_modules(self) -> list[Any]:
        from jax._src.lib import xla_client

        return [xla_client.hlo.HloModule.from_serialized_hlo_module_proto(self._module)]

    def get_compiled_memory_stats(self) -> Any:
        return self._stats  # a stand-in is made only where exact(), so read

    def get_parameter_layouts(self) -> list[_Layout]:
        return [_Layout(s.layout()) for s in self._parameters]

    def get_output_layouts(self) -> list[_Layout]:
        return [_Layout(s.layout()) for s in self._results]

    def get_output_memory_kinds(self) -> list[list[str]]:
        try:
            kind = self._devices[0].default_memory().kind
        except Exception:  # a device of a topology (no device here): the executable's own word
            if self.platform not in _DEFAULT_KINDS:
                raise
            kind = _DEFAULT_KINDS[self.platform]
        return [[kind] * len(self._results)]

    def local_devices(self) -> list[Any]:
        return list(self._devices)

    def execute_sharded(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("fieldmem stopped this compile before its code generation: it cannot be run")

    execute = execute_sharded
