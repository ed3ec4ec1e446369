"""The pmap family and shard_map: fieldmem analyses the per-device program the user's own wrapper runs.

``jax.pmap`` (jax 0.10: a ``jit`` of a ``shard_map``), ``flax.nnx.pmap`` and ``equinox.filter_pmap`` are
analysed as the jit they call, with their own donation, each leaf named by the user's path; a ``jax.jit``
of a ``shard_map`` is a jit like any other. Over four simulated devices (one CLI run with ``--devices 4
--run``, one plain-jax run of the same steps, both shared by the tests below) the per-device figures
equal ``memory_analysis()`` of the user's own compile, every alias holds on every shard, and it is the
alias the user's own call shows. In this process (one device) the same wrappers map an axis of one.
Steps live in tests/assets/pmapped_steps.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import pytest

from fieldmem.driver import prepare_call, start_variants
from fieldmem.model.errors import ArgumentsError, DonationError, TargetError
from fieldmem.request.spec import DonateSpec, StaticSpec

from helpers_compile import check_one, make_target, xla_memory

ASSETS = Path(__file__).parents[1] / "assets"
STEPS = ASSETS / "pmapped_steps.py"
DEVICES = 4

pytestmark = pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")


def _load(name: str) -> Any:
    """An asset module loaded without putting tests/assets on sys.path."""
    spec = importlib.util.spec_from_file_location(f"_{name}_under_test", ASSETS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ps = _load("pmapped_steps")


def prepared(fn: Any, args: tuple, donate: str | None = None) -> Any:
    spec = DonateSpec.parse(donate, "donate=") if donate is not None else DonateSpec()
    return prepare_call(fn, args, {}, donate=spec, static=StaticSpec())


# ---- one device, in this process ----------------------------------------------------------------------


@pytest.mark.compile
def test_a_pmap_is_analysed_as_the_jit_it_calls_with_its_own_donation() -> None:
    args = ps.relax_args()
    call = prepared(ps.relax, args)
    assert call.wrapper == "jax.pmap"
    assert call.positional_names == ("u", "f")  # the rate is static_broadcasted: no leaf
    assert call.donated_positions == {0} and call.donation_source == "jit"
    plain, donated = start_variants(call, None).result()
    # the donated variant is the user's own program: what jax.pmap(...).lower(...).compile() gives
    own = xla_memory(ps.relax.lower(*args).compile())
    assert {k: donated.variant.memory[k] for k in own} == own
    assert [leaf.donated for leaf in plain.variant.inputs] == [False, False]
    assert [(leaf.path, leaf.donated) for leaf in donated.variant.inputs] == [("u", True), ("f", False)]
    assert donated.variant.donated_arguments == ("u",)


@pytest.mark.compile
def test_a_pmapped_pytree_with_an_unmapped_argument_is_named_by_the_users_paths() -> None:
    result = check_one(make_target(ps.advect, ps.advect_args), min_bytes=0)
    assert [(i.path, i.shape, i.donated) for i in result.inputs] == [
        ("state['t']", (1,), True),
        ("state['u']", (1, ps.COLS), True),
        ("v", (ps.COLS,), False),  # in_axes None: every device takes it whole
    ]
    donated = result.variants["donated"]
    assert donated.donated_arguments == ("state",)
    assert {(a.input, a.output) for a in donated.aliases} == {("state['t']", "out['t']"), ("state['u']", "out['u']")}


@pytest.mark.compile
def test_nnx_pmap_and_filter_pmap_are_analysed_with_their_own_donation() -> None:
    nnx_result = check_one(make_target(ps.nnx_relax, ps.nnx_args), min_bytes=0)
    assert [(a.input, a.output) for a in nnx_result.variants["donated"].aliases] == [("field.u", "field.u")]
    assert [o.path for o in nnx_result.outputs] == ["field.u", "out"]
    assert nnx_result.variants["donated"].donated_arguments == ("field",)
    eqx_result = check_one(make_target(ps.eqx_relax, ps.eqx_args), min_bytes=0)
    assert eqx_result.variants["donated"].donated_arguments == ("u", "f")  # donate="all": every array
    assert [(a.input, a.output) for a in eqx_result.variants["donated"].aliases] == [("u", "out")]
    # the equinox program is the user's own: filter_pmap(...).lower(...).compile()
    own = xla_memory(ps.eqx_relax.lower(*ps.eqx_args()).compile().compiled)
    assert {k: getattr(eqx_result.variants["donated"].memory, k) for k in own} == own


def test_donate_and_static_lists_are_refused_for_a_pmap() -> None:
    with pytest.raises(DonationError, match=r"--donate u: the target is jax\.pmap"):
        prepared(ps.relax, ps.relax_args(), donate="u")
    assert prepared(ps.relax, ps.relax_args(), donate="all").donated_positions == {0, 1}
    assert prepared(ps.relax, ps.relax_args(), donate="none").donated_positions == frozenset()


def test_a_mapped_axis_longer_than_the_devices_says_how_many_are_needed() -> None:
    """jax's own call fails deep in the program ("cannot select an axis to squeeze out"); fieldmem says why."""
    with pytest.raises(ArgumentsError) as caught:
        prepared(ps.relax, (jnp.zeros((4, 8)), jnp.zeros((4, 8)), 0.5))
    assert str(caught.value) == (
        "jax.pmap maps an axis of 4 over 1 device(s) (jax.pmap needs one device per entry): "
        "check it with --devices 4, or on 4 devices"
    )


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: ps.shard_around_jit, "jax.shard_map around a jax.jit never reuses your buffers"),
        (lambda: __import__("flax").nnx.pmap(ps._eqx_relax, graph=False), "flax.nnx.pmap(graph=False"),
    ],
)
def test_what_is_still_refused_is_one_line(make: Any, words: str) -> None:
    with pytest.raises(TargetError) as caught:
        prepared(make(), (jnp.zeros((1, 8)), jnp.zeros((1, 8))))
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.compile
def test_suggest_is_not_available_for_a_pmap() -> None:
    from fieldmem.parent.checker import check_targets
    from fieldmem.request.options import CheckOptions

    (result,) = check_targets([make_target(ps.relax, ps.relax_args)], CheckOptions(min_bytes=0, suggest=True)).results
    assert result.suggestion is not None and result.suggestion.summary.startswith("not available for jax.pmap")


# ---- four simulated devices: one fieldmem run and one plain-jax run, shared ------------------------------

# the user's own wrappers under four devices: memory_analysis() of their own compile, and what their own
# call does to the donated buffers (per shard, device order)
_OWN = """
import json, sys
sys.path.insert(0, sys.argv[1])
import jax
import pmapped_steps as ps

def memory(compiled):
    m = compiled.memory_analysis()
    return {"argument_bytes": m.argument_size_in_bytes, "output_bytes": m.output_size_in_bytes,
            "alias_bytes": m.alias_size_in_bytes, "temp_bytes": m.temp_size_in_bytes}

def shards(array):
    return [s.data.unsafe_buffer_pointer() for s in sorted(array.addressable_shards, key=lambda s: s.device.id)]

def reuse(before, array, out):
    return {"same_buffers": shards(out) == before, "deleted": array.is_deleted(), "shards": len(before)}

found = {"devices": len(jax.devices())}
found["relax"] = memory(ps.relax.lower(*ps.relax_args()).compile())
found["advect"] = memory(ps.advect.lower(*ps.advect_args()).compile())
found["eqx_relax"] = memory(ps.eqx_relax.lower(*ps.eqx_args()).compile().compiled)
found["shard_relax"] = memory(ps.shard_relax.lower(*ps.shard_args()).compile())

u, f, rate = ps.relax_args(); before = shards(u)
found["relax_call"] = reuse(before, u, ps.relax(u, f, rate))
field, f = ps.nnx_args(); array = field.u.get_raw_value(); before = shards(array)
ps.nnx_relax(field, f)
found["nnx_relax_call"] = reuse(before, array, field.u.get_raw_value())
u, f = ps.eqx_args(); before = shards(u)
found["eqx_relax_call"] = reuse(before, u, ps.eqx_relax(u, f))
u, f = ps.shard_args(); before = shards(u)
found["shard_relax_call"] = reuse(before, u, ps.shard_relax(u, f))
u, f = ps.shard_args(); before = shards(u)
found["shard_around_jit_call"] = reuse(before, u, ps.shard_around_jit(u, f))
print(json.dumps(found))
"""


def _environment() -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    return env


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """fieldmem's report of every case in pmapped_steps.py (``--devices 4 --run``), by name, and what the
    user's own wrappers give under four devices."""
    folder = tmp_path_factory.mktemp("pmap")
    out = folder / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", str(STEPS), "--devices", str(DEVICES), "--run"]
        + ["-f", "json", "-o", str(out)],
        capture_output=True,
        text=True,
        env=_environment(),
        cwd=folder,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: a step that is not in place (see the tests)
    report = json.loads(out.read_text())
    env = dict(_environment(), XLA_FLAGS=f"--xla_force_host_platform_device_count={DEVICES}")
    own = subprocess.run([sys.executable, "-c", _OWN, str(ASSETS)], capture_output=True, text=True, env=env, check=True)
    user = json.loads(own.stdout.strip().splitlines()[-1])
    assert user["devices"] == DEVICES
    return {r["name"].removeprefix("pmapped_steps:"): r for r in report["results"]}, user


MAPPED = ("relax", "advect", "nnx_relax", "eqx_relax", "shard_relax")


@pytest.mark.compile
@pytest.mark.parametrize("name", MAPPED)
def test_every_alias_holds_on_every_shard_and_is_the_users_own(
    four_devices: tuple[dict[str, Any], dict[str, Any]], name: str
) -> None:
    results, user = four_devices
    result = results[name]
    assert result["status"] == "ok", result.get("error")
    assert result["devices"] == list(range(DEVICES))
    run = result["variants"]["donated"]["run"]
    assert run["aliases"] and all(a["confirmed"] for a in run["aliases"]), run["aliases"]
    assert all(f"({DEVICES} shards)" in a["detail"] for a in run["aliases"])
    if f"{name}_call" in user:  # the user's own call reuses the donated buffer on every shard too
        assert user[f"{name}_call"] == {"same_buffers": True, "deleted": True, "shards": DEVICES}


@pytest.mark.compile
@pytest.mark.parametrize("name", ["relax", "advect", "eqx_relax", "shard_relax"])
def test_per_device_figures_equal_the_users_own_compile(
    four_devices: tuple[dict[str, Any], dict[str, Any]], name: str
) -> None:
    results, user = four_devices
    memory = results[name]["variants"]["donated"]["memory"]
    assert {k: memory[k] for k in user[name]} == user[name]


@pytest.mark.compile
def test_the_pmapped_field_update_per_device(four_devices: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """The issue's step: a field pmapped with donate_argnums=(0,). Each device holds a quarter of u and f
    (the mapped axis, ``device_shape``); u's piece is reused for out. XLA:CPU computes the update into a
    temporary and copies it into that buffer (the user's own program has the copy too), so donating saves
    nothing per device: the report says so."""
    results, user = four_devices
    relax = results["relax"]
    piece = [1, ps.COLS]
    assert [(i["path"], i["shape"], i["device_shape"]) for i in relax["inputs"]] == [
        ("u", [DEVICES, ps.COLS], piece),
        ("f", [DEVICES, ps.COLS], piece),
    ]
    assert [(o["path"], o["device_shape"]) for o in relax["outputs"]] == [("out", piece)]
    memory = relax["variants"]["donated"]["memory"]
    assert memory["argument_bytes"] == 2 * 4 * ps.COLS  # two float32 rows of COLS on each device
    assert memory["alias_bytes"] == 4 * ps.COLS == user["relax"]["alias_bytes"]
    assert memory["temp_bytes"] == user["relax"]["temp_bytes"] == 4 * ps.COLS
    assert [(a["input"], a["output"]) for a in relax["variants"]["donated"]["aliases"]] == [("u", "out")]
    assert relax["verdict"]["summary"].startswith("not in place: out is not written in place")


@pytest.mark.compile
def test_a_jit_of_a_shard_map_writes_in_place(four_devices: tuple[dict[str, Any], dict[str, Any]]) -> None:
    results, _ = four_devices
    shard = results["shard_relax"]
    assert shard["verdict"]["in_place"] is True
    assert [(i["path"], i["device_shape"]) for i in shard["inputs"]] == [("u", [2, ps.COLS]), ("f", [2, ps.COLS])]
    assert shard["checks"][0]["name"] == "expect-in-place" and shard["checks"][0]["passed"]


@pytest.mark.compile
def test_shard_map_around_a_jit_keeps_the_callers_buffers(four_devices: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """Why it is refused: called outside a jit, the inner jit's donation never reaches the caller's buffers."""
    _, user = four_devices
    assert user["shard_around_jit_call"] == {"same_buffers": False, "deleted": False, "shards": DEVICES}


def test_a_pmap_is_not_compiled_for_a_deviceless_backend() -> None:
    """Its mesh is made from the devices jax runs on when it is called: no program for another backend's chips."""
    from fieldmem.driver.deviceless import deviceless_scope, target
    from fieldmem.model.errors import OptionError

    try:
        chips = target("tpu:v5e")
    except OptionError as exc:
        pytest.skip(str(exc))
    call = prepared(ps.relax, ps.relax_args())
    with deviceless_scope(chips), pytest.raises(TargetError) as caught:
        start_variants(call, None)
    assert str(caught.value).startswith("--backend tpu:v5e: jax.pmap builds its program for the devices jax runs on")
