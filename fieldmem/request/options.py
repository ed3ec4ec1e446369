"""How a check runs, as the user asked for it: thresholds, speed levers, expectations. No jax.

The one definition of each default and of each validator that the CLI, the
config, the registry, the Python API and the pytest plugin share. Nothing here
reads files, prints or imports jax.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fieldmem.model.errors import OptionError
from fieldmem.model.machine import (
    AT_ONCE_ARENAS,
    HEAP_PAD,
    RESERVE,
    UNMEASURED,
    available_memory,
    glibc,
    heap_pad_set,
    malloc_arenas,
    usable_cores,
)
from fieldmem.model.versions import is_release
from fieldmem.model.word_sets import EXPECTATIONS, Expectation
from fieldmem.request.backends import parse_backend

__all__ = [
    "EXPECTATIONS",
    "FORMATS",
    "MAX_DEVICES",
    "MAX_JOBS",
    "MIN_BYTES",
    "CheckOptions",
    "JobsChoice",
    "choose_jobs",
    "default_jobs",
    "footprint_budget",
    "heap_pad_said",
    "jobs_said",
    "parse_backends",
    "parse_expect",
    "parse_format",
    "parse_new",
]


def footprint_budget(max_footprint: Any, max_peak: Any, how: str = "{}=") -> Any:
    """The budget of the donated footprint given as ``max_footprint``, or as ``max_peak`` (its older name),
    unparsed; ``how`` writes a setting's name in a message (``"{}="``: ``max_footprint=``).

    Raises:
        OptionError: both are given.
    """
    if max_footprint is not None and max_peak is not None:
        raise OptionError(
            f"{how.format('max_footprint')} and {how.format('max_peak')} are one budget, the donated footprint "
            f"({how.format('max_peak')} is its older name): give {how.format('max_footprint')} alone"
        )
    return max_footprint if max_footprint is not None else max_peak


#: The output formats of ``--format`` (and ``format`` in ``[tool.fieldmem]``), in the order errors list
#: them; :mod:`fieldmem.render` has one renderer each (tests/render/test_formats.py holds them equal).
FORMATS = ("table", "json", "github", "markdown", "html")


def parse_format(name: str, where: str = "--format") -> str:
    """``name`` when it is one of :data:`FORMATS`.

    Raises:
        OptionError: naming what was given and the formats there are.
    """
    if name not in FORMATS:
        raise OptionError(f"{where} {name!r} is not known: use one of {', '.join(FORMATS)}")
    return name


#: Copies and findings smaller than this stay in the JSON report but out of the
#: verdict, the table and the baseline gate (``--min-bytes``; 1 KiB).
MIN_BYTES = 1024

#: The most CPU devices ``--devices`` simulates. jax starts 2048 in about 2 s and
#: 4096 in about 12 s: the cost climbs steeply with the count (benchmarks/bench_devices.py,
#: results in benchmarks/results/devices.json): a larger count is refused, not waited for.
MAX_DEVICES = 4096

#: The most concurrent compiles the default ``--jobs`` asks for, however many cores the machine has:
#: each compile holds its HLO module and XLA's working memory.
MAX_JOBS = 8


@dataclass(frozen=True)
class JobsChoice:
    """How many compiles the default ``--jobs`` runs at once, and the machine's facts it was chosen from."""

    jobs: int
    cores: int  # the CPU cores this process may use
    available: int | None  # bytes of memory available when chosen (None: not readable here)
    per_compile: int  # bytes one compile is taken to need until one is measured (the gate's assumption)
    by_memory: int | None  # compiles of ``per_compile`` the memory available holds beside the reserve

    def describe(self) -> str:
        """One line for ``-v``: what was chosen and from what."""
        gib = 1 << 30
        said = f"--jobs {self.jobs} (the default): {self.cores} core{'s' if self.cores != 1 else ''}"
        if self.available is None:
            said += ", the memory available unread"
        else:
            said += (
                f", {self.available / gib:.1f} GiB available holds {self.by_memory} compile"
                f"{'s' if self.by_memory != 1 else ''} of {self.per_compile / gib:.1f} GiB (the most one took"
                " in fieldmem's measurements)"
            )
        return said + f", at most {MAX_JOBS}; a compile beside others starts while the memory left holds it"


def choose_jobs(
    cores: int | None = None, available: int | Callable[[], int | None] | None = available_memory
) -> JobsChoice:
    """The default ``--jobs``: one compile per usable core, no more than the memory available holds (each
    taken to need :data:`~fieldmem.model.machine.UNMEASURED`, the most one compile took in fieldmem's
    measurements, beside :data:`~fieldmem.model.machine.RESERVE`), at least two where there are two cores (the
    compile gate, :mod:`fieldmem.driver.compile_memory`, starts a second only where the memory measured
    holds it), at most :data:`MAX_JOBS`.

    A compile runs in XLA's C++ code without the GIL, so while the pool's threads compile, this thread lowers
    the next target (benchmarks/bench_jobs.py measures the default against ``--jobs 1``; results/jobs.md).
    """
    cores = usable_cores() if cores is None else max(1, cores)
    free = available() if callable(available) else available
    by_memory = None if free is None else max(0, free - RESERVE) // UNMEASURED
    jobs = min(cores, MAX_JOBS)
    if by_memory is not None:
        jobs = min(jobs, max(by_memory, 2))
    return JobsChoice(max(1, jobs), cores, free, UNMEASURED, by_memory)


def jobs_said(jobs: int, choice: JobsChoice | None, environ: Mapping[str, str]) -> str:
    """The ``-v`` line on how many compiles run at once: the default's choice and its facts (``choice``), or
    the number given; and the malloc arenas its worker keeps."""
    said = choice.describe() if choice is not None else f"--jobs {jobs} (given)"
    how = "one compile at a time" if jobs == 1 else "compiles at once"
    if "MALLOC_ARENA_MAX" in environ:
        said += f"; {how}, MALLOC_ARENA_MAX={environ['MALLOC_ARENA_MAX']} as set"
    else:
        cores = choice.cores if choice is not None else usable_cores()
        per = "one per core" if jobs == 1 else f"two per core, at least {AT_ONCE_ARENAS}"
        said += f"; {how}, in at most {malloc_arenas(cores, jobs > 1)} malloc arenas ({per})"
    return said


def heap_pad_said(options: CheckOptions, environ: Mapping[str, str], on_glibc: bool | None = None) -> str:
    """The ``-v`` line on the heap padding of the worker's malloc (fieldmem.worker.main.pad_malloc_heap; ``on_glibc``:
    whether this is glibc's C library, read when None)."""
    if not options.isolate:
        return "malloc as this process has it (--no-isolate: nothing is set in your process)"
    if heap_pad_set(environ):
        return "the worker's malloc pads its heap as your environment sets (MALLOC_TOP_PAD_ or GLIBC_TUNABLES)"
    if not (glibc() if on_glibc is None else on_glibc):
        return "malloc as the worker has it (not glibc's)"
    return (
        f"the worker's malloc grows its heap {HEAP_PAD >> 20} MiB past its need each time (glibc's M_TOP_PAD;"
        " MALLOC_TOP_PAD_ sets another)"
    )


#: A worker of a static check without the persistent cache stops each XLA:CPU compile once its reading is dumped
#: (fieldmem.driver.early; the report is the same, timings aside) unless ``FIELDMEM_EARLY_STOP=0`` is in the
#: environment: measured faster than every compile awaited on the compile-heavy step on both machines, and about
#: as fast on the cold module (benchmarks/results/early-stop.md and early-stop-13cores.md).
EARLY_STOP_ENV = "FIELDMEM_EARLY_STOP"

#: ``0`` in a worker's environment: a program libtpu refuses for not fitting is not compiled again without that
#: check to tell its figures (the driver reads it; here, not in fieldmem.request.fit, so that the
#: worker does not import the fit's records for one name). ``fieldmem fit`` sets it for a point whose compile without
#: the check crashed the worker (libtpu 0.0.42.1 does for some rematerialised programs), and checks it again.
TPU_OOM_FIGURES_ENV = "FIELDMEM_TPU_OOM_FIGURES"


def early_stop_wanted(environ: Mapping[str, str]) -> bool:
    """Whether a static check's worker may stop its XLA:CPU compiles, and its GPU compiles without the device,
    early: unless ``FIELDMEM_EARLY_STOP=0``."""
    return environ.get(EARLY_STOP_ENV, "1").strip() != "0"


def user_dumps(environ: Mapping[str, str]) -> bool:
    """Whether the user asked XLA to dump (``--xla_dump_to`` in ``XLA_FLAGS``): a compile stopped early dumps to a
    folder of fieldmem's instead, so theirs would stay empty; their compiles run to their end."""
    return "--xla_dump_to" in (environ.get("XLA_FLAGS") or "")


def early_stop_said(
    options: CheckOptions, environ: Mapping[str, str], backends: Sequence[str | None], cached: bool = False
) -> str:
    """The ``-v`` line on whether this check's compiles stop once XLA has dumped what fieldmem reads
    (fieldmem.driver.early), and why not where they do not (``cached``: jax's persistent cache is on, where each
    dump is kept for a rerun, fieldmem.driver.kept)."""
    stops = (
        "XLA:CPU compiles, and GPU compiles without the device, stop once XLA has dumped the optimized module and"
        " its buffer assignment"
    )
    if not options.compile_fast:
        why = "--run" if options.run else "--probe" if options.probe else "--no-fast-compile"
        return f"every compile runs to its end ({why}: the code generation is needed)"
    if not options.isolate:
        return f"every compile runs to its end in this process (--no-isolate); in a worker, {stops}"
    if not early_stop_wanted(environ):
        return f"every compile runs to its end ({EARLY_STOP_ENV}=0)"
    if user_dumps(environ):
        return "every compile runs to its end (XLA_FLAGS asks XLA to dump: the dump is yours, in full)"
    if all(b is not None and b.split(":")[0] == "tpu" for b in backends):
        return "every compile runs to its end (TPU compiles do: the dump does not give their temporaries exactly)"
    where = f"{stops}, in the worker (one device, arguments not in a tuple, the device's default memory); "
    rest = "TPU compiles, and those of a GPU of this machine, run to their end"
    if cached:
        return (
            where + "each dump is kept in the persistent cache folder under jax's key, which a rerun reads instead"
            " of compiling (a cache folder that is not local, such as gs://, or a JAX_COMPILATION_CACHE_DIR of yours"
            f" whose key leaves the source lines out, keeps the full compile); {rest}"
        )
    return where + rest


def default_jobs() -> int:
    """``--jobs`` when none is given (:func:`choose_jobs`)."""
    return choose_jobs().jobs


@dataclass(frozen=True)
class CheckOptions:
    """How to check: thresholds and speed levers, shared by the CLI and the API."""

    min_bytes: int = MIN_BYTES
    jobs: int = field(default_factory=default_jobs)  # concurrent compiles (pool threads); 1: none
    suggest: bool = False  # also find (and verify by compiling) the donation that saves the most
    backend: str | None = None  # compile for this backend (cpu, gpu, tpu); None: jax's default
    cache_dir: str | None = None  # JAX's persistent compilation cache folder; None: jax's own setting
    run: bool = False  # also run both variants and check the plan by buffer identity and device memory
    probe: bool = False  # with run: time each aliased slice update at two buffer sizes
    isolate: bool = True  # with run: each target in a worker process of its own (clean peak, crash-safe)
    timeout: float | None = None  # with run and isolate: seconds a target's worker may take
    # XLA:CPU codegen at -O0 where nothing runs (same HLO and buffer assignment; code size unavailable)
    fast_compile: bool = True

    @property
    def compile_fast(self) -> bool:
        """Whether compiles use the fast options: a static check does; --run and --probe execute what
        they compile, so they get the code XLA generates by default."""
        return self.fast_compile and not self.run and not self.probe


def _given(option: str, value: object) -> tuple[str, bool]:
    """The setting as the user wrote it, with its value (``--backend 'x'``, ``backend='x'``), and whether
    the name and the value are glued (``backend=``)."""
    glued = option.endswith("=") and not option.endswith(" =")
    return (f"{option}{value!r}" if glued else f"{option} {value!r}"), glued


def _names(value: object, given: str, what: str, example: str) -> tuple[str, ...]:
    """A comma-separated string or a list of strings, each stripped.

    Raises:
        OptionError: anything else, naming ``what`` and an ``example`` list.
    """
    if isinstance(value, str):
        return tuple(name.strip() for name in value.split(","))
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return tuple(name.strip() for name in value)
    raise OptionError(f"{given}: name {what} as a string or a list of strings, e.g. {example}")


def parse_jax_versions(value: object, option: str = "--jax") -> tuple[str, ...]:
    """``"0.9.2,0.10.2"`` or ``["0.9.2", "0.10.2"]`` -> ``("0.9.2", "0.10.2")``: the jax releases to check
    under, each in its own environment (:mod:`fieldmem.parent.envs`), in the order given.

    Raises:
        OptionError: a value that is not a release number (``0.10.2``), or one named twice.
    """
    given, _ = _given(option, value)
    versions = _names(value, given, "jax releases", '["0.9.2", "0.10.2"]')
    for version in versions:
        if not is_release(version):
            raise OptionError(
                f"{given}: {version!r} is not a jax release: name them as 0.9.2,0.10.2 (three numbers, no leading zero)"
            )
    if len(set(versions)) != len(versions):
        raise OptionError(f"{given}: a release is named twice")
    return versions


def parse_backends(value: object, option: str = "--backend") -> tuple[str, ...]:
    """``"cpu,gpu:h100,tpu:v5e:1x1"`` or ``["cpu", "tpu:v5e"]`` -> ``("cpu", "gpu:h100", "tpu:v5e")``
    (canonical names, :func:`fieldmem.request.backends.parse_backend`); whether each is available is the
    driver's to say.

    ``option`` names the setting as the user wrote it (``--backend``, ``backend=``,
    ``<file>: [tool.fieldmem] backends``).

    Raises:
        OptionError: an empty name, an unknown one (listing the known ones), one named twice, or a value
            that is not strings.
    """
    given, glued = _given(option, value)
    names = _names(value, given, "backends", '["cpu", "tpu:v5e"]')
    if not all(names):
        raise OptionError(f"{given}: name backends separated by commas, e.g. cpu,gpu")
    try:
        names = tuple(parse_backend(name).name for name in names)
    except OptionError as exc:  # its message names --backend: name the setting the user wrote
        raise OptionError(exc.message.replace("--backend ", f"{option}" if glued else f"{option} ", 1)) from None
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise OptionError(f"{given} names {', '.join(repeated)} twice")
    return names


def parse_expect(value: object, option: str, *, required: bool = False) -> Expectation | None:
    """``value`` when it is one of :data:`EXPECTATIONS`; None when not given (the next layer decides).

    What a target may be expected to be (defined with the report, which
    records it): ``in-place`` fails the check when the donated variant is not
    in place; ``fits`` when it is not known to fit the device's memory; ``any`` only reports. ``option`` names the setting as the user
    wrote it: ``--expect`` on the command line, ``expect=`` in Python,
    ``<file>: [tool.fieldmem] expect =`` in the config. A keyword (``expect=``) is glued to the value, anything
    else is followed by a space. ``required``: None is a mistake too (the
    Python API, whose default is ``"any"``).

    Raises:
        OptionError: any other value, naming the allowed ones.
    """
    if value in EXPECTATIONS or (value is None and not required):
        return value
    glued = option.endswith("=") and not option.endswith(" =")
    given = f"{option}{value!r}" if glued else f"{option} {value!r}"
    raise OptionError(f"{given} is not known: use one of {', '.join(EXPECTATIONS)}")


def parse_new(value: object, option: str) -> tuple[str, ...] | None:
    """Output paths declared new (``--new``, ``new=``), or None when not given (the next layer decides).

    ``value``: a string of comma-separated patterns or a list of such strings
    (``--new`` may be repeated). A pattern is an output path as the report
    names outputs, so it starts with ``out``: ``out[1]``, ``out.logits``,
    ``out['logits']``; it covers everything under that path, and ``*`` matches
    any run of characters (``out*logits``). An output so declared is a new
    output, never a break of in place.

    Raises:
        OptionError: a pattern that is not an output path, or a value that is not strings.
    """
    if value is None:
        return None
    glued = option.endswith("=") and not option.endswith(" =")

    def given(part: object) -> str:
        return f"{option}{part!r}" if glued else f"{option} {part!r}"

    if not isinstance(value, (str, list, tuple)):
        raise OptionError(f"{given(value)} is not known: give output paths such as 'out.logits' or 'out[1]'")
    parts: Iterable[object] = [value] if isinstance(value, str) else value
    patterns: list[str] = []
    for part in parts:
        if not isinstance(part, str):
            raise OptionError(f"{given(part)} is not an output path: give strings such as 'out.logits'")
        for pattern in (p.strip() for p in part.split(",")):
            if not pattern:
                continue
            if not pattern.startswith("out") or pattern[3:4] not in ("", ".", "[", "*"):
                raise OptionError(
                    f"{given(pattern)} is not an output path: output paths start with 'out', as the report "
                    "names them (out, out[1], out.logits, out['logits']; * matches any run of characters)"
                )
            if pattern not in patterns:
                patterns.append(pattern)
    return tuple(patterns)
