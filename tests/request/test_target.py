"""Target loading (``module:fn``, ``file.py:fn``, bare modules) and the registration API."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import fieldmem
from fieldmem.model.errors import ArgumentsError, OptionError, TargetError
from fieldmem.request.definitions import display_path
from fieldmem.request.loading import load_module, resolve_object
from fieldmem.request.registry import Case, registered_cases
from fieldmem.request.spec import DonateSpec, StaticSpec
from fieldmem.request.target import Target, TargetOptions, resolve_target

NO_OPTIONS = TargetOptions()


def one(spec: str, options: TargetOptions = NO_OPTIONS) -> Target:
    targets = resolve_target(spec, options)
    assert len(targets) == 1, targets
    return targets[0]


# ---- loading modules and files ------------------------------------------------


def test_module_function(in_assets: Path) -> None:
    target = one("models:step")
    module = sys.modules["models"]
    assert target.function is module.step
    assert target.spec == "models:step"
    assert target.name == "models:step"
    # the registered case for step gives its factory and expectation
    assert target.args_factory is module.make_args
    assert target.args_origin == "models:make_args"
    assert target.expect == "in-place"
    assert target.definition is not None and target.definition.endswith("models.py:17")


def test_file_function(assets: Path) -> None:
    target = one(f"{assets}/models.py:step")
    assert target.function.__name__ == "step"
    assert target.expect == "in-place"
    assert str(assets) in sys.path  # the file's folder, for its own imports


def test_relative_file_function(in_assets: Path) -> None:
    target = one("models.py:scale")
    assert target.function.__name__ == "scale"
    assert target.name == "models.py:scale"
    assert target.args_factory is None
    assert target.expect == "any"
    assert target.donate == DonateSpec() and target.static == StaticSpec()


def test_file_and_module_of_the_same_name(in_assets: Path, tmp_path: Path) -> None:
    """A file named like an already imported module gets its own module, not the other one."""
    one("models:step")
    other = tmp_path / "models.py"
    other.write_text("def step(u):\n    return u * 2\n")
    target = one(f"{other}:step")
    assert target.function is not sys.modules["models"].step
    assert target.function.__module__.startswith("_fieldmem_models_")
    # loading it again reuses the module
    assert one(f"{other}:step").function is target.function


def test_package_module_and_decorator_cases(in_assets: Path) -> None:
    targets = resolve_target("userpkg.model", NO_OPTIONS)
    assert [t.name for t in targets] == ["userpkg:set_row", "userpkg:jit_row"]
    set_row, jit_row = targets
    assert set_row.donate == DonateSpec("list", ("u",))
    assert set_row.expect == "in-place"
    assert hasattr(jit_row.function, "lower")  # the decorator returned the jit object unchanged
    assert all(t.spec == "userpkg.model" for t in targets)


def test_bare_file_gives_its_cases(in_assets: Path) -> None:
    targets = resolve_target("models.py", NO_OPTIONS)
    assert [t.name for t in targets] == ["models.py:step", "models:cast"]


def test_attribute_path(in_assets: Path) -> None:
    target = one("models:model.update")
    assert target.function == sys.modules["models"].model.update
    assert target.name == "models:model.update"


def test_jit_object_target(in_assets: Path) -> None:
    target = one("models:jitted_donating")
    assert hasattr(target.function, "lower")
    assert target.donate.mode == "auto"  # the jit object's own donation decides
    assert target.definition is not None and "models.py:" in target.definition


def test_cli_options_override_the_case(in_assets: Path) -> None:
    options = TargetOptions(
        args="models:make_args_kwargs",
        donate=DonateSpec.parse("none"),
        static=StaticSpec.parse("1"),
        expect="any",
        max_peak=4096,
        max_live_peak=2048,
    )
    target = one("models:step", options)
    assert target.args_origin == "models:make_args_kwargs"
    assert target.donate.mode == "none"
    assert target.static.items == (1,)
    assert target.expect == "any"
    assert target.max_peak == 4096 and target.max_live_peak == 2048


def test_shapes_are_held_as_data_and_the_driver_makes_them(in_assets: Path) -> None:
    """A request holds --shapes as dtype and dims; the abstract arrays are the driver's to make (the
    request layer never reaches into it), as the checker does."""
    import jax

    from fieldmem.driver import shape_structs
    from fieldmem.model.errors import ArgumentsError

    target = one("models:scale", TargetOptions(shapes=(("float32", (4, 4)), ("bfloat16", ()))))
    assert target.args_origin == "--shapes" and target.args_factory is None
    assert target.shapes == (("float32", (4, 4)), ("bfloat16", ()))
    with pytest.raises(ArgumentsError, match="its --shapes: the driver makes them"):
        target.example_arguments()
    args = shape_structs(target.shapes)
    assert [type(a) for a in args] == [jax.ShapeDtypeStruct, jax.ShapeDtypeStruct]
    assert args[0].shape == (4, 4) and args[1].dtype == jax.numpy.bfloat16


def test_module_that_is_not_on_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TargetError, match=r"module 'models' not found: is it installed"):
        resolve_target("models:step", NO_OPTIONS)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "an empty target was given"),
        ("   ", "an empty target was given"),
        ("models:", "ends with ':': name the function, e.g. models:update"),
        ("nosuchmod:step", "module 'nosuchmod' not found"),
        ("nosuchpkg.sub:step", "module 'nosuchpkg.sub' not found"),
        ("userpkg.nosuch:step", "module 'userpkg.nosuch' not found"),
        ("no such:step", "'no such' is not a module name: use the form pkg.module:function"),
        ("missing.py:step", "file 'missing.py' does not exist"),
        ("sub/missing:step", "file 'sub/missing' does not exist (a module is written pkg.module"),
        ("models:stepp", "module 'models' has no 'stepp'; did you mean 'step'?"),
        ("models.py:stepp", "module 'models.py' has no 'stepp'; did you mean 'step'?"),
        ("models:zzzz", "module 'models' has no 'zzzz'"),
        ("models:model.updat", "Model 'models:model' has no 'updat'; did you mean 'update'?"),
        ("models:model..update", "is not an attribute path"),
        ("models:NOT_A_FUNCTION", "'models:NOT_A_FUNCTION' is an int, not a function"),
        ("models:N", "'models:N' is an int, not a function"),
        ("broken_import:step", "importing 'broken_import' raised ValueError: config.yaml not found"),
        ("broken_import.py:step", "loading 'broken_import.py' raised ValueError: config.yaml not found"),
        ("broken_import", "importing 'broken_import' raised ValueError"),
        ("exits_at_import.py:step", "raised SystemExit(3)"),
        ("exits_at_import:step", "raised SystemExit(3)"),
        (
            "userpkg.broken:step",
            "importing 'userpkg.broken' raised ModuleNotFoundError: No module named 'fieldmem_no_such_dependency'",
        ),
        ("no_cases", "'no_cases' registers no fieldmem.case(...): name a function instead (e.g. no_cases:update)"),
        ("no_cases.py", "registers no fieldmem.case"),
        ("userpkg", "'userpkg' registers no fieldmem.case"),
    ],
)
def test_bad_targets(in_assets: Path, spec: str, message: str) -> None:
    with pytest.raises(TargetError) as info:
        resolve_target(spec, NO_OPTIONS)
    assert message in info.value.message
    assert "\n" not in info.value.message
    assert info.value.exit_code == 2


def test_broken_module_is_not_left_half_imported(in_assets: Path) -> None:
    with pytest.raises(TargetError):
        load_module("broken_import.py")
    assert "broken_import" not in sys.modules
    with pytest.raises(TargetError, match=re.escape("config.yaml")):  # and fails the same way again
        load_module("broken_import.py")


def test_attribute_that_raises(in_assets: Path) -> None:
    class Holder:
        @property
        def step(self) -> None:
            raise RuntimeError("lazy init failed")

    module = load_module("models")
    module.holder = Holder()  # type: ignore[attr-defined]
    try:
        with pytest.raises(TargetError, match=r"reading 'step' of 'models:holder' raised RuntimeError: lazy init"):
            resolve_object(module, "models", "holder.step")
    finally:
        del module.holder  # type: ignore[attr-defined]


# ---- example arguments --------------------------------------------------------


def test_factory_returning_a_tuple(in_assets: Path) -> None:
    args, kwargs = one("models:step").example_arguments()
    assert [a.shape for a in args] == [(32, 32), (32,)] and kwargs == {}


@pytest.mark.parametrize(
    ("factory", "kwarg_names"),
    [("make_args_list", []), ("make_args_kwargs", ["row"]), ("make_abstract", [])],
)
def test_factory_forms(in_assets: Path, factory: str, kwarg_names: list[str]) -> None:
    args, kwargs = one("models:step", TargetOptions(args=f"models:{factory}")).example_arguments()
    assert isinstance(args, tuple)
    assert list(kwargs) == kwarg_names
    assert len(args) + len(kwargs) == 2


def test_factory_from_a_file(in_assets: Path) -> None:
    target = one("models:step", TargetOptions(args="models.py:make_u"))
    assert target.args_origin == "models.py:make_u"
    args, _ = target.example_arguments()
    assert len(args) == 1


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("models:factory_raises", "args factory models:factory_raises raised RuntimeError: no data file here"),
        ("models:factory_returns_array", "returned a ndarray, not an argument tuple"),
        ("models:factory_returns_none", "returned a NoneType, not an argument tuple"),
    ],
)
def test_bad_factory_results(in_assets: Path, factory: str, message: str) -> None:
    target = one("models:step", TargetOptions(args=factory))  # the factory is not called yet
    with pytest.raises(ArgumentsError) as info:
        target.example_arguments()
    assert message in info.value.message
    assert "\n" not in info.value.message


def test_factory_that_exits(in_assets: Path) -> None:
    target = one("models:scale")
    target = Target(**{**target.__dict__, "args_factory": lambda: sys.exit("bye"), "args_origin": "f"})
    with pytest.raises(ArgumentsError, match="args factory f raised SystemExit: bye"):
        target.example_arguments()


def test_no_example_arguments(in_assets: Path) -> None:
    with pytest.raises(ArgumentsError, match=r"no example arguments for models.py:scale: pass --args"):
        one("models.py:scale").example_arguments()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("models:NOT_A_FACTORY", "--args 'models:NOT_A_FACTORY' is a tuple, not a callable"),
        ("models:nofactory", "--args 'models:nofactory': module 'models' has no 'nofactory'"),
        ("models:make_arg", "did you mean 'make_args'?"),
        ("nomodule:f", "--args 'nomodule:f': module 'nomodule' not found"),
        ("models", "--args 'models': the target's module 'models' has no 'models'"),
        ("make_arg", "did you mean 'make_args'?"),
        ("NOT_A_FACTORY", "--args 'NOT_A_FACTORY' is a tuple, not a callable"),
        ("models:", "--args 'models:' is not FACTORY or MODULE:FACTORY"),
        (":make_args", "--args ':make_args' is not FACTORY or MODULE:FACTORY"),
        ("broken_import:f", "--args 'broken_import:f': importing 'broken_import' raised ValueError"),
    ],
)
def test_bad_args_option(in_assets: Path, args: str, message: str) -> None:
    with pytest.raises(ArgumentsError) as info:
        resolve_target("models:step", TargetOptions(args=args))
    assert message in info.value.message


@pytest.mark.parametrize("spec", ["models:step", "models.py:step", "models:step,step"])
def test_args_bare_factory_in_target_module(in_assets: Path, spec: str) -> None:
    """``--args make_args`` is the factory beside the target; ``MODULE:FACTORY`` names the same one."""
    (bare,) = resolve_target(spec, TargetOptions(args="make_args"))
    (prefixed,) = resolve_target(spec, TargetOptions(args="models:make_args"))
    first = getattr(bare, "first", bare)
    other = getattr(prefixed, "first", prefixed)
    assert first.args_factory is other.args_factory
    assert first.args_factory.__name__ == "make_args"
    assert first.args_origin.endswith(":make_args")
    args, _ = first.example_arguments()
    assert len(args) == len(other.example_arguments()[0])


# ---- the registration API -----------------------------------------------------


def _make() -> tuple:
    return ()


def test_case_registers_under_the_calling_module() -> None:
    def update(u):  # type: ignore[no-untyped-def]
        return u

    returned = fieldmem.case(
        update, args=_make, name="mine", donate="0", static="n", expect="in-place", max_peak="1KiB"
    )
    assert returned is update
    (case,) = [c for c in registered_cases(__name__) if c.function is update]
    assert case == Case(
        function=update,
        args=_make,
        name="mine",
        donate=DonateSpec("list", (0,)),
        static=StaticSpec(("n",)),
        expect="in-place",
        max_peak=1024,
        module=__name__,
    )


def test_case_as_a_decorator() -> None:
    @fieldmem.case(args=_make, max_peak=2048, max_live_peak="1KiB")
    def update(u):  # type: ignore[no-untyped-def]
        return u

    assert callable(update) and update.__name__ == "update"
    (case,) = [c for c in registered_cases(__name__) if c.function is update]
    assert case.max_peak == 2048 and case.max_live_peak == 1024 and case.expect is None and case.donate == DonateSpec()


def test_case_defaults() -> None:
    def update(u):  # type: ignore[no-untyped-def]
        return u

    fieldmem.case(update)
    (case,) = [c for c in registered_cases(__name__) if c.function is update]
    assert (case.args, case.name, case.expect, case.max_peak) == (None, None, None, None)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"expect": "sometimes"}, "expect='sometimes' is not known: use one of in-place, fits, any"),
        ({"donate": "a b"}, "donate='a b': 'a b' is neither an argument number nor an argument name"),
        ({"donate": -1}, "donate=-1: argument numbers start at 0"),
        ({"donate": 1.5}, "donate=1.5 is not understood: use 'all', 'none'"),
        ({"static": 2.0}, "static=2.0 is not understood"),
        ({"static": [-1]}, "argument numbers start at 0"),
        ({"max_peak": "lots"}, "max_peak='lots' is not understood: write e.g. 64MiB"),
        ({"max_peak": -1}, "max_peak=-1 is negative"),
        ({"args": (1, 2)}, "fieldmem.case(args=...) must be a callable returning the arguments, got tuple"),
        ({"name": ""}, "fieldmem.case(name='') must be a non-empty string"),
    ],
)
def test_case_rejects_bad_values(kwargs: dict, message: str) -> None:
    def update(u):  # type: ignore[no-untyped-def]
        return u

    with pytest.raises(OptionError) as info:
        fieldmem.case(update, **kwargs)
    assert message in info.value.message
    assert not [c for c in registered_cases(__name__) if c.function is update]


def test_case_rejects_a_non_callable() -> None:
    with pytest.raises(OptionError, match="registers a function, got int"):
        fieldmem.case(42)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="registers a function, got str"):
        fieldmem.case(args=_make)("step")


def test_reimporting_a_module_does_not_register_its_cases_twice(in_assets: Path) -> None:
    """Dropping a module from sys.modules and importing it again gives fresh cases, not doubled ones."""
    load_module("models")
    assert [c.function.__name__ for c in registered_cases("models")] == ["step", "cast"]
    del sys.modules["models"]
    targets = resolve_target("models", NO_OPTIONS)
    assert [t.name for t in targets] == ["models:step", "models:cast"]


def test_registration_imports_nothing_heavy() -> None:
    import subprocess

    code = (
        "import sys, fieldmem\n"
        "fieldmem.case(lambda u: u, args=lambda: (), donate='all', max_peak='1MiB')\n"
        "print('jax' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


# ---- options in layers, and per target ------------------------------------------


def test_options_stack_strongest_last() -> None:
    config = TargetOptions(args="pkg:make", donate=DonateSpec("all"), expect="in-place", max_peak=10)
    command_line = TargetOptions(shapes=(("float32", (2,)),), max_peak=20)
    stacked = config.overridden_by(command_line)
    # args and shapes are one setting: the stronger layer gives both
    assert (stacked.args, stacked.shapes) == (None, (("float32", (2,)),))
    assert (stacked.donate, stacked.expect, stacked.max_peak) == (DonateSpec("all"), "in-place", 20)
    assert config.overridden_by(TargetOptions()) == config
    assert TargetOptions().overridden_by(config) == config


def test_each_spec_gets_its_own_options(in_assets: Path) -> None:
    from fieldmem.parent.checker import resolve_all

    run = TargetOptions(expect="any")
    resolved = resolve_all(
        ["models:step", "models.py:step"], run, {"models.py:step": TargetOptions(donate=DonateSpec("none"))}
    )
    by_spec = {t.spec: t for t in resolved if isinstance(t, Target)}
    assert by_spec["models:step"].expect == "any" and by_spec["models:step"].donate == DonateSpec()
    assert by_spec["models.py:step"].donate == DonateSpec("none")
    assert by_spec["models.py:step"].expect == "in-place"  # not given for it: the case's own


def test_a_file_of_an_installed_package_is_shown_from_the_package_on() -> None:
    """The same on every machine and venv, so a baseline saved elsewhere matches."""
    assert display_path("/opt/venv/lib/python3.11/site-packages/optax/_src/numerics.py") == "optax/_src/numerics.py"
    assert display_path("/usr/lib/python3/dist-packages/flax/linen/linear.py") == "flax/linen/linear.py"
    assert display_path("/a/site-packages/b/site-packages/pkg/mod.py") == "pkg/mod.py"
    assert display_path("/etc/site-packages.py") == "/etc/site-packages.py"


def test_a_file_is_shown_from_the_working_directory_of_the_moment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shown names are cached per working directory: a change of it changes them."""
    (tmp_path / "pkg").mkdir()
    file = str(tmp_path / "pkg" / "model.py")
    monkeypatch.chdir(tmp_path)
    assert display_path(file) == "pkg/model.py"
    monkeypatch.chdir(tmp_path / "pkg")
    assert display_path(file) == "model.py"
    assert display_path(file, cwd=str(tmp_path)) == "pkg/model.py"
    monkeypatch.chdir("/")
    assert display_path("pkg/model.py", cwd=str(tmp_path)) == "pkg/model.py"


DUPLICATE_NAMES = """\
import jax.numpy as jnp
import fieldmem


def make():
    return (jnp.zeros((64, 64)),)


def good(u):
    return u + 1


def bad(u):
    return u.T + 1


fieldmem.case({first}, args=make, name="step", expect="in-place")
fieldmem.case({second}, args=make, name="step", expect="in-place")
"""


@pytest.mark.compile
@pytest.mark.parametrize("isolate", [True, False], ids=["worker", "in-process"])
@pytest.mark.parametrize(("first", "second"), [("good", "bad"), ("bad", "good")])
def test_two_cases_of_one_name_are_never_one_verdict_twice(
    tmp_path: Path, isolate: bool, first: str, second: str
) -> None:
    """Issue 29, item 7: two cases named alike gave two rows, and the worker (which answers by name) gave
    the second's verdict for both: with the bad case second, a pass. Now the first is checked, the second
    is an error that says why (exit 2), in the worker and in-process alike."""
    import json
    import os
    import subprocess

    (tmp_path / "dup.py").write_text(DUPLICATE_NAMES.format(first=first, second=second))
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", "dup.py", "-f", "json", "--no-cache"]
        + ([] if isolate else ["--no-isolate"]),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(root)),
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    results = json.loads(done.stdout)["results"]
    assert [r["name"] for r in results] == ["step", "step (2)"]
    assert results[0]["verdict"]["in_place"] is (first == "good")
    assert results[1]["status"] == "error"
    assert "more than one case named 'step'" in results[1]["error"]["message"]
