"""Hold ``fieldmem fit``'s frontier to plain jax: the largest value it reports compiles without "does not fit",
and the next one up does not. Compiles without the device, as fieldmem did, but through jax alone.

    python hardware/fit_verify.py hardware/results/fit-block-tpu-v5e.json [OUT.json]

For each search of the ``fieldmem fit -f json`` document (a deviceless backend) and each row, the step is
compiled with plain jax (``step.trace(...).lower().compile()``; a step that is not a jit is jitted donating
every argument) for the backend's chips at the largest value that fits and at the next one up, each backend
in a process of its own started as the fieldmem command starts one (``JAX_PLATFORMS=cpu``, as many CPU
devices as the topology has chips, so that the factory's shardings make a mesh its size, carried onto the
chips). On a TPU, "does not fit" is libtpu's own refusal (``RESOURCE_EXHAUSTED``: the program exceeds the
HBM it leaves a program); on a GPU, XLA compiles any program, so it is the footprint ``memory_analysis()``
gives (argument + output + temp - alias) against the memory of the GPU's target config. Writes what happened
to ``OUT.json`` (default: beside the document, ``*-verify.json``). Exit 0 when every point agrees, 1 when one
does not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hardware"))

from fit_chip import _load, out_of_memory, plan_points  # noqa: E402


def compile_point(backend: str, target: str, factory: str, values: dict[str, Any]) -> dict[str, Any]:
    """In this process (started for ``backend``): the step compiled with plain jax at ``values``."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding

    from fieldmem.driver.deviceless import nvcc_folder
    from fieldmem.driver.deviceless import target as topology
    from fieldmem.request.backends import device_memory, parse_backend

    chips = topology(backend).devices
    step, make_args = _load(target), _load(factory)
    made = make_args(**values)
    args, kwargs = made if isinstance(made, tuple) and len(made) == 2 and isinstance(made[1], dict) else (made, {})

    def on_chips(leaf: Any) -> Any:
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            return leaf
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding):
            mesh = sharding.mesh
            placed = Mesh(np.array(chips).reshape(mesh.devices.shape), mesh.axis_names)
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(placed, sharding.spec))
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=SingleDeviceSharding(chips[0]))

    args = jax.tree.map(on_chips, tuple(args))
    jitted = step if hasattr(step, "trace") else jax.jit(step, donate_argnums=tuple(range(len(args))))
    lowered = jitted.trace(*args, **kwargs).lower()
    platform = parse_backend(backend).platform
    options = {"xla_gpu_cuda_data_dir": nvcc_folder()} if platform == "gpu" else None
    found: dict[str, Any] = {}
    try:
        compiled = lowered.compile(compiler_options=options) if options else lowered.compile()
    except Exception as exc:
        text = str(exc)
        found["compiled"] = False
        found["refused"] = out_of_memory(text)
        found["error"] = (text.strip().splitlines() or [""])[0][:400]
        found["does_not_fit"] = found["refused"]
        return found
    memory = compiled.memory_analysis()
    footprint = (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )
    capacity = device_memory(parse_backend(backend))
    found["compiled"] = True
    found["footprint_bytes"] = int(footprint)
    found["capacity_bytes"] = capacity.bytes if capacity is not None else None
    # a TPU program that compiled fits (libtpu refuses the others); a GPU one fits when its footprint does
    found["does_not_fit"] = platform == "gpu" and capacity is not None and footprint > capacity.bytes
    return found


def _backend_process(backend: str, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from fieldmem.request.backends import DEVICELESS_ENV, parse_backend

    env = dict(os.environ)
    env.update(DEVICELESS_ENV)
    chips = parse_backend(backend).chips
    if chips > 1:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={chips}").strip()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, __file__, "--backend-process", json.dumps({"backend": backend, "points": points})],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    if not lines:
        raise RuntimeError(f"the {backend} process gave no answer: {done.stderr.strip()[-600:]}")
    answers: list[dict[str, Any]] = json.loads(lines[-1])
    return answers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?")
    parser.add_argument("out", nargs="?")
    parser.add_argument("--backend-process", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.backend_process is not None:
        asked = json.loads(options.backend_process)
        answers = [
            {**p, "plain_jax": compile_point(asked["backend"], p["target"], p["args"], p["values"])}
            for p in asked["points"]
        ]
        print(json.dumps(answers), flush=True)
        return 0
    if options.report is None:
        parser.error("name a fieldmem fit -f json document")
    document = json.loads(Path(options.report).read_text(encoding="utf-8"))
    backends = list(dict.fromkeys(s["backend"] for s in document.get("searches", [])))
    results = []
    for backend in backends:
        points = plan_points(document, backend)
        for answer in _backend_process(backend, points):
            answer["backend"] = backend
            answer["agrees"] = answer["plain_jax"]["does_not_fit"] == (answer["reported"] == "does not fit")
            results.append(answer)
            print(
                f"fit_verify: {backend} {answer['values']}: reported {answer['reported']}, plain jax "
                f"{'does not fit' if answer['plain_jax']['does_not_fit'] else 'fits'}",
                file=sys.stderr,
            )
    out = (
        Path(options.out) if options.out else Path(options.report).with_name(Path(options.report).stem + "-verify.json")
    )
    written = {
        "what": "fieldmem fit's frontier against plain jax compiles (hardware/fit_verify.py)",
        "report": str(options.report),
        "points": results,
        "agrees": all(r["agrees"] for r in results),
    }
    out.write_text(json.dumps(written, indent=1) + "\n", encoding="utf-8")
    return 0 if written["agrees"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
