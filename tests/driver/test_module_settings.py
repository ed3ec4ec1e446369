"""A module's own settings for jax are in force when it is checked (issue 28, part 4).

A script that begins with ``os.environ["XLA_FLAGS"] =
"--xla_force_host_platform_device_count=4"`` (or ``JAX_ENABLE_X64=1``, or
``jax.config.update(...)``) before it uses jax runs with them under
``python``; ``fieldmem check`` imports the first module before jax starts in
its worker, so they are in force there too, and checks a module that sets
jax otherwise than the one in force in a fresh worker of its own
(fieldmem/driver/settings.py, docs/isolation.md). The real command runs in a
subprocess, as a user runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fieldmem.driver.backends import device_count, with_device_count
from fieldmem.model.environment import ModuleSettings
from fieldmem.model.report import Report
from fieldmem.render.pieces import module_settings_text

ROOT = Path(__file__).resolve().parents[2]

# a field split by rows over 4 devices: the sharding needs the 4 devices the module asks for at its top
FOUR_DEVICES = """\
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

import fieldmem


def relax(u, f):
    return u + 0.5 * (f - u)


def state():
    mesh = jax.make_mesh((4,), ("x",))
    rows = NamedSharding(mesh, P("x"))
    return (jax.device_put(jnp.zeros((64, 8)), rows), jax.device_put(jnp.ones((64, 8)), rows))


fieldmem.case(relax, args=state, name="relax", donate="u", expect="in-place")
"""


def _step(name: str, top: str = "") -> str:
    """A module, after ``top``, whose one case doubles a vector of jax's default dtype split over every
    device jax has (the result's ``devices`` say how many)."""
    return top + textwrap.dedent(
        f"""\
        import jax
        import jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec as P

        import fieldmem


        def {name}(u):
            return u * 2.0


        def vector():
            mesh = jax.make_mesh((jax.device_count(),), ("x",))
            return (jax.device_put(jnp.zeros((384,)), NamedSharding(mesh, P("x"))),)


        fieldmem.case({name}, args=vector, name="{name}", donate="u")
        """
    )


X64_BY_CONFIG = _step("by_config").replace(
    "import jax.numpy as jnp\n", 'import jax.numpy as jnp\n\njax.config.update("jax_enable_x64", True)\n', 1
)
X64_BY_ENVIRONMENT = _step("by_environment", 'import os\n\nos.environ["JAX_ENABLE_X64"] = "1"\n\n')
TWO_DEVICES = _step("two", 'import os\n\nos.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"\n\n')
CPU_DEVICES_BY_CONFIG = _step("by_count").replace(
    "import jax.numpy as jnp\n", 'import jax.numpy as jnp\n\njax.config.update("jax_num_cpu_devices", 4)\n', 1
)
PLAIN = _step("plain")


def _run(folder: Path, *args: str, platforms: str | None = "cpu") -> subprocess.CompletedProcess[str]:
    temp = folder / "tmp"
    temp.mkdir(exist_ok=True)
    env = dict(os.environ, COLUMNS="200", TMPDIR=str(temp), PYTHONPATH=str(ROOT))
    for name in ("FORCE_COLOR", "XLA_FLAGS", "JAX_ENABLE_X64", "JAX_PLATFORMS"):
        env.pop(name, None)
    if platforms is not None:
        env["JAX_PLATFORMS"] = platforms
    return subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", *args, "-f", "json", "--no-cache"],
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
        timeout=300,
    )


def _check(folder: Path, *args: str) -> dict[str, Any]:
    done = _run(folder, *args)
    assert done.returncode in (0, 1), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _results(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {result["name"]: result for result in report["results"]}


def _settings(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["target"]: entry for entry in report.get("module_settings", [])}


@pytest.mark.compile
def test_a_module_that_asks_for_four_devices_at_its_top_is_checked_on_four(tmp_path: Path) -> None:
    (tmp_path / "field.py").write_text(FOUR_DEVICES)
    report = _check(tmp_path, "field.py", "--run")  # no --devices
    assert len(report["devices"]) == 4
    relax = _results(report)["relax"]
    assert relax["status"] == "ok", relax["error"]
    assert relax["devices"] == [0, 1, 2, 3]
    assert [leaf["device_shape"] for leaf in relax["inputs"]] == [[16, 8], [16, 8]]  # a quarter on each
    assert relax["verdict"]["kind"] == "in-place"
    run = relax["variants"]["donated"]["run"]
    assert run is not None and all(alias["confirmed"] for alias in run["aliases"])  # on every shard
    assert _settings(report) == {
        "field.py": {
            "target": "field.py",
            "environment": {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"},
            "config": {},
            "note": None,
            "replaced": {},
        }
    }


@pytest.mark.compile
def test_each_module_is_checked_with_its_own_settings_in_one_run(tmp_path: Path) -> None:
    """Four modules, three setting jax each its own way: each is checked as ``python`` would run it alone
    (those that set it otherwise than the first in a worker of their own)."""
    for name, text in [
        ("plain.py", PLAIN),
        ("by_config.py", X64_BY_CONFIG),
        ("by_environment.py", X64_BY_ENVIRONMENT),
        ("two.py", TWO_DEVICES),
    ]:
        (tmp_path / name).write_text(text)
    report = _check(tmp_path, "plain.py", "by_config.py", "by_environment.py", "two.py")
    results = _results(report)
    assert all(r["status"] == "ok" for r in results.values()), [r["error"] for r in results.values()]
    dtypes = {name: [leaf["dtype"] for leaf in r["inputs"]] for name, r in results.items()}
    assert dtypes == {
        "plain": ["float32"],
        "by_config": ["float64"],  # jax.config.update at import
        "by_environment": ["float64"],  # JAX_ENABLE_X64 set before jax is imported
        "two": ["float32"],
    }
    assert {name: r["devices"] for name, r in results.items()} == {
        "plain": [0],
        "by_config": [0],
        "by_environment": [0],
        "two": [0, 1],
    }
    assert len(report["devices"]) == 1  # the header is the first worker's: the first module's jax
    settings = _settings(report)
    assert set(settings) == {"by_config.py", "by_environment.py", "two.py"}
    assert settings["by_config.py"]["config"] == {"jax_enable_x64": "True"}
    assert settings["by_environment.py"]["environment"] == {"JAX_ENABLE_X64": "1"}
    assert settings["two.py"]["environment"] == {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}


@pytest.mark.compile
def test_devices_wins_over_a_modules_own_count_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "two.py").write_text(TWO_DEVICES)
    (tmp_path / "by_count.py").write_text(CPU_DEVICES_BY_CONFIG)
    report = _check(tmp_path, "two.py", "by_count.py", "--devices", "3")
    results = _results(report)
    assert {name: r["devices"] for name, r in results.items()} == {"two": [0, 1, 2], "by_count": [0, 1, 2]}
    settings = _settings(report)
    assert settings["two.py"]["note"] == "--devices 3 wins over its own count of 2 CPU devices"
    assert settings["two.py"]["environment"] == {}  # its XLA_FLAGS, with the count of --devices, are fieldmem's
    assert settings["by_count.py"]["note"] == "--devices 3 wins over its own count of 4 CPU devices"
    assert settings["by_count.py"]["config"] == {"jax_num_cpu_devices": "3"}


@pytest.mark.compile
def test_a_module_that_starts_jax_at_its_top_starts_it_quiet(tmp_path: Path) -> None:
    """jax's backends start in the module now, not in fieldmem first: the accelerator plugins' known start-up
    noise (with jax's CUDA plugin or libtpu installed and no such device) stays off stderr all the same."""
    from fieldmem.driver.quiet import known_noise

    (tmp_path / "top.py").write_text(_step("top", "import jax\n\nDEVICES = jax.devices()\n\n"))
    done = _run(tmp_path, "top.py", platforms=None)  # every plugin installed is started
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert known_noise(lines) == lines, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.compile
def test_watch_checks_a_module_whose_settings_changed_in_a_fresh_worker(tmp_path: Path) -> None:
    """The worker --watch keeps has jax started: an edit that asks for other devices is checked by a new one."""
    from fieldmem.parent.isolate import Unit, WatchSession
    from fieldmem.request.options import CheckOptions
    from fieldmem.request.target import TargetOptions

    module = tmp_path / "two.py"
    module.write_text(TWO_DEVICES)
    here = os.getcwd()
    saved = {name: os.environ.get(name) for name in ("XLA_FLAGS", "JAX_PLATFORMS", "TMPDIR")}
    os.environ.pop("XLA_FLAGS", None)
    os.environ.update(JAX_PLATFORMS="cpu", TMPDIR=str(tmp_path))
    os.chdir(tmp_path)
    session = WatchSession([Unit("two.py", TargetOptions())], [None], CheckOptions(), check_backends=False)
    try:
        (first,) = session.check()
        assert first.results[0].devices == (0, 1)
        module.write_text(TWO_DEVICES.replace("count=2", "count=4"))
        recheck = session.recheck([str(module.resolve())])
        (again,) = recheck.reports
        assert again.results[0].status == "ok"
        assert again.results[0].devices == (0, 1, 2, 3)
        assert recheck.restarted == 1
        assert again.module_settings[0].environment == {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    finally:
        session.close()
        os.chdir(here)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def test_the_device_count_of_xla_flags_is_read_and_replaced() -> None:
    flags = "--xla_cpu_foo=1 --xla_force_host_platform_device_count=4"
    assert device_count(flags) == 4 and device_count("") is None
    assert device_count(flags + " --xla_force_host_platform_device_count=2") == 2  # the last one given
    assert with_device_count(flags, 8) == "--xla_cpu_foo=1 --xla_force_host_platform_device_count=8"
    assert with_device_count("", 3) == "--xla_force_host_platform_device_count=3"


def test_module_settings_travel_in_the_json_and_show_in_the_header() -> None:
    from factories import make_report, make_result

    settings = (
        ModuleSettings("field.py", environment={"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}),
        ModuleSettings("x64.py", config={"jax_enable_x64": "True"}, note="--devices 2 wins over its own count"),
        ModuleSettings("gone.py", environment={"JAX_PLATFORMS": None}),
    )
    assert module_settings_text(make_report((make_result(),))) is None
    report = Report.from_dict(json.loads(json.dumps(make_report((make_result(),), module_settings=settings).to_dict())))
    assert report.module_settings == settings
    assert module_settings_text(report) == (
        "field.py set XLA_FLAGS=--xla_force_host_platform_device_count=4; "
        "x64.py set jax_enable_x64=True (--devices 2 wins over its own count); gone.py set JAX_PLATFORMS unset"
    )
    from fieldmem.render import RenderOptions
    from fieldmem.render.table import render

    header = render(report, RenderOptions(width=400, color=False)).splitlines()[0]
    assert header.endswith(" · " + module_settings_text(report))  # type: ignore[operator]
    # a report written before module_settings existed reads as one with none
    document = report.to_dict()
    del document["module_settings"]
    assert Report.from_dict(document).module_settings == ()


# ---- issue 49: a module that patches jax cannot change another module's targets ----------------------------

GOOD = """\
import jax
import jax.numpy as jnp
import fieldmem


def step(u):
    return u.at[0].set(1.0)


fieldmem.case(jax.jit(step, donate_argnums=0), args=lambda: (jnp.ones((64, 64)),), name="good", expect="in-place")
"""

# replaces jax.jit by one that drops the donation
DROPS_DONATION = """\
import jax
import jax.numpy as jnp
import fieldmem

_jit = jax.jit


def no_donation_jit(fun, *args, **kwargs):
    kwargs.pop("donate_argnums", None)
    return _jit(fun, *args, **kwargs)


jax.jit = no_donation_jit


def step(u):
    return u.at[0].set(2.0)


fieldmem.case(jax.jit(step, donate_argnums=0), args=lambda: (jnp.ones((64, 64)),), name="patched")
"""

# replaces jax.jit by one that raises
BREAKS_JIT = """\
import jax
import jax.numpy as jnp
import fieldmem


def broken(*args, **kwargs):
    raise RuntimeError("this jit refuses")


jax.jit = broken


def step(u):
    return u + 1.0


fieldmem.case(step, args=lambda: (jnp.ones((64, 64)),), name="broken")
"""


@pytest.mark.compile
@pytest.mark.parametrize("patcher", ["drops.py", "breaks.py"])
@pytest.mark.parametrize("first", [True, False], ids=["patcher-first", "patcher-second"])
def test_a_module_that_patches_jax_changes_only_its_own_targets(tmp_path: Path, patcher: str, first: bool) -> None:
    """Beside a module replacing jax.jit, good.py was "not in place" (exit 1), or errored "a fieldmem bug"
    when the replacement raised; alone it is in place."""
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "drops.py").write_text(DROPS_DONATION)
    (tmp_path / "breaks.py").write_text(BREAKS_JIT)
    done = _run(tmp_path, *((patcher, "good.py") if first else ("good.py", patcher)))
    assert done.returncode in (0, 1, 2) and "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    results = _results(report)
    good = results["good"]
    assert good["status"] == "ok" and good["verdict"]["kind"] == "in-place", good
    assert [c["passed"] for c in good["checks"]] == [True]
    if patcher == "drops.py":  # its own targets are checked with its jit: no donation
        assert results["patched"]["verdict"]["kind"] == "not-in-place"
        expected = f"{patcher.removesuffix('.py')}.no_donation_jit"
    else:  # its own target meets the jit it installed
        assert results["broken"]["status"] == "error" and "this jit refuses" in results["broken"]["error"]["message"]
        expected = "breaks.broken"
    settings = _settings(report)
    assert settings[patcher]["replaced"] == {"jax.jit": expected}
    assert "good.py" not in settings


def test_what_a_load_replaced_in_jax_is_measured_and_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's measure: what one load replaced, against what was in force before it; undone where the
    module is not checked."""
    import jax.numpy as jnp

    from fieldmem.driver import settings

    monkeypatch.setattr(settings, "_pristine", {})
    settings._keep_pristine()
    original = jnp.zeros
    assert settings.replaced_in_jax() == {}
    before = settings.replaced_in_jax()
    monkeypatch.setattr(jnp, "zeros", len)
    replaced = settings._replaced_by_load(before, settings.replaced_in_jax())
    assert replaced == {"jax.numpy.zeros": (original, len)}
    assert settings._described(len) == "builtins.len"
    settings._put_back(replaced)
    assert jnp.zeros is original and settings.replaced_in_jax() == {}
    # a load that changes nothing replaces nothing, though a replacement is in force
    monkeypatch.setattr(jnp, "zeros", len)
    now = settings.replaced_in_jax()
    assert settings._replaced_by_load(now, settings.replaced_in_jax()) == {}


def test_what_a_module_replaced_travels_in_the_json_and_shows_in_the_header() -> None:
    from factories import make_report, make_result

    settings = (ModuleSettings("patch.py", replaced={"jax.jit": "patch.my_jit"}),)
    report = Report.from_dict(json.loads(json.dumps(make_report((make_result(),), module_settings=settings).to_dict())))
    assert report.module_settings == settings
    assert module_settings_text(report) == "patch.py replaced jax.jit with patch.my_jit (for its own targets)"
    document = report.to_dict()
    del document["module_settings"][0]["replaced"]  # a report written before issue 49
    assert Report.from_dict(document).module_settings == (ModuleSettings("patch.py"),)
