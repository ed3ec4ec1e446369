"""What a cached jax environment is: the request it is made for, the environment its marker records, where
environments live, and reading one back from its folder (is it what its name says?).

:mod:`fieldmem.parent.envs` makes, finds and removes them, with an installer of
:mod:`fieldmem.parent.env_install`. Standard library only: this runs in the parent, which never imports jax.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fieldmem.model.errors import EnvError, quoted

__all__ = [
    "LOG",
    "MARKER",
    "PLUGIN_NAMES",
    "EnvRequest",
    "JaxEnv",
    "check_requirement",
    "checked_env",
    "env_problem",
    "env_root",
    "expand_plugins",
    "from_marker",
    "normal_name",
    "python_in",
    "requirement_name",
    "version_key",
]

MARKER = "fieldmem-env.json"  # written last: its presence (matching the request) is what makes an environment
SCHEMA = "fieldmem.env/1"
LOG = "fieldmem-install.log"  # the installer's output, kept in the environment's folder
# Deviceless compilers by backend kind: ``--backend tpu:v5e`` needs libtpu (the version jax[tpu]==V pins),
# ``gpu:h100`` the CUDA plugin at jax's version without its CUDA runtime (not needed to compile) and nvcc's
# ptxas and libdevice (as pyproject's tpu and gpu extras do for the jax fieldmem itself runs).
_PLUGIN_KINDS: dict[str, Callable[[str], tuple[str, ...]]] = {
    "tpu": lambda v: (f"jax[tpu]=={v}",),
    "gpu": lambda v: (f"jax-cuda12-plugin=={v}", f"jax-cuda12-pjrt=={v}", "nvidia-cuda-nvcc-cu12>=12.6.85"),
}
# distributions that are accelerator plugins, however they came in (``jax[tpu]`` brings libtpu)
PLUGIN_NAMES = re.compile(
    r"^(libtpu(-nightly)?|jax-cuda\d+-(plugin|pjrt)|jax-rocm\d*-(plugin|pjrt)|nvidia-cuda-nvcc-cu\d+)$"
)


_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def env_root() -> Path:
    """The folder holding the environments, absolute: ``$FIELDMEM_ENVS``, else
    ``$XDG_CACHE_HOME/fieldmem/envs``, else ``~/.cache/fieldmem/envs``."""
    if os.environ.get("FIELDMEM_ENVS"):  # a relative one is relative to where fieldmem runs, as typed
        return Path(os.environ["FIELDMEM_ENVS"]).expanduser().absolute()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser().absolute() / "fieldmem" / "envs"
    return Path.home() / ".cache" / "fieldmem" / "envs"


def normal_name(name: str) -> str:
    """A distribution name as the index compares them (PEP 503): ``Jax_Cuda12.Plugin`` -> ``jax-cuda12-plugin``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    found = _NAME.match(requirement)
    return normal_name(found.group(1)) if found else ""


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def expand_plugins(version: str, plugins: tuple[str, ...]) -> tuple[str, ...]:
    """The requirements ``plugins`` stands for under jax ``version``: a backend kind (``tpu``, ``gpu``) is its
    deviceless compilers at that version (:data:`_PLUGIN_KINDS`); anything else is a requirement as given."""
    out: list[str] = []
    for plugin in plugins:
        out.extend(_PLUGIN_KINDS[plugin](version) if plugin in _PLUGIN_KINDS else (plugin,))
    return tuple(dict.fromkeys(out))


def check_requirement(text: str, what: str) -> str:
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
# Reading an environment


def python_in(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def from_marker(folder: Path) -> JaxEnv | None:
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
            python=python_in(folder),
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
        if normal_name(info.name.removesuffix(".dist-info").rpartition("-")[0]) != name:
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


def checked_env(env: JaxEnv) -> JaxEnv:
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
