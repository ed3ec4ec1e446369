"""Hand-built reports for the renderer, format and compare tests (no compile).

One place for the environment every such report carries; a test overrides
only what it is about (another backend, two devices, a baseline).
"""

from __future__ import annotations

from typing import Any

from fieldmem.report import DeviceInfo, Report, TargetResult


def make_report(results: tuple[TargetResult, ...], **overrides: Any) -> Report:
    """A cpu, one-device, jax 0.10.2 report of ``results``; keyword arguments replace any field."""
    fields: dict[str, Any] = dict(
        fieldmem_version="0.1.0",
        jax_version="0.10.2",
        jaxlib_version="0.10.2",
        backend="cpu",
        platform_version="cpu",
        devices=(DeviceInfo(id=0, platform="cpu", kind="cpu"),),
        results=results,
        min_bytes=1024,
    )
    fields.update(overrides)
    return Report(**fields)


def without_timings(document: dict[str, Any]) -> dict[str, Any]:
    """A report document without what differs between two runs of the same check (times, date)."""
    import json

    document = json.loads(json.dumps(document))
    document.pop("created", None)
    for result in document["results"]:
        for variant in result.get("variants", {}).values():
            variant.pop("lower_seconds", None)
            variant.pop("compile_seconds", None)
    return document
