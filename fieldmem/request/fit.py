"""What one ``fieldmem fit`` run is asked to do: ``--vary``, ``--at-least``, ``--budget`` and the rest, from
the command line, ``[[tool.fieldmem.fit]]`` tables and the Python API, as one frozen :class:`FitRequest`.

A knob is a keyword parameter of the step's args factory: ``batch=1..4096`` (every integer from 1 to 4096),
``batch=8..4096:8`` (every 8th from 8), ``remat=none,dots,full`` (a list, tried in the order given) or
``seq=1024`` (one value). A list value reads as an integer (``256``), a number (``0.5``), ``true`` or
``false``, or else as the text it is (``dots``). At most one knob is a range: the search finds its largest
value that fits for each combination of the listed ones. ``--at-least batch=256`` is a floor on that
largest value, so it names the range knob.

Every mistake is an :class:`~fieldmem.model.errors.OptionError` (a config's, a
:class:`~fieldmem.request.config.ConfigError`) in one line, raised before anything compiles. Nothing here
imports jax, prints or reads a file other than the config.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fieldmem.model.errors import OptionError, quoted
from fieldmem.model.fit_report import Knob, KnobValue, knob_text
from fieldmem.model.units import parse_bytes
from fieldmem.model.versions import check_supported
from fieldmem.request.options import MIN_BYTES, TPU_OOM_FIGURES_ENV, parse_backends, parse_jax_versions
from fieldmem.request.spec import DonateSpec, StaticSpec

__all__ = [
    "FIT_FORMATS",
    "FIT_KEYS",
    "MAX_RANGE",
    "TOP_LINES",
    "TPU_OOM_FIGURES_ENV",
    "FitFlags",
    "FitPlan",
    "FitRequest",
    "FitTable",
    "build_fit_request",
    "fit_plan",
    "parse_budget",
    "parse_floor",
    "parse_floors",
    "parse_knob",
    "parse_knob_value",
    "parse_knobs",
]

#: The output formats of ``fieldmem fit --format``: the frontier as a table, a ``fieldmem.fit/1`` document,
#: a Markdown summary, or an SVG picture of each search's footprint against the searched knob.
FIT_FORMATS = ("table", "json", "markdown", "svg")

#: How many lines at the live peak each point keeps (``--top``), and each change of peak names.
TOP_LINES = 5

#: The most values a range may hold: 2**62 (bisection takes at most 64 compiles per row).
MAX_RANGE = 2**62

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RANGE = re.compile(r"^\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*(?::\s*(\d+)\s*)?$")
_INTEGER = re.compile(r"^[+-]?\d+$")
_NUMBER = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


def parse_knob_value(text: str) -> KnobValue:
    """``"256"`` -> 256, ``"0.5"`` -> 0.5, ``"true"``/``"false"`` -> a bool, anything else the text itself."""
    stripped = text.strip()
    if _INTEGER.match(stripped):
        return int(stripped)
    if _NUMBER.match(stripped):
        return float(stripped)
    if stripped in ("true", "false"):
        return stripped == "true"
    return stripped


def _usage(option: str) -> str:
    return (
        f"write {option} NAME=LOW..HIGH (every integer, e.g. batch=1..4096), NAME=LOW..HIGH:STEP "
        "(batch=8..4096:8) or NAME=A,B,C (remat=none,dots,full)"
    )


def parse_knob(text: str, option: str = "--vary") -> Knob:
    """One ``--vary`` value as a :class:`~fieldmem.model.fit_report.Knob`.

    Raises:
        OptionError: not ``NAME=RANGE`` or ``NAME=LIST``, a name that is not a Python identifier, an empty
            or reversed range, a step below 1, an empty list item or a value listed twice.
    """
    name, sep, spec = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise OptionError(f"{option} {quoted(text)}: {_usage(option)}")
    if not _NAME.match(name):
        raise OptionError(
            f"{option} {quoted(text)}: {quoted(name)} is not a keyword parameter name: the args factory's "
            "parameters are Python names (batch, seq_len, remat)"
        )
    found = _RANGE.match(spec)
    if found is not None:
        low, high = int(found.group(1)), int(found.group(2))
        step = int(found.group(3)) if found.group(3) is not None else 1
        if step < 1:
            raise OptionError(f"{option} {quoted(text)}: the step must be at least 1")
        if high < low:
            raise OptionError(f"{option} {quoted(text)}: the range ends below its start: write LOW..HIGH")
        if (high - low) // step + 1 > MAX_RANGE:
            raise OptionError(f"{option} {quoted(text)}: the range holds more than 2**62 values")
        high = low + (high - low) // step * step  # the last value the steps reach
        return Knob(name, "range", low=low, high=high, step=step, text=f"{name}={spec.strip()}")
    if ".." in spec:
        raise OptionError(f"{option} {quoted(text)}: a range is two integers, LOW..HIGH[:STEP]; {_usage(option)}")
    items = [item.strip() for item in spec.split(",")]
    if not spec.strip() or any(not item for item in items):
        raise OptionError(f"{option} {quoted(text)}: an empty value: {_usage(option)}")
    values = tuple(parse_knob_value(item) for item in items)
    return Knob(name, "list", values=_distinct(values, option, text), text=f"{name}={spec.strip()}")


def _distinct(values: tuple[KnobValue, ...], option: str, text: str) -> tuple[KnobValue, ...]:
    seen: list[tuple[type, KnobValue]] = []
    for value in values:
        if (type(value), value) in seen:
            raise OptionError(f"{option} {quoted(text)}: {quoted(knob_text(value))} is listed twice")
        seen.append((type(value), value))
    return values


def _knob_from_value(name: str, value: Any, option: str) -> Knob:
    """A knob the Python API or a config table gives as a value: a ``range``, a list, a string, a scalar."""
    if isinstance(value, range):
        if value.step < 1 or len(value) == 0:
            raise OptionError(f"{option}{name}={value!r}: give an increasing, non-empty range")
        return parse_knob(f"{name}={value.start}..{value[-1]}:{value.step}", option)
    if isinstance(value, str):
        return parse_knob(f"{name}={value}", option)
    if isinstance(value, (list, tuple)):
        if not value or not all(isinstance(v, (bool, int, float, str)) for v in value):
            raise OptionError(
                f"{option}{name}={value!r}: list the values as integers, numbers, booleans or text, e.g. "
                '["none", "dots", "full"]'
            )
        values = tuple(v.strip() if isinstance(v, str) else v for v in value)
        if any(v == "" for v in values):
            raise OptionError(f"{option}{name}: an empty value")
        return Knob(
            name, "list", values=_distinct(values, option, name), text=f"{name}={','.join(map(knob_text, values))}"
        )
    if isinstance(value, (bool, int, float)):
        return Knob(name, "list", values=(value,), text=f"{name}={knob_text(value)}")
    raise OptionError(
        f"{option}{name}={value!r}: give a range ('1..4096', range(1, 4097)), a list of values or one value"
    )


def parse_knobs(given: Iterable[str] | Mapping[str, Any], option: str = "--vary") -> tuple[Knob, ...]:
    """Every knob of ``--vary`` (strings ``NAME=SPEC``) or of a mapping (``vary=`` in Python, a config
    table), in order.

    Raises:
        OptionError: a knob that does not parse, a name given twice, or more than one range.
    """
    if isinstance(given, Mapping):
        glue = option if option.endswith(("=", " ")) else f"{option} "
        knobs = [_knob_from_value(str(name), value, glue) for name, value in given.items()]
    else:
        knobs = [parse_knob(text, option) for text in given]
    names = [k.name for k in knobs]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise OptionError(f"{option}: {repeated[0]} is varied twice: give each knob once")
    ranges = [k for k in knobs if k.kind == "range" and k.count > 1]
    if len(ranges) > 1:
        other = ranges[1]
        raise OptionError(
            f"{option}: {ranges[0].name} and {other.name} are both ranges: the search bisects one; list the "
            f"values of the other ({other.name}={other.low},{other.high})"
        )
    return tuple(
        k if k.kind != "range" or k.count > 1 else Knob(k.name, "list", values=(k.low or 0,), text=k.text)
        for k in knobs
    )


def parse_floor(text: str, option: str = "--at-least") -> tuple[str, int]:
    """``batch=256`` -> ``("batch", 256)``.

    Raises:
        OptionError: not ``NAME=INTEGER``.
    """
    name, sep, value = text.partition("=")
    if not sep or not _NAME.match(name.strip()) or not _INTEGER.match(value.strip()):
        raise OptionError(f"{option} {quoted(text)}: write {option} NAME=VALUE with an integer, e.g. batch=256")
    return name.strip(), int(value.strip())


def parse_floors(given: Iterable[str] | Mapping[str, Any], option: str = "--at-least") -> tuple[tuple[str, int], ...]:
    """Every floor of ``--at-least`` (strings) or a mapping (``at_least=`` in Python, a config table).

    Raises:
        OptionError: a floor that is not an integer, or a knob given two floors.
    """
    if isinstance(given, Mapping):
        floors = []
        for name, value in given.items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(f"{option}{name}={value!r}: the floor is an integer, e.g. batch=256")
            floors.append((str(name), value))
    else:
        floors = [parse_floor(text, option) for text in given]
    names = [name for name, _ in floors]
    if len(set(names)) != len(names):
        raise OptionError(f"{option}: a knob is given two floors")
    return tuple(floors)


def parse_budget(value: object, option: str = "--budget") -> int | None:
    """``--budget N``: at least 1 compile.

    Raises:
        OptionError: not a whole number of at least 1.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OptionError(f"{option} {value!r}: give the most compiles the search may use, at least 1")
    return value


@dataclass(frozen=True)
class FitPlan:
    """One search, every value checked: the target and its factory, the knobs and what gates them.

    ``max_peak``: a memory budget per device the footprint must also fit (``--max-peak``/``--max-footprint``);
    on a backend whose device memory is not known (the CPU), it is the only one. ``donate``, ``static``:
    as ``fieldmem check`` takes them (None: the step's own). ``suggest``: compile once at the factory's
    defaults with ``--suggest`` first, and search with the donation it verified.
    """

    target: str
    knobs: tuple[Knob, ...]
    args: str | None = None
    floors: tuple[tuple[str, int], ...] = ()
    budget: int | None = None
    expect_fits: bool = False
    max_peak: int | None = None
    donate: DonateSpec | None = None
    static: StaticSpec | None = None
    suggest: bool = False
    top: int = TOP_LINES

    @property
    def searched(self) -> Knob | None:
        """The range knob, whose largest value that fits each row finds (None: every knob is a list)."""
        return next((k for k in self.knobs if k.kind == "range"), None)

    @property
    def listed(self) -> tuple[Knob, ...]:
        return tuple(k for k in self.knobs if k.kind != "range")


def fit_plan(
    target: str,
    knobs: tuple[Knob, ...],
    *,
    args: str | None = None,
    floors: tuple[tuple[str, int], ...] = (),
    budget: int | None = None,
    expect: str | None = None,
    max_peak: int | None = None,
    donate: DonateSpec | None = None,
    static: StaticSpec | None = None,
    suggest: bool = False,
    top: int = TOP_LINES,
    where: str = "",
) -> FitPlan:
    """The :class:`FitPlan` of these values, checked against each other (``where`` prefixes messages: a
    config table's name).

    Raises:
        OptionError: no knob, a floor on a knob that is not the range, a floor the range cannot reach, an
            ``expect`` other than ``fits``, or a negative ``top``.
    """
    lead = f"{where}: " if where else ""
    if not knobs:
        raise OptionError(
            f"{lead}nothing to vary: name the args factory's keyword parameters to search, e.g. "
            "--vary batch=1..4096 --vary remat=none,dots,full"
        )
    searched = next((k for k in knobs if k.kind == "range"), None)
    for name, floor in floors:
        if searched is None or name != searched.name:
            what = f"the range knob is {searched.name}" if searched is not None else "no knob is a range"
            raise OptionError(
                f"{lead}--at-least {name}={floor}: a floor is on the largest value of the searched range that "
                f"fits, and {what}"
            )
        assert searched.low is not None and searched.high is not None
        if floor > searched.high:
            raise OptionError(
                f"{lead}--at-least {name}={floor} is above the range {searched.describe()}: no search can meet it"
            )
    if expect not in (None, "fits", "any"):
        raise OptionError(
            f"{lead}--expect {expect!r}: fieldmem fit expects fits (the step fits at the factory's own defaults) or any"
        )
    if top < 0:
        raise OptionError(f"{lead}--top {top} must be 0 or more: the lines kept at each point's peak")
    return FitPlan(
        target=target,
        knobs=knobs,
        args=args,
        floors=floors,
        budget=budget,
        expect_fits=expect == "fits",
        max_peak=max_peak,
        donate=donate,
        static=static,
        suggest=suggest,
        top=top,
    )


# ----------------------------------------------------------------------------
# [[tool.fieldmem.fit]]

#: The keys of a ``[[tool.fieldmem.fit]]`` table, with what each holds (for messages).
FIT_KEYS: dict[str, str] = {
    "target": 'the step, e.g. "pkg.train:step"',
    "args": 'its args factory, e.g. "pkg.train:make_args"',
    "vary": 'the knobs: a table, e.g. {batch = "1..4096", remat = ["none", "dots", "full"]}, or a list of '
    '"NAME=SPEC" strings',
    "at-least": "floors on the searched knob, e.g. {batch = 256}",
    "budget": "the most compiles a search may use, at least 1",
    "expect": '"fits" (the step fits at the factory\'s own defaults) or "any"',
    "backends": 'backends to search on, e.g. ["tpu:v5e", "gpu:h100"]',
    "max-peak": 'a memory budget per device, e.g. "12GiB"',
    "donate": '"all", "none", argument numbers or names',
    "static": "argument numbers or names",
    "suggest": "true or false: search with the donation --suggest verifies",
    "baseline": 'the fit baseline file, e.g. "fieldmem-fit.json"',
}


@dataclass(frozen=True)
class FitTable:
    """One ``[[tool.fieldmem.fit]]`` table, parsed (paths already relative to the current directory)."""

    target: str
    where: str
    args: str | None = None
    knobs: tuple[Knob, ...] = ()
    floors: tuple[tuple[str, int], ...] = ()
    budget: int | None = None
    expect: str | None = None
    backends: tuple[str, ...] | None = None
    max_peak: int | None = None
    donate: DonateSpec | None = None
    static: StaticSpec | None = None
    suggest: bool | None = None
    baseline: str | None = None


def parse_fit_tables(value: Any, where: str, rebase_spec: Any, rebase: Any) -> tuple[FitTable, ...]:
    """The ``fit`` key of ``[tool.fieldmem]``: one table or an array of tables. ``rebase_spec``/``rebase``
    make a config-relative target or file path relative to the current directory.

    Raises:
        OptionError: an unknown key, a value of the wrong type or one that does not parse (the config
            turns it into its own error).
    """
    import difflib

    tables = [value] if isinstance(value, dict) else value
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise OptionError(f"{where} fit should be a table ([tool.fieldmem.fit]) or tables ([[tool.fieldmem.fit]])")
    found: list[FitTable] = []
    for n, table in enumerate(tables):
        name = "[tool.fieldmem.fit]" if isinstance(value, dict) else f"[[tool.fieldmem.fit]] #{n + 1}"
        here = f"{where} {name}"
        for key in table:
            if key not in FIT_KEYS:
                close = difflib.get_close_matches(key, list(FIT_KEYS), n=1, cutoff=0.7)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise OptionError(f"{here} has an unknown key {quoted(key)}: {hint}known keys: {', '.join(FIT_KEYS)}")

        def get(key: str, *types: type, table: dict[str, Any] = table, here: str = here) -> Any:
            item = table.get(key)
            if item is None:
                return None
            if (isinstance(item, bool) and bool not in types) or not isinstance(item, types):
                raise OptionError(f"{here} {key} = {item!r}: it should be {FIT_KEYS[key]}")
            return item

        target = get("target", str)
        if target is None or not target.strip():
            raise OptionError(f'{here} has no target: add target = "pkg.train:step"')
        vary = get("vary", dict, list)
        if vary is not None and isinstance(vary, list) and not all(isinstance(v, str) for v in vary):
            raise OptionError(f"{here} vary = {vary!r}: it should be {FIT_KEYS['vary']}")
        floors = get("at-least", dict)
        args = get("args", str)
        budget = get("budget", int)
        max_peak = get("max-peak", str, int)
        donate = get("donate", str, int, list)
        static = get("static", str, int, list)
        backends = get("backends", str, list)
        baseline = get("baseline", str)
        found.append(
            FitTable(
                target=rebase_spec(target.strip()),
                where=here,
                args=rebase_spec(args.strip()) if args is not None else None,
                knobs=parse_knobs(vary, f"{here} vary") if vary is not None else (),
                floors=parse_floors(floors, f"{here} at-least ") if floors is not None else (),
                budget=parse_budget(budget, f"{here} budget =") if budget is not None else None,
                expect=get("expect", str),
                backends=parse_backends(backends, f"{here} backends =") if backends is not None else None,
                max_peak=parse_bytes(max_peak, f"{here} max-peak") if max_peak is not None else None,
                donate=DonateSpec.parse(donate, f"{here} donate") if donate is not None else None,
                static=StaticSpec.parse(static, f"{here} static") if static is not None else None,
                suggest=get("suggest", bool),
                baseline=rebase(baseline) if baseline else None,
            )
        )
    targets = [t.target for t in found]
    repeated = sorted({t for t in targets if targets.count(t) > 1})
    if repeated:
        raise OptionError(f"{where}: {repeated[0]} has two [[tool.fieldmem.fit]] tables: merge them")
    return tuple(found)


# ----------------------------------------------------------------------------
# The command line over the config


@dataclass(frozen=True)
class FitFlags:
    """The command line of ``fieldmem fit`` as typed: None (or empty, False) where not given."""

    target: str | None = None
    args: str | None = None
    vary: tuple[str, ...] = ()
    at_least: tuple[str, ...] = ()
    budget: int | None = None
    expect: str | None = None
    backend: str | None = None
    max_peak: str | None = None
    donate: str | None = None
    static: str | None = None
    suggest: bool = False
    top: int | None = None
    min_bytes: str | None = None
    output_format: str | None = None
    output: Path | None = None
    verbose: bool = False
    baseline: Path | None = None
    no_baseline: bool = False
    save_baseline: Path | None = None
    jax: str | None = None
    python: Path | None = None
    cache_dir: str | None = None
    no_cache: bool = False
    jobs: int | None = None


@dataclass(frozen=True)
class FitRequest:
    """Everything one ``fieldmem fit`` run needs: a plan per target, each searched on each backend."""

    plans: tuple[FitPlan, ...]
    backends: tuple[str | None, ...]
    min_bytes: int
    output_format: str = "table"
    output: Path | None = None
    verbose: bool = False
    baseline: Path | str | None = None
    save_baseline: Path | None = None
    jax_versions: tuple[str, ...] | None = None
    python: Path | None = None
    cache_dir: str | None = None
    default_cache: bool = True
    jobs: int | None = None
    # the backends the plans' config tables name, where they name their own (a plan index -> backends)
    plan_backends: Mapping[int, tuple[str, ...]] = field(default_factory=dict)


def build_fit_request(flags: FitFlags, tables: Sequence[FitTable], config_baseline: str | None = None) -> FitRequest:
    """``flags`` over the config's ``[[tool.fieldmem.fit]]`` ``tables``: the command line wins.

    With a target on the command line, its table (if any) gives what the command line does not; without
    one, every table is a search.

    Raises:
        OptionError: a value that does not parse, two that contradict each other, or nothing to search.
    """
    if flags.output_format is not None and flags.output_format not in FIT_FORMATS:
        raise OptionError(f"--format {flags.output_format!r} is not known here: use one of {', '.join(FIT_FORMATS)}")
    output_format = flags.output_format or "table"
    if output_format == "svg" and flags.output is None:
        raise OptionError("--format svg is a picture: write it to a file with -o FILE.svg")
    if flags.baseline is not None and flags.no_baseline:
        raise OptionError("--baseline and --no-baseline contradict each other: use one of them")
    if flags.no_cache and flags.cache_dir is not None:
        raise OptionError("--cache-dir and --no-cache contradict each other: use one of them")
    if flags.jobs is not None and flags.jobs < 1:
        raise OptionError(f"--jobs {flags.jobs} must be at least 1")
    if flags.jax is not None and flags.python is not None:
        raise OptionError("--jax and --python both say which jax the workers use: give one of them")
    budget = parse_budget(flags.budget)
    max_peak = parse_bytes(flags.max_peak, "--max-peak") if flags.max_peak is not None else None
    command_knobs = parse_knobs(flags.vary) if flags.vary else ()
    command_floors = parse_floors(flags.at_least) if flags.at_least else ()
    if flags.target is not None:
        table = next((t for t in tables if t.target == flags.target.strip()), None)
        chosen = [(flags.target.strip(), table)]
    else:
        if not tables:
            raise OptionError(
                "nothing to fit: name the step (fieldmem fit pkg.train:step --args pkg.train:make_args "
                "--vary batch=1..4096) or add a [[tool.fieldmem.fit]] table to pyproject.toml"
            )
        chosen = [(t.target, t) for t in tables]
    plans, plan_backends = [], {}
    for n, (target, table) in enumerate(chosen):
        where = table.where if table is not None and flags.target is None else ""
        knobs = command_knobs or (table.knobs if table is not None else ())
        plans.append(
            fit_plan(
                target,
                knobs,
                args=flags.args if flags.args is not None else table.args if table is not None else None,
                floors=command_floors or (table.floors if table is not None else ()),
                budget=budget if budget is not None else table.budget if table is not None else None,
                expect=flags.expect if flags.expect is not None else table.expect if table is not None else None,
                max_peak=max_peak if max_peak is not None else table.max_peak if table is not None else None,
                donate=DonateSpec.parse(flags.donate)
                if flags.donate is not None
                else table.donate
                if table is not None
                else None,
                static=StaticSpec.parse(flags.static)
                if flags.static is not None
                else table.static
                if table is not None
                else None,
                suggest=flags.suggest or bool(table is not None and table.suggest),
                top=flags.top if flags.top is not None else TOP_LINES,
                where=where,
            )
        )
        if table is not None and table.backends is not None and flags.backend is None:
            plan_backends[n] = table.backends
    backends: tuple[str | None, ...] = parse_backends(flags.backend) if flags.backend is not None else (None,)
    if flags.backend is None and plan_backends and len(plan_backends) == len(plans):
        backends = ()  # every plan names its own
    baselines = {t.baseline for _, t in chosen if t is not None and t.baseline is not None}
    if len(baselines) > 1:
        raise OptionError(
            f"the [[tool.fieldmem.fit]] tables name {len(baselines)} baseline files: keep one fit baseline for the run"
        )
    baseline: Path | str | None = None
    if not flags.no_baseline:
        baseline = flags.baseline or (baselines.pop() if baselines else config_baseline)
        if (
            baseline is not None
            and flags.baseline is None
            and flags.save_baseline is not None
            and not Path(baseline).exists()
        ):
            baseline = None  # this run makes it
    min_bytes = parse_bytes(flags.min_bytes, "--min-bytes") if flags.min_bytes is not None else MIN_BYTES
    jax_versions = parse_jax_versions(flags.jax) if flags.jax is not None else None
    if jax_versions is not None:
        for version in jax_versions:
            check_supported(version)
        if len(jax_versions) > 1 and flags.save_baseline is not None:
            raise OptionError("--save-baseline records one jax release: save under one --jax release")
    if flags.python is not None and not flags.python.is_file():
        raise OptionError(f"--python {flags.python}: no Python interpreter there (name its bin/python)")
    cache_dir = None if flags.no_cache else flags.cache_dir
    return FitRequest(
        plans=tuple(plans),
        backends=backends,
        min_bytes=min_bytes,
        output_format=output_format,
        output=flags.output,
        verbose=flags.verbose,
        baseline=baseline,
        save_baseline=flags.save_baseline,
        jax_versions=jax_versions,
        python=flags.python,
        cache_dir=cache_dir,
        default_cache=not flags.no_cache and cache_dir is None,
        jobs=flags.jobs,
        plan_backends=plan_backends,
    )
