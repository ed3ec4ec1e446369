"""What one ``fieldmem check`` run is asked to do: command-line flags and ``[tool.fieldmem]`` in, a request out.

:func:`build_request` is the one place where the options of ``fieldmem
check`` are parsed, merged with the config (the command line wins) and
checked against each other; every mistake is an :class:`OptionError` (or the
parser's own error) with one line saying what was given and what would work,
raised before anything compiles. The result, a frozen :class:`CheckRequest`,
holds everything the rest of the run needs: targets and their options, how to
check, where the output goes, which baseline to compare with and to save.

It computes no finding, prints nothing and imports no jax. It only looks at
the file system to tell whether an output file's folder exists and whether
the configured baseline exists yet; it creates nothing (the compilation
cache folder is made by the driver, reading the baseline is the CLI's).
"""

from __future__ import annotations

import dataclasses
import math
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fieldmem.model.errors import OptionError
from fieldmem.model.files import not_a_file
from fieldmem.model.units import parse_bytes
from fieldmem.model.versions import check_supported
from fieldmem.request.backends import check_combination, parse_backend
from fieldmem.request.config import Config
from fieldmem.request.definitions import display_path
from fieldmem.request.options import (
    MAX_DEVICES,
    MIN_BYTES,
    CheckOptions,
    JobsChoice,
    choose_jobs,
    parse_backends,
    parse_expect,
    parse_format,
    parse_jax_versions,
    parse_new,
)
from fieldmem.request.spec import DonateSpec, StaticSpec, parse_shapes
from fieldmem.request.target import TargetOptions
from fieldmem.request.tolerance import Tolerances

__all__ = [
    "BaselineSettings",
    "CheckFlags",
    "CheckRequest",
    "OutputSettings",
    "backend_file",
    "build_request",
    "check_distinct_outputs",
    "check_writable",
    "file_identity",
    "parse_backends",
]


@dataclass(frozen=True)
class CheckFlags:
    """The command line of ``fieldmem check`` as typed: None (or False) where an option is not given."""

    targets: tuple[str, ...] = ()
    args: str | None = None  # for every target
    args_for: tuple[tuple[str, str], ...] = ()  # (target, factory): --args given after each target
    shapes: str | None = None
    donate: str | None = None
    static: str | None = None
    expect: str | None = None
    max_peak: str | None = None
    max_live_peak: str | None = None
    min_bytes: str | None = None
    output_format: str | None = None
    output: Path | None = None
    html_output: Path | None = None
    verbose: bool = False
    top: int = 0
    suggest: bool = False
    cache_dir: str | None = None
    no_cache: bool = False
    fast_compile: bool | None = None  # None: the config's, else on
    backend: str | None = None
    jobs: int | None = None
    baseline: Path | None = None
    no_baseline: bool = False
    save_baseline: Path | None = None
    prune_baseline: bool = False
    accept_current: bool = False  # --accept-current: record the run as it is, failing checks accepted
    tolerance: str | None = None
    run: bool = False
    probe: bool = False
    isolate: bool = True
    timeout: float | None = None
    devices: int | None = None
    new: tuple[str, ...] | None = None  # --new, as given (each may be a comma list)
    watch: bool = False  # --watch: after the check, check again what each save changes
    jax: str | None = None  # --jax 0.9.2,0.10.2: each target under each release
    python: Path | None = None  # --python PATH: the workers' interpreter, with its own jax


@dataclass(frozen=True)
class OutputSettings:
    """Where the reports go: stdout in ``format``, and the files of ``-o`` and ``--html``."""

    format: str  # a renderer name; with ``file``, stdout gets the table and the file this format
    file: Path | None = None  # -o: one file per backend when there are several (report.cpu.json)
    html: Path | None = None  # --html: likewise
    verbose: bool = False
    top: int = 0  # --top: the largest contributors to each live peak, by line (0: none)


@dataclass(frozen=True)
class BaselineSettings:
    """Which baseline the run is compared with, how much growth is allowed, and where it is saved."""

    compare_with: str | Path | None = None  # read before anything compiles; None: no comparison
    tolerances: Tolerances = Tolerances()
    save_to: Path | None = None  # written after the whole run, only when it passed
    prune: bool = False  # with save_to: drop entries of this backend whose target was not checked
    # with save_to: record the run as it is (failing checks accepted) and gate it against that, not compare_with
    accept_current: bool = False
    root: Path | None = None  # file targets are named relative to it: the config's folder; None: the baseline's


@dataclass(frozen=True)
class CheckRequest:
    """Everything one ``fieldmem check`` run needs, every value parsed and checked."""

    targets: tuple[str, ...]
    target_options: TargetOptions  # for every target without a [[tool.fieldmem.target]] table
    per_target: Mapping[str, TargetOptions]  # for each target with one, already stacked
    options: CheckOptions  # cache_dir: the folder named by --cache-dir or the config, else None
    output: OutputSettings
    baseline: BaselineSettings
    default_cache: bool = False  # no folder named and no --no-cache: the driver's default folder
    backends: tuple[str, ...] | None = None  # --backend; None: jax's default, one report
    # who named the backends: "--backend" or "[tool.fieldmem] backends" (None: jax's default backend)
    backends_origin: str | None = None
    # --jax: each target under each of these jax releases, one report each (None: this environment's jax)
    jax_versions: tuple[str, ...] | None = None
    python: Path | None = None  # --python: the workers run under this interpreter (its own jax)
    devices: int | None = None  # --devices: simulate this many CPU devices
    implied_devices: int | None = None  # without --devices: the chip count of a multi-chip deviceless backend
    # where options.cache_dir was named, for messages: the option, or the config's key and file
    cache_dir_origin: str = "--cache-dir"
    watch: bool = False  # --watch: keep the worker and check again what each save changes
    jobs_choice: JobsChoice | None = None  # how the default --jobs was chosen (None: --jobs or the config gave it)


def build_request(flags: CheckFlags, config: Config) -> CheckRequest:
    """``flags`` over ``config`` as one checked request; the command line beats the config.

    Raises:
        OptionError: an option value fieldmem cannot use, or two that contradict each other
            (the spec parsers' and the tolerance parser's own errors pass through).
    """
    _check_alone(flags)
    # a target named twice is checked once: its results, its baseline entry and its row are one
    targets = tuple(dict.fromkeys(t.strip() for t in (flags.targets or config.all_targets)))
    if not targets:
        raise OptionError(
            "no targets: name them (fieldmem check pkg.model:update) or list them in pyproject.toml "
            'under [tool.fieldmem] as targets = ["pkg.model:update"]'
        )
    output = _output(flags, config)
    if flags.watch and output.format != "table" and output.file is None:
        raise OptionError(
            f"--watch prints its checks for a terminal, as a table: --format {output.format} needs -o FILE "
            "(rewritten after every check)"
        )
    backends = parse_backends(flags.backend) if flags.backend is not None else config.backends
    check_combination(parse_backend(b) for b in backends or ())
    jax_versions = _jax_versions(flags, config)
    deviceless = [b for b in backends or () if parse_backend(b).deviceless]
    if deviceless and (flags.run or flags.probe):
        raise OptionError(
            f"{'--probe' if flags.probe else '--run'} runs the program, and --backend {deviceless[0]} compiles "
            "without the device: nothing can run there (check it with --backend gpu or tpu on a machine that has one)"
        )
    for path, option in (
        (flags.output, "--output"),
        (flags.html_output, "--html"),
        (flags.save_baseline, "--save-baseline"),
    ):
        if path is not None:
            check_writable(path, option, through_link=option == "--save-baseline")
    baseline = _baseline(flags, config)
    check_distinct_outputs(output, baseline, backends)
    target_options, per_target = config.target_options(_command_line_options(flags), targets)
    for spec, factory in flags.args_for:  # --args given after this target: its own, over every layer
        spec = spec.strip()
        per_target[spec] = dataclasses.replace(per_target.get(spec, target_options), args=factory, shapes=None)
    options, default_cache, jobs_choice = _check_options(flags, config)
    return CheckRequest(
        targets=targets,
        target_options=target_options,
        per_target=per_target,
        options=options,
        output=output,
        baseline=baseline,
        default_cache=default_cache,
        backends=backends,
        backends_origin=None
        if backends is None
        else ("--backend" if flags.backend is not None else "[tool.fieldmem] backends"),
        jax_versions=jax_versions,
        python=flags.python,
        devices=flags.devices,
        implied_devices=_implied_devices(backends) if flags.devices is None else None,
        cache_dir_origin=_cache_dir_origin(flags, config),
        watch=flags.watch,
        jobs_choice=jobs_choice,
    )


def _implied_devices(backends: tuple[str, ...] | None) -> int | None:
    """The CPU devices a multi-chip deviceless backend implies when ``--devices`` is not given: its chip
    count (``tpu:v5e:16x16``: 256), so example arguments sharded over every device jax has make a mesh the
    size of the topology. None where no backend (or several of different sizes) implies one."""
    chips = {b.chips for b in map(parse_backend, backends or ()) if b.deviceless and 1 < b.chips <= MAX_DEVICES}
    return chips.pop() if len(chips) == 1 else None


def _jax_versions(flags: CheckFlags, config: Config) -> tuple[str, ...] | None:
    """``--jax`` (else ``[tool.fieldmem] jax``), each release in range; with ``--python``, none."""
    versions = parse_jax_versions(flags.jax) if flags.jax is not None else config.jax
    if flags.python is not None:
        if flags.jax is not None:
            raise OptionError("--jax and --python both say which jax the workers use: give one of them")
        if not (flags.python.is_file() and os.access(flags.python, os.X_OK)):
            raise OptionError(f"--python {flags.python}: no Python interpreter there (name its bin/python)")
        if not flags.isolate:
            raise OptionError("--python runs the workers under that interpreter: drop --no-isolate")
        return None  # the interpreter's own jax; [tool.fieldmem] jax gives way to it
    if versions is not None:
        for version in versions:
            check_supported(version)
    if versions is not None and flags.watch:
        raise OptionError("--watch checks one jax at a time: drop --jax (or [tool.fieldmem] jax) with --watch")
    if versions is not None and len(versions) > 1 and flags.save_baseline is not None:
        raise OptionError(
            "--save-baseline records one jax release per target: save under one --jax release "
            "(each entry keeps the release it was made with)"
        )
    if versions is not None and not flags.isolate:
        raise OptionError("--jax runs workers under another jax: it needs them, drop --no-isolate")
    return versions


def _check_alone(flags: CheckFlags) -> None:
    """The checks that need neither the config nor the file system."""
    parse_expect(flags.expect, "--expect")
    parse_new(flags.new, "--new")
    if (flags.args is not None or flags.args_for) and flags.shapes is not None:
        raise OptionError("--args and --shapes both give example arguments: use one of them")
    if flags.jobs is not None and flags.jobs < 1:
        raise OptionError(f"--jobs {flags.jobs} must be at least 1")
    if flags.baseline is not None and flags.no_baseline:
        raise OptionError("--baseline and --no-baseline contradict each other: use one of them")
    if flags.prune_baseline and flags.save_baseline is None:
        raise OptionError("--prune-baseline only applies with --save-baseline PATH")
    if flags.accept_current and flags.save_baseline is None:
        raise OptionError("--accept-current only applies with --save-baseline PATH: it records the run as it is")
    if flags.accept_current and flags.baseline is not None:
        raise OptionError(
            "--accept-current records this run as it is, whatever an earlier baseline says; --baseline compares "
            "it with one: drop --baseline (review the regressions with --baseline first, then record)"
        )
    timeout = flags.timeout
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise OptionError(f"--timeout {timeout:g} must be positive: a number of seconds, e.g. --timeout 60")
    if timeout is not None and not (flags.run or flags.probe):
        raise OptionError("--timeout only applies with --run")
    if timeout is not None and not flags.isolate:
        raise OptionError(
            "--timeout needs the worker processes of --run: with --no-isolate the targets run in this "
            "process, where a hanging call cannot be stopped; drop --no-isolate or --timeout"
        )
    if flags.watch:
        _check_watch(flags)
    if flags.devices is not None and flags.devices < 1:
        raise OptionError(f"--devices {flags.devices} must be at least 1")
    if flags.devices is not None and flags.devices > MAX_DEVICES:
        raise OptionError(
            f"--devices {flags.devices} is more than {MAX_DEVICES}, the most fieldmem simulates (jax takes "
            "longer and longer to start more simulated devices)"
        )


def _check_watch(flags: CheckFlags) -> None:
    """The options ``--watch`` cannot go with: it checks statically, again and again, in the worker it
    keeps."""
    if not flags.isolate:
        raise OptionError(
            "--watch loads your modules again in the worker process it keeps; --no-isolate has none: drop --no-isolate"
        )
    if flags.run or flags.probe:
        option = "--probe" if flags.probe else "--run"
        raise OptionError(
            f"--watch checks on every save and {option} would run your code each time: use {option} without --watch"
        )
    if flags.save_baseline is not None:
        raise OptionError(
            "--save-baseline records one finished run, and --watch does not finish: save it with "
            "fieldmem check --save-baseline PATH"
        )


def _output(flags: CheckFlags, config: Config) -> OutputSettings:
    output_format = parse_format(flags.output_format or config.format or "table")
    if flags.top < 0:
        raise OptionError(f"--top {flags.top} must be 0 or more: the number of lines to list per target")
    return OutputSettings(
        format=output_format, file=flags.output, html=flags.html_output, verbose=flags.verbose, top=flags.top
    )


def check_writable(output: Path, option: str = "--output", *, through_link: bool = False) -> None:
    """Fail before compiling anything when ``option FILE`` cannot be written.

    ``through_link``: the file is written through a symbolic link at ``output`` (a baseline), so what it
    points to must be a file; otherwise the link itself is replaced.

    Raises:
        OptionError: ``output`` is a folder, a FIFO, a device or a socket (never replaced, never waited
            on), or its folder does not exist.
    """
    folder = output.parent if str(output.parent) else Path(".")
    if output.is_dir():
        raise OptionError(f"{option} {str(output)!r} is a folder: name a file, e.g. {str(output / 'report.json')!r}")
    kind = not_a_file(output, through_link=through_link)
    if kind is not None:
        raise OptionError(
            f"{option} {str(output)!r} is not a regular file ({kind}), which fieldmem never replaces: name a file"
        )
    if not folder.is_dir():
        raise OptionError(f"{option} {str(output)!r}: the folder {str(folder)!r} does not exist")


def pair_args(tokens: Sequence[str], targets: Sequence[str], given: Sequence[str]) -> tuple[str | None, dict[str, str]]:
    """Which targets each ``--args`` of a command line is for: given once, every target; given more than
    once, each applies to the targets written before it (since the previous one):
    ``fieldmem check a.py:decode --args m:decode_args a.py:rollout --args m:rollout_args``.

    ``tokens``: the command line as typed (after ``check``); ``targets`` and ``given``: the targets and the
    ``--args`` values, in order, as the parser read them. Returns the factory for every target (given once)
    or None, and the factory of each target (given more than once).

    Raises:
        OptionError: given more than once, and a target comes after the last ``--args`` (or none before
            one), or one target is given two factories.
    """
    if len(given) <= 1:
        return (given[0] if given else None), {}
    usage = (
        "write each target's --args after it (fieldmem check a.py:f --args m:f_args b.py:g --args m:g_args), "
        "or give --args once for every target"
    )
    pending: list[str] = []
    paired: dict[str, str] = {}
    next_target, next_args, n = 0, 0, 0
    while n < len(tokens):
        token = tokens[n]
        value: str | None = None
        if token == "--args" and n + 1 < len(tokens):
            value, n = tokens[n + 1], n + 2
        elif token.startswith("--args="):
            value, n = token[len("--args=") :], n + 1
        else:
            if next_target < len(targets) and token == targets[next_target]:
                pending.append(token)
                next_target += 1
            n += 1
            continue
        if next_args < len(given) and value == given[next_args]:
            next_args += 1
            if not pending:
                raise OptionError(f"--args {value} follows no target: {usage}")
            for target in pending:
                if paired.get(target, value) != value:
                    raise OptionError(f"{target} is given two --args ({paired[target]} and {value}): {usage}")
                paired[target] = value
            pending = []
    left = [t for t in targets if t not in paired]
    if left:
        raise OptionError(
            f"--args is given {len(given)} times, each for the targets before it, and {left[0]} has none: {usage}"
        )
    return None, paired


def _command_line_options(flags: CheckFlags) -> TargetOptions:
    """The per-target options the command line gives (the strongest layer)."""
    return TargetOptions(
        args=flags.args,
        shapes=parse_shapes(flags.shapes) if flags.shapes is not None else None,
        donate=DonateSpec.parse(flags.donate) if flags.donate is not None else None,
        static=StaticSpec.parse(flags.static) if flags.static is not None else None,
        expect=parse_expect(flags.expect, "--expect"),
        max_peak=parse_bytes(flags.max_peak, "--max-footprint") if flags.max_peak is not None else None,
        max_live_peak=parse_bytes(flags.max_live_peak, "--max-live-peak") if flags.max_live_peak is not None else None,
        new=parse_new(flags.new, "--new"),
    )


def _first_given(*values: bool | None) -> bool:
    """The first of ``values`` that is not None (the flag, then the config, then the default)."""
    for value in values:
        if value is not None:
            return value
    raise ValueError("no value given")  # pragma: no cover - every caller ends with a default


def _check_options(flags: CheckFlags, config: Config) -> tuple[CheckOptions, bool, JobsChoice | None]:
    """How to check, whether the driver picks the default compilation cache folder, and how the default
    ``--jobs`` was chosen (None: given)."""
    if flags.min_bytes is not None:
        min_bytes = parse_bytes(flags.min_bytes, "--min-bytes")
    else:
        min_bytes = config.min_bytes if config.min_bytes is not None else MIN_BYTES
    if flags.no_cache and flags.cache_dir is not None:
        raise OptionError("--cache-dir and --no-cache contradict each other: use one of them")
    cache_dir = None if flags.no_cache else (flags.cache_dir if flags.cache_dir is not None else config.cache_dir)
    choice = None if flags.jobs or config.jobs else choose_jobs()
    options = CheckOptions(
        min_bytes=min_bytes,
        jobs=flags.jobs or config.jobs or (choice.jobs if choice is not None else 1),
        suggest=flags.suggest,
        cache_dir=cache_dir,
        fast_compile=_first_given(flags.fast_compile, config.fast_compile, True),
        run=flags.run or flags.probe,
        probe=flags.probe,
        isolate=flags.isolate,
        timeout=flags.timeout,
    )
    return options, not flags.no_cache and cache_dir is None, choice


def _cache_dir_origin(flags: CheckFlags, config: Config) -> str:
    """Where the compilation cache folder was named: ``--cache-dir``, else the config's key and file."""
    if flags.cache_dir is None and config.cache_dir is not None and config.path is not None:
        return f"cache-dir in {display_path(str(config.path))} [tool.fieldmem]"
    return "--cache-dir"


def _baseline(flags: CheckFlags, config: Config) -> BaselineSettings:
    """The baseline settings; the config's baseline may not exist yet when this very run creates it."""
    if flags.tolerance is not None:
        tolerances = Tolerances.parse(flags.tolerance)
    else:
        tolerances = config.tolerance or Tolerances()
    # --accept-current records the run as it is: the config's baseline is not compared with
    path = None if flags.no_baseline or flags.accept_current else (flags.baseline or config.baseline)
    if path is not None and flags.baseline is None and flags.save_baseline is not None and not Path(path).exists():
        path = None
    for baseline_path, option in ((path, "--baseline"), (flags.save_baseline, "--save-baseline")):
        if baseline_path is not None:
            _check_regular(Path(baseline_path), option)
    return BaselineSettings(
        compare_with=path,
        tolerances=tolerances,
        save_to=flags.save_baseline,
        prune=flags.prune_baseline,
        accept_current=flags.accept_current,
        root=config.path.resolve().parent if config.path is not None else None,
    )


def _check_regular(path: Path, option: str) -> None:
    """A baseline path naming a FIFO, device or socket would hang or be destroyed: refuse it now."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # missing (save creates it; --baseline says so when read) or unreadable (said when read)
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise OptionError(f"{option} {str(path)!r} is not a regular file (a FIFO, device or socket): name a JSON file")


def file_identity(path: Path) -> tuple[str, tuple[int, int] | None]:
    """What makes two paths the same file: the path with links resolved, and the inode where it exists."""
    try:
        info = path.stat()
        inode: tuple[int, int] | None = (info.st_dev, info.st_ino)
    except OSError:
        inode = None
    return os.path.normcase(os.path.realpath(path)), inode


def backend_file(path: Path, backend: str) -> Path:
    """The file ``-o``/``--html`` ``path`` becomes for one of several backends: ``report.cpu.json``, and
    ``report.tpu-v5e-2x2.json`` for a deviceless backend (its colons are no part of a file name)."""
    return path.with_name(f"{path.stem}.{backend.replace(':', '-')}{path.suffix}")


def check_distinct_outputs(
    output: OutputSettings, baseline: BaselineSettings, backends: tuple[str, ...] | None = None
) -> None:
    """Refuse a run where two files it writes, or a file it writes and the baseline, are one file.

    ``--save-baseline b.json --html b.json`` would replace the baseline with a
    page, ``--baseline b.json -o b.json`` with a report. Paths are compared
    after resolving symbolic links (and by inode, for hard links). Reading
    and then saving one baseline (``--baseline b.json --save-baseline
    b.json``) is the one pair allowed.

    Raises:
        OptionError: two of ``-o``, ``--html``, ``--save-baseline`` and the
            baseline read name the same file.
    """
    several = backends is not None and len(backends) > 1
    named: list[tuple[str, Path, bool]] = []  # (option, path, written)
    for option, path in (("--output", output.file), ("--html", output.html)):
        if path is None:
            continue
        for backend in backends if several and backends is not None else (None,):
            named.append((option, backend_file(path, backend) if backend is not None else path, True))
    if baseline.save_to is not None:
        named.append(("--save-baseline", baseline.save_to, True))
    if baseline.compare_with is not None:
        named.append(("--baseline", Path(baseline.compare_with), False))
    seen: list[tuple[str, Path, bool, tuple[str, tuple[int, int] | None]]] = []
    for option, path, written in named:
        real, inode = file_identity(path)
        for other_option, other_path, other_written, (other_real, other_inode) in seen:
            same = real == other_real or (inode is not None and inode == other_inode)
            if not same or {option, other_option} == {"--baseline", "--save-baseline"}:
                continue
            if written and other_written:
                what = f"both write {str(path)!r}"
            else:
                what = f"{other_option if other_written else option} would replace the baseline {str(path)!r}"
            raise OptionError(
                f"{other_option} {str(other_path)!r} and {option} {str(path)!r} name the same file: {what}; "
                "give each output its own file"
            )
        seen.append((option, path, written, (real, inode)))
