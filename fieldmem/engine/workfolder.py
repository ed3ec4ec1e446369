"""The folder a ``--run`` parent (:mod:`fieldmem.engine.isolate`) shares with its worker (:mod:`fieldmem.engine.worker`).

The parent writes :data:`REQUEST`; the worker appends ``start N`` and
``done N`` to :data:`EVENTS` around each target and writes each target's
:class:`WorkerResult` with :mod:`fieldmem.codec` to :func:`result_file`
(whole: a partial file is renamed into place). Only these names are shared;
neither side imports the other. No jax.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fieldmem.report import Chain, TargetResult

__all__ = ["EVENTS", "REQUEST", "WorkerResult", "result_file"]

REQUEST = "request.json"
EVENTS = "events"


@dataclasses.dataclass(frozen=True)
class WorkerResult:
    """What a worker gives back for one target: its results and, for a chain, the chain."""

    results: tuple[TargetResult, ...]
    chains: tuple[Chain, ...] = ()


def result_file(folder: Path, index: int) -> Path:
    """Where the worker writes the :class:`WorkerResult` of the request's target ``index``."""
    return folder / f"result-{index}.json"
