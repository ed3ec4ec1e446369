"""Cached environments with another jax (``--jax 0.9.2``, ``fieldmem envs``): one virtual environment per
jax release (and plugins, and the user's own packages), made once and reused after.

A worker needs only the standard library, jax and fieldmem's driver, request and ground modules, so it
can run under the interpreter of such an environment with fieldmem's package folder first on its
``PYTHONPATH`` (:func:`worker_environment`). Standard library only: this runs in the parent, which never
imports jax.

Where they live (:func:`env_root`): ``$FIELDMEM_ENVS``, else ``$XDG_CACHE_HOME/fieldmem/envs``, else
``~/.cache/fieldmem/envs``; one folder each, ``jax-0.9.2-py311`` (``-<digest>`` added where plugins or
packages were asked for).

Complete or absent: an environment is made in a hidden sibling folder (``.jax-0.9.2-py311.PID.XXXX.tmp``)
and renamed into place once its marker (:data:`MARKER`, the request and the versions installed) is
written, so a creation that is killed never leaves a folder that looks complete; what a killed creation
left is removed by the next one once its process is gone. Creations of the same environment are
serialised by a lock (:func:`fieldmem.model.files.locked` on a folder of its own under ``.locks``); a
second one waits, then finds the first one's environment. An environment whose marker matches the
request is used as it is: no installer starts.

The installer: ``uv`` where it is on ``PATH`` (``benchmarks/results/envs.md``: several times faster than
pip), else pip (this Python's, through ``pip --python``; the environment's own where this Python has
none); ``$FIELDMEM_INSTALLER`` (``uv`` or ``pip``) chooses. Both honour ``$PIP_INDEX_URL`` (and
``$PIP_EXTRA_INDEX_URL``), and run with short network timeouts so that an unreachable index is an error
in seconds, never a hang.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fieldmem.model.errors import EnvError, UnsupportedJaxError, listing, quoted
from fieldmem.model.files import LockTimeout, locked, process_alive, terminating, write_atomic
from fieldmem.model.versions import check_supported, is_release, supported_range

__all__ = [
    "MARKER",
    "EnvRequest",
    "Installer",
    "JaxEnv",
    "borrowed_folder",
    "choose_installer",
    "ensure_env",
    "env_problem",
    "env_root",
    "env_size",
    "expand_plugins",
    "folder_in_use",
    "list_envs",
    "remove_env",
    "user_packages",
    "worker_environment",
]

MARKER = "fieldmem-env.json"  # written last: its presence (matching the request) is what makes an environment
SCHEMA = "fieldmem.env/1"
LOG = "fieldmem-install.log"  # the installer's output, kept in the environment's folder
NETWORK_TIMEOUT = 15  # seconds an installer waits on one connection to the index
LOCK_WAIT = 3600.0  # seconds a creation waits for another one of the same environment
INSTALL_TIMEOUT = 1800.0  # seconds one installer command may run ($FIELDMEM_ENV_TIMEOUT)

# Deviceless compilers by backend kind: ``--backend tpu:v5e`` needs libtpu (the version jax[tpu]==V pins),
# ``gpu:h100`` the CUDA plugin at jax's version without its CUDA runtime (not needed to compile) and nvcc's
# ptxas and libdevice (as pyproject's tpu and gpu extras do for the jax fieldmem itself runs).
_PLUGIN_KINDS: dict[str, Callable[[str], tuple[str, ...]]] = {
    "tpu": lambda v: (f"jax[tpu]=={v}",),
    "gpu": lambda v: (f"jax-cuda12-plugin=={v}", f"jax-cuda12-pjrt=={v}", "nvidia-cuda-nvcc-cu12>=12.6.85"),
}
# distributions that are accelerator plugins, however they came in (``jax[tpu]`` brings libtpu)
_PLUGIN_NAMES = re.compile(
    r"^(libtpu(-nightly)?|jax-cuda\d+-(plugin|pjrt)|jax-rocm\d*-(plugin|pjrt)|nvidia-cuda-nvcc-cu\d+)$"
)
# What each part of an environment takes once installed, in MiB, as pip installed them for jax 0.10.2 on
# Linux x86-64 (measured with importlib.metadata's file lists, 2026-12-06: jaxlib 341, scipy 113 with its
# libraries, numpy 59, jax 14; libtpu 683; jax-cuda12-pjrt 458, jax-cuda12-plugin 20, nvidia-cuda-nvcc-cu12
# 94): the first use of an environment says about how much it puts where (a library of the user's counts as
# installed here, where it is)
_INSTALLED_MIB = {"jax": 527, "tpu": 683, "gpu": 572}
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_FOLDER = re.compile(r"^jax-(\d+(?:\.\d+)*)-py\d+(-[0-9a-f]{8})?$")
_TEMPORARY = re.compile(r"^\.(jax-[^/]+)\.(\d+)\.[0-9a-f]{8}\.(tmp|old)$")


def env_root() -> Path:
    """The folder holding the environments, absolute: ``$FIELDMEM_ENVS``, else
    ``$XDG_CACHE_HOME/fieldmem/envs``, else ``~/.cache/fieldmem/envs``."""
    if os.environ.get("FIELDMEM_ENVS"):  # a relative one is relative to where fieldmem runs, as typed
        return Path(os.environ["FIELDMEM_ENVS"]).expanduser().absolute()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser().absolute() / "fieldmem" / "envs"
    return Path.home() / ".cache" / "fieldmem" / "envs"


def _normal(name: str) -> str:
    """A distribution name as the index compares them (PEP 503): ``Jax_Cuda12.Plugin`` -> ``jax-cuda12-plugin``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    found = _NAME.match(requirement)
    return _normal(found.group(1)) if found else ""


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def expand_plugins(version: str, plugins: tuple[str, ...]) -> tuple[str, ...]:
    """The requirements ``plugins`` stands for under jax ``version``: a backend kind (``tpu``, ``gpu``) is its
    deviceless compilers at that version (:data:`_PLUGIN_KINDS`); anything else is a requirement as given."""
    out: list[str] = []
    for plugin in plugins:
        out.extend(_PLUGIN_KINDS[plugin](version) if plugin in _PLUGIN_KINDS else (plugin,))
    return tuple(dict.fromkeys(out))


def _check_requirement(text: str, what: str) -> str:
    text = text.strip()
    if not text or text.startswith("-") or not _NAME.match(text) or "\n" in text:
        raise EnvError(f"{what} {quoted(text)} is not a requirement: name a package, e.g. flax or 'optax>=0.2'")
    return text


@dataclasses.dataclass(frozen=True)
class EnvRequest:
    """What an environment is made of: jax ``version`` (and jaxlib at the same), the ``plugins`` and
    ``packages`` requirements (sorted), the SHA-256 of a ``requirements`` file's bytes (empty: none) and
    the Python (``3.11``) it runs. Two requests that are equal share one environment."""

    version: str
    plugins: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    requirements: str = ""
    python: str = f"{sys.version_info[0]}.{sys.version_info[1]}"

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "plugins": list(self.plugins),
            "packages": list(self.packages),
            "requirements": self.requirements,
            "python": self.python,
        }

    @property
    def folder_name(self) -> str:
        """``jax-0.9.2-py311``, with a digest of the plugins and packages where there are any."""
        name = f"jax-{self.version}-py{self.python.replace('.', '')}"
        if self.plugins or self.packages or self.requirements:
            extra = json.dumps([self.plugins, self.packages, self.requirements]).encode()
            name += "-" + hashlib.sha256(extra).hexdigest()[:8]
        return name

    @property
    def requirement_lines(self) -> tuple[str, ...]:
        return (f"jax=={self.version}", f"jaxlib=={self.version}", *self.plugins, *self.packages)


@dataclasses.dataclass(frozen=True)
class JaxEnv:
    """A complete environment: the jax ``version`` asked for, its ``folder`` and ``python``, the versions
    installed there (read from the environment after the install: ``jax``, ``jaxlib``, ``plugins`` and
    ``packages`` as (name, version) pairs, ``installed`` every distribution), the ``installer`` that made
    it (``uv 0.13.9``), when (``created``, ISO 8601 UTC) and the ``request`` it answers."""

    version: str
    folder: Path
    python: Path
    jax: str
    jaxlib: str
    plugins: tuple[tuple[str, str], ...]
    packages: tuple[tuple[str, str], ...]
    installed: tuple[tuple[str, str], ...]
    installer: str
    created: str
    request: EnvRequest

    @property
    def log(self) -> Path:
        """The installer's output when the environment was made."""
        return self.folder / LOG


# ----------------------------------------------------------------------------
# Installers


@dataclasses.dataclass(frozen=True)
class Installer:
    """How environments are made: ``kind`` ``uv`` (``command`` the uv executable) or ``pip`` (``command``
    this Python's ``-m pip``, empty where this Python has no pip: the environment's own is used), and
    ``version`` for the marker and the messages."""

    kind: str
    command: tuple[str, ...]
    version: str

    @property
    def label(self) -> str:
        return f"{self.kind} {self.version}".strip()


def _pip_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("pip")
    except metadata.PackageNotFoundError:
        return ""


def choose_installer() -> Installer:
    """``$FIELDMEM_INSTALLER`` (``uv``, ``pip``), else uv where it is on ``PATH``, else pip.

    Raises:
        EnvError: ``$FIELDMEM_INSTALLER`` names an installer that is not there, or another word.
    """
    wanted = os.environ.get("FIELDMEM_INSTALLER", "").strip().lower() or "auto"
    if wanted not in ("auto", "uv", "pip"):
        raise EnvError(f"FIELDMEM_INSTALLER={quoted(wanted)} is not an installer: use uv or pip (or leave it unset)")
    uv = shutil.which("uv") if wanted in ("auto", "uv") else None
    if uv is not None:
        try:
            said = subprocess.run([uv, "--version"], capture_output=True, text=True, timeout=30).stdout.split()
        except (OSError, subprocess.SubprocessError):
            said = []
        return Installer("uv", (uv,), said[1] if len(said) > 1 else "")
    if wanted == "uv":
        raise EnvError("FIELDMEM_INSTALLER=uv but uv is not on PATH: install uv, or unset it to use pip")
    version = _pip_version()
    # pip --python (pip 22.3 on) installs into another environment; without it the environment's own pip does
    usable = version and _version_key(version) >= (22, 3)
    return Installer("pip", (sys.executable, "-m", "pip") if usable else (), version)


def _index_options(installer: Installer) -> list[str]:
    """``$PIP_INDEX_URL`` and ``$PIP_EXTRA_INDEX_URL`` for uv, which does not read them (pip does)."""
    if installer.kind != "uv":
        return []
    options = []
    if os.environ.get("PIP_INDEX_URL"):
        options += ["--index-url", os.environ["PIP_INDEX_URL"]]
    for url in os.environ.get("PIP_EXTRA_INDEX_URL", "").split():
        options += ["--extra-index-url", url]
    return options


def _installer_environ() -> dict[str, str]:
    """This process's environment, less what would point an installer or the new Python at this one."""
    environ = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    }
    environ.setdefault("UV_HTTP_TIMEOUT", str(NETWORK_TIMEOUT))
    environ.setdefault("UV_HTTP_RETRIES", "1")
    environ["PYTHONNOUSERSITE"] = "1"
    environ["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return environ


def _venv_command(installer: Installer, folder: Path) -> list[str]:
    if installer.kind == "uv":  # relocatable: the scripts it installs still work once renamed into place
        return [
            *installer.command,
            "venv",
            "--quiet",
            "--allow-existing",
            "--relocatable",
            "--python",
            sys.executable,
            str(folder),
        ]
    return [sys.executable, "-m", "venv", *(["--without-pip"] if installer.command else []), str(folder)]


def _install_command(
    installer: Installer, python: Path, lines: tuple[str, ...], requirements: Path | None
) -> list[str]:
    extra = ["-r", str(requirements)] if requirements is not None else []
    if installer.kind == "uv":
        return [
            *installer.command,
            "pip",
            "install",
            "--python",
            str(python),
            *_index_options(installer),
            *lines,
            *extra,
        ]
    pip = [*installer.command, "--python", str(python)] if installer.command else [str(python), "-m", "pip"]
    timeouts = ["--timeout", str(NETWORK_TIMEOUT), "--retries", "1", "--no-input", "--progress-bar", "off"]
    return [*pip, "install", *timeouts, *lines, *extra]


def _install_timeout() -> float:
    """Seconds one installer command may run: ``$FIELDMEM_ENV_TIMEOUT`` (a positive number), else
    :data:`INSTALL_TIMEOUT`."""
    try:
        seconds = float(os.environ.get("FIELDMEM_ENV_TIMEOUT") or INSTALL_TIMEOUT)
    except ValueError:
        return INSTALL_TIMEOUT
    return seconds if 0 < seconds < float("inf") else INSTALL_TIMEOUT


def _end_group(process: subprocess.Popen[str]) -> None:
    """Kill the installer and every process it started (its process group: pip's own children, a build)."""
    if os.name == "posix":
        import signal

        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
    if process.poll() is None:
        with contextlib.suppress(OSError):
            process.kill()


# (Linux) runs the installer, after asking the kernel to kill it when fieldmem dies (PR_SET_PDEATHSIG, kept
# across exec): a fieldmem killed by SIGKILL leaves no installer downloading on. A launcher rather than a
# preexec_fn, which would make Python fork (not spawn) a process that may hold jax's threads.
_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(137)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def _dying_with_this_process(command: list[str]) -> list[str]:
    """``command``, started so that it dies with this process where the system allows it (Linux)."""
    if not sys.platform.startswith("linux"):
        return command
    return [sys.executable, "-I", "-c", _LAUNCHER, str(os.getpid()), *command]


# installer lines worth showing while an environment is made (the rest go to its log only)
# the installer's lines worth a progress line: its big downloads (the minutes go there: jaxlib, libtpu), and
# its summaries (pip's install steps, uv's counts); the whole output is in the log
_PROGRESS = re.compile(
    r"^\s*(Downloading \S+ \([\d.]+ [MG]B\)|Installing collected|Successfully installed|Resolved|Prepared|Installed)"
)
_PROGRESS_WIDTH = 100  # a long line (pip lists every package) is cut here, with an ellipsis


def _run_logged(command: list[str], log: Any, progress: Callable[[str], None] | None, label: str) -> int:
    """Run ``command``, its output into ``log`` (and the lines :data:`_PROGRESS` matches to ``progress``);
    its exit status. Killed with every process it started past ``$FIELDMEM_ENV_TIMEOUT`` seconds (status
    -9), on an interruption, and when fieldmem itself is killed (Linux)."""
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    process = subprocess.Popen(
        _dying_with_this_process(command),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_installer_environ(),
        cwd=str(env_root()),  # no project's installer settings (a uv.toml, a pyproject) where it runs
        text=True,
        errors="replace",
        # a process group of its own, ended whole (past the timeout, on an interruption), and killed with
        # this process: nothing it started keeps downloading after fieldmem is gone
        start_new_session=os.name == "posix",
    )
    timer = threading.Timer(_install_timeout(), _end_group, args=(process,))
    timer.daemon = True
    timer.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            if progress is not None and _PROGRESS.match(line):
                text = line.strip()
                progress(f"{label}: {text if len(text) <= _PROGRESS_WIDTH else text[: _PROGRESS_WIDTH - 1] + '…'}")
        return process.wait()
    finally:
        timer.cancel()
        _end_group(process)  # also after it ended: a child it left running goes with it
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
        log.flush()


# ----------------------------------------------------------------------------
# What went wrong, read from the installer's output

_OFFLINE = re.compile(
    r"Failed to establish a new connection|NewConnectionError|Connection refused|Network is unreachable|"
    r"Temporary failure in name resolution|Name or service not known|nodename nor servname|ConnectTimeout|"
    r"Read timed out|connection timed out|Could not fetch URL|error sending request|dns error|"
    r"Failed to fetch|operation timed out|No route to host",
    re.IGNORECASE,
)


def _not_found(log: str) -> str | None:
    """The requirement the installer found no release of (``jax==0.9.7``), or None."""
    for pattern in (
        r"No matching distribution found for (\S+)",
        r"there is no version of (\S+?)(?: and|,|$)",
        r"Because (\S+) was not found in the package registry",
    ):
        found = re.search(pattern, log, re.MULTILINE)
        if found:
            return found.group(1).rstrip(".")
    return None


def _versions_listed(log: str, name: str) -> list[str]:
    found = re.search(rf"requirement {re.escape(name)}\S* \(from versions: ([^)]*)\)", log, re.IGNORECASE)
    if not found or found.group(1).strip() == "none":
        return []
    return [v.strip() for v in found.group(1).split(",") if v.strip()]


def _python_bound(log: str, version: str) -> str | None:
    """``>=3.12`` where pip skipped ``version`` for needing another Python, else None."""
    found = re.search(rf"(?:^|[:;,]\s*){re.escape(version)} Requires-Python (\S+?)(?:;|$)", log, re.MULTILINE)
    return found.group(1) if found else None


def _conflict(log: str, pinned: set[str]) -> tuple[str, str, str] | None:
    """(package, what it needs, its version or range) of the dependency that blocks a resolution, or None:
    the first whose need is one of the ``pinned`` names (jax), else the first.

    pip: ``flax 0.12.8 depends on jax>=0.10.0`` under "The conflict is caused by"; uv: ``flax>=0.12.7,<=0.12.8
    depends on jax>=0.10.0`` in its explanation.
    """
    found: list[tuple[str, str, str]] = []
    if "ResolutionImpossible" in log or "conflict is caused by" in log:
        block = log.split("conflict is caused by", 1)[-1]
        for hit in re.finditer(r"^\s*(\S+) (\S+) depends on (\S+)", block, re.MULTILINE):
            found.append((hit.group(1), hit.group(3), hit.group(2)))
    elif "No solution found" in log or "requirements are unsatisfiable" in log:
        for hit in re.finditer(r"\b([A-Za-z0-9][\w.-]*?)([<>=!~][^\s]*)? depends on ([^\s,]+?)[,.]?(?:\s|$)", log):
            found.append((hit.group(1), hit.group(3), hit.group(2) or ""))
    found = [f for f in found if _requirement_name(f[1]) != "python"]
    return next((f for f in found if _requirement_name(f[1]) in pinned), found[0] if found else None)


def _last_error(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if line.lower().startswith(("error", "× ", "x "))]
    return (errors or lines or ["no output"])[-1]


def _index_versions(installer: Installer, name: str) -> list[str]:
    """The versions of ``name`` on the index, newest first, by ``pip index versions``; [] where pip cannot say."""
    if installer.kind != "pip" or not installer.command:
        pip = [sys.executable, "-m", "pip"] if _pip_version() else None
    else:
        pip = list(installer.command)
    if pip is None:
        return []
    command = [*pip, "index", "versions", name, "--timeout", str(NETWORK_TIMEOUT), "--retries", "1"]
    try:
        said = subprocess.run(command, capture_output=True, text=True, timeout=60, env=_installer_environ()).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = re.search(r"Available versions: (.*)", said)
    return [v.strip() for v in found.group(1).split(",")] if found else []


def _failure(request: EnvRequest, installer: Installer, log: str, log_path: Path, status: int) -> EnvError:
    """The one line that says why the install failed."""
    where = f"the installer's log: {log_path}"
    missing = _not_found(log)
    if missing is not None:
        name = _requirement_name(missing)
        if _OFFLINE.search(log):  # not found because the index did not answer
            return _offline(request, log_path)
        if name in ("jax", "jaxlib"):
            bound = _python_bound(log, request.version)
            if bound is not None:
                return EnvError(
                    f"{name} {request.version} needs Python {bound}; fieldmem runs on Python "
                    f"{sys.version.split()[0]}: run fieldmem under a newer Python to check with it ({where})"
                )
            versions = _versions_listed(log, name) or _index_versions(installer, name)
            versions = sorted(set(versions), key=_version_key, reverse=True)
            has = f" (it has {listing(versions, 8)})" if versions else ""
            return EnvError(f"{name} {request.version} is not on the package index{has}")
        return EnvError(f"{missing} is not on the package index for jax {request.version} ({where})")
    pins = {_requirement_name(line): line for line in request.requirement_lines if "==" in line}
    conflict = _conflict(log, set(pins))
    if conflict is not None:
        package, needs, version = conflict
        name = _requirement_name(package)
        other = _requirement_name(needs)
        against = pins.get(other, f"the other requirements of jax {request.version}")
        against = against.replace("==", " ", 1) if "==" in against else against
        what = f"{package} {version}" if version[:1].isdigit() else package + version
        return EnvError(f"{what} needs {needs}: no {name} works with {against} ({where})")
    if _OFFLINE.search(log):
        return _offline(request, log_path)
    if status == -9:
        return EnvError(f"installing jax {request.version} ran past {_install_timeout():g} s and was stopped ({where})")
    return EnvError(
        f"installing jax {request.version} failed ({installer.kind} exit status {status}): {_last_error(log)} ({where})"
    )


def _offline(request: EnvRequest, log_path: Path) -> EnvError:
    return EnvError(
        f"no environment for jax {request.version} is cached and the package index cannot be reached: "
        f"connect to it (or set PIP_INDEX_URL to one that can be) and try again (the installer's log: {log_path})"
    )


# ----------------------------------------------------------------------------
# Reading an environment


def _python_in(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


_READ_INSTALLED = (
    "import json, importlib.metadata as m; "
    "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}))"
)


def _installed(python: Path) -> dict[str, str]:
    """Every distribution installed in the environment of ``python`` (normalized name -> version)."""
    done = subprocess.run(
        [str(python), "-I", "-c", _READ_INSTALLED],
        capture_output=True,
        text=True,
        timeout=120,
        env=_installer_environ(),
    )
    if done.returncode != 0:
        raise EnvError(f"the new environment's Python {python} does not start: {_last_error(done.stderr)}")
    return {_normal(name): version for name, version in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def _requirements_names(path: Path) -> set[str]:
    names = set()
    with contextlib.suppress(OSError, UnicodeDecodeError):
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                names.add(_requirement_name(line))
    return names


def _from_marker(folder: Path) -> JaxEnv | None:
    """The environment in ``folder`` as its marker records it; None where there is no readable marker or
    its Python is gone (the interpreter it was made from was removed)."""
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        if data.get("schema") != SCHEMA:
            return None
        asked = data["request"]
        request = EnvRequest(
            version=asked["version"],
            plugins=tuple(asked["plugins"]),
            packages=tuple(asked["packages"]),
            requirements=asked["requirements"],
            python=asked["python"],
        )
        installed = data["installed"]
        env = JaxEnv(
            version=request.version,
            folder=folder,
            python=_python_in(folder),
            jax=installed.get("jax", ""),
            jaxlib=installed.get("jaxlib", ""),
            plugins=tuple((n, v) for n, v in data["plugins"]),
            packages=tuple((n, v) for n, v in data["packages"]),
            installed=tuple(sorted(installed.items())),
            installer=data["installer"],
            created=data["created"],
            request=request,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return env if os.path.exists(env.python) else None


def _site_packages(folder: Path) -> list[Path]:
    """The ``site-packages`` folders of the environment in ``folder``."""
    return sorted(folder.glob("lib/python*/site-packages")) + sorted(folder.glob("Lib/site-packages"))


_METADATA_VERSION = re.compile(r"^Version:[ \t]*(\S+)[ \t]*$", re.MULTILINE)


def _distribution(site: Path, name: str) -> tuple[str, list[str]] | None:
    """The version of distribution ``name`` installed in ``site`` and the files its ``RECORD`` lists
    (relative to ``site``); None where it is not installed there (or its metadata cannot be read)."""
    for info in sorted(site.glob("*.dist-info")):
        if _normal(info.name.removesuffix(".dist-info").rpartition("-")[0]) != name:
            continue
        try:
            metadata = (info / "METADATA").read_text("utf-8", errors="replace")
            record = (info / "RECORD").read_text("utf-8", errors="replace")
        except OSError:
            return None
        found = _METADATA_VERSION.search(metadata)
        if found is None:
            return None
        files = [line.split(",", 1)[0] for line in record.splitlines() if line.strip()]
        return found.group(1), files
    return None


def env_problem(env: JaxEnv) -> str | None:
    """What is wrong with the environment ``env`` as its name and marker describe it, in a few words, or
    None: its Python is no program, its jax or jaxlib is missing or another release than its name says, or
    a file of theirs is gone. Read from the environment's files (no Python is started): a few milliseconds."""
    python = Path(os.path.realpath(env.python))
    try:
        info = python.stat()
    except OSError as exc:
        return f"its Python {env.python} cannot be read ({exc.strerror or exc})"
    if not info.st_size or not os.access(python, os.X_OK):
        return f"its Python {env.python} is no program (an empty or not executable file)"
    sites = _site_packages(env.folder)
    if not sites:
        return "it has no site-packages folder"
    held: dict[str, str] = {}
    for name in ("jax", "jaxlib"):
        found, site = None, sites[0]
        for site in sites:
            found = _distribution(site, name)
            if found is not None:
                break
        if found is None:
            return f"it holds no {name}"
        version, files = found
        held[name] = version
        # what the installer put there: not its scripts (outside it) nor the bytecode Python makes again
        kept = (f for f in files if not f.startswith("..") and "__pycache__" not in f and not f.endswith(".pyc"))
        missing = next((f for f in kept if not (site / f).exists()), None)
        if missing is not None:
            return f"{name} {version} there lacks {missing}"
    if held["jax"] != env.version or held["jaxlib"] != env.version:
        return f"it holds jax {held['jax']} and jaxlib {held['jaxlib']}, not {env.version}"
    return None


def _checked(env: JaxEnv) -> JaxEnv:
    """``env``, where what it holds is what its name says (:func:`env_problem`).

    Raises:
        EnvError: one line saying what is wrong and how to make it again.
    """
    problem = env_problem(env)
    if problem is None:
        return env
    raise EnvError(
        f"the cached environment for jax {env.version} in {env.folder} is not usable: {problem}; remove it "
        f"(fieldmem envs remove {env.folder.name}) and it is made again on first use"
    )


def _marker(
    request: EnvRequest, installed: dict[str, str], installer: Installer, extra_names: set[str]
) -> dict[str, Any]:
    plugin_names = {_requirement_name(p) for p in request.plugins} - {"jax", "jaxlib"}
    plugins = sorted((n, v) for n, v in installed.items() if n in plugin_names or _PLUGIN_NAMES.match(n))
    package_names = {_requirement_name(p) for p in request.packages} | extra_names
    packages = sorted((n, v) for n, v in installed.items() if n in package_names and not _PLUGIN_NAMES.match(n))
    return {
        "schema": SCHEMA,
        "request": request.as_json(),
        "installed": dict(sorted(installed.items())),
        "plugins": plugins,
        "packages": packages,
        "installer": installer.label,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": sys.version.split()[0],
    }


# ----------------------------------------------------------------------------
# Making, finding and removing environments


def _request(
    version: str, plugins: tuple[str, ...], requirements: Path | None, packages: tuple[str, ...]
) -> EnvRequest:
    version = version.strip()
    if not is_release(version):
        raise EnvError(
            f"{quoted(version)} is not a jax release: name one as 0.9.2 (three numbers, no leading zero; "
            f"fieldmem supports jax {supported_range()})"
        )
    try:  # before anything is downloaded
        check_supported(version)
    except UnsupportedJaxError as exc:
        raise EnvError(exc.message) from None
    plugins = tuple(_check_requirement(p, "plugin") for p in plugins)
    packages = tuple(_check_requirement(p, "package") for p in packages)
    digest = ""
    if requirements is not None:
        try:
            digest = hashlib.sha256(Path(requirements).read_bytes()).hexdigest()
        except OSError as exc:
            raise EnvError(f"cannot read the requirements file {str(requirements)!r}: {exc.strerror or exc}") from None
    return EnvRequest(
        version=version,
        plugins=tuple(sorted(set(expand_plugins(version, plugins)))),
        packages=tuple(sorted(set(packages))),
        requirements=digest,
    )


def _temporary(root: Path, name: str, suffix: str) -> Path:
    return root / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.{suffix}"


def _remove_stale(root: Path) -> None:
    """Remove what creations and removals killed on the way left (their process is gone)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            found = _TEMPORARY.match(entry.name)
            if found and not process_alive(int(found.group(2))):
                shutil.rmtree(entry.path, ignore_errors=True)


def _discard(folder: Path, root: Path) -> None:
    """Remove ``folder``: renamed aside first, so that no half-removed environment is ever at its place."""
    aside = _temporary(root, folder.name, "old")
    try:
        os.rename(folder, aside)
    except FileNotFoundError:
        return
    shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def _env_lock(root: Path, name: str, label: str, progress: Callable[[str], None] | None) -> Iterator[None]:
    """Hold the lock of environment ``name`` (a folder of its own under ``root/.locks``), saying so when
    another fieldmem holds it."""
    folder = _lock_folder(root, name)
    try:
        with locked(folder / "env", timeout=0):
            yield
        return
    except LockTimeout:
        pass
    except OSError as exc:  # the folder cannot be locked here (read-only, and no flock): say where
        raise _unwritable(root, exc) from None
    if progress is not None:
        progress(f"{label}: waiting for another fieldmem that is making this environment")
    try:
        with locked(folder / "env", timeout=LOCK_WAIT):
            yield
    except LockTimeout:
        raise EnvError(
            f"another fieldmem has been making the environment {root / name} for over {LOCK_WAIT:g} s"
        ) from None


def _lock_folder(root: Path, name: str) -> Path:
    """The folder of environment ``name``'s lock (under ``root/.locks``), made where missing.

    Raises:
        EnvError: it cannot be made (a read-only environments folder).
    """
    folder = root / ".locks" / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(root, exc) from None
    return folder


def _unwritable(root: Path, exc: OSError) -> EnvError:
    return EnvError(
        f"cannot write in the environments folder {str(root)!r}: {exc.strerror or exc} "
        "(set FIELDMEM_ENVS to a folder you can write)"
    )


@contextlib.contextmanager
def folder_in_use(env_folder: Path) -> Iterator[None]:
    """Hold the environment in ``env_folder`` in use for the block (workers run under it): ``fieldmem envs
    remove`` refuses it meanwhile, rather than pull its files from under a running check. A shared lock on
    the environment's lock folder: checks share it, a removal needs it alone. Where it cannot be taken (a
    read-only environments folder, no ``flock``), the block runs without it.

    Raises:
        EnvError: the environment was removed before the lock was taken.
    """
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(EnvError, LockTimeout, OSError):  # no lock to take: used without one
            folder = _lock_folder(env_folder.parent, env_folder.name)
            stack.enter_context(locked(folder / "env", timeout=LOCK_WAIT, shared=True))
        if not (env_folder / MARKER).exists():
            raise EnvError(
                f"the environment {env_folder} was removed as this check began: run it again, and it is made again"
            )
        yield


def ensure_env(
    version: str,
    *,
    plugins: tuple[str, ...] = (),
    requirements: Path | None = None,
    packages: tuple[str, ...] = (),
    progress: Callable[[str], None] | None = None,
) -> JaxEnv:
    """The environment with ``jax==version`` and ``jaxlib==version``, ``plugins`` (requirements, or a backend
    kind, ``tpu`` or ``gpu``, for its deviceless compilers at that version), ``packages`` (the user's own,
    left to the installer to resolve against the jax pin) and a ``requirements`` file: the cached one when
    its marker matches (no installer starts), else made now, ``progress`` told what is done.

    A cached environment is used only where what it holds is what its name says (:func:`_checked`).

    Raises:
        EnvError: one line: a release that is not one or out of the supported range (before anything is
            downloaded), a version the index does not have (with the ones it has), no set of the
            packages that works with that jax (naming the blocking package), the index unreachable, the
            environments folder not writable or full, another failure of the installer (naming its log),
            or a cached environment that is broken or holds another jax (with ``fieldmem envs remove``).
    """
    request = _request(version, tuple(plugins), requirements, tuple(packages))
    root = env_root()
    folder = root / request.folder_name
    env = _from_marker(folder)
    if env is not None and env.request == request:
        return _checked(env)
    label = f"jax {request.version}"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvError(f"cannot make the environments folder {str(root)!r}: {exc.strerror or exc}") from None
    with _env_lock(root, request.folder_name, label, progress):
        env = _from_marker(folder)  # another fieldmem may have made it while this one waited
        if env is not None and env.request == request:
            return _checked(env)
        _remove_stale(root)
        if folder.exists():  # incomplete, or made for another request: made again
            _discard(folder, root)
        return _create(request, folder, requirements, progress, label)


def _create(
    request: EnvRequest, folder: Path, requirements: Path | None, progress: Callable[[str], None] | None, label: str
) -> JaxEnv:
    """Make the environment of ``request`` in a temporary sibling of ``folder``, then rename it there."""
    installer = choose_installer()
    root = folder.parent
    started = time.monotonic()
    if progress is not None:
        progress(
            f"{label}: making an environment with {installer.label} in {folder} (first use; `fieldmem envs "
            f"remove {request.version}` removes it): downloading {', '.join(request.requirement_lines)}, "
            f"about {_estimate(request)} once installed"
        )
    with terminating():  # SIGTERM, Ctrl-C: the temporary folder goes with the creation
        building = _temporary(root, folder.name, "tmp")
        try:
            building.mkdir()
            log_path = building / LOG
            python = _python_in(building)
            with open(log_path, "w", encoding="utf-8") as log:
                status = _run_logged(_venv_command(installer, building), log, progress, label)
                if status != 0:
                    raise _kept(_failure(request, installer, log_path.read_text("utf-8"), log_path, status), log_path)
                if progress is not None:
                    progress(f"{label}: installing {' '.join(request.requirement_lines)}")
                copied = None
                if requirements is not None:  # a copy kept as a record; installed from where it is (its -r, -c)
                    copied = building / "requirements.txt"
                    shutil.copyfile(requirements, copied)
                given = Path(requirements).resolve() if requirements is not None else None
                lines = request.requirement_lines
                status = _run_logged(_install_command(installer, python, lines, given), log, progress, label)
            if status != 0:
                raise _kept(_failure(request, installer, log_path.read_text("utf-8"), log_path, status), log_path)
            installed = _installed(python)
            if installed.get("jax") != request.version or installed.get("jaxlib") != request.version:
                raise _kept(
                    EnvError(
                        f"the installer put jax {installed.get('jax', 'none')} and jaxlib "
                        f"{installed.get('jaxlib', 'none')} in the environment for jax {request.version} "
                        f"(the installer's log: {log_path})"
                    ),
                    log_path,
                )
            extra = _requirements_names(copied) if copied is not None else set()
            marker = _marker(request, installed, installer, extra)
            write_atomic(building / MARKER, json.dumps(marker, indent=2) + "\n")
            os.rename(building, folder)
        except BaseException as exc:  # Ctrl-C too: no half-built environment is left
            shutil.rmtree(building, ignore_errors=True)
            if isinstance(exc, OSError):  # the folder full or read-only, or removed meanwhile: nothing is left
                raise EnvError(
                    f"cannot make the environment for jax {request.version} in {str(root)!r}: "
                    f"{exc.strerror or exc} (nothing was left behind)"
                ) from None
            raise
    env = _from_marker(folder)
    if env is None:  # pragma: no cover - its marker was just written
        raise EnvError(f"the environment made in {folder} cannot be read back")
    if progress is not None:
        size = env_size(env) / 2**20
        progress(f"{label}: ready in {time.monotonic() - started:.1f} s: {size:,.0f} MiB in {folder}")
    return env


def _estimate(request: EnvRequest) -> str:
    """About how much ``request``'s environment takes once installed (``1.2 GiB``): jax with jaxlib, numpy and
    scipy, each deviceless compiler (:data:`_INSTALLED_MIB`), and each package as installed here (nothing
    for one not installed here, or a requirements file's)."""
    from importlib import metadata

    total = _INSTALLED_MIB["jax"] * 2**20
    if any(p.startswith(("jax[tpu]", "libtpu")) for p in request.plugins):
        total += _INSTALLED_MIB["tpu"] * 2**20
    if any(p.startswith("jax-cuda") for p in request.plugins):
        total += _INSTALLED_MIB["gpu"] * 2**20
    for package in request.packages:
        with contextlib.suppress(metadata.PackageNotFoundError, ValueError):
            files = metadata.distribution(_requirement_name(package)).files or ()
            total += sum(getattr(f, "size", None) or 0 for f in files)
    return f"{total / 2**30:.1f} GiB" if total >= 2**30 else f"{total / 2**20:.0f} MiB"


def _kept(error: EnvError, log_path: Path) -> EnvError:
    """``error``, with the installer's log moved beside the environments (``jax-0.9.2-py311.log``) before the
    temporary folder holding it is removed, and the message naming it there."""
    root = log_path.parent.parent
    found = _TEMPORARY.match(log_path.parent.name)
    kept = root / f"{found.group(1) if found else 'jax'}.log"
    try:
        write_atomic(kept, log_path.read_text("utf-8", errors="replace"))  # whole, or not at all
    except OSError as exc:  # a full disk: the message never names a log in the folder about to go
        gone = f"the installer's log could not be kept: {exc.strerror or exc}"
        return EnvError(error.message.replace(f"the installer's log: {log_path}", gone).replace(str(log_path), gone))
    return EnvError(error.message.replace(str(log_path), str(kept)))


def list_envs() -> tuple[JaxEnv, ...]:
    """The complete environments under :func:`env_root`, by jax version (then folder)."""
    root = env_root()
    try:
        names = sorted(entry.name for entry in os.scandir(root) if entry.is_dir() and _FOLDER.match(entry.name))
    except OSError:
        return ()
    found = [env for env in (_from_marker(root / name) for name in names) if env is not None]
    return tuple(sorted(found, key=lambda env: (_version_key(env.version), env.folder.name)))


def remove_env(version: str) -> tuple[JaxEnv, ...]:
    """Remove the environments of jax ``version`` (or the one whose folder is named ``version``); those removed.

    Raises:
        EnvError: none is cached for that version (the ones that are named), one is in use by a running
            check, or the folder cannot be written.
    """
    version = version.strip()
    root = env_root()
    found = [env for env in list_envs() if version in (env.version, env.folder.name)]
    if not found:
        cached = sorted({env.version for env in list_envs()}, key=_version_key)
        has = f"cached: {', '.join(cached)}" if cached else "none is cached"
        raise EnvError(f"no environment for jax {quoted(version)} in {root} ({has}): fieldmem envs list shows them")
    for env in found:
        folder = _lock_folder(root, env.folder.name)
        try:
            with locked(folder / "env", timeout=0):
                _discard(env.folder, root)
        except LockTimeout:
            raise EnvError(
                f"the environment for jax {env.version} in {env.folder} is in use by a running fieldmem (a check "
                "under it, or its creation): remove it once that has ended"
            ) from None
        except OSError as exc:
            raise EnvError(f"cannot remove the environment {str(env.folder)!r}: {exc.strerror or exc}") from None
    return tuple(found)


def env_size(env: JaxEnv) -> int:
    """Bytes the environment's files take (each file once, however many links it has; links not followed)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder, _dirs, files in os.walk(env.folder):
        for name in files:
            with contextlib.suppress(OSError):
                info = os.lstat(os.path.join(folder, name))
                if (info.st_dev, info.st_ino) not in seen:
                    seen.add((info.st_dev, info.st_ino))
                    total += info.st_size
    return total


# ----------------------------------------------------------------------------
# Running a worker there


def package_folder() -> str:
    """The folder a worker under an environment's Python imports ``fieldmem`` from: the one holding this
    package, or, where that holds other packages too (an installation's ``site-packages``, which would
    bring this environment's jax along), a folder under :func:`env_root` holding only a link to it."""
    package = Path(__file__).resolve().parents[1]
    folder = package.parent
    if folder.name not in ("site-packages", "dist-packages") and not (folder / "jax").exists():
        return str(folder)
    digest = hashlib.sha256(str(package).encode()).hexdigest()[:12]
    shim = env_root() / ".fieldmem-package" / digest
    if not (shim / "fieldmem").exists():
        shim.mkdir(parents=True, exist_ok=True)
        link = shim / f".fieldmem.{os.getpid()}.{secrets.token_hex(4)}"
        link.symlink_to(package, target_is_directory=True)
        os.replace(link, shim / "fieldmem")
    return str(shim)


def _requirement_closure(names: tuple[str, ...]) -> list[Any]:
    """The distributions installed here of ``names`` and of what they require (an extra's requirement left
    out, and one this installation does not have)."""
    from importlib import metadata

    found: dict[str, Any] = {}
    todo = [_normal(name) for name in names]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except (metadata.PackageNotFoundError, ValueError):
            continue
        found[name] = dist
        for requirement in dist.requires or ():
            if "extra ==" not in requirement.replace('"', "").replace("'", ""):
                todo.append(_requirement_name(requirement))
    return list(found.values())


def _top_level(dist: Any) -> set[str]:
    """The top-level modules and packages a distribution installs (``_pytest``, ``pytest``, ``py``)."""
    names = set()
    for file in dist.files or ():
        first = file.parts[0] if file.parts else ""
        if not first or first == ".." or first.endswith((".dist-info", ".egg-info", ".pth")) or first == "__pycache__":
            continue
        if len(file.parts) == 1 and not first.endswith(".py"):
            continue
        names.add(first)
    return names


def borrowed_folder(names: tuple[str, ...]) -> str | None:
    """A folder of links to what the distributions ``names`` (and what they require) install here, for a
    worker under another interpreter whose installation lacks them: it looks there last (the pytest a test
    module imports, for the plugin's ``--fieldmem-jax`` workers), so its own releases win where it has them.
    None where none of them is installed here, or the folder cannot be made."""
    links: dict[str, str] = {}
    for dist in _requirement_closure(names):
        for top in _top_level(dist):
            path = Path(str(dist.locate_file(top)))
            if path.exists():
                links.setdefault(top, str(path))
    if not links:
        return None
    digest = hashlib.sha256(json.dumps(sorted(links.items())).encode()).hexdigest()[:12]
    folder = env_root() / ".fieldmem-borrowed" / digest
    if folder.is_dir():
        return str(folder)
    building = folder.parent / f".{digest}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        building.mkdir(parents=True)
        for top, target in links.items():
            (building / top).symlink_to(target, target_is_directory=os.path.isdir(target))
        os.rename(building, folder)
    except OSError:
        shutil.rmtree(building, ignore_errors=True)
        return str(folder) if folder.is_dir() else None  # made by another fieldmem meanwhile, or not at all
    return str(folder)


def worker_environment(env: JaxEnv) -> dict[str, str]:
    """What a worker under ``env.python`` adds to this process's environment: fieldmem's package folder
    alone on ``PYTHONPATH`` (so ``fieldmem.driver`` imports from this fieldmem, jax from the environment),
    ``VIRTUAL_ENV`` the environment, no ``PYTHONHOME`` and no user site-packages."""
    return {
        "PYTHONPATH": package_folder(),
        "VIRTUAL_ENV": str(env.folder),
        "PYTHONHOME": "",  # empty is unset to Python
        "PYTHONNOUSERSITE": "1",
    }


# ----------------------------------------------------------------------------
# The user's own packages

_NOT_USER = re.compile(r"^(jax|jaxlib|fieldmem|libtpu.*|jax-cuda.*|jax-rocm.*|nvidia-.*)$")


def user_packages() -> tuple[str, ...]:
    """The libraries of this environment built on jax that came from a package index (flax, optax,
    equinox…): the packages a ``--jax`` environment gets, unpinned, so the installer picks the releases
    that work with its jax. Ones installed from a folder or a repository (the user's own project) are left
    out: the index does not have them."""
    from importlib import metadata

    names = set()
    for dist in metadata.distributions():
        name = _normal(dist.metadata["Name"] or "")
        if not name or _NOT_USER.match(name) or dist.read_text("direct_url.json") is not None:
            continue
        if any(_requirement_name(r) == "jax" and "extra ==" not in r for r in dist.requires or ()):
            names.add(name)
    return tuple(sorted(names))
