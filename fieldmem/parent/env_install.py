"""Installing a jax environment: the installer (uv or pip) and its commands, run with their output logged,
and what went wrong read from that log (a version the index lacks, a conflict, no network) in one line.

:func:`fieldmem.parent.envs.ensure_env` makes an environment with these. Standard library only: this runs
in the parent, which never imports jax.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fieldmem.model.errors import EnvError, listing, quoted
from fieldmem.parent.env_records import EnvRequest, env_root, normal_name, requirement_name, version_key

__all__ = [
    "Installer",
    "choose_installer",
    "install_command",
    "install_failure",
    "installed_distributions",
    "run_logged",
    "venv_command",
]

NETWORK_TIMEOUT = 15  # seconds an installer waits on one connection to the index
INSTALL_TIMEOUT = 1800.0  # seconds one installer command may run ($FIELDMEM_ENV_TIMEOUT)


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
    usable = version and version_key(version) >= (22, 3)
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


def venv_command(installer: Installer, folder: Path) -> list[str]:
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


def install_command(installer: Installer, python: Path, lines: tuple[str, ...], requirements: Path | None) -> list[str]:
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


def run_logged(command: list[str], log: Any, progress: Callable[[str], None] | None, label: str) -> int:
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
    found = [f for f in found if requirement_name(f[1]) != "python"]
    return next((f for f in found if requirement_name(f[1]) in pinned), found[0] if found else None)


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


def install_failure(request: EnvRequest, installer: Installer, log: str, log_path: Path, status: int) -> EnvError:
    """The one line that says why the install failed."""
    where = f"the installer's log: {log_path}"
    missing = _not_found(log)
    if missing is not None:
        name = requirement_name(missing)
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
            versions = sorted(set(versions), key=version_key, reverse=True)
            has = f" (it has {listing(versions, 8)})" if versions else ""
            return EnvError(f"{name} {request.version} is not on the package index{has}")
        return EnvError(f"{missing} is not on the package index for jax {request.version} ({where})")
    pins = {requirement_name(line): line for line in request.requirement_lines if "==" in line}
    conflict = _conflict(log, set(pins))
    if conflict is not None:
        package, needs, version = conflict
        name = requirement_name(package)
        other = requirement_name(needs)
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
# What the installer put there

_READ_INSTALLED = (
    "import json, importlib.metadata as m; "
    "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}))"
)


def installed_distributions(python: Path) -> dict[str, str]:
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
    return {normal_name(name): version for name, version in json.loads(done.stdout.strip().splitlines()[-1]).items()}
