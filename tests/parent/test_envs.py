"""Cached environments with another jax (fieldmem/parent/envs.py, ``fieldmem envs``; issue 33, item 1).

The tests marked ``compile`` make one real environment (``jax==0.9.2 jaxlib==0.9.2``, from the package
index: pip's cache makes it a download once), shared by the module, and ask the index about a release it
does not have. The others stand in for the installer: its output (the one-line errors read from pip's and
uv's words), a creation killed on the way, two creations at once, the index out of reach (a port nothing
listens on: refused at once), the folders and the command line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fieldmem.frontends.cli import app
from fieldmem.model.errors import EnvError
from fieldmem.parent import env_install, envs
from fieldmem.parent.envs import (
    MARKER,
    EnvRequest,
    Installer,
    JaxEnv,
    ensure_env,
    env_root,
    list_envs,
    remove_env,
    worker_environment,
)

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "envs"
    monkeypatch.setenv("FIELDMEM_ENVS", str(folder))
    return folder


def _pip_only(monkeypatch: pytest.MonkeyPatch, index: str | None = None) -> None:
    """pip as the installer, reading no configuration file of this machine (its extra indexes, links)."""
    monkeypatch.setenv("FIELDMEM_INSTALLER", "pip")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    if index is not None:
        monkeypatch.setenv("PIP_INDEX_URL", index)


def _fake_env(root: Path, version: str, *, marker: bool = True, holds: str | None = None, **asked: object) -> Path:
    """A stand-in for a made environment: a folder named as ``ensure_env`` names it, its ``bin/python`` a link
    to this Python, jax and jaxlib of ``holds`` (default: ``version``) in its site-packages as an installer
    puts them (a package, its dist-info and the RECORD listing its files), and (``marker``) its marker."""
    request = envs._request(version, (), None, ())
    request = EnvRequest(**{**request.as_json(), **asked}) if asked else request  # type: ignore[arg-type]
    folder = root / request.folder_name
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").symlink_to(sys.executable)
    site = folder / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    for name in ("jax", "jaxlib"):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("")
        info = site / f"{name}-{holds or version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {holds or version}\n")
        record = [f"{name}/__init__.py,,", f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
        (info / "RECORD").write_text("\n".join(record) + "\n")
    if marker:
        installed = {"jax": version, "jaxlib": version, "numpy": "2.0.0"}
        data = envs._marker(request, installed, Installer("pip", (), "26.0"), set())
        (folder / MARKER).write_text(json.dumps(data))
    return folder


# ----------------------------------------------------------------------------
# The requests, and where environments live


def test_env_root_is_fieldmem_envs_else_the_xdg_cache_else_the_home_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIELDMEM_ENVS", "/somewhere/envs")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert env_root() == Path("/somewhere/envs")
    monkeypatch.delenv("FIELDMEM_ENVS")
    assert env_root() == Path("/xdg/fieldmem/envs")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", "/home/someone")
    assert env_root() == Path("/home/someone/.cache/fieldmem/envs")


def test_a_backend_kind_stands_for_its_compilers_at_that_jax_and_each_request_has_its_folder() -> None:
    plain = envs._request("0.9.2", (), None, ())
    tpu = envs._request("0.9.2", ("tpu",), None, ())
    gpu = envs._request("0.8.1", ("gpu",), None, ("flax",))
    assert plain.folder_name == f"jax-0.9.2-py{sys.version_info[0]}{sys.version_info[1]}"
    assert tpu.plugins == ("jax[tpu]==0.9.2",)  # jax's own extra pins the libtpu of that release
    assert set(gpu.plugins) == {"jax-cuda12-plugin==0.8.1", "jax-cuda12-pjrt==0.8.1", "nvidia-cuda-nvcc-cu12>=12.6.85"}
    assert gpu.requirement_lines[:2] == ("jax==0.8.1", "jaxlib==0.8.1")
    names = {
        plain.folder_name,
        tpu.folder_name,
        gpu.folder_name,
        envs._request("0.9.2", (), None, ("flax",)).folder_name,
    }
    assert len(names) == 4 and all(re.match(r"^jax-0\.\d\.\d-py\d+(-[0-9a-f]{8})?$", name) for name in names)
    assert envs._request("0.9.2", (), None, ("optax", "flax")) == envs._request("0.9.2", (), None, ("flax", "optax"))


@pytest.mark.parametrize(
    ("version", "packages", "expected"),
    [
        ("latest", (), "'latest' is not a jax release: name one as 0.9.2"),
        ("0.9.2 --pre", (), "is not a jax release"),
        ("0.9.2", ("--index-url=http://elsewhere",), "package '--index-url=http://elsewhere' is not a requirement"),
    ],
)
def test_a_request_that_is_not_one_is_one_line(
    root: Path, version: str, packages: tuple[str, ...], expected: str
) -> None:
    with pytest.raises(EnvError, match=re.escape(expected)) as caught:
        ensure_env(version, packages=packages)
    assert "\n" not in str(caught.value)
    assert not root.exists()  # refused before anything is made


def test_an_unreadable_requirements_file_is_one_line(root: Path, tmp_path: Path) -> None:
    with pytest.raises(EnvError, match=r"cannot read the requirements file '.*missing\.txt'"):
        ensure_env("0.9.2", requirements=tmp_path / "missing.txt")


# ----------------------------------------------------------------------------
# What went wrong, read from the installer's words

_PIP_CONFLICT = """\
ERROR: Cannot install flax==0.12.3, flax==0.12.8 and jax==0.7.1 because these package versions have conflicting dependencies.

The conflict is caused by:
    The user requested jax==0.7.1
    flax 0.12.8 depends on jax>=0.10.0
    flax 0.12.3 depends on jax>=0.8.1

ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/
"""
_UV_CONFLICT = """\
error: No solution found when resolving dependencies
  cause: Because the current Python version (3.11.7) does not satisfy Python>=3.12 and all of:
             flax>=0.12.9,<=0.12.10
         depend on Python>=3.12, we can conclude that all of:
             flax>=0.12.9,<=0.12.10
          cannot be used.
         And because flax>=0.12.7,<=0.12.8 depends on jax>=0.10.0, we can conclude that flax>=0.12.7 depends on jax>=0.10.0.
         And because you require jax==0.9.2 and flax>=0.12.7, we can conclude that your requirements are unsatisfiable.
"""
_PIP_MISSING = """\
ERROR: Ignored the following versions that require a different python version: 0.11.0 Requires-Python >=3.12; 0.11.1 Requires-Python >=3.12
ERROR: Could not find a version that satisfies the requirement jax==0.9.7 (from versions: 0.9.1, 0.9.2, 0.10.2, 0.11.0)
ERROR: No matching distribution found for jax==0.9.7
"""
_PIP_OFFLINE = """\
WARNING: Retrying (Retry(total=0)) after connection broken by 'NewConnectionError("HTTPConnection(host='127.0.0.1', port=9): Failed to establish a new connection: [Errno 111] Connection refused")': /jax/
ERROR: Could not find a version that satisfies the requirement jax==0.9.2 (from versions: none)
ERROR: No matching distribution found for jax==0.9.2
"""
_UV_OFFLINE = """\
error: Request failed after 1 retry
  Caused by: Failed to fetch: `http://127.0.0.1:9/jax/`
  Caused by: error sending request for url (http://127.0.0.1:9/jax/)
  Caused by: tcp connect error
  Caused by: Connection refused (os error 111)
"""


def _said(log: str, version: str = "0.9.2", packages: tuple[str, ...] = (), status: int = 1) -> str:
    request = EnvRequest(version=version, packages=tuple(sorted(set(packages))))  # any version: as the index names it
    message = str(
        env_install.install_failure(request, Installer("pip", (), "26.0"), log, Path("/envs/jax.log"), status)
    )
    assert "\n" not in message
    return message


def test_no_compatible_set_names_the_package_that_blocks_it_from_pips_and_uvs_words() -> None:
    assert _said(_PIP_CONFLICT, "0.7.1", ("flax>=0.12.3",)) == (
        "flax 0.12.8 needs jax>=0.10.0: no flax works with jax 0.7.1 (the installer's log: /envs/jax.log)"
    )
    assert _said(_UV_CONFLICT, "0.9.2", ("flax>=0.12.7",)) == (
        "flax>=0.12.7,<=0.12.8 needs jax>=0.10.0: no flax works with jax 0.9.2 (the installer's log: /envs/jax.log)"
    )


def test_a_release_the_index_lacks_is_named_with_the_ones_it_has_and_one_for_another_python() -> None:
    assert _said(_PIP_MISSING, "0.9.7") == "jax 0.9.7 is not on the package index (it has 0.11.0, 0.10.2, 0.9.2, 0.9.1)"
    missing_new = _PIP_MISSING.replace("0.9.7", "0.11.0")
    assert _said(missing_new, "0.11.0").startswith("jax 0.11.0 needs Python >=3.12; fieldmem runs on Python ")
    uv = "error: No solution found\n  cause: Because there is no version of jaxlib==0.9.0.1 and you require it, we can"
    assert _said(uv, "0.9.0.1").startswith("jaxlib 0.9.0.1 is not on the package index")


def test_an_index_out_of_reach_says_the_environment_is_not_cached() -> None:
    for log in (_PIP_OFFLINE, _UV_OFFLINE):
        assert _said(log).startswith(
            "no environment for jax 0.9.2 is cached and the package index cannot be reached: "
        ), log


def test_another_failure_gives_the_installers_last_error_and_its_log() -> None:
    said = _said("Collecting jax==0.9.2\nERROR: Could not install packages due to an OSError: disk full\n")
    assert said == (
        "installing jax 0.9.2 failed (pip exit status 1): ERROR: Could not install packages due to an OSError: "
        "disk full (the installer's log: /envs/jax.log)"
    )


def test_an_index_out_of_reach_is_one_line_within_seconds_and_leaves_only_the_log(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip, pointed at a port nothing listens on (``PIP_INDEX_URL``, as a user would), refuses at once."""
    _pip_only(monkeypatch, "http://127.0.0.1:9/simple/")
    said: list[str] = []
    started = time.monotonic()
    with pytest.raises(EnvError) as caught:
        ensure_env("0.9.2", progress=said.append)
    assert time.monotonic() - started < 30
    message = str(caught.value)
    assert message.startswith("no environment for jax 0.9.2 is cached and the package index cannot be reached")
    log = Path(re.search(r"the installer's log: (\S+)\)$", message).group(1))  # type: ignore[union-attr]
    assert log.parent == root and "127.0.0.1:9" in log.read_text()
    assert sorted(p.name for p in root.iterdir()) == [".locks", log.name]  # no half environment, no temporary one
    assert said[0].startswith("jax 0.9.2: making an environment with pip ")
    # the first use says what it downloads, how big it will be and where it goes (issue 48)
    assert f" in {root}/jax-0.9.2-py" in said[0], said[0]
    assert "downloading jax==0.9.2, jaxlib==0.9.2, about 527 MiB once installed" in said[0], said[0]
    assert "`fieldmem envs remove 0.9.2` removes it" in said[0], said[0]


def test_the_size_said_adds_each_compiler_and_the_users_packages() -> None:
    from fieldmem.parent.envs import _estimate, _request

    assert _estimate(_request("0.9.2", (), None, ())) == "527 MiB"
    assert _estimate(_request("0.9.2", ("tpu",), None, ())) == f"{(527 + 683) / 1024:.1f} GiB"
    assert _estimate(_request("0.9.2", ("gpu",), None, ())) == f"{(527 + 572) / 1024:.1f} GiB"
    with_flax = _estimate(_request("0.9.2", (), None, ("flax",)))
    assert with_flax != "527 MiB"  # flax counted as installed here


# ----------------------------------------------------------------------------
# Complete or absent, made once


def test_a_killed_creation_leaves_no_environment_and_the_next_one_clears_what_it_left(root: Path) -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\n"
            "from fieldmem.parent import envs\n"
            "def stuck(command, log, progress, label):\n"
            "    log.write('installing\\n'); log.flush(); time.sleep(60); return 0\n"
            "envs.run_logged = stuck\n"
            "envs.ensure_env('0.9.2')\n",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "FIELDMEM_ENVS": str(root)},
    )
    try:
        deadline = time.monotonic() + 30
        while not any(p.name.endswith(".tmp") and (p / envs.LOG).exists() for p in root.glob(".jax-*")):
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert list_envs() == ()
    assert not (root / envs._request("0.9.2", (), None, ()).folder_name).exists()
    left = list(root.glob(".jax-*.tmp"))
    assert len(left) == 1

    made: list[EnvRequest] = []

    def create(request: EnvRequest, folder: Path, *rest: object) -> str:
        made.append(request)
        return "made"

    envs_create = envs._create
    try:
        envs._create = create  # type: ignore[assignment]
        assert ensure_env("0.9.2") == "made"  # type: ignore[comparison-overlap]
    finally:
        envs._create = envs_create
    assert not left[0].exists() and len(made) == 1


def test_a_folder_without_its_marker_is_made_again(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    half = _fake_env(root, "0.9.2", marker=False)
    (half / "lib" / "more").mkdir()
    assert list_envs() == ()
    seen: list[bool] = []
    monkeypatch.setattr(envs, "_create", lambda request, folder, *rest: seen.append(folder.exists()) or "made")
    assert ensure_env("0.9.2") == "made"
    assert seen == [False]  # the half one was out of the way before the new one was made


def test_two_creations_at_once_make_one_environment(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second waits on the first's lock, then finds its environment: one creation, the same record."""
    calls: list[str] = []

    def create(request: EnvRequest, folder: Path, requirements: object, progress: object, label: str) -> JaxEnv:
        calls.append(threading.current_thread().name)
        time.sleep(0.5)
        _fake_env(folder.parent, request.version)
        env = envs.from_marker(folder)
        assert env is not None
        return env

    monkeypatch.setattr(envs, "_create", create)
    found: dict[str, JaxEnv] = {}
    said: list[str] = []

    def one(name: str) -> None:
        found[name] = ensure_env("0.10.2", progress=said.append)

    first = threading.Thread(target=one, args=("first",), name="first")
    first.start()
    while not calls:
        time.sleep(0.01)
    second = threading.Thread(target=one, args=("second",), name="second")
    second.start()
    first.join(10)
    second.join(10)
    assert calls == ["first"]
    assert found["first"] == found["second"]
    assert said == ["jax 0.10.2: waiting for another fieldmem that is making this environment"]


def test_list_and_remove(root: Path) -> None:
    _fake_env(root, "0.10.2")
    _fake_env(root, "0.9.2")
    _fake_env(root, "0.9.2", packages=("flax",))
    _fake_env(root, "0.8.1", marker=False)  # incomplete: not listed
    (root / ".jax-0.7.1-py311.1.00000000.tmp").mkdir()  # a creation under way: not listed
    listed = list_envs()
    assert [env.version for env in listed] == ["0.9.2", "0.9.2", "0.10.2"]
    assert listed[0].jax == "0.9.2" and listed[0].python == listed[0].folder / "bin" / "python"
    assert envs.env_size(listed[0]) > 0
    removed = remove_env("0.9.2")
    assert {env.folder for env in removed} == {listed[0].folder, listed[1].folder}
    assert [env.version for env in list_envs()] == ["0.10.2"] and not listed[0].folder.exists()
    with pytest.raises(EnvError) as caught:
        remove_env("0.9.2")
    assert str(caught.value) == (
        f"no environment for jax '0.9.2' in {root} (cached: 0.10.2): fieldmem envs list shows them"
    )


# ----------------------------------------------------------------------------
# A worker under an environment's Python


def test_a_worker_there_imports_fieldmem_from_here_and_nothing_else_from_here(root: Path) -> None:
    folder = _fake_env(root, "0.9.2")
    env = envs.from_marker(folder)
    assert env is not None
    environ = worker_environment(env)
    assert environ["PYTHONPATH"] == str(ROOT)  # the checkout: its folder holds fieldmem and no jax
    assert environ["VIRTUAL_ENV"] == str(folder) and environ["PYTHONNOUSERSITE"] == "1"
    here = {p for p in (sys.prefix, *sys.path) if "site-packages" in p}
    assert not any(p in value for value in environ.values() for p in here)


def test_an_installed_fieldmem_is_reached_through_a_folder_holding_only_it(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where fieldmem is in a site-packages (a wheel, not a checkout), that folder would bring its jax along."""
    site = tmp_path / "lib" / "site-packages"
    (site / "fieldmem" / "parent").mkdir(parents=True)
    (site / "jax").mkdir()
    monkeypatch.setattr(envs, "__file__", str(site / "fieldmem" / "parent" / "envs.py"))
    env = envs.from_marker(_fake_env(root, "0.9.2"))
    assert env is not None
    folder = Path(worker_environment(env)["PYTHONPATH"])
    assert folder.parent.parent == root and os.listdir(folder) == ["fieldmem"]
    assert (folder / "fieldmem").resolve() == site / "fieldmem"
    assert worker_environment(env)["PYTHONPATH"] == str(folder)  # made once


def test_user_packages_are_the_index_libraries_built_on_jax() -> None:
    found = envs.user_packages()
    assert {"flax", "optax", "equinox"} <= set(found)  # installed in this venv (the test extra)
    assert not {"jax", "jaxlib", "fieldmem", "numpy"} & set(found)


# ----------------------------------------------------------------------------
# The command line


def test_envs_list_create_and_remove_on_the_command_line(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done = runner.invoke(app, ["envs", "list"])
    assert done.exit_code == 0 and done.output.startswith(f"no jax environments in {root}")
    _fake_env(root, "0.9.2")
    done = runner.invoke(app, ["envs", "list"])
    lines = done.output.splitlines()
    assert done.exit_code == 0 and lines[0].split() == ["version", "installed", "size", "folder"]
    assert re.match(
        rf"^0\.9\.2 +jax 0\.9\.2, jaxlib 0\.9\.2 +\d+(\.\d)? (B|KiB|MiB) +{re.escape(str(root))}/jax-0\.9\.2-py",
        lines[1],
    )
    monkeypatch.setattr(envs, "_create", lambda *a: pytest.fail("a cached environment was made again"))
    done = runner.invoke(app, ["envs", "create", "0.9.2"])
    assert done.exit_code == 0 and done.output.startswith("jax 0.9.2: jax 0.9.2, jaxlib 0.9.2 in ")
    done = runner.invoke(app, ["envs", "remove", "0.9.7"])
    assert done.exit_code == 2
    assert (
        done.output
        == f"fieldmem: error: no environment for jax '0.9.7' in {root} (cached: 0.9.2): fieldmem envs list shows them\n"
    )
    done = runner.invoke(app, ["envs", "remove", "0.9.2"])
    assert done.exit_code == 0 and done.output.startswith("removed jax 0.9.2: ") and list_envs() == ()
    done = runner.invoke(app, ["envs", "create", "latest"])
    assert done.exit_code == 2 and done.output == (
        "fieldmem: error: 'latest' is not a jax release: name one as 0.9.2 (three numbers, no leading zero; "
        "fieldmem supports jax 0.7.0 to 0.10.2)\n"
    )


# ----------------------------------------------------------------------------
# A real environment (from the package index; pip's cache makes it one download)


@pytest.fixture(scope="module")
def real_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("real") / "envs"
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def made(real_root: Path) -> tuple[JaxEnv, list[str], float]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FIELDMEM_ENVS", str(real_root))
        said: list[str] = []
        started = time.monotonic()
        env = ensure_env("0.9.2", progress=said.append)
        return env, said, time.monotonic() - started


@pytest.mark.compile
def test_a_real_environment_holds_that_jax_and_says_so(made: tuple[JaxEnv, list[str], float], real_root: Path) -> None:
    env, said, _ = made
    assert (env.version, env.jax, env.jaxlib, env.plugins, env.packages) == ("0.9.2", "0.9.2", "0.9.2", (), ())
    assert env.folder.parent == real_root and (env.folder / MARKER).exists() and env.log.exists()
    assert dict(env.installed)["numpy"] and env.installer.split()[0] in ("pip", "uv")
    assert said[0].startswith("jax 0.9.2: making an environment with ") and said[-1].startswith("jax 0.9.2: ready in ")
    assert not list(real_root.glob(".jax-*"))  # the temporary folder was renamed into place


@pytest.mark.compile
def test_a_worker_under_it_imports_jax_from_it_and_the_driver_from_here(made: tuple[JaxEnv, list[str], float]) -> None:
    env = made[0]
    done = subprocess.run(
        [
            str(env.python),
            "-c",
            "import jax, fieldmem.driver; print(jax.__file__, jax.__version__, fieldmem.driver.__file__)",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu", **worker_environment(env)},
        cwd=env.folder,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    jax_file, version, driver_file = done.stdout.split()
    assert Path(jax_file).is_relative_to(env.folder) and version == "0.9.2"
    assert Path(driver_file) == ROOT / "fieldmem" / "driver" / "__init__.py"


@pytest.mark.compile
def test_a_made_environment_is_reused_without_an_installer(
    made: tuple[JaxEnv, list[str], float], real_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, _, first = made
    monkeypatch.setenv("FIELDMEM_ENVS", str(real_root))

    def no_installer(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"an installer started: {args}")

    monkeypatch.setattr(envs, "run_logged", no_installer)
    monkeypatch.setattr(envs, "choose_installer", no_installer)
    monkeypatch.setattr(subprocess, "Popen", no_installer)
    said: list[str] = []
    started = time.monotonic()
    again = ensure_env("0.9.2", progress=said.append)
    took = time.monotonic() - started
    assert again == env and said == []
    assert took < min(0.5, first / 10), (took, first)
    assert list_envs() == (env,)


@pytest.mark.compile
def test_a_release_the_index_does_not_have_is_one_line(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EnvError) as caught:
        ensure_env("0.9.7")
    message = str(caught.value)
    assert re.match(r"^jax 0\.9\.7 is not on the package index \(it has \d+\.\d+\.\d+, \d+\.\d+\.\d+", message), message
    assert "0.9.7," not in message
    assert list_envs() == ()


def test_the_installers_are_told_short_timeouts_and_the_index_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip gets ``--timeout 15 --retries 1`` and reads ``PIP_INDEX_URL`` itself; uv is handed it (it does
    not read pip's variables) and gets its timeouts through its own (``UV_HTTP_TIMEOUT``)."""
    monkeypatch.setenv("PIP_INDEX_URL", "http://index.example/simple/")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "http://a.example/simple/ http://b.example/simple/")
    python = Path("/envs/jax/bin/python")
    pip = env_install.install_command(
        Installer("pip", (sys.executable, "-m", "pip"), "26.0"), python, ("jax==0.9.2",), None
    )
    assert pip[:5] == [sys.executable, "-m", "pip", "--python", str(python)]
    assert pip[5:10] == ["install", "--timeout", "15", "--retries", "1"] and pip[-1] == "jax==0.9.2"
    assert "index.example" not in " ".join(pip)
    req = Path("/project/requirements-jax.txt")
    uv = env_install.install_command(Installer("uv", ("/bin/uv",), "0.13.9"), python, ("jax==0.9.2",), req)
    assert uv[:5] == ["/bin/uv", "pip", "install", "--python", str(python)]
    assert uv[5:11] == [
        "--index-url",
        "http://index.example/simple/",
        "--extra-index-url",
        "http://a.example/simple/",
        "--extra-index-url",
        "http://b.example/simple/",
    ]
    assert uv[-3:] == ["jax==0.9.2", "-r", str(req)]
    assert env_install._installer_environ()["UV_HTTP_TIMEOUT"] == "15"
    monkeypatch.setenv("FIELDMEM_INSTALLER", "conda")
    with pytest.raises(EnvError, match=r"^FIELDMEM_INSTALLER='conda' is not an installer: use uv or pip"):
        env_install.choose_installer()
