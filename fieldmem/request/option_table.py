"""Every option of fieldmem, declared once: its name, type, default and help, and where each front end takes
it (the ``fieldmem check`` command line, ``[tool.fieldmem]``, the Python API, the pytest plugin).

The command line's ``check`` (:mod:`fieldmem.frontends.check_cli`), the config reader
(:mod:`fieldmem.request.config`), the API's keywords (:mod:`fieldmem.frontends.api`), the plugin's options
and ini names (:mod:`fieldmem.frontends.pytest_options`) and its marker's and fixture's keywords and defaults
(:mod:`fieldmem.frontends.pytest_plugin`) are built from :data:`OPTIONS`: an option added here is on all of
them, and reaches the checks of each (tests/request/test_option_table.py adds one in a scratch copy). What an
option *does* is the code that reads it (:mod:`fieldmem.request.build`, :mod:`fieldmem.request.options`, the
plugin's :func:`~fieldmem.frontends.pytest_options.parse_limit`); a new option's behaviour is written there.

Where the front ends disagree on a default or a name, each keeps its own, and :attr:`Option.differs` says so.
Data only: nothing here imports typer, pytest or jax (nor the report's records: ``fieldmem --help`` reads this
table), reads a file or prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "OPTIONS",
    "Option",
    "api_options",
    "cli_options",
    "config_keys",
    "limit_options",
    "marker_options",
    "option",
    "plugin_options",
]


@dataclass(frozen=True)
class Option:
    """One option, and how each front end takes it (None, or empty: that front end does not take it)."""

    name: str  # the option's name in Python: the check command's parameter (CheckFlags' field)
    type: Any  # the command line's type (an annotation typer reads); None: not on the command line
    default: Any  # the command line's default (None: the next source decides: [tool.fieldmem], then fieldmem)
    help: str  # the command line's help text
    cli: tuple[str, ...] | None = None  # its flags on ``fieldmem check`` (the first is its name)
    argument: bool = False  # the command's positional argument (the targets), not an option
    metavar: str | None = None  # the command line's placeholder for the value, where not typer's
    config: str | None = None  # its key in [tool.fieldmem]
    config_holds: str = ""  # what the key holds, for a message about a wrong value
    config_types: tuple[type, ...] = ()  # the TOML types the key takes
    config_older: str | None = None  # an older key, still taken (one of the two)
    config_older_holds: str = ""
    per_target: bool = False  # also a key of each [[tool.fieldmem.target]] table
    pytest: str | None = None  # the plugin's command-line option
    ini: str | None = None  # its ini twin
    pytest_metavar: str | None = None
    pytest_help: str = ""
    pytest_older: tuple[str, str] | None = None  # an older (option, ini) pair, still taken
    pytest_flag: bool = False  # the plugin's option takes no value (its ini twin is a boolean)
    pytest_default: Any = None  # the plugin's default, where the session's parsing does not decide it
    pytest_session: bool = False  # the plugin reads it once for the session (its report, baseline, workers),
    # not as a limit of each check; a plugin option that is not is each check's, set in the CheckOptions field
    # of its name where the plugin does not read it itself (an option added to the table)
    marker: str | None = None  # its keyword on @pytest.mark.fieldmem and the fieldmem_check fixture
    marker_older: str | None = None  # an older keyword, still taken (one of the two)
    marker_default: Any = None  # the plugin's limit where nothing sets it (a keyword's None: this default)
    marker_chain: bool = True  # fieldmem_check.chain takes it too
    api: str | None = None  # the keyword of check_function / check_chain / assert_in_place
    api_older: str | None = None  # an older keyword, still taken (one of the two)
    api_default: Any = None  # the API's default
    differs: str = ""  # where the front ends disagree on its default or name


#: Every option, in the order ``fieldmem check --help`` lists them (the other front ends keep this order too).
OPTIONS: tuple[Option, ...] = (
    Option(
        "targets",
        list[str] | None,
        None,
        "pkg.module:fn, path/to/file.py:fn, module:obj.attr, a module/file alone (every fieldmem.case registered in it), or a folder path such as examples/ (every case its modules register). Default: the targets of [tool.fieldmem] in pyproject.toml.",
        cli=(),
        argument=True,
        config="targets",
        config_holds='a list of targets, e.g. ["pkg.model:update", "src/step.py"]',
        config_types=(list,),
    ),
    Option(
        "args",
        list[str] | None,
        None,
        "FACTORY (in the target's own module) or MODULE:FACTORY returning the positional args tuple, or (args, kwargs). Once: for every target; after each target: for the targets before it (a.py:f --args m:f_args b.py:g --args m:g_args).",
        cli=("--args",),
        config="args",
        config_holds='FACTORY (in the target\'s module) or MODULE:FACTORY, e.g. "pkg.model:make_args"',
        config_types=(str,),
        per_target=True,
    ),
    Option(
        "shapes",
        str | None,
        None,
        "Array-only signatures, e.g. 'f32[4096,4096] f32[4096]' (nothing allocated).",
        cli=("--shapes",),
        config="shapes",
        config_holds='array signatures, e.g. "f32[4096,4096] f32[4096]"',
        config_types=(str,),
        per_target=True,
    ),
    Option(
        "donate",
        str | None,
        None,
        "What the donated variant donates: all | none | numbers (0,2) | names (params,opt_state). Default: a jit target's own donation, else all array arguments.",
        cli=("--donate",),
        config="donate",
        config_holds='"all", "none", argument numbers or names',
        config_types=(str, int, list),
        per_target=True,
        api="donate",
        marker="donate",
    ),
    Option(
        "static",
        str | None,
        None,
        "Extra static arguments (numbers or names); non-array arguments are static anyway.",
        cli=("--static",),
        config="static",
        config_holds="argument numbers or names",
        config_types=(str, int, list),
        per_target=True,
        api="static",
        marker="static",
    ),
    Option(
        "expect",
        str | None,
        None,
        "in-place: exit 1 when the donated variant is not in place. fits: exit 1 unless it is known to fit the device's memory (--backend gpu:h100, tpu:v5e, or a GPU/TPU here). any (default): report only.",
        cli=("--expect",),
        config="expect",
        config_holds="one of {expectations}",  # the report's expectations, filled in by config_keys()
        config_types=(str,),
        per_target=True,
        api="expect",
        api_default="any",
        differs="the API's default is \"any\" (required); the command line's None is [tool.fieldmem]'s, else any",
    ),
    Option(
        "in_place",
        None,
        None,
        "",
        marker="in_place",
        marker_default=True,
        differs="the plugin's own form of expect: in_place=True is expect in-place (its default), False any",
    ),
    Option(
        "new",
        list[str] | None,
        None,
        "Output paths meant to be new buffers (out.logits, out[1]; repeat or comma-separate; * matches any run of characters): never a break of in place, even where a donated input of their size exists.",
        cli=("--new",),
        config="new",
        config_holds='output paths meant to be new buffers, e.g. ["out.logits"] or "out[1]"',
        config_types=(str, list),
        per_target=True,
        api="new",
        marker="new",
        marker_chain=False,  # a chain's outputs are its steps'
    ),
    Option(
        "max_peak",
        str | None,
        None,
        "Budget for the donated footprint (what the program holds at once: footprint_bytes), e.g. 64MiB; exceeding it exits 1. --max-peak is its older name.",
        cli=("--max-footprint", "--max-peak"),
        config="max-footprint",
        config_holds='a size, e.g. "64MiB"',
        config_types=(str, int),
        config_older="max-peak",
        config_older_holds='a size, e.g. "64MiB" (the older name of max-footprint)',
        per_target=True,
        pytest="--fieldmem-max-footprint",
        ini="fieldmem_max_footprint",
        pytest_metavar="SIZE",
        pytest_help="budget for the donated variant's footprint (footprint_bytes: what the program holds at once) in every fieldmem_check, e.g. 64MiB (--fieldmem-max-peak, ini fieldmem_max_peak: its older name)",
        pytest_older=("--fieldmem-max-peak", "fieldmem_max_peak"),
        api="max_footprint",
        api_older="max_peak",
        marker="max_footprint",
        marker_older="max_peak",
    ),
    Option(
        "max_live_peak",
        str | None,
        None,
        "Budget for the donated live peak (distinct buffers live at once); exceeding it exits 1.",
        cli=("--max-live-peak",),
        config="max-live-peak",
        config_holds='a size, e.g. "64MiB"',
        config_types=(str, int),
        per_target=True,
        pytest="--fieldmem-max-live-peak",
        ini="fieldmem_max_live_peak",
        pytest_metavar="SIZE",
        pytest_help="budget for the donated variant's live_peak_bytes in every fieldmem_check, e.g. 64MiB",
        api="max_live_peak",
        marker="max_live_peak",
    ),
    Option(
        "min_bytes",
        str | None,
        None,
        "Copies and findings smaller than this stay in JSON but out of the verdict, table and baseline gate (default 1KiB).",
        cli=("--min-bytes",),
        config="min-bytes",
        config_holds='a size, e.g. "1KiB"',
        config_types=(str, int),
        pytest="--fieldmem-min-bytes",
        ini="fieldmem_min_bytes",
        pytest_metavar="SIZE",
        pytest_help="copies and outputs smaller than this do not decide the verdict (default 1KiB)",
        api="min_bytes",
        api_default=1024,  # MIN_BYTES (tests/request/test_option_table.py holds every API default to the API)
        marker="min_bytes",
        marker_default=1024,  # MIN_BYTES, as the API's
    ),
    Option(
        "output_format",
        str | None,
        None,
        "table (default) | json | github | markdown | html",
        cli=("--format", "-f"),
        config="format",
        config_holds='an output format, e.g. "table"',
        config_types=(str,),
    ),
    Option(
        "output",
        Path | None,
        None,
        "Write the report in --format to this file (the table still goes to stdout).",
        cli=("--output", "-o"),
    ),
    Option(
        "html_output",
        Path | None,
        None,
        "Also write a self-contained HTML page (memory timelines, buffers live at the peak) to this file.",
        cli=("--html",),
    ),
    Option(
        "verbose",
        bool,
        False,
        "Per target: every figure, alias, unusable donation, copy and finding.",
        cli=("--verbose", "-v"),
    ),
    Option(
        "top",
        int,
        0,
        "Per target: the N largest contributors to the live peak, by line of your code (an argument by its path), plain and donated.",
        cli=("--top",),
        metavar="N",
    ),
    Option(
        "suggest",
        bool,
        False,
        "Also find the donation that saves the most and verify it with one more compile per target.",
        cli=("--suggest",),
    ),
    Option(
        "cache_dir",
        str | None,
        None,
        "Keep JAX's persistent compilation cache in this folder: an unchanged function is loaded, not compiled, on the next run (same findings).",
        cli=("--cache-dir",),
        config="cache-dir",
        config_holds='a folder for JAX\'s compilation cache, e.g. ".jax-cache"',
        config_types=(str,),
    ),
    Option(
        "no_cache",
        bool,
        False,
        "Do not use JAX's persistent compilation cache (default: --cache-dir, cache-dir in [tool.fieldmem], $FIELDMEM_CACHE_DIR, else ~/.cache/fieldmem/jax).",
        cli=("--no-cache",),
    ),
    Option(
        "fast_compile",
        bool | None,
        None,
        "XLA:CPU's LLVM code generation at -O0 for what is only analysed (the default): the same HLO, buffer assignment and findings in about 40% less compile time; the generated code size is then unavailable. --run and --probe compile what they execute as XLA does by default. --no-fast-compile: the default code generation everywhere (default: fast-compile in [tool.fieldmem], else on).",
        cli=("--fast-compile/--no-fast-compile",),
        config="fast-compile",
        config_holds="true or false",
        config_types=(bool,),
        api="fast_compile",
        api_default=True,
        differs="the API's default is True; the command line's None is [tool.fieldmem]'s fast-compile, else on",
    ),
    Option(
        "backend",
        str | None,
        None,
        'Compile for this backend: cpu, gpu, tpu (default: jax\'s), or without the device: tpu:v5e, tpu:v5e:2x2, tpu:v4, tpu:v5p, tpu:v6e, gpu:h100, gpu:h100:8, gpu:a100, gpu:h200, gpu:b200 (needs pip install "fieldmem[tpu]" / "fieldmem[gpu]"). Several, e.g. cpu,gpu:h100,tpu:v5e: each target on each, then side by side; -o/--html then write one file per backend (report.cpu.json, report.tpu-v5e.json).',
        cli=("--backend",),
        config="backends",
        config_holds='backends to check on, each with its own report, e.g. ["cpu", "tpu:v5e", "gpu:h100"]',
        config_types=(str, list),
        api="backend",
        marker="backend",
        differs="[tool.fieldmem] names it backends; the API takes one backend per call (the plugin's fixture and marker several, as backend=)",
    ),
    Option(
        "jax",
        str | None,
        None,
        "Check under these jax releases, e.g. 0.9.2,0.10.2: each in a cached environment of its own (made on first use: fieldmem envs), one report each, then side by side.",
        cli=("--jax",),
        metavar="VERSIONS",
        config="jax",
        config_holds='jax releases to check under, each in its own cached environment, e.g. ["0.9.2", "0.10.2"]',
        config_types=(str, list),
        pytest="--fieldmem-jax",
        pytest_session=True,
        ini="fieldmem_jax",
        pytest_metavar="VERSION",
        pytest_help="check under this jax release, in a cached environment of its own (fieldmem envs; made on first use), rather than the jax installed here: one release per session",
        differs="--fieldmem-jax takes one release per session; --jax several",
    ),
    Option(
        "python",
        Path | None,
        None,
        "Run the workers under this Python (a venv you prepared, with its own jax) instead.",
        cli=("--python",),
        metavar="PATH",
    ),
    Option(
        "jobs",
        int | None,
        None,
        "Compile the two variants, and up to N targets, concurrently when > 1 (default: the CPU cores, at most 8).",
        cli=("--jobs", "-j"),
        config="jobs",
        config_holds="a whole number, at least 1",
        config_types=(int,),
    ),
    Option(
        "baseline",
        Path | None,
        None,
        "Compare with this baseline file; any regression exits 1.",
        cli=("--baseline",),
        config="baseline",
        config_holds='a file path, e.g. "fieldmem-baseline.json"',
        config_types=(str,),
        pytest="--fieldmem-baseline",
        pytest_session=True,
        ini="fieldmem_baseline",
        pytest_metavar="PATH",
        pytest_help="compare every fieldmem_check with this baseline (fieldmem check --save-baseline or --fieldmem-save-baseline writes it) and list each regression at the end (default with --fieldmem-compare-fail: the baseline of [tool.fieldmem])",
        differs="the plugin compares with [tool.fieldmem]'s baseline only with --fieldmem-compare-fail; fieldmem check always",
    ),
    Option(
        "no_baseline",
        bool,
        False,
        "Do not compare with the baseline named in [tool.fieldmem].",
        cli=("--no-baseline",),
    ),
    Option(
        "save_baseline",
        Path | None,
        None,
        "Record this run in this baseline file, after the whole run and only when it passed, or with --accept-current as it is (entries of other targets and backends are kept).",
        cli=("--save-baseline",),
        pytest="--fieldmem-save-baseline",
        pytest_session=True,
        ini=None,  # no ini twin: a baseline saved by every run would never gate anything
        pytest_metavar="PATH",
        pytest_help="save every fieldmem_check of the session into this baseline (atomically, under its lock; entries of other targets and backends are kept), when every test passed and no check regressed",
    ),
    Option(
        "prune_baseline",
        bool,
        False,
        "With --save-baseline: drop entries of this backend whose target this run did not check.",
        cli=("--prune-baseline",),
    ),
    Option(
        "accept_current",
        bool,
        False,
        "With --save-baseline: record this run as it is, failing checks included (not a target that could not be checked): the gate accepts each while it fails the same way, so a run with --baseline fails only when something changes. Not with --baseline.",
        cli=("--accept-current",),
    ),
    Option(
        "tolerance",
        str | None,
        None,
        "Growth allowed against the baseline: 2%, 1MiB, 5%+1MiB, peak:5%,temp:1MiB.",
        cli=("--tolerance",),
        config="tolerance",
        config_holds='e.g. "2%" or "peak:5%,temp:1MiB"',
        config_types=(str,),
        pytest="--fieldmem-tolerance",
        pytest_session=True,
        ini="fieldmem_tolerance",
        pytest_metavar="TOLERANCE",
        pytest_help="growth the baseline comparison allows, as fieldmem check --tolerance: e.g. 2% or peak:5%,temp:1MiB (default: [tool.fieldmem] tolerance, else exact)",
    ),
    Option(
        "config",
        Path | None,
        None,
        "The pyproject.toml whose [tool.fieldmem] to use (default: found upward).",
        cli=("--config",),
    ),
    Option(
        "run",
        bool,
        False,
        "Also run both variants: confirm every alias by buffer identity and read Device.memory_stats() per device (in worker processes: one per target where the device has memory statistics).",
        cli=("--run",),
        api="run",
        api_default=False,
    ),
    Option(
        "probe",
        bool,
        False,
        "With --run (implied): time each aliased slice update (.at[].set, scatter) at two buffer sizes; a time that grows with the buffer means the update rewrites it although the HLO is in place.",
        cli=("--probe",),
    ),
    Option(
        "isolate",
        bool,
        True,
        "Load, check and run the targets in a worker process, never in the one that writes the report (default): a target that exits, crashes or hangs (--timeout) is that target's error. With --run, a worker per target where the device has memory statistics. --no-isolate checks in this process, for debugging: a target that exits or crashes then ends the run.",
        cli=("--isolate/--no-isolate",),
        pytest="--fieldmem-isolate",
        pytest_session=True,
        ini="fieldmem_isolate",
        pytest_metavar="yes|no",
        pytest_help="trace and compile each fieldmem_check in fieldmem's supervised worker process, where a crash, os._exit or hang fails that test only (yes, the default), or in pytest's own process (no)",
        differs="--fieldmem-isolate takes yes or no; the command line is a flag pair",
    ),
    Option(
        "timeout",
        float | None,
        None,
        "With --run: seconds a target may take in its worker before the worker is killed.",
        cli=("--timeout",),
        pytest="--fieldmem-timeout",
        pytest_session=True,
        ini="fieldmem_timeout",
        pytest_metavar="SECONDS",
        pytest_help="a fieldmem_check taking longer fails its test, and its worker process is killed (default 600; 0: no limit)",
        pytest_default=600.0,
        differs="the plugin's default is 600 s (0: no limit); the command line's None: no limit",
    ),
    Option(
        "devices",
        int | None,
        None,
        "Simulate N CPU devices (XLA_FLAGS --xla_force_host_platform_device_count), to check sharded updates on a laptop.",
        cli=("--devices",),
    ),
    Option(
        "watch",
        bool,
        False,
        "After the check, keep jax and the compiled programs warm and check again, on every save, the targets whose code changed, printing what changed since their last check. Ctrl-C stops it (exit code: as the last checks stand). Not with --run, --probe, --save-baseline or --no-isolate.",
        cli=("--watch",),
    ),
    Option(
        "report",
        None,
        None,
        "",
        pytest="--fieldmem-report",
        pytest_session=True,
        ini="fieldmem_report",
        pytest_metavar="PATH",
        pytest_help="write the JSON report (fieldmem.report/2) of every fieldmem_check in the session to PATH",
    ),
    Option(
        "compare_fail",
        None,
        None,
        "",
        pytest="--fieldmem-compare-fail",
        pytest_session=True,
        ini="fieldmem_compare_fail",
        pytest_flag=True,
        pytest_help="fail the session when a fieldmem_check regressed against the baseline (every regression listed once, as fieldmem check --baseline fails)",
    ),
    Option("name", None, None, "", api="name"),
    Option(
        "target",
        None,
        None,
        "",
        config="target",
        config_holds='[[tool.fieldmem.target]] tables, each with target = "pkg.model:update"',
        config_types=(list,),
    ),
    Option(
        "fit",
        None,
        None,
        "",
        config="fit",
        config_holds='[[tool.fieldmem.fit]] tables, each a search of fieldmem fit with target = "pkg.train:step"',
        # no types: fieldmem.request.fit reads the tables (one table or an array of them) and says what is wrong
    ),
)


def option(name: str) -> Option:
    """The option named ``name``.

    Raises:
        KeyError: no option has that name.
    """
    for row in OPTIONS:
        if row.name == name:
            return row
    raise KeyError(name)


def cli_options() -> tuple[Option, ...]:
    """The parameters of ``fieldmem check``, in the order of its help: the targets, then its options."""
    return tuple(row for row in OPTIONS if row.cli is not None)


def config_keys(per_target: bool = False) -> dict[str, str]:
    """The keys of ``[tool.fieldmem]`` (``per_target``: of a ``[[tool.fieldmem.target]]`` table, ``target``
    first), each with what it holds, for messages."""
    # the report's records load only here, with the config: the command line's --help does not need them
    from fieldmem.model.word_sets import EXPECTATIONS

    expectations = ", ".join(repr(e) for e in EXPECTATIONS)
    keys: dict[str, str] = {"target": "the target this table configures"} if per_target else {}
    for row in OPTIONS:
        if row.config is None or (per_target and not row.per_target):
            continue
        keys[row.config] = row.config_holds.replace("{expectations}", expectations)
        if row.config_older is not None:
            keys[row.config_older] = row.config_older_holds
    return keys


def plugin_options() -> tuple[Option, ...]:
    """The pytest plugin's options (each with its ini twin where it has one)."""
    return tuple(row for row in OPTIONS if row.pytest is not None)


def api_options() -> tuple[Option, ...]:
    """The keywords the Python API's checks take."""
    return tuple(row for row in OPTIONS if row.api is not None)


def marker_options() -> tuple[Option, ...]:
    """The keywords of the pytest plugin's ``fieldmem`` marker and ``fieldmem_check`` fixture, in the order the
    marker's help lists them: what is asserted (``in_place``), the limits the plugin's options set too (the
    budgets, the threshold), then the others, each group in the table's order."""
    marked = [row for row in OPTIONS if row.marker is not None]
    return tuple(sorted(marked, key=lambda row: (row.name != "in_place", row.pytest is None)))


def limit_options() -> tuple[Option, ...]:
    """What the pytest plugin takes as a limit of each check: its marker's keywords, then its options that are
    not the session's (each check's default: the option, else its ini twin, else ``[tool.fieldmem]``, else
    ``marker_default``)."""
    return marker_options() + tuple(row for row in plugin_options() if row.marker is None and not row.pytest_session)
