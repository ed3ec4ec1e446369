"""The jax releases fieldmem's worker supports, and the check of a release named for ``--jax``.

The worker (:mod:`fieldmem.worker.main`) drives jax through :mod:`fieldmem.driver`, which reads
what the compiled executable gives: ``memory_analysis()`` (its figures, ``peak_memory_in_bytes``
and the serialized buffer assignment), the optimized HLO module, ``args_info``, ``jit(...).trace``.
:data:`OLDEST_JAX` is the oldest release where the worker gives a complete report for every
bundled example, each figure equal to that release's own ``memory_analysis()`` of the same
program and the same aliases; :data:`NEWEST_JAX` the newest checked so. Both were measured by
``benchmarks/versions.py`` (``benchmarks/results/versions.md``): before 0.7, ``memory_analysis()``
has no ``peak_memory_in_bytes``, and before 0.6 a ``jax.jit`` object does not expose its options.

Standard library and fieldmem's errors only: the process that writes the report checks a release
before any environment with it is made, and never imports jax.
"""

from __future__ import annotations

import re

from fieldmem.model.errors import UnsupportedJaxError

__all__ = [
    "NEWEST_JAX",
    "OLDEST_JAX",
    "UnsupportedJaxError",
    "check_release",
    "check_supported",
    "is_release",
    "supported_range",
]

OLDEST_JAX = "0.7.0"
NEWEST_JAX = "0.10.2"

_RELEASE = re.compile(r"^([0-9]+)\.([0-9]+)\.([0-9]+)")  # ASCII digits: "٠.٧.١" is no release
# a release as a user names one (--jax, fieldmem envs create) and the package index has it: three numbers in
# ASCII digits, none with a leading zero ("0.7" and "0.7.1.0" are not one, "00.07.01" is not "0.7.1")
_NAMED = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")


def supported_range() -> str:
    """The range in words: ``0.7.0 to 0.10.2``."""
    return f"{OLDEST_JAX} to {NEWEST_JAX}"


def _release(version: str) -> tuple[int, int, int] | None:
    found = _RELEASE.match(version.strip())
    return None if found is None else (int(found[1]), int(found[2]), int(found[3]))


def check_supported(version: str) -> None:
    """Return when fieldmem's worker supports jax ``version`` (``0.9.2``; a suffix such as ``.dev1`` or
    ``rc1`` is read by its release number), else raise.

    Raises:
        UnsupportedJaxError: one line naming the release and the supported range.
    """
    release = _release(version)
    if release is None:
        raise UnsupportedJaxError(f"jax {version!r} is not a release number: name one as 0.9.2 ({supported_range()})")
    oldest, newest = _release(OLDEST_JAX), _release(NEWEST_JAX)
    assert oldest is not None and newest is not None
    if release < oldest:
        raise UnsupportedJaxError(
            f"jax {version} is older than fieldmem's worker supports: it supports jax {supported_range()}"
        )
    if release > newest:
        raise UnsupportedJaxError(
            f"jax {version} is newer than fieldmem's worker has been checked with: it supports jax {supported_range()}"
        )


def is_release(version: str) -> bool:
    """Whether ``version`` names a jax release as the package index does: ``0.9.2`` (not ``0.9``,
    ``0.9.2.0``, ``00.09.02`` or digits of another script)."""
    return bool(_NAMED.match(version))


def check_release(version: str) -> None:
    """Return when ``version`` names a release (:func:`is_release`) that fieldmem's worker supports, else
    raise: what a user names is checked before anything is downloaded for it.

    Raises:
        UnsupportedJaxError: one line naming the release and the supported range.
    """
    if not is_release(version):
        raise UnsupportedJaxError(
            f"{version!r} is not a jax release: name one as 0.9.2 (three numbers, no leading zero; "
            f"fieldmem supports jax {supported_range()})"
        )
    check_supported(version)
