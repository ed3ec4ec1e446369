"""A compile stopped early, kept under jax's persistent-cache key: what a rerun reads instead of compiling.

A static check's worker stops its XLA:CPU compiles once XLA has dumped the
optimized module and its text (:mod:`fieldmem.driver.early`); the code
generation it abandons is what would have written jax's persistent cache
entry. With the cache on, that dump is kept instead, in ``fieldmem-readings/``
inside jax's cache folder, under the key jax computed for the compile: jax's
own key, which covers the module with its source locations (fieldmem sets
``jax_compilation_cache_include_metadata_in_key``), the compile options but
the dump's, the devices and the versions of jax and of the backend. A rerun
looks there when jax's own cache has no entry, and answers from the kept dump
exactly as the early stop answers from a fresh one, without compiling.

One file per key, written whole (a temporary file in the same folder, then a
rename: a reader never sees half of one); a file that is missing, unreadable
or not one of these is a miss, and the compile runs. jax's cache size limit
(``jax_compilation_cache_max_size``) does not count these files; they are
small beside an executable (the module and its text, compressed).

No jax here: the folder is given by the caller (:func:`folder_of`).
"""

from __future__ import annotations

import os
import re
import struct
import tempfile
import zlib
from pathlib import Path

__all__ = ["FOLDER", "MAGIC", "folder_of", "load", "save"]

#: the folder inside jax's cache folder that holds the kept dumps
FOLDER = "fieldmem-readings"
#: the first bytes of a kept dump: its format (a file of another format is a miss)
MAGIC = b"fieldmem-dump 1\n"
_LENGTH = struct.Struct("<Q")  # the module's length, before the module, then the text (all compressed)
_KEY = re.compile(r"[A-Za-z0-9_.-]{1,200}")  # jax's keys: the module's name, '-', a sha256 in hex


def folder_of(cache_dir: str | None) -> Path | None:
    """Where kept dumps live for jax's cache folder ``cache_dir`` (None: no cache folder, or one that is not a
    local path, such as ``gs://``, where nothing is kept)."""
    if not cache_dir or "://" in cache_dir:
        return None
    return Path(cache_dir).expanduser() / FOLDER


def _path(folder: Path, key: str) -> Path | None:
    return folder / key if _KEY.fullmatch(key) else None


def load(folder: Path, key: str) -> tuple[bytes, str] | None:
    """The optimized module (serialized ``HloProto``) and its text kept under ``key`` (None: none, or not whole)."""
    path = _path(folder, key)
    if path is None:
        return None
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    if not raw.startswith(MAGIC):
        return None
    try:
        body = zlib.decompress(raw[len(MAGIC) :])
        (length,) = _LENGTH.unpack_from(body)
        start = _LENGTH.size
        if start + length > len(body):
            return None
        return body[start : start + length], body[start + length :].decode()
    except (zlib.error, struct.error, UnicodeDecodeError):
        return None


def save(folder: Path, key: str, module: bytes, text: str) -> bool:
    """Keep ``module`` and ``text`` under ``key``, whole or not at all; whether it was written (a folder that
    cannot be written is not an error: the next run compiles)."""
    path = _path(folder, key)
    if path is None:
        return False
    body = zlib.compress(_LENGTH.pack(len(module)) + module + text.encode(), 1)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    except OSError:
        return False
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(MAGIC + body)
        os.replace(temporary, path)
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        return False
    return True
