"""What a user's module sets for jax when it is imported: ``XLA_*`` and ``JAX_*`` variables, ``jax.config.update``.

A script that begins with ``os.environ["XLA_FLAGS"] =
"--xla_force_host_platform_device_count=8"`` (or ``JAX_ENABLE_X64=1``, or
``jax.config.update(...)``) before it uses jax runs with them under
``python``: jax reads its ``JAX_*`` variables when it is imported and XLA's
when its backends start. The worker (:mod:`fieldmem.worker.main`) imports
the first module it checks before jax is imported or started, so what that
module sets is in force as it would be under ``python``, and
:class:`ImportSettings` measures what each import set (against fieldmem's
own environment) and whether a later module's settings are the ones in
force: a module whose settings differ is checked by a fresh worker, where
it is the first.

A module may also replace what jax's public modules hold (``jax.jit = no_donation_jit``): what jax's
public modules (``jax``, ``jax.numpy``, ``jax.lax``...) held right after jax was imported is kept, and
each import's replacements are measured against what was in force before it, like its settings: a module
that replaces something is checked in a worker of its own (its targets with its replacement, every other
module's without it), and the replacement it made where it is not checked is put back at once.

``jax.config.update`` calls are recorded by wrapping jax's ``Config.update``
in the worker as soon as jax is imported, by whom it may be; and jax's
backends start without the accelerator plugins' known noise whoever starts
them (:func:`fieldmem.driver.quiet.quiet_backends_start`: a module may, at its
top, where fieldmem used to start them first). The two jax functions fieldmem
replaces, each tolerated when missing.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import os
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fieldmem.driver.backends import device_count, with_device_count
from fieldmem.driver.quiet import jax_started

__all__ = ["Found", "ImportSettings", "replaced_in_jax", "watched"]

#: the variables a module's settings are read from: jax's own (read when it is imported) and XLA's (read when
#: its backends start: ``XLA_FLAGS``, ``XLA_PYTHON_CLIENT_PREALLOCATE``, ...)
PREFIXES = ("XLA_", "JAX_")
_CPU_DEVICES = "jax_num_cpu_devices"  # jax's own count of CPU devices: it wins over XLA_FLAGS's
_T = TypeVar("_T")


def watched(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that jax and XLA read (:data:`PREFIXES`)."""
    return {name: value for name, value in environ.items() if name.startswith(PREFIXES)}


@dataclass(frozen=True)
class Found:
    """What one import set for jax: the variables it changed (None: removed) and the ``jax.config.update``
    calls it made (name to the value's ``repr``), with fieldmem's own ``--devices`` applied; ``note``: what of
    it fieldmem did not take, in one line."""

    environment: dict[str, str | None] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)
    note: str | None = None
    # what it replaced in jax's public modules: ``jax.jit`` -> what holds it now (``patch.my_jit``)
    replaced: dict[str, str] = field(default_factory=dict)

    def same(self, other: Found) -> bool:
        """Whether jax runs the same under ``other``'s settings as under these: the same settings, and
        neither replaced anything of jax's (a replacement is one module's own)."""
        return (
            self.environment == other.environment
            and self.config == other.config
            and not self.replaced
            and not other.replaced
        )

    def __bool__(self) -> bool:
        return bool(self.environment or self.config or self.note or self.replaced)

    def as_dict(self) -> dict[str, Any]:
        """As the worker sends it (the report's ``ModuleSettings`` less the target)."""
        return {
            "environment": dict(self.environment),
            "config": dict(self.config),
            "note": self.note,
            **({"replaced": dict(self.replaced)} if self.replaced else {}),
        }


class ImportSettings:
    """The jax settings of one worker process: what each import set and which of them are in force.

    :meth:`load` runs a spec's loading. The first one of the process runs before jax starts: what it set
    is in force, and :meth:`load` starts jax with it (fieldmem's ``--devices`` winning). Each later one is
    measured against fieldmem's environment too; where it sets something else (or nothing, where the first
    set something), it is undone and the spec is not checked here: a fresh worker checks it, first.
    """

    def __init__(self) -> None:
        self.in_force: Found | None = None  # None: no import has started jax in this process yet
        self._base: dict[str, str] = {}
        self._devices: int | None = None

    def begin(self, environ: Mapping[str, str], devices: int | None) -> None:
        """A request's environment (fieldmem's, before any module) and its ``--devices`` (None: not given)."""
        self._base = watched(environ)
        self._devices = devices
        _record_config_calls()

    def load(self, load: Callable[[], _T], start: Callable[[], None]) -> tuple[_T, Found, bool]:
        """What ``load`` returned, what it set for jax, and whether its targets are checked in this process.

        ``start`` starts jax's backends: called after the first load, with what it set in force.
        """
        _put(self._base)  # measured against fieldmem's environment: what an earlier import set goes first
        calls: list[tuple[str, Any, Any]] = []
        _recording.append(calls)
        started = jax_started()
        before = replaced_in_jax()
        try:
            value = load()
        finally:
            _recording.pop()
        replaced = _replaced_by_load(before, replaced_in_jax())
        in_force = self.in_force
        started_by_it = in_force is None and not started and jax_started()  # its import started the backends
        found = self._noted(self._found(calls, not started_by_it), calls, started_by_it)
        if replaced:
            found = dataclasses.replace(found, replaced={name: _described(now) for name, (_, now) in replaced.items()})
        if in_force is None:  # the first import of this process: jax starts with what it set
            if self._devices is not None and any(name == _CPU_DEVICES for name, _, _ in calls):
                _update(_CPU_DEVICES, self._devices)
            self.in_force = found
            _put({**self._base, **found.environment})
            start()
            return value, found, True
        _put({**self._base, **in_force.environment})
        if found.same(in_force):
            return value, found, True
        _undo(calls)  # another module's settings are in force here: this one is checked by a fresh worker
        _put_back(replaced)  # and what it replaced in jax holds for its own targets only, there
        return value, found, False

    def _found(self, calls: list[tuple[str, Any, Any]], devices_apply: bool) -> Found:
        now = watched(os.environ)
        environment: dict[str, str | None] = {
            name: now.get(name) for name in sorted({*self._base, *now}) if now.get(name) != self._base.get(name)
        }
        config = {name: repr(value) for name, value, _ in calls}
        if self._devices is not None and devices_apply:  # fieldmem's --devices wins over the module's own count
            environment, config = self._with_devices(environment, config)
        return Found(environment, config)

    def _with_devices(
        self, environment: dict[str, str | None], config: dict[str, str]
    ) -> tuple[dict[str, str | None], dict[str, str]]:
        assert self._devices is not None
        if "XLA_FLAGS" in environment:
            flags = with_device_count(environment["XLA_FLAGS"] or "", self._devices)
            if flags == self._base.get("XLA_FLAGS"):
                del environment["XLA_FLAGS"]
            else:
                environment["XLA_FLAGS"] = flags
        if _CPU_DEVICES in config:
            config[_CPU_DEVICES] = repr(self._devices)
        return environment, config

    def _noted(self, found: Found, calls: list[tuple[str, Any, Any]], started_by_it: bool) -> Found:
        """``found`` with a note where fieldmem's ``--devices`` wins over the module's own count of CPU
        devices, or came too late for it (``started_by_it``: its import started jax's backends)."""
        devices = self._devices
        if devices is None:
            return found
        theirs = [device_count(os.environ.get("XLA_FLAGS", ""))] + [
            int(value) for name, value, _ in calls if name == _CPU_DEVICES and isinstance(value, int)
        ]
        counts = [n for n in theirs if n is not None and n >= 0 and n != devices]
        if not counts:
            return found
        if started_by_it:
            note = f"it started jax at import with its own {counts[-1]} CPU devices, before --devices {devices} could apply"
        else:
            note = f"--devices {devices} wins over its own count of {counts[-1]} CPU devices"
        return Found(found.environment, found.config, note)


def _put(values: Mapping[str, str | None]) -> None:
    """Make the watched variables of this process's environment ``values`` (None or absent: unset)."""
    for name in watched(os.environ):
        if values.get(name) is None:
            del os.environ[name]
    for name, value in values.items():
        if value is not None and os.environ.get(name) != value:
            os.environ[name] = value


# -- what a module replaces in jax's public modules ------------------------------------------------------------

# per public jax module (``jax``, ``jax.numpy``...), what it held once jax was imported: filled by _after_jax
_pristine: dict[str, dict[str, Any]] = {}
_MISSING = object()


def _public_jax_modules() -> dict[str, Any]:
    """The imported modules of jax's public API: ``jax`` and ``jax.*`` with no private part (``jax._src``)."""
    return {
        name: module
        for name, module in list(sys.modules.items())
        if module is not None
        and (name == "jax" or name.startswith("jax."))
        and not any(part.startswith("_") for part in name.split("."))
    }


def _keep_pristine() -> None:
    """Remember what jax's public modules hold now (right after jax was imported): the module attributes
    a user's module may replace (their own names, not a submodule that is imported later)."""
    for name, module in _public_jax_modules().items():
        if name not in _pristine:
            _pristine[name] = {
                attr: value
                for attr, value in vars(module).items()
                if not attr.startswith("__") and not isinstance(value, types.ModuleType)
            }


def replaced_in_jax() -> dict[str, tuple[Any, Any]]:
    """What differs in jax's public modules from what they held when jax was imported: ``jax.jit`` ->
    (the original, what holds it now; :data:`_MISSING` where deleted). Empty before jax is imported."""
    found: dict[str, tuple[Any, Any]] = {}
    for name, held in _pristine.items():
        module = sys.modules.get(name)
        if module is None:
            continue
        now = vars(module)
        for attr, value in held.items():
            current = now.get(attr, _MISSING)
            if current is not value:
                found[f"{name}.{attr}"] = (value, current)
    return found


def _replaced_by_load(
    before: dict[str, tuple[Any, Any]], after: dict[str, tuple[Any, Any]]
) -> dict[str, tuple[Any, Any]]:
    """What one load replaced: each name whose holder changed during it -> (what held it before, now)."""
    changed: dict[str, tuple[Any, Any]] = {}
    for name in {*before, *after}:
        # a name in neither differs from what jax made: in one only, what jax made is its other side
        was = before[name][1] if name in before else after[name][0]
        now = after[name][1] if name in after else before[name][0]
        if was is not now:
            changed[name] = (was, now)
    return changed


def _put_back(replaced: dict[str, tuple[Any, Any]]) -> None:
    """Undo what one load replaced: each name held by what held it before the load."""
    for name, (was, _) in replaced.items():
        module_name, _, attr = name.rpartition(".")
        module = sys.modules.get(module_name)
        if module is None:
            continue
        try:
            if was is _MISSING:
                delattr(module, attr)
            else:
                setattr(module, attr, was)
        except (AttributeError, TypeError):  # a module that refuses it: its targets are checked elsewhere anyway
            pass


def _described(value: Any) -> str:
    """What now holds a replaced name, in a few words: ``patch.my_jit``, ``nothing`` (deleted)."""
    if value is _MISSING:
        return "nothing (deleted)"
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        return f"{module}.{qualname}"
    return f"a {type(value).__name__}"


# -- jax.config.update, recorded -------------------------------------------------------------------------------

# the lists that record calls now (one per load being measured): (name, value, value before)
_recording: list[list[tuple[str, Any, Any]]] = []
_NOT_READ = object()
_hooked = False


def _record_config_calls() -> None:
    """From now on, record each ``jax.config.update`` call into the lists of :data:`_recording`: jax's
    ``Config.update`` is wrapped now if jax is imported, else as soon as it is."""
    global _hooked
    if _hooked:
        return
    _hooked = True
    jax = sys.modules.get("jax")
    if jax is not None and hasattr(jax, "config"):
        _after_jax(jax)
    else:
        sys.meta_path.insert(0, _AfterJax())


def _after_jax(jax: Any) -> None:
    """Once jax is imported: its ``jax.config.update`` calls recorded, its backends' start quiet (whoever
    starts them: the module may, at import)."""
    from fieldmem.driver.quiet import quiet_backends_start

    _keep_pristine()  # before anything else runs: what jax's public modules hold as jax made them
    config = getattr(jax, "config", None)
    if config is not None:
        _wrap(type(config))
    quiet_backends_start()


class _AfterJax(importlib.abc.MetaPathFinder):
    """Calls :func:`_after_jax` once the ``jax`` package has been executed (by whichever import comes first)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "jax":
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        run = getattr(loader, "exec_module", None)
        if run is None:  # pragma: no cover - an unusual loader: nothing recorded
            return spec

        def exec_module(module: Any) -> None:
            if self in sys.meta_path:  # jax is being imported: once is enough
                sys.meta_path.remove(self)
            run(module)
            _after_jax(module)

        loader.exec_module = exec_module
        return spec


def _wrap(config_type: type) -> None:
    original = getattr(config_type, "update", None)
    if original is None or getattr(original, "_fieldmem_recorded", False):
        return

    def update(self: Any, name: str, val: Any) -> Any:
        if _recording:
            try:
                before = self.values.get(name, _NOT_READ)
            except Exception:  # another jax layout
                before = _NOT_READ
            for calls in _recording:  # recorded before the call: one that raises (too late) counts too
                calls.append((name, val, before))
        return original(self, name, val)

    update._fieldmem_recorded = True  # type: ignore[attr-defined]
    update._fieldmem_original = original  # type: ignore[attr-defined]
    config_type.update = update  # type: ignore[attr-defined]


def _update(name: str, value: Any) -> None:
    """``jax.config.update``, not recorded."""
    jax = sys.modules.get("jax")
    if jax is None:
        return
    config = jax.config
    original = getattr(type(config).update, "_fieldmem_original", type(config).update)
    try:
        original(config, name, value)
    except Exception:  # too late for it (a backend started): what is in force stays
        pass


def _undo(calls: list[tuple[str, Any, Any]]) -> None:
    """Put back what ``calls`` changed, last first."""
    for name, _, before in reversed(calls):
        if before is not _NOT_READ:
            _update(name, before)
