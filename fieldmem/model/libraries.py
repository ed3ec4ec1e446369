"""Which files are library code, and which the user's own: one definition for source lines and ``--watch``.

**User code** is any file that is not library code. **Library code** is a file

- under an installation folder of this interpreter: ``sysconfig``'s
  ``stdlib``, ``platstdlib``, ``purelib`` and ``platlib`` paths (the standard
  library and site-packages of the environment fieldmem runs in), and
  ``site``'s user site-packages;
- in a folder named ``site-packages`` or ``dist-packages`` anywhere (another
  environment's installs);
- under a folder on ``sys.path`` that holds an installed distribution's
  ``*.dist-info`` (``pip install --target DIR`` with DIR on ``PYTHONPATH``, as on
  a machine whose image puts jax in a folder of its own);
- of fieldmem itself (its package folder: fieldmem calls the user's function
  through a wrapper of its own);
- or no file at all: a frozen module of the interpreter (``<frozen runpy>``)
  or generated code (``<string>``: a dataclass's ``__init__``), which no one
  can open at a line.

A package the user installed without ``-e`` lives in site-packages and counts as
library code; an editable install or a checkout on ``sys.path`` is user code.
A worker under another interpreter (``--python``, ``--jax``) names its own
installation folders (:func:`add_library_folders`): its standard library is
library code too, wherever it lives.
Pure (``os``, ``site``, ``sysconfig``), no jax; the folders are read once.
"""

from __future__ import annotations

import functools
import os
import site
import sys
import sysconfig
from collections.abc import Iterable

__all__ = ["add_library_folders", "install_targets", "is_library_file", "library_folders"]

_INSTALL_FOLDER_NAMES = frozenset({"site-packages", "dist-packages"})
# fieldmem's package folder: this file is fieldmem/model/libraries.py
_FIELDMEM = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the fieldmem package


# the installation folders of other interpreters whose workers this process heard from
_OTHER_INTERPRETERS: list[str] = []


def add_library_folders(folders: Iterable[str]) -> None:
    """Count the files under ``folders`` (another interpreter's :func:`library_folders`, as its worker sent
    them) as library code from now on; folders known already (a worker under this interpreter names this
    one's) change nothing."""
    known = set(library_folders())
    new = [f for f in dict.fromkeys(folders) if isinstance(f, str) and f and f.rstrip(os.sep) not in known]
    if new:
        _OTHER_INTERPRETERS.extend(new)
        library_folders.cache_clear()
        is_library_file.cache_clear()


@functools.lru_cache(maxsize=1)
def library_folders() -> tuple[str, ...]:
    """The folders whose files are library code (absolute, real paths, no trailing separator)."""
    found: list[str] = []
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            found.append(path)
    try:
        found.extend(site.getsitepackages())
    except AttributeError:  # some virtualenvs' site module has no getsitepackages
        pass
    user_site = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    if isinstance(user_site, str):
        found.append(user_site)
    found.append(_FIELDMEM)
    found.extend(_OTHER_INTERPRETERS)
    found.extend(_install_targets())
    folders: list[str] = []
    for path in found:
        for variant in (os.path.abspath(path), os.path.realpath(path)):
            variant = variant.rstrip(os.sep)
            if variant and variant not in folders:
                folders.append(variant)
    return tuple(folders)


@functools.lru_cache(maxsize=1)
def install_targets() -> tuple[str, ...]:
    """The folders on ``sys.path`` that pip installed into (:func:`_install_targets`), absolute, read once."""
    return tuple(os.path.abspath(f).rstrip(os.sep) for f in _install_targets())


def _install_targets() -> list[str]:
    """The folders on ``sys.path`` that pip installed distributions into (they hold a ``*.dist-info``): a
    checkout on the path holds none (an editable install's metadata is an ``*.egg-info`` there, or lives in
    site-packages)."""
    found = []
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        if any(name.endswith(".dist-info") for name in names):
            found.append(entry)
    return found


@functools.lru_cache(maxsize=4096)
def is_library_file(file: str) -> bool:
    """Whether ``file`` (as XLA's metadata names it) is library code, as the module docstring defines it."""
    if file.startswith("<"):
        return True  # <frozen runpy>, <string>: no file to open
    parts = file.replace("\\", "/").split("/")
    if _INSTALL_FOLDER_NAMES.intersection(parts):
        return True
    paths = {os.path.abspath(file)}
    try:
        paths.add(os.path.realpath(file))
    except (OSError, ValueError):
        pass
    for path in paths:
        for folder in library_folders():
            if path == folder or path.startswith(folder + os.sep):
                return True
    return False
