"""The jax this process runs: its backends and devices, simulated CPU devices, the compilation cache.

``--backend`` picks a backend (:func:`backend_scope`), ``--devices`` sets
how many CPU devices jax starts with (:func:`simulate_cpu_devices`, before
jax starts), ``--cache-dir`` turns on jax's persistent compilation cache
(:func:`compilation_cache`), and :func:`environment` reads the versions and
devices a report records. jax is imported on first use, so ``fieldmem
--help`` stays instant. Reads ``jax._src.xla_bridge._backends`` (whether jax
started), tolerated when missing.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from typing import Any

from fieldmem.driver.jaxerrors import first_line
from fieldmem.driver.quiet import jax_started
from fieldmem.model.errors import OptionError
from fieldmem.model.readings import Environment

__all__ = [
    "CACHE_ENV",
    "backend_devices",
    "backend_scope",
    "cache_folder",
    "compilation_cache",
    "default_cache_folder",
    "device_count",
    "environment",
    "simulate_cpu_devices",
    "with_device_count",
]


def backend_devices(name: str) -> list[Any]:
    """The devices of backend ``name`` (``cpu``, ``gpu``, ``cuda``, ``tpu``...).

    A deviceless name (``tpu:v5e:2x2``, ``gpu:h100``) gives the chips of its
    topology, which compile but never run (:mod:`fieldmem.driver.deviceless`).

    Raises:
        OptionError: jax has no such backend here (not installed, no device,
            or it failed to start), naming the backends it has; for a deviceless
            name, an unknown kind or topology or an extra that is not installed.
    """
    from fieldmem.driver.quiet import start_jax

    start_jax()  # the first to import jax may be here (check_backends): quiet about the plugins' start-up noise
    if ":" in name:
        from fieldmem.driver.deviceless import target

        return list(target(name).devices)
    import jax

    try:
        devices = list(jax.devices(name))
    except RuntimeError as exc:
        found = sorted({jax.default_backend(), "cpu"})
        why = first_line(exc).split(": ", 1)[-1]
        from fieldmem.request.backends import GPU_KINDS, TPU_KINDS

        kinds = ", ".join([*(f"tpu:{k}" for k in TPU_KINDS), *(f"gpu:{k}" for k in GPU_KINDS)])
        raise OptionError(
            f"--backend {name} is not available here ({why}); this jax has {', '.join(found)}; "
            f"without the device: {kinds}"
        ) from None
    if not devices:  # pragma: no cover - jax raises rather than return no devices
        raise OptionError(f"--backend {name} has no devices here")
    return devices


@contextlib.contextmanager
def backend_scope(name: str | None) -> Iterator[None]:
    """Make backend ``name``'s first device the default while a target is checked (None: jax's default).

    The args factory runs inside it too, so the arrays it creates live on
    that backend and the two variants are lowered and compiled for it.
    Arrays already committed to devices (a sharded input) keep theirs.
    """
    if name is None:
        yield
        return
    if ":" in name:  # compiled without the device: arguments made on the CPU, lowered on its chips
        from fieldmem.driver.deviceless import deviceless_scope, target

        with deviceless_scope(target(name)):
            yield
        return
    import jax

    with jax.default_device(backend_devices(name)[0]):
        yield


_CACHE_OPTIONS = (
    "jax_compilation_cache_dir",
    # every executable, however small or quick: a check compiles many small ones
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
    # file names and lines are findings here: by default jax leaves them out of the
    # key, and an executable compiled from another checkout, or before a line was
    # added above the function, would bring its stale locations along
    "jax_compilation_cache_include_metadata_in_key",
)


_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def simulate_cpu_devices(count: int) -> None:
    """Make the CPU backend have ``count`` devices (``--devices``): set before jax starts, in XLA_FLAGS,
    which worker processes inherit.

    Raises:
        OptionError: ``count`` is below 1, or jax already started with another number of CPU devices.
    """
    import os
    import sys

    if count < 1:
        raise OptionError(f"--devices {count} must be at least 1")
    if jax_started():
        try:
            have = len(sys.modules["jax"].devices("cpu"))
        except RuntimeError:
            have = None
        if have is not None and have != count:
            raise OptionError(
                f"--devices {count}: jax already started in this process with {have} CPU device(s); "
                f"set XLA_FLAGS={_DEVICE_COUNT_FLAG}={count} before importing jax"
            )
        return
    os.environ["XLA_FLAGS"] = with_device_count(os.environ.get("XLA_FLAGS", ""), count)


def device_count(flags: str) -> int | None:
    """The CPU device count ``flags`` (an ``XLA_FLAGS`` value) asks for, the last one given (None: none)."""
    import re

    found = re.findall(rf"{_DEVICE_COUNT_FLAG}=(\d+)(?:\s|$)", flags)
    return int(found[-1]) if found else None


def with_device_count(flags: str, count: int) -> str:
    """``flags`` (an ``XLA_FLAGS`` value) asking for ``count`` CPU devices, whatever count it asked for."""
    import re

    kept = re.sub(rf"\s*{_DEVICE_COUNT_FLAG}=\S*", "", flags)
    return f"{kept} {_DEVICE_COUNT_FLAG}={count}".strip()


def cache_folder(path: str | None, origin: str = "--cache-dir") -> str | None:
    """Create the compilation cache folder ``path`` (None: none), so a bad one stops a run before any compile.

    ``origin`` names where the folder was given in messages (``--cache-dir``, or
    the config's key and file: ``cache-dir in pyproject.toml``).

    Raises:
        OptionError: the folder cannot be created or written.
    """
    if path is None:
        return None
    import os

    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise OptionError(f"{origin} {path!r} cannot be created: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise OptionError(f"{origin} {path!r} is not writable")
    return path


CACHE_ENV = "FIELDMEM_CACHE_DIR"


def default_cache_folder() -> str | None:
    """The command line's compilation cache when none is named: ``$FIELDMEM_CACHE_DIR`` (``none``: no
    cache); else, when ``$JAX_COMPILATION_CACHE_DIR`` is set, None (jax's own setting stands); else
    ``$XDG_CACHE_HOME/fieldmem/jax`` (``~/.cache/fieldmem/jax``). None when it cannot be made: a
    default never stops a run."""
    import os

    chosen = os.environ.get(CACHE_ENV)
    if chosen is None and os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return None  # jax's own cache setting stands
    if chosen is not None:
        if chosen.strip().lower() in ("", "none", "off", "0"):
            return None
        path = chosen
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = os.path.join(base, "fieldmem", "jax")
    try:
        return cache_folder(path)
    except OptionError:
        return None


@contextlib.contextmanager
def compilation_cache(path: str | None, backend: str | None = None) -> Iterator[None]:
    """Use JAX's persistent compilation cache in folder ``path`` while checking (None: leave jax's settings).

    An unchanged function is then loaded rather than compiled on the next
    run; the executable, its HLO, memory figures and buffer assignment are
    the same (tests/frontends/test_cli.py checks the findings are identical). The
    previous settings are restored afterwards. A deviceless ``backend``
    (``tpu:v5e``) uses no persistent cache at all, whatever jax's settings:
    jax would store its executables, but loading one needs a client of that
    platform, which a machine without the device has not ("PjRtCompiler must
    be constructed with a Client"), and every rerun would warn and compile.

    Raises:
        OptionError: the folder cannot be created or written.
    """
    import jax

    folder = cache_folder(path)  # a bad folder is an error for every backend
    if backend is not None and ":" in backend:
        previous_enabled = getattr(jax.config, "jax_enable_compilation_cache", True)
        jax.config.update("jax_enable_compilation_cache", False)
        _forget_cache_decision()  # jax decides once per process whether it uses the cache
        try:
            yield
        finally:
            jax.config.update("jax_enable_compilation_cache", previous_enabled)
            _forget_cache_decision()
        return
    if folder is None:
        yield
        return
    import os

    previous = {name: getattr(jax.config, name) for name in _CACHE_OPTIONS}
    wanted = dict(zip(_CACHE_OPTIONS, (os.path.abspath(folder), 0.0, 0, True)))
    # jax opens its cache folder once, at the first compile that uses it: another folder is opened anew
    moved = previous[_CACHE_OPTIONS[0]] != wanted[_CACHE_OPTIONS[0]]
    for name, value in wanted.items():
        jax.config.update(name, value)
    if moved:
        _forget_cache_decision()
    try:
        yield
    finally:
        for name, value in previous.items():
            jax.config.update(name, value)
        if moved:
            _forget_cache_decision()


def _forget_cache_decision() -> None:
    """Make jax decide anew, at its next compile, whether to use the persistent cache.

    jax memoizes that decision (``jax._src.compilation_cache.is_cache_used``)
    at the first compile of the process; ``reset_cache`` forgets it. Tolerated
    when this jax has no such function.
    """
    try:
        from jax._src import compilation_cache

        compilation_cache.reset_cache()
    except Exception:  # another jax layout
        pass


def environment(backend: str | None = None) -> Environment:
    """Versions, backend and devices of the jax this process runs (of ``backend``, when named)."""
    import jax

    try:
        import jaxlib

        jaxlib_version = getattr(jaxlib, "__version__", None) or jax.lib.__version__
    except Exception:  # pragma: no cover - jaxlib always importable with jax
        jaxlib_version = "unknown"
    devices = backend_devices(backend) if backend is not None else jax.devices()
    deviceless = backend is not None and ":" in backend
    try:
        platform_version: str | None = None if deviceless else devices[0].client.platform_version
    except Exception:
        platform_version = None
    return Environment(
        jax_version=jax.__version__,
        jaxlib_version=str(jaxlib_version),
        backend=backend
        if deviceless and backend is not None
        else (devices[0].platform if backend is not None else jax.default_backend()),
        platform_version=platform_version,
        devices=tuple({"id": d.id, "platform": d.platform, "kind": getattr(d, "device_kind", None)} for d in devices),
        deviceless=_deviceless_facts(backend) if deviceless and backend is not None else None,
        plugin_versions=_plugin_versions(devices[0].platform if devices else None),
        library_versions=imported_libraries(),
    )


# jax itself, its compilers and fieldmem: named elsewhere in a report, not libraries built on jax
_NOT_LIBRARIES = re.compile(r"^(jax|jaxlib|fieldmem|libtpu.*|jax-cuda.*|jax-rocm.*|nvidia-.*)$")


#: a distribution's METADATA line saying it requires jax itself (not jaxlib, not jax-cuda12-plugin)
_REQUIRES_JAX = re.compile(r"^Requires-Dist:[ \t]*jax\b(?![-_.])(?P<rest>[^\n]*)$", re.MULTILINE | re.IGNORECASE)


def imported_libraries() -> dict[str, str]:
    """The release of each library built on jax (a distribution that requires jax: flax, optax, equinox…)
    that this process imported, by distribution name: what the checked code ran with, whatever else is
    installed.

    Only each distribution's METADATA is read, as text, and only for those that require jax (outside an
    extra) are its top-level modules looked up: ``importlib.metadata.packages_distributions()`` reads every
    installed distribution's module list (a whole RECORD where there is no top_level.txt), 0.45 s of each
    worker's start on a machine with a large site-packages (benchmarks/results/profile-overhead-13cores.md).
    Where one name is installed twice, the first on ``sys.path`` is the one imported, as importlib finds it.
    Each ``sys.path`` folder is read once while it is unchanged (:func:`read_libraries_ahead`).
    """
    import sys

    for reading in _READING:  # what a compile's wait began (read_libraries_meanwhile): done, not read twice
        reading.join()
    imported = {name.partition(".")[0] for name in list(sys.modules)}
    found: dict[str, str] = {}
    seen: set[str] = set()
    for entry in list(sys.path):
        for name, version, top_level in _requiring_jax(entry):
            if name in seen:
                continue
            seen.add(name)
            if top_level & imported and version:
                found[name] = version
    return dict(sorted(found.items()))


def read_libraries_ahead() -> None:
    """Read now the distributions of each ``sys.path`` folder that require jax, for :func:`imported_libraries`:
    a worker waiting for its request does, and a check's report then reads only the folders its request added
    (a folder is read again where its modification time changed: a distribution installed or removed since).
    Reading them took 0.057 s on the 13-core host (129 distributions), the last of the worker's work before its
    answers' end."""
    import sys

    for entry in list(sys.path):
        _requiring_jax(entry)


def read_libraries_meanwhile() -> None:
    """:func:`read_libraries_ahead` in a thread of its own, once a process: started where a thread is about to
    wait for a compile (which holds no GIL), so that the reading costs the check nothing there; the
    report's :func:`imported_libraries` waits for it. A worker reads them while it waits for its request; where
    the request came first (sent before the worker had loaded jaxlib), it reads them here instead, not on its way
    to the first compile: 0.11 s on the 13-core host (``benchmarks/results/timeline-13cores.txt``)."""
    with _READING_LOCK:
        if _READING:
            return

        def read() -> None:
            with contextlib.suppress(Exception):  # a folder that cannot be read is read again, and said, at the end
                read_libraries_ahead()

        reading = threading.Thread(target=read, name="fieldmem-libraries", daemon=True)
        _READING.append(reading)
        reading.start()


_READING: list[threading.Thread] = []  # the thread read_libraries_meanwhile started (none yet)
_READING_LOCK = threading.Lock()


#: by ``sys.path`` folder: (its modification time, its distributions that require jax as
#: ``(name, version, top-level modules)``, in importlib's order)
_REQUIRING_JAX: dict[str, tuple[int, tuple[tuple[str, str | None, frozenset[str]], ...]]] = {}


def _requiring_jax(entry: str) -> tuple[tuple[str, str | None, frozenset[str]], ...]:
    """The distributions installed in the ``sys.path`` folder ``entry`` that require jax (outside an extra), as
    ``(name, version, top-level modules)``: read once while the folder is unchanged."""
    import os
    from importlib import metadata

    folder = os.path.abspath(entry or os.curdir)  # "" is the working directory, which may change
    try:
        changed = os.stat(folder).st_mtime_ns
    except OSError:  # no such folder (a zip, or gone): nothing installed there that importlib reads as a folder
        changed = -1
    kept = _REQUIRING_JAX.get(folder)
    if kept is not None and kept[0] == changed:
        return kept[1]
    found: list[tuple[str, str | None, frozenset[str]]] = []
    try:
        distributions = list(metadata.distributions(path=[folder]))
    except Exception:  # pragma: no cover - an unreadable path entry
        distributions = []
    for dist in distributions:
        try:
            text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
            if not any("extra ==" not in m.group("rest") for m in _REQUIRES_JAX.finditer(text)):
                continue
            owner = dist.metadata["Name"]
            if not owner:
                continue
            name = re.sub(r"[-_.]+", "-", owner).lower()
            if _NOT_LIBRARIES.match(name):
                continue
            found.append((name, dist.version, frozenset(_top_level(dist))))
        except Exception:  # a broken distribution's metadata: not a library this report can name
            continue
    _REQUIRING_JAX[folder] = (changed, tuple(found))
    return tuple(found)


def _top_level(dist: Any) -> set[str]:
    """The top-level modules ``dist`` installs: its top_level.txt, else the first part of each Python file
    its RECORD lists (as ``importlib.metadata.packages_distributions`` infers them)."""
    declared = (dist.read_text("top_level.txt") or "").split()
    if declared:
        return set(declared)
    return {f.parts[0] if len(f.parts) > 1 else f.with_suffix("").name for f in (dist.files or ()) if f.suffix == ".py"}


#: the distributions that compile for each platform, beside jaxlib (the report names those installed)
_PLUGINS = {
    "tpu": ("libtpu", "libtpu-nightly"),
    "gpu": ("jax-cuda12-plugin", "jax-cuda12-pjrt", "nvidia-cuda-nvcc-cu12", "jax-cuda13-plugin", "jax-cuda13-pjrt"),
    "cuda": ("jax-cuda12-plugin", "jax-cuda12-pjrt", "nvidia-cuda-nvcc-cu12", "jax-cuda13-plugin", "jax-cuda13-pjrt"),
    "rocm": ("jax-rocm60-plugin", "jax-rocm60-pjrt"),
}


def _plugin_versions(platform: str | None) -> dict[str, str]:
    """The versions of ``platform``'s compiler plugins installed here, by distribution name."""
    from importlib import metadata

    found = {}
    for name in _PLUGINS.get(platform or "", ()):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def _deviceless_facts(name: str) -> dict[str, Any]:
    """What a deviceless backend is, for the report's label."""
    from fieldmem.driver.deviceless import DEVICELESS_NOTE, target
    from fieldmem.request.backends import device_memory

    found = target(name)
    memory = device_memory(found.backend)
    return {
        "backend": found.backend.name,
        "platform": found.platform,
        "kind": found.backend.kind,
        "device_kind": found.device_kind,
        "topology": found.backend.topology,
        "chips": len(found.devices),
        "note": DEVICELESS_NOTE[found.platform],
        "device_memory_bytes": memory.bytes if memory is not None else None,
    }
