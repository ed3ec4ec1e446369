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

This module makes, finds and removes environments, and says how a worker runs under one;
:mod:`fieldmem.parent.env_records` holds what an environment is (its request, its marker, reading it
back) and :mod:`fieldmem.parent.env_install` the installers and the reading of their failures.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fieldmem.model.errors import EnvError, quoted
from fieldmem.model.files import LockTimeout, locked, process_alive, terminating, write_atomic
from fieldmem.model.versions import UnsupportedJaxError, check_supported, is_release, supported_range
from fieldmem.parent.env_install import (
    Installer,
    choose_installer,
    install_command,
    install_failure,
    installed_distributions,
    run_logged,
    venv_command,
)
from fieldmem.parent.env_records import (
    LOG,
    MARKER,
    PLUGIN_NAMES,
    SCHEMA,
    EnvRequest,
    JaxEnv,
    check_requirement,
    checked_env,
    env_problem,
    env_root,
    expand_plugins,
    from_marker,
    normal_name,
    python_in,
    requirement_name,
    version_key,
)

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

LOCK_WAIT = 3600.0  # seconds a creation waits for another one of the same environment
# What each part of an environment takes once installed, in MiB, as pip installed them for jax 0.10.2 on
# Linux x86-64 (measured with importlib.metadata's file lists, 2026-12-06: jaxlib 341, scipy 113 with its
# libraries, numpy 59, jax 14; libtpu 683; jax-cuda12-pjrt 458, jax-cuda12-plugin 20, nvidia-cuda-nvcc-cu12
# 94): the first use of an environment says about how much it puts where (a library of the user's counts as
# installed here, where it is)
_INSTALLED_MIB = {"jax": 527, "tpu": 683, "gpu": 572}
_FOLDER = re.compile(r"^jax-(\d+(?:\.\d+)*)-py\d+(-[0-9a-f]{8})?$")
_TEMPORARY = re.compile(r"^\.(jax-[^/]+)\.(\d+)\.[0-9a-f]{8}\.(tmp|old)$")


# ----------------------------------------------------------------------------
# Making, finding and removing environments


def _requirements_names(path: Path) -> set[str]:
    names = set()
    with contextlib.suppress(OSError, UnicodeDecodeError):
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                names.add(requirement_name(line))
    return names


def _marker(
    request: EnvRequest, installed: dict[str, str], installer: Installer, extra_names: set[str]
) -> dict[str, Any]:
    plugin_names = {requirement_name(p) for p in request.plugins} - {"jax", "jaxlib"}
    plugins = sorted((n, v) for n, v in installed.items() if n in plugin_names or PLUGIN_NAMES.match(n))
    package_names = {requirement_name(p) for p in request.packages} | extra_names
    packages = sorted((n, v) for n, v in installed.items() if n in package_names and not PLUGIN_NAMES.match(n))
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
    plugins = tuple(check_requirement(p, "plugin") for p in plugins)
    packages = tuple(check_requirement(p, "package") for p in packages)
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

    A cached environment is used only where what it holds is what its name says (:func:`checked_env`).

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
    env = from_marker(folder)
    if env is not None and env.request == request:
        return checked_env(env)
    label = f"jax {request.version}"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvError(f"cannot make the environments folder {str(root)!r}: {exc.strerror or exc}") from None
    with _env_lock(root, request.folder_name, label, progress):
        env = from_marker(folder)  # another fieldmem may have made it while this one waited
        if env is not None and env.request == request:
            return checked_env(env)
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
            python = python_in(building)
            with open(log_path, "w", encoding="utf-8") as log:
                status = run_logged(venv_command(installer, building), log, progress, label)
                if status != 0:
                    raise _kept(
                        install_failure(request, installer, log_path.read_text("utf-8"), log_path, status), log_path
                    )
                if progress is not None:
                    progress(f"{label}: installing {' '.join(request.requirement_lines)}")
                copied = None
                if requirements is not None:  # a copy kept as a record; installed from where it is (its -r, -c)
                    copied = building / "requirements.txt"
                    shutil.copyfile(requirements, copied)
                given = Path(requirements).resolve() if requirements is not None else None
                lines = request.requirement_lines
                status = run_logged(install_command(installer, python, lines, given), log, progress, label)
            if status != 0:
                raise _kept(
                    install_failure(request, installer, log_path.read_text("utf-8"), log_path, status), log_path
                )
            installed = installed_distributions(python)
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
    env = from_marker(folder)
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
            files = metadata.distribution(requirement_name(package)).files or ()
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
    found = [env for env in (from_marker(root / name) for name in names) if env is not None]
    return tuple(sorted(found, key=lambda env: (version_key(env.version), env.folder.name)))


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
        cached = sorted({env.version for env in list_envs()}, key=version_key)
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
    todo = [normal_name(name) for name in names]
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
                todo.append(requirement_name(requirement))
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
        name = normal_name(dist.metadata["Name"] or "")
        if not name or _NOT_USER.match(name) or dist.read_text("direct_url.json") is not None:
            continue
        if any(requirement_name(r) == "jax" and "extra ==" not in r for r in dist.requires or ()):
            names.add(name)
    return tuple(sorted(names))
