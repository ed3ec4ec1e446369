"""On a real TPU v5e: does the largest batch ``fieldmem fit`` reported for ``tpu:v5e`` run, and does the next one
up fail with an out-of-memory error?

    python hardware/fit_chip.py OUT.json [--report hardware/results/fit-block-tpu-v5e.json]

The report is a ``fieldmem fit -f json`` document of ``examples/fit/block.py`` (by default the one the docs
show, compiled without the chip). For each of its rows (each remat policy) two points are run with plain
jax, each in a fresh process (the device's ``peak_bytes_in_use`` is a high-water mark over a process's
life, and one process at a time holds the chip): the largest batch reported to fit, and the next one up.
A point's process makes its arguments with the example's own factory as real arrays (zeros) on the chip,
calls the jitted step twice (the second call on the first one's outputs: the donated state in steady
state) and waits for it. It ``ran``, or it failed with ``out-of-memory`` (XLA's ``RESOURCE_EXHAUSTED`` at
compile or run time, the arrays' allocation included), or with another ``error``.

``OUT.json`` gets, per point: the values, what fieldmem reported (fits or not, the footprint it predicted),
what happened, the device's ``peak_bytes_in_use``, ``bytes_in_use`` and ``bytes_limit`` after it, the first
line of an error, and the jax and libtpu it ran with. ``agrees`` is true when every planned point ran (the
file is written again after each one, so a run stopped midway keeps what it saw; ``planned`` counts them),
every reported fit ran and every reported misfit ran out of memory. Exit 0 when all agree, 1 when one does
not, 2 when there is no TPU here or the report is not one.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_REPORT = ROOT / "hardware" / "results" / "fit-block-tpu-v5e.json"
OUT_OF_MEMORY = ("RESOURCE_EXHAUSTED", "out of memory", "Out of memory", "exceeds available HBM", "OOM")


class NoTpu(Exception):
    """There is no TPU here for jax to run on."""


def plan_points(document: dict[str, Any], backend: str = "tpu:v5e") -> list[dict[str, Any]]:
    """The points to run: per row of the search on ``backend``, its largest value that fits and the next one up
    (a row without one of them gives what it has), each with what fieldmem reported of it.

    Raises:
        ValueError: the document is not a fit document with a search on ``backend``.
    """
    if not isinstance(document, dict) or not str(document.get("schema", "")).startswith("fieldmem.fit/"):
        raise ValueError("not a fieldmem fit document (fieldmem fit -f json -o FILE)")
    searches = [s for s in document.get("searches", []) if s.get("backend") == backend]
    if not searches:
        raise ValueError(f"it has no search on {backend}")
    points = []
    for search in searches:
        knob = search.get("searched")
        for row in search.get("rows", []):
            for value, reported in ((row.get("largest"), "fits"), (row.get("smallest_failing"), "does not fit")):
                if value is None or knob is None:
                    continue
                values = {**row.get("fixed", {}), knob: value}
                point = next((p for p in row.get("points", []) if p.get("values") == values), {})
                points.append(
                    {
                        "target": search.get("target"),
                        "args": search.get("args"),
                        "values": values,
                        "reported": reported,
                        "reported_footprint_bytes": point.get("footprint_bytes"),
                        "reported_capacity_bytes": point.get("capacity_bytes"),
                    }
                )
    return points


def out_of_memory(message: str) -> bool:
    """Whether an error's text is XLA's (or jax's) out-of-memory."""
    return any(word in message for word in OUT_OF_MEMORY)


def _load(spec: str) -> Any:
    """``path/to/file.py:name`` or ``module:name`` -> the object (a file is loaded by its path)."""
    module_part, _, name = spec.rpartition(":")
    if module_part.endswith(".py"):
        path = (ROOT / module_part) if not os.path.isabs(module_part) else Path(module_part)
        name_of = f"_fit_chip_{path.stem}"
        module = sys.modules.get(name_of)  # the step and its factory from one module
        if module is None:
            loaded = importlib.util.spec_from_file_location(name_of, path)
            assert loaded is not None and loaded.loader is not None
            module = importlib.util.module_from_spec(loaded)
            sys.modules[name_of] = module
            loaded.loader.exec_module(module)
    else:
        module = importlib.import_module(module_part)
    obj = module
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def run_one(target: str, factory: str, values: dict[str, Any]) -> dict[str, Any]:
    """In this process (a fresh one): the step on real arrays at ``values``, twice; what happened."""
    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    if device.platform != "tpu":
        raise NoTpu(f"jax runs on {device.platform} here ({device.device_kind}), not a TPU")
    step, make_args = _load(target), _load(factory)
    made = make_args(**values)
    args, kwargs = made if isinstance(made, tuple) and len(made) == 2 and isinstance(made[1], dict) else (made, {})
    outcome: dict[str, Any] = {"device_kind": device.device_kind, "devices": len(jax.devices())}
    stage = "making the arguments"
    start = time.perf_counter()
    try:

        def real(leaf: Any) -> Any:
            if isinstance(leaf, jax.ShapeDtypeStruct):
                sharding = leaf.sharding if getattr(leaf, "sharding", None) is not None else None
                return jax.device_put(jnp.zeros(leaf.shape, leaf.dtype), sharding)
            return leaf

        args = jax.block_until_ready(jax.tree.map(real, tuple(args)))
        stage = "running the step"
        first = step(*args, **kwargs)
        jax.block_until_ready(first)
        stage = "running the step again on its outputs"
        state = tuple(first[:2]) + tuple(args[2:]) if isinstance(first, tuple) and len(first) >= 2 else args
        jax.block_until_ready(step(*state, **kwargs))
        outcome["outcome"] = "ran"
    except Exception as exc:  # XlaRuntimeError, or what the step raised
        message = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        outcome["outcome"] = "out-of-memory" if out_of_memory(str(exc)) else "error"
        outcome["stage"] = stage
        outcome["error"] = message[:500]
    outcome["seconds"] = round(time.perf_counter() - start, 3)
    stats = device.memory_stats() or {}
    for key in ("peak_bytes_in_use", "bytes_in_use", "bytes_limit"):
        outcome[key] = stats.get(key)
    outcome["jax_version"] = jax.__version__
    try:  # the TPU compiler the chip's programs were compiled with (fieldmem's deviceless one may differ)
        from importlib.metadata import version

        outcome["libtpu_version"] = version("libtpu")
    except Exception:  # not installed as a distribution (libtpu-nightly, a build of one's own)
        outcome["libtpu_version"] = None
    return outcome


def _child(point: dict[str, Any], timeout: float) -> dict[str, Any]:
    """:func:`run_one` of ``point`` in a process of its own; its answer, or why there is none."""
    factory = point["args"] or ""
    command = [
        sys.executable,
        __file__,
        "--one",
        json.dumps({"target": point["target"], "args": factory, "values": point["values"]}),
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        return {"outcome": "error", "error": f"did not finish within {timeout:g} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode == 3:
        raise NoTpu(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no TPU")
    if not lines:
        tail = [line for line in done.stderr.splitlines() if line.strip()][-3:]
        said = " | ".join(tail)
        return {
            "outcome": "out-of-memory" if out_of_memory(done.stderr) else "error",
            "error": said[:500],
            "exit": done.returncode,
        }
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="where to write the JSON of what happened")
    parser.add_argument("--report", default=str(DEFAULT_REPORT), help="the fieldmem fit -f json document")
    parser.add_argument("--backend", default="tpu:v5e", help="whose search in the report to run (default tpu:v5e)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds a point's process may take")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a point's own process
    options = parser.parse_args(argv)
    if options.one is not None:
        asked = json.loads(options.one)
        try:
            print(json.dumps(run_one(asked["target"], asked["args"], asked["values"])), flush=True)
        except NoTpu as exc:
            print(f"fit_chip: {exc}", file=sys.stderr)
            return 3
        return 0
    if options.out is None:
        parser.error("name the file to write, e.g. python hardware/fit_chip.py fit-chip.json")
    try:
        document = json.loads(Path(options.report).read_text(encoding="utf-8"))
        points = plan_points(document, options.backend)
    except (OSError, ValueError) as exc:
        print(f"fit_chip: {options.report}: {exc}", file=sys.stderr)
        return 2
    results: list[dict[str, Any]] = []

    def write() -> bool:
        """Write what was seen so far (a run stopped midway keeps its points); whether all of it agrees."""
        written = {
            "what": "fieldmem fit's frontier on tpu:v5e against a real chip (hardware/fit_chip.py)",
            "report": str(options.report),
            "created": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
            "points": results,
            "planned": len(points),
            "agrees": len(results) == len(points) and all(r["agrees"] for r in results),
        }
        Path(options.out).write_text(json.dumps(written, indent=1) + "\n", encoding="utf-8")
        return bool(written["agrees"])

    try:
        for point in points:
            print(f"fit_chip: {point['values']} (reported: {point['reported']})", file=sys.stderr, flush=True)
            happened = _child(point, options.timeout)
            agrees = (point["reported"] == "fits" and happened.get("outcome") == "ran") or (
                point["reported"] == "does not fit" and happened.get("outcome") == "out-of-memory"
            )
            results.append({**point, **happened, "agrees": agrees})
            print(f"fit_chip:   {happened.get('outcome')} (agrees: {agrees})", file=sys.stderr, flush=True)
            write()
    except NoTpu as exc:
        print(f"fit_chip: {exc}: run this on a machine with a TPU v5e", file=sys.stderr)
        return 2
    return 0 if write() else 1


if __name__ == "__main__":
    raise SystemExit(main())
