"""``build_request``: command-line flags over ``[tool.fieldmem]`` -> one checked request, nothing compiled.

Every cross-option rule of ``fieldmem check`` lives in
:func:`fieldmem.request.build.build_request`; these tests give it flags and a
:class:`~fieldmem.request.config.Config` directly, so they run in the fast
suite. ``tests/frontends/test_cli.py`` checks that the command prints these messages.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from fieldmem.model.errors import OptionError
from fieldmem.request.build import CheckFlags, CheckRequest, build_request, check_writable, parse_backends
from fieldmem.request.config import Config, TargetConfig
from fieldmem.request.options import EXPECTATIONS, MIN_BYTES, default_jobs, parse_expect, parse_new
from fieldmem.request.spec import DonateSpec
from fieldmem.request.target import TargetOptions
from fieldmem.request.tolerance import Tolerances

TARGET = "pkg.model:update"


def build(config: Config = Config(), **flags: object) -> CheckRequest:
    flags.setdefault("targets", (TARGET,))
    return build_request(CheckFlags(**flags), config)  # type: ignore[arg-type]


# ---- what a request holds -------------------------------------------------------


def test_defaults() -> None:
    request = build()
    assert request.targets == (TARGET,)
    assert request.target_options == TargetOptions() and dict(request.per_target) == {}
    options = request.options
    assert options.min_bytes == MIN_BYTES == 1024
    assert options.jobs == default_jobs() == request.jobs_choice.jobs
    assert request.jobs_choice.cores == len(os.sched_getaffinity(0))
    assert (options.suggest, options.run, options.probe, options.isolate, options.fast_compile) == (
        False,
        False,
        False,
        True,
        True,
    )
    assert options.compile_fast  # a static check compiles at -O0 by default
    assert options.cache_dir is None and request.default_cache  # the driver picks its default folder
    assert (request.output.format, request.output.file, request.output.html) == ("table", None, None)
    assert request.baseline.compare_with is None and request.baseline.save_to is None
    assert request.baseline.tolerances == Tolerances()
    assert request.backends is None and request.devices is None


def test_the_config_fills_in_what_the_command_line_leaves_out() -> None:
    config = Config(
        targets=("a:f", "b:g"),
        options=TargetOptions(expect="in-place", max_peak=10),
        min_bytes=0,
        tolerance=Tolerances.parse("2%"),
        baseline="b.json",
        format="json",
        jobs=3,
        cache_dir=".jax-cache",
        fast_compile=False,
    )
    request = build(config, targets=())
    assert request.targets == ("a:f", "b:g")
    assert request.target_options == TargetOptions(expect="in-place", max_peak=10)
    assert (request.options.min_bytes, request.options.jobs, request.options.fast_compile) == (0, 3, False)
    assert request.options.cache_dir == ".jax-cache" and not request.default_cache
    assert request.output.format == "json"
    assert request.baseline.compare_with == "b.json"
    assert request.baseline.tolerances == Tolerances.parse("2%")


def test_the_command_line_beats_the_config() -> None:
    config = Config(
        targets=("a:f",),
        options=TargetOptions(expect="in-place", max_peak=10),
        min_bytes=0,
        tolerance=Tolerances.parse("2%"),
        baseline="b.json",
        format="json",
        jobs=3,
        cache_dir="c",
    )
    request = build(
        config,
        targets=("x:y",),
        expect="any",
        max_peak="1KiB",
        min_bytes="2KiB",
        tolerance="5%",
        baseline=Path("other.json"),
        output_format="markdown",
        jobs=1,
        cache_dir="mine",
    )
    assert request.targets == ("x:y",)  # targets named: the config's are not checked
    assert request.target_options == TargetOptions(expect="any", max_peak=1024)
    assert (request.options.min_bytes, request.options.jobs, request.options.cache_dir) == (2048, 1, "mine")
    assert request.output.format == "markdown"
    assert request.baseline.compare_with == Path("other.json")
    assert request.baseline.tolerances == Tolerances.parse("5%")


def test_a_target_table_is_stacked_under_the_command_line() -> None:
    config = Config(
        targets=("a:f",),
        options=TargetOptions(expect="in-place"),
        per_target=(TargetConfig("b:g", TargetOptions(donate=DonateSpec.parse("none"), max_peak=5)),),
    )
    request = build(config, targets=(), max_peak="7")
    assert request.targets == ("a:f", "b:g")
    assert request.target_options == TargetOptions(expect="in-place", max_peak=7)
    assert dict(request.per_target) == {
        "b:g": TargetOptions(donate=DonateSpec.parse("none"), expect="in-place", max_peak=7)
    }


def test_the_command_lines_options_are_parsed() -> None:
    request = build(shapes="f32[4,4] f32[4]", donate="0", static="n", max_live_peak="1MiB")
    assert request.target_options.shapes == (("float32", (4, 4)), ("float32", (4,)))
    assert request.target_options.donate == DonateSpec.parse("0")
    assert request.target_options.static is not None
    assert request.target_options.max_live_peak == 1024**2


def test_probe_implies_run_and_the_speed_levers_pass_through() -> None:
    request = build(probe=True, isolate=False, suggest=True, fast_compile=True, devices=4)
    options = request.options
    assert (options.run, options.probe, options.isolate, options.timeout) == (True, True, False, None)
    assert options.suggest and options.fast_compile and request.devices == 4
    assert not options.compile_fast  # what the probe times is the default code generation
    assert build(probe=True, timeout=5.0).options.timeout == 5.0


@pytest.mark.parametrize(
    ("flag", "key", "fast"),
    [(None, None, True), (None, False, False), (False, None, False), (True, False, True), (False, True, False)],
)
def test_fast_compile_is_on_by_default_and_the_flag_beats_the_config(
    flag: bool | None, key: bool | None, fast: bool
) -> None:
    request = build(Config(fast_compile=key), fast_compile=flag)
    assert request.options.fast_compile is fast and request.options.compile_fast is fast


@pytest.mark.parametrize(("run", "probe"), [(True, False), (False, True)])
def test_what_runs_is_compiled_with_the_default_code_generation(run: bool, probe: bool) -> None:
    assert not build(run=run, probe=probe).options.compile_fast


@pytest.mark.parametrize(
    ("flags", "cache_dir", "default_cache"),
    [
        ({}, None, True),
        ({"no_cache": True}, None, False),
        ({"cache_dir": "given"}, "given", False),
    ],
)
def test_which_compilation_cache(flags: dict[str, object], cache_dir: str | None, default_cache: bool) -> None:
    request = build(**flags)
    assert (request.options.cache_dir, request.default_cache) == (cache_dir, default_cache)
    # the config's folder is used unless the command line names one or turns the cache off
    configured = build(Config(cache_dir="configured"), **flags)
    expected = "configured" if not flags else cache_dir
    assert (configured.options.cache_dir, configured.default_cache) == (expected, False)


def test_the_baseline_to_compare_with(tmp_path: Path) -> None:
    missing, existing = str(tmp_path / "missing.json"), tmp_path / "b.json"
    existing.write_text("{}")
    save = tmp_path / "new.json"
    assert build(Config(baseline=missing)).baseline.compare_with == missing  # reading it will say it is missing
    # the config's baseline may not exist yet when this very run is the one that creates it
    assert build(Config(baseline=missing), save_baseline=save).baseline.compare_with is None
    assert build(Config(baseline=str(existing)), save_baseline=save).baseline.compare_with == str(existing)
    named = build(baseline=Path(missing), save_baseline=save).baseline
    assert named.compare_with == Path(missing) and named.save_to == save  # named: always read
    assert build(Config(baseline=str(existing)), no_baseline=True).baseline.compare_with is None
    assert build(save_baseline=save, prune_baseline=True).baseline.prune


def test_several_backends() -> None:
    request = build(backend="cpu, gpu", output=Path("report.json"), output_format="json")
    assert request.backends == ("cpu", "gpu")
    assert build(backend="cpu,gpu").backends == ("cpu", "gpu")  # a table: both on stdout
    assert parse_backends("tpu") == ("tpu",)


# ---- every mistake, before anything compiles ---------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"expect": "sometimes"}, "--expect 'sometimes' is not known: use one of in-place, fits, any"),
        ({"args": "m:f", "shapes": "f32[3]"}, "--args and --shapes both give example arguments: use one of them"),
        ({"jobs": 0}, "--jobs 0 must be at least 1"),
        (
            {"baseline": Path("b.json"), "no_baseline": True},
            "--baseline and --no-baseline contradict each other: use one of them",
        ),
        ({"prune_baseline": True}, "--prune-baseline only applies with --save-baseline PATH"),
        ({"timeout": 0.0, "run": True}, "--timeout 0 must be positive"),
        ({"timeout": 5.0}, "--timeout only applies with --run"),
        (
            {"targets": ()},
            "no targets: name them (fieldmem check pkg.model:update) or list them in pyproject.toml "
            'under [tool.fieldmem] as targets = ["pkg.model:update"]',
        ),
        ({"output_format": "xml"}, "--format 'xml' is not known: use one of table, json"),
        ({"backend": "cpu,cpu"}, "--backend 'cpu,cpu' names cpu twice"),
        ({"backend": "cpu,"}, "--backend 'cpu,': name backends separated by commas, e.g. cpu,gpu"),
        ({"shapes": "f32[32,32"}, "--shapes entry 'f32[32,32' is not DTYPE[DIMS]"),
        ({"donate": ""}, "--donate '' is empty: use one of auto, all, none"),
        ({"static": "2;3"}, "neither an argument number nor an argument name"),
        ({"max_peak": "lots"}, "--max-footprint 'lots' is not understood: write e.g. 64MiB"),
        ({"max_live_peak": "-1"}, "--max-live-peak '-1' is not understood (a size is 0 or more bytes)"),
        ({"min_bytes": "1 parsec"}, "--min-bytes '1 parsec' is not understood"),
        ({"cache_dir": "c", "no_cache": True}, "--cache-dir and --no-cache contradict each other: use one of them"),
        ({"tolerance": "peek:5%"}, "--tolerance 'peek:5%': 'peek' is not a figure: did you mean 'peak'?"),
    ],
)
def test_each_mistake_is_one_option_error(flags: dict[str, object], message: str) -> None:
    with pytest.raises(OptionError) as caught:
        build(**flags)
    assert message in caught.value.message
    assert "\n" not in caught.value.message


def test_mistakes_of_the_command_line_come_before_the_configs_targets() -> None:
    # the checks that need nothing else run first, in the order fieldmem check always had
    with pytest.raises(OptionError, match="--expect"):
        build(targets=(), expect="never", jobs=0)
    with pytest.raises(OptionError, match="--jobs"):
        build(targets=(), jobs=0)


@pytest.mark.parametrize("option", ["output", "html_output", "save_baseline"])
def test_output_files_are_checked_before_anything_compiles(tmp_path: Path, option: str) -> None:
    name = {"output": "--output", "html_output": "--html", "save_baseline": "--save-baseline"}[option]
    with pytest.raises(OptionError) as caught:
        build(**{option: tmp_path / "nope" / "report.json"})
    assert caught.value.message == (
        f"{name} {str(tmp_path / 'nope' / 'report.json')!r}: the folder {str(tmp_path / 'nope')!r} does not exist"
    )
    with pytest.raises(OptionError, match=re.escape("is a folder: name a file, e.g. ")):
        build(**{option: tmp_path})
    request = build(**{option: tmp_path / "report.json"})
    kept = {
        "output": request.output.file,
        "html_output": request.output.html,
        "save_baseline": request.baseline.save_to,
    }
    assert kept[option] == tmp_path / "report.json"


def test_check_writable_accepts_a_bare_file_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    check_writable(Path("report.json"))  # its folder is the current one
    (tmp_path / "sub").mkdir()
    with pytest.raises(OptionError, match="--output 'sub' is a folder"):
        check_writable(Path("sub"))


# ---- one expect validator for every front end ------------------------------------


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--expect", "--expect 'never' is not known: use one of in-place, fits, any"),
        ("expect=", "expect='never' is not known: use one of in-place, fits, any"),
        (
            "pyproject.toml: [tool.fieldmem] expect =",
            "pyproject.toml: [tool.fieldmem] expect = 'never' is not known: use one of in-place, fits, any",
        ),
    ],
)
def test_parse_expect_names_the_setting_as_written(option: str, message: str) -> None:
    with pytest.raises(OptionError) as caught:
        parse_expect("never", option)
    assert caught.value.message == message


def test_parse_expect_accepts_the_expectations_and_none_unless_required() -> None:
    assert [parse_expect(e, "--expect") for e in EXPECTATIONS] == ["in-place", "fits", "any"]
    assert parse_expect(None, "--expect") is None
    with pytest.raises(OptionError, match="expect=None is not known"):
        parse_expect(None, "expect=", required=True)


# ---- --new: outputs declared new --------------------------------------------------


def test_new_is_parsed_into_the_command_line_options() -> None:
    request = build(new=("out.logits,out[2]", "out.logits"))
    assert request.target_options.new == ("out.logits", "out[2]")
    assert build().target_options.new is None


def test_new_must_name_output_paths() -> None:
    with pytest.raises(OptionError) as caught:
        build(new=("logits",))
    assert caught.value.message.startswith("--new 'logits' is not an output path: output paths start with 'out'")


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--new", "--new 'x' is not an output path"),
        ("new=", "new='x' is not an output path"),
        ("pyproject.toml: [tool.fieldmem] new =", "pyproject.toml: [tool.fieldmem] new = 'x' is not an output path"),
    ],
)
def test_parse_new_names_the_setting_as_written(option: str, message: str) -> None:
    with pytest.raises(OptionError) as caught:
        parse_new("x", option)
    assert caught.value.message.startswith(message)


def test_a_target_named_twice_is_checked_once() -> None:
    """Issue 29, item 7: 8,000 copies of one target were 8,000 checks (144 s) and 8,000 rows of one name."""
    request = build(targets=("m.py:f", " m.py:f", "m.py:g", *["m.py:f"] * 8000))
    assert request.targets == ("m.py:f", "m.py:g")
