"""``[tool.fieldmem]`` in pyproject.toml: finding it, reading it, and refusing what it cannot use (pure)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from fieldmem.request.config import KEYS, Config, ConfigError, find_config, load_config
from fieldmem.request.spec import DonateSpec, StaticSpec
from fieldmem.request.target import TargetOptions
from fieldmem.request.tolerance import Tolerance, Tolerances

FULL = """
[project]
name = "demo"

[tool.fieldmem]
targets = ["pkg.model:update", "src/step.py"]
args = "pkg.model:make_args"
donate = "params,opt_state"
static = [2, "n_steps"]
expect = "in-place"
max-peak = "64MiB"
max-live-peak = "48MiB"
min-bytes = 4096
tolerance = "peak:5%,temp:1MiB"
baseline = "ci/fieldmem-baseline.json"
format = "json"
jobs = 2
cache-dir = ".jax-cache"
fast-compile = true

[[tool.fieldmem.target]]
target = "src/step.py:step"
shapes = "f32[8,8]"
max-peak = "1MiB"
max-live-peak = 1000

[[tool.fieldmem.target]]
target = "pkg.model:update"
donate = "none"
new = ["out.logits", "out['aux']"]
"""


def write(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pyproject.toml"
    path.write_text(text)
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder (a git checkout) as the current directory."""
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    monkeypatch.chdir(root)
    return root


def test_every_key(project: Path) -> None:
    config = load_config(write(project, FULL))
    assert config.path == project / "pyproject.toml"
    assert config.targets == ("pkg.model:update", "src/step.py")
    assert config.all_targets == ("pkg.model:update", "src/step.py", "src/step.py:step")
    assert config.options == TargetOptions(
        args="pkg.model:make_args",
        donate=DonateSpec("list", ("params", "opt_state")),
        static=StaticSpec((2, "n_steps")),
        expect="in-place",
        max_peak=64 * 1024 * 1024,
        max_live_peak=48 * 1024 * 1024,
    )
    assert (config.min_bytes, config.format, config.jobs, config.cache_dir) == (4096, "json", 2, ".jax-cache")
    assert config.fast_compile is True
    assert config.tolerance == Tolerances.parse("peak:5%,temp:1MiB")
    assert config.baseline == os.path.join("ci", "fieldmem-baseline.json")
    step, update = config.per_target
    assert step.target == "src/step.py:step"
    assert step.options == TargetOptions(shapes=(("float32", (8, 8)),), max_peak=1024 * 1024, max_live_peak=1000)
    assert update.options == TargetOptions(donate=DonateSpec("none"), new=("out.logits", "out['aux']"))


def test_the_command_line_beats_a_table_which_beats_the_config(project: Path) -> None:
    config = load_config(write(project, FULL))
    specs = ["pkg.model:update", "src/step.py:step", "other:f"]
    run, per_target = config.target_options(TargetOptions(expect="any"), specs)
    assert run.expect == "any" and run.donate == DonateSpec("list", ("params", "opt_state"))
    assert set(per_target) == {"pkg.model:update", "src/step.py:step"}  # other:f takes the run's options
    update, step = per_target["pkg.model:update"], per_target["src/step.py:step"]
    assert update.donate == DonateSpec("none") and update.expect == "any" and update.args == "pkg.model:make_args"
    # the table's shapes replace the config's args: both say where the example arguments come from
    assert (step.args, step.shapes, step.max_peak) == (None, (("float32", (8, 8)),), 1024 * 1024)
    _, overridden = config.target_options(TargetOptions(args="pkg.other:make", max_peak=5), specs)
    assert overridden["src/step.py:step"].args == "pkg.other:make"
    assert overridden["src/step.py:step"].shapes is None
    assert overridden["src/step.py:step"].max_peak == 5
    # --new on the command line replaces a table's new
    _, declared = config.target_options(TargetOptions(new=("out[1]",)), specs)
    assert declared["pkg.model:update"].new == ("out[1]",)
    assert per_target["pkg.model:update"].new == ("out.logits", "out['aux']")


def test_found_from_a_subfolder_and_paths_stay_relative_to_it(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(
        project,
        '[tool.fieldmem]\ntargets = ["src/step.py:step", "pkg.m:f"]\nbaseline = "b.json"\nargs = "src/step.py:make"\n',
    )
    (project / "src").mkdir()
    monkeypatch.chdir(project / "src")
    config = load_config()
    assert config.path == project / "pyproject.toml"
    assert config.targets == ("step.py:step", "pkg.m:f")  # a file, relative to here; a module as written
    assert config.baseline == os.path.join("..", "b.json")
    assert config.options.args == "step.py:make"


def test_a_pyproject_without_the_table_is_passed_over_up_to_the_repository(project: Path) -> None:
    write(project, '[tool.fieldmem]\ntargets = ["a:f"]\n')
    inner = project / "sub"
    write(inner, '[project]\nname = "inner"\n')
    assert find_config(inner) == project / "pyproject.toml"
    assert find_config(project.parent) is None or find_config(project.parent) != project / "pyproject.toml"
    # the search stops at the repository root
    nested = project / "vendored"
    (nested / ".git").mkdir(parents=True)
    assert find_config(nested) is None


def test_no_config_is_an_empty_one(project: Path) -> None:
    assert load_config() == Config()
    write(project, '[project]\nname = "x"\n')
    assert load_config() == Config()
    assert Config().all_targets == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[tool.fieldmem]\nmax_peak = '1MiB'\n", "has an unknown key 'max_peak': did you mean 'max-peak'?"),
        ("[tool.fieldmem]\ntarget = 'a:f'\n", "target = 'a:f' is a string: it should be [[tool.fieldmem.target]]"),
        ("[tool.fieldmem]\ntargets = 'a:f'\n", "targets = 'a:f' is a string: it should be a list of targets"),
        ("[tool.fieldmem]\ntargets = ['a:f', 3]\n", "every target must be a non-empty string"),
        ("[tool.fieldmem]\njobs = '2'\n", "jobs = '2' is a string: it should be a whole number"),
        ("[tool.fieldmem]\njobs = 0\n", "jobs = 0 must be at least 1"),
        ("[tool.fieldmem]\njobs = true\n", "jobs = True is a boolean"),
        ("[tool.fieldmem]\nfast-compile = 'yes'\n", "fast-compile = 'yes' is a string: it should be true or false"),
        ("[tool.fieldmem]\nmax-peak = 'lots'\n", "[tool.fieldmem] max-peak 'lots' is not understood: write e.g. 64MiB"),
        (
            "[tool.fieldmem]\nmax-footprint = '2MiB'\nmax-peak = '1MiB'\n",
            "max-footprint and max-peak are one budget (max-peak is its older name): keep max-footprint",
        ),
        ("[tool.fieldmem]\nmin-bytes = 1.5\n", "min-bytes = 1.5 is a float"),
        ("[tool.fieldmem]\nexpect = 'always'\n", "expect = 'always' is not known: use one of in-place, fits, any"),
        ("[tool.fieldmem]\nnew = 'logits'\n", "[tool.fieldmem] new = 'logits' is not an output path"),
        ("[tool.fieldmem]\nnew = 3\n", "new = 3 is an integer"),
        ("[[tool.fieldmem.target]]\ntarget = 'a:f'\nnew = ['out', 4]\n", "new = 4 is not an output path"),
        (
            "[tool.fieldmem]\ntolerance = 'peek:5%'\n",
            "tolerance 'peek:5%': 'peek' is not a figure: did you mean 'peak'?",
        ),
        ("[tool.fieldmem]\ntolerance = 5\n", "tolerance = 5 is an integer"),
        ("[tool.fieldmem]\ndonate = 'a b'\n", "donate 'a b': 'a b' is neither an argument number nor an argument name"),
        ("[tool.fieldmem]\nshapes = 'q7[4]'\n", "unknown dtype 'q7'"),
        ("[tool.fieldmem]\nformat = 'xml'\n", "format = 'xml' is not known: use one of table"),
        ("[tool.fieldmem]\nargs = 'a:f'\nshapes = 'f32[2]'\n", "gives both args and shapes"),
        ("[[tool.fieldmem.target]]\nargs = 'a:f'\n", "[[tool.fieldmem.target]] #1 has no target"),
        (
            "[[tool.fieldmem.target]]\ntarget = 'a:f'\nbaseline = 'x'\n",
            "[[tool.fieldmem.target]] #1 has an unknown key 'baseline'",
        ),
        (
            "[[tool.fieldmem.target]]\ntarget = 'a:f'\n[[tool.fieldmem.target]]\ntarget = 'a:f'\n",
            "#2: target 'a:f' has a table already",
        ),
        ("[[tool.fieldmem.target]]\ntarget = 'a:f'\nmax-peak = -1\n", "max-peak -1 is negative"),
        ("[tool]\nfieldmem = 3\n", "tool.fieldmem must be a table"),
        ("[tool.fieldmem\n", "is not valid TOML: "),
    ],
)
def test_mistakes_name_the_file_and_the_key(project: Path, text: str, message: str) -> None:
    path = write(project, text)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert message in error.value.message, error.value.message
    assert error.value.message.startswith("pyproject.toml"), error.value.message
    assert "\n" not in error.value.message


def test_the_footprint_budget_is_max_footprint_and_max_peak_its_older_name(project: Path) -> None:
    footprint = load_config(write(project, "[tool.fieldmem]\nmax-footprint = '2MiB'\n"))
    older = load_config(write(project, "[tool.fieldmem]\nmax-peak = '2MiB'\n"))
    assert footprint.options.max_peak == older.options.max_peak == 2 * 1024 * 1024


def test_an_unknown_key_lists_the_known_ones(project: Path) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(write(project, "[tool.fieldmem]\nfrobnicate = 1\n"))
    assert "unknown key 'frobnicate': known keys: " + ", ".join(KEYS) in error.value.message


def test_a_named_config_must_exist_and_hold_the_table(project: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape("--config 'nope.toml' does not exist")):
        load_config("nope.toml")
    write(project, '[project]\nname = "x"\n')
    with pytest.raises(ConfigError, match=r"pyproject.toml has no \[tool.fieldmem\] table"):
        load_config("pyproject.toml")
    write(project, '[tool.fieldmem]\ntolerance = "2%"\n')
    assert load_config(project).tolerance == Tolerances(default=Tolerance(relative=0.02))  # a folder works too


def test_a_broken_pyproject_on_the_way_up_is_an_error(project: Path) -> None:
    write(project, "[tool.fieldmem\n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_config()
