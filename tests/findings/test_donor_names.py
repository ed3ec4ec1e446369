"""The "donate X" hint names, for each new output, the input of the same path and shape (issue 48).

Every bundled example and the real-library steps (a flax linen + optax AdamW step, a KV decode, an nnx AdamW
step, an equinox step) are checked with nothing donated, so that every state output is written to a new
buffer and its ``new-buffer`` finding names the input it should reuse. The input expected is found here by
the convention update functions are written with, apart from fieldmem: item ``i`` of a tuple output is the
``i``-th argument (``out[1][0].mu['w']`` is ``opt_state[0].mu['w']``), a single output mirrors an argument
(``out['w']`` is ``params['w']``), and a wrapper's output named by the user's leaf (``model.l1.kernel``) is
that leaf. Where that input exists with the output's shape and dtype, it is the one named; elsewhere the one
named has the output's shape and dtype, and no two outputs are sent to one input while another fits.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fieldmem.parent.checker import check_targets
from fieldmem.request.options import CheckOptions
from fieldmem.request.spec import DonateSpec
from fieldmem.request.target import Target, TargetOptions, resolve_target

pytestmark = pytest.mark.compile

ROOT = Path(__file__).resolve().parents[2]
ASSETS = Path(__file__).resolve().parents[1] / "assets"


def _targets() -> list[Target]:
    found: list[Target] = []
    for file in sorted((ROOT / "examples").glob("*.py")):
        found += [t for t in resolve_target(str(file), TargetOptions()) if isinstance(t, Target)]
    steps = [
        ("deploy_steps.py:adamw_step", "deploy_steps:train_args"),
        ("deploy_steps.py:kv_decode", "deploy_steps:decode_args"),
        ("wrapped_steps.py:nnx_adamw_step", "wrapped_steps:nnx_adamw_args"),
        ("wrapped_steps.py:eqx_step", "wrapped_steps:eqx_args"),
    ]
    for spec, args in steps:
        found += [t for t in resolve_target(str(ASSETS / spec), TargetOptions(args=args)) if isinstance(t, Target)]
    none = DonateSpec.parse("none", "--donate")
    return [dataclasses.replace(t, donate=none) for t in found]


@pytest.fixture(scope="module")
def results(monkeypatch_module: Any) -> list[Any]:
    report = check_targets(_targets(), CheckOptions(min_bytes=1024, isolate=False))
    assert all(r.status == "ok" for r in report.results), [(r.name, r.error) for r in report.results]
    return list(report.results)


@pytest.fixture(scope="module")
def monkeypatch_module() -> Any:
    """tests/assets on sys.path, as the CLI puts a target's folder there."""
    sys.path.insert(0, str(ASSETS))
    yield
    sys.path.remove(str(ASSETS))


def _mirrored(output: str, arguments: list[str]) -> set[str]:
    if not output.startswith("out"):
        return {output}
    item = re.fullmatch(r"out\[(\d+)\](.*)", output, re.S)
    if item is not None and int(item.group(1)) < len(arguments):
        return {arguments[int(item.group(1))] + item.group(2)}
    return {argument + output[3:] for argument in arguments}


def test_each_new_output_names_the_input_of_its_path_and_shape(results: list[Any]) -> None:
    named = 0
    for result in results:
        inputs = {leaf.path: leaf for leaf in result.inputs if leaf.used}
        outputs = {out.path: out for out in result.outputs}
        arguments = list(dict.fromkeys(leaf.path.split("[")[0].split(".")[0] for leaf in result.inputs))
        hints = [f for f in result.verdict.findings if f.code == "new-buffer"]
        for finding in hints:
            out = outputs[finding.output]
            assert finding.input in inputs, (result.name, finding.message)
            leaf = inputs[finding.input]
            fits = [p for p, i in inputs.items() if (i.shape, i.dtype) == (out.shape, out.dtype)]
            mirror = [p for p in _mirrored(out.path, arguments) if p in fits]
            if mirror:  # one of them (a single output mirrors every argument of its shape: u and f alike)
                assert finding.input in mirror, (result.name, out.path, finding.message)
            elif fits:
                assert (leaf.shape, leaf.dtype) == (out.shape, out.dtype), (result.name, finding.message)
            # the message's fix names the same input
            assert f"{finding.input} has its size" in finding.message, finding.message
            named += 1
        # no input named for two outputs while another of their shape and dtype is left
        twice = [path for path, n in Counter(f.input for f in hints).items() if n > 1]
        for path in twice:
            shape = (inputs[path].shape, inputs[path].dtype)
            left = {p for p, i in inputs.items() if (i.shape, i.dtype) == shape} - {f.input for f in hints}
            assert not left, (result.name, path, left)
    assert named >= 30  # the examples and the library steps have state to name
