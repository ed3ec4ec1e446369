"""``[tool.fieldmem]`` in ``pyproject.toml``: what a bare ``fieldmem check`` checks, and how.

The table is read once into a frozen :class:`Config`, every value parsed by
the same parsers as the command line (sizes, donation, shapes, tolerances),
so a mistake in the file is reported before anything compiles, as one line
naming the file, the key and what would work. Unknown keys are errors (with
a did-you-mean), never ignored. Nothing here prints or imports jax.

Paths in the table (file targets such as ``src/model.py:update``, a file
``args`` factory, ``baseline``) are relative to the folder holding the
``pyproject.toml``; they are rewritten relative to the current directory, so
running from that folder (as CI does) keeps target names exactly as written.
Documented in ``docs/configuration.md``.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fieldmem.model.errors import FieldmemError, OptionError, listing, quoted
from fieldmem.model.files import not_a_file
from fieldmem.model.units import parse_bytes
from fieldmem.request.definitions import display_path
from fieldmem.request.fit import parse_fit_tables
from fieldmem.request.loading import is_file_spec
from fieldmem.request.option_table import OPTIONS, config_keys
from fieldmem.request.options import (
    FORMATS,
    parse_backends,
    parse_expect,
    parse_jax_versions,
    parse_new,
)
from fieldmem.request.spec import DonateSpec, StaticSpec, parse_shapes
from fieldmem.request.target import TargetOptions
from fieldmem.request.tolerance import Tolerances

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["KEYS", "TARGET_KEYS", "Config", "ConfigError", "TargetConfig", "find_config", "load_config"]

#: key -> what it holds, for messages: the keys of [tool.fieldmem], then those of a [[tool.fieldmem.target]]
#: table, as the option table declares them (fieldmem.request.option_table)
KEYS: dict[str, str] = config_keys()
TARGET_KEYS = tuple(config_keys(per_target=True))


class ConfigError(FieldmemError):
    """``[tool.fieldmem]`` cannot be read or holds a value fieldmem cannot use. Exit code 2."""

    kind = "config"


@dataclass(frozen=True)
class TargetConfig:
    """A ``[[tool.fieldmem.target]]`` table: one target and its own options."""

    target: str
    options: TargetOptions


@dataclass(frozen=True)
class Config:
    """The parsed ``[tool.fieldmem]`` table; ``None`` (or empty) where a key is absent."""

    path: Path | None = None
    targets: tuple[str, ...] = ()
    options: TargetOptions = TargetOptions()
    per_target: tuple[TargetConfig, ...] = ()
    min_bytes: int | None = None
    tolerance: Tolerances | None = None
    tolerance_text: str | None = None
    baseline: str | None = None
    format: str | None = None
    jobs: int | None = None
    cache_dir: str | None = None
    fast_compile: bool | None = None
    backends: tuple[str, ...] | None = None  # each target on each, as --backend cpu,tpu:v5e
    jax: tuple[str, ...] | None = None  # each target under each jax release, as --jax 0.9.2,0.10.2
    fits: tuple[Any, ...] = ()  # the searches of a bare fieldmem fit ([[tool.fieldmem.fit]]: FitTable)
    # every key the table gave, by option name, as TOML read it (of the types the option table allows); the
    # fields above hold the parsed values of the keys fieldmem reads itself
    values: Mapping[str, Any] = field(default_factory=dict)

    @property
    def all_targets(self) -> tuple[str, ...]:
        """``targets``, then each per-target table's target not already among them."""
        extra = [t.target for t in self.per_target if t.target not in self.targets]
        return (*self.targets, *extra)

    def target_options(
        self, command_line: TargetOptions, specs: Iterable[str]
    ) -> tuple[TargetOptions, dict[str, TargetOptions]]:
        """Options for the whole run and for each spec with a table, stacked strongest last.

        The command line beats a target's table, which beats ``[tool.fieldmem]``,
        which beats what the registered case says.
        """
        run = self.options.overridden_by(command_line)
        tables = {t.target: t.options for t in self.per_target}
        per_target = {
            spec: self.options.overridden_by(tables[spec]).overridden_by(command_line)
            for spec in specs
            if spec in tables
        }
        return run, per_target


def find_config(start: str | os.PathLike[str] | None = None) -> Path | None:
    """The nearest ``pyproject.toml`` with a ``[tool.fieldmem]`` table, from ``start`` upward.

    The search stops at the repository root (a folder holding ``.git``), so a
    project never picks up the table of a folder above it.

    Raises:
        ConfigError: a ``pyproject.toml`` met on the way is not valid TOML.
    """
    folder = Path(start if start is not None else os.getcwd()).resolve()
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file() and "fieldmem" in _read_toml(pyproject).get("tool", {}):
            return pyproject
        if (candidate / ".git").exists():
            return None
    return None


def load_config(path: str | os.PathLike[str] | None = None, *, start: str | os.PathLike[str] | None = None) -> Config:
    """Read ``[tool.fieldmem]`` from ``path``, or from the file :func:`find_config` finds.

    With no ``path`` and no such file, an empty :class:`Config` (nothing
    configured). A ``path`` given must exist and hold the table.

    Raises:
        ConfigError: the file is missing, not TOML, lacks the table (when
            named), or holds an unknown key or a bad value.
    """
    if path is None:
        found = find_config(start)
        if found is None:
            return Config()
        file = found
    else:
        file = Path(path)
        if file.is_dir():
            file = file / "pyproject.toml"
        if not file.is_file():
            where = repr(os.fspath(path)) if file == Path(path) else f"{os.fspath(path)!r}: {str(file)!r}"
            raise ConfigError(f"--config {where} {_not_a_file(file)}: name a pyproject.toml")
    data = _read_toml(file)
    tool = data.get("tool", {})
    table = tool.get("fieldmem") if isinstance(tool, dict) else None
    if table is None:
        raise ConfigError(f"{_shown(file)} has no [tool.fieldmem] table: add one, or leave --config out")
    if not isinstance(table, dict):
        raise ConfigError(f"{_shown(file)}: tool.fieldmem must be a table ([tool.fieldmem])")
    return _parse(table, file)


def _not_a_file(file: Path) -> str:
    """What ``file`` is where it is no regular file to read: ``does not exist``, ``is a FIFO, not a file``,
    ``is a symbolic link loop``... (a FIFO is never opened: it would wait for a writer)."""
    try:
        os.lstat(file)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    try:
        os.stat(file)
    except FileNotFoundError:
        return f"is a symbolic link to {os.readlink(file)!r}, which does not exist"
    except OSError as exc:  # ELOOP
        return f"is a symbolic link that cannot be followed ({exc.strerror or exc})"
    kind = not_a_file(file, through_link=True)
    return f"is {kind}, not a file" if kind is not None else "is not a regular file"


def _shown(file: Path) -> str:
    return display_path(str(file))


def _read_toml(file: Path) -> dict[str, Any]:
    try:
        with open(file, "rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{_shown(file)} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{_shown(file)} is not valid TOML: byte {exc.start} is not UTF-8 text (TOML files are UTF-8)"
        ) from None
    except RecursionError:
        raise ConfigError(f"{_shown(file)} is nested too deeply to read (arrays or tables inside each other)") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {_shown(file)}: {exc.strerror or exc}") from None


# ----------------------------------------------------------------------------
# Parsing the table


class _Table:
    """One TOML table being read: says where a bad value is (file, table, key)."""

    def __init__(self, data: Mapping[str, Any], file: Path, name: str, allowed: Iterable[str]) -> None:
        self.data, self.file, self.name = data, file, name
        allowed = tuple(allowed)
        for key in data:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.7)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ConfigError(
                    f"{self.where()} has an unknown key {quoted(key)}: {hint}known keys: {listing(allowed, len(allowed))}"
                )

    def where(self, key: str | None = None) -> str:
        return f"{_shown(self.file)}: {self.name}" + (f" {key}" if key else "")

    def wrong_type(self, key: str, value: Any) -> ConfigError:
        return ConfigError(f"{self.where(key)} = {value!r} is {_type_name(value)}: it should be {KEYS[key]}")

    def get(self, key: str, *types: type) -> Any:
        """The value of ``key`` (None when absent), refusing a value of another TOML type."""
        value = self.data.get(key)
        if value is None:
            return None
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise self.wrong_type(key, value)
        return value

    def parsed(self, key: str, parse: Any, *types: type) -> Any:
        """``parse(value, label)`` with the parser's message re-worded to name the file and key."""
        value = self.get(key, *types)
        if value is None:
            return None
        try:
            return parse(value, self.where(key))
        except OptionError as exc:
            raise ConfigError(exc.message) from None


def _type_name(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "an array", dict: "a table"}
    return names.get(type(value), f"a {type(value).__name__}")


def _rebase(path: str, root: Path) -> str:
    """A config-relative path, relative to the current directory (unchanged when run from ``root``)."""
    if os.path.isabs(path):
        return path
    return os.path.relpath(root / path)


def _rebase_spec(spec: str, root: Path) -> str:
    """``src/model.py:update`` relative to ``root`` -> relative to the current directory; modules as given."""
    module_part, sep, attr = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if not is_file_spec(module_part):
        return spec
    return f"{_rebase(module_part, root)}{sep}{attr}"


def _parse_shapes(text: str, label: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """``parse_shapes``, its messages naming the config key instead of ``--shapes``."""
    try:
        return parse_shapes(text)
    except OptionError as exc:
        raise OptionError(f"{label} {exc.message.removeprefix('--shapes ')}") from None


def _footprint_budget(table: _Table) -> int | None:
    """``max-footprint``, or ``max-peak`` (its older name): the budget of the donated footprint."""
    footprint = table.parsed("max-footprint", parse_bytes, str, int)
    older = table.parsed("max-peak", parse_bytes, str, int)
    if footprint is not None and older is not None:
        raise ConfigError(
            f"{table.where('max-peak')}: max-footprint and max-peak are one budget (max-peak is its older name): "
            "keep max-footprint"
        )
    return footprint if footprint is not None else older


def _target_options(table: _Table, root: Path) -> TargetOptions:
    args = table.get("args", str)
    shapes = table.parsed("shapes", _parse_shapes, str)
    if args is not None and shapes is not None:
        raise ConfigError(f"{table.where()} gives both args and shapes: keep one of them")
    expect = table.parsed("expect", lambda value, where: parse_expect(value, f"{where} ="), str)
    return TargetOptions(
        args=_rebase_spec(args, root) if args is not None else None,
        shapes=shapes,
        donate=table.parsed("donate", DonateSpec.parse, str, int, list),
        static=table.parsed("static", StaticSpec.parse, str, int, list),
        expect=expect,
        max_peak=_footprint_budget(table),
        max_live_peak=table.parsed("max-live-peak", parse_bytes, str, int),
        new=table.parsed("new", lambda value, where: parse_new(value, f"{where} ="), str, list),
    )


def _parse(data: Mapping[str, Any], file: Path) -> Config:
    root = file.resolve().parent
    table = _Table(data, file, "[tool.fieldmem]", KEYS)
    targets = table.get("targets", list)
    if targets is not None and not all(isinstance(t, str) and t.strip() for t in targets):
        raise ConfigError(
            f"{table.where('targets')} = {targets!r}: every target must be a non-empty string, "
            'e.g. targets = ["pkg.model:update"]'
        )
    output_format = table.get("format", str)
    if output_format is not None and output_format not in FORMATS:
        raise ConfigError(f"{table.where('format')} = {output_format!r} is not known: use one of {', '.join(FORMATS)}")
    jobs = table.get("jobs", int)
    if jobs is not None and jobs < 1:
        raise ConfigError(f"{table.where('jobs')} = {jobs} must be at least 1")
    tolerance_text = table.get("tolerance", str)
    baseline = table.get("baseline", str)
    cache_dir = table.get("cache-dir", str)
    return Config(
        path=file,
        targets=tuple(_rebase_spec(t.strip(), root) for t in targets or ()),
        options=_target_options(table, root),
        per_target=_per_target(table, root),
        min_bytes=table.parsed("min-bytes", parse_bytes, str, int),
        tolerance=table.parsed("tolerance", Tolerances.parse, str),
        tolerance_text=tolerance_text,
        baseline=_rebase(baseline, root) if baseline else None,
        format=output_format,
        jobs=jobs,
        cache_dir=_rebase(cache_dir, root) if cache_dir else None,
        fast_compile=table.get("fast-compile", bool),
        backends=table.parsed("backends", lambda value, where: parse_backends(value, f"{where} ="), str, list),
        jax=table.parsed("jax", lambda value, where: parse_jax_versions(value, f"{where} ="), str, list),
        fits=_fit_tables(table, root),
        values=_values(table),
    )


def _values(table: _Table) -> dict[str, Any]:
    """Every key of the option table in ``table``, by option name (an older key under the option's), each of
    a TOML type the table allows."""
    values: dict[str, Any] = {}
    for row in OPTIONS:
        for key in (row.config, row.config_older):
            if key is not None and key in table.data:
                values[row.name] = table.get(key, *row.config_types) if row.config_types else table.data[key]
    return values


def _fit_tables(table: _Table, root: Path) -> tuple[Any, ...]:
    """``[[tool.fieldmem.fit]]`` (or one ``[tool.fieldmem.fit]`` table): parsed by :mod:`fieldmem.request.fit`."""
    value = table.data.get("fit")
    if value is None:
        return ()

    try:
        return parse_fit_tables(
            value, _shown(table.file), lambda spec: _rebase_spec(spec, root), lambda path: _rebase(path, root)
        )
    except OptionError as exc:
        raise ConfigError(exc.message) from None


def _per_target(table: _Table, root: Path) -> tuple[TargetConfig, ...]:
    tables = table.get("target", list)
    if tables is None:
        return ()
    configs: list[TargetConfig] = []
    for n, item in enumerate(tables):
        if not isinstance(item, dict):
            raise table.wrong_type("target", tables)
        inner = _Table(item, table.file, f"[[tool.fieldmem.target]] #{n + 1}", TARGET_KEYS)
        spec = inner.get("target", str)
        if spec is None or not spec.strip():
            raise ConfigError(f'{inner.where()} has no target: add target = "pkg.model:update"')
        spec = _rebase_spec(spec.strip(), root)
        if any(c.target == spec for c in configs):
            raise ConfigError(f"{inner.where()}: target {spec!r} has a table already: merge the two")
        configs.append(TargetConfig(target=spec, options=_target_options(inner, root)))
    return tuple(configs)
