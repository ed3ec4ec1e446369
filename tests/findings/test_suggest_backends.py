"""``--suggest`` says which backend its answer is for, gives the same answer for a function and its undonated
``jax.jit``, and over two backends (``cpu`` and the deviceless ``tpu:v5e``) gives each backend's best and the
donation best across both, each held to brute force over donation subsets on that backend (issue 48).

Brute force compiles every subset of the array arguments with ``jax.jit(fn, donate_argnums=subset)`` apart
from fieldmem: on the CPU here, for the TPU with jax's topology API (no device), and reads the footprint from
``memory_analysis()`` (argument + output + temp − alias; constants are the same in every subset). The arrays
are small: each compile takes a fraction of a second.
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import jax
import pytest
from helpers_backends import require_extra
from typer.testing import CliRunner

from fieldmem.frontends.cli import app
from fieldmem.gate.compare import compare_reports, load_report

from helpers_compile import UNUSABLE_WARNING

pytestmark = pytest.mark.compile

MIN = 1024
BACKENDS = ("cpu", "tpu:v5e")

MODULE = """
import jax
import jax.numpy as jnp
import optax


def _loss(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"]) ** 2)


tx = optax.adamw(1e-3, weight_decay=1e-4)


def adamw_step(params, opt_state, x):
    loss, grads = jax.value_and_grad(_loss)(params, x)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def adamw_args():
    params = {"w1": jnp.ones((128, 128)) * 0.01, "b1": jnp.zeros(128), "w2": jnp.ones((128, 128)) * 0.01}
    return params, tx.init(params), jnp.ones((128, 128))  # a batch of a kernel's size: XLA may alias it


def kv_decode(k_cache, v_cache, k_new, v_new, pos):
    return k_cache.at[:, pos].set(k_new), v_cache.at[:, pos].set(v_new)


def kv_args():
    cache = jnp.zeros((2, 64, 4, 32), jnp.bfloat16)
    new = jnp.ones((2, 4, 32), jnp.bfloat16)
    return cache, cache + 1, new, new, jnp.int32(3)


def ema(avg, x, scale):
    return 0.9 * avg + 0.1 * x * scale, x * 2.0


def ema_args():
    return jnp.zeros((64, 64)), jnp.ones((64, 64)), jnp.ones((64, 64))


adamw_step_jit = jax.jit(adamw_step)
kv_decode_jit = jax.jit(kv_decode)
ema_jit = jax.jit(ema)
"""
CASES = {"adamw_step": "adamw_args", "kv_decode": "kv_args", "ema": "ema_args"}


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case, written plain and as its undonated jit, checked with --suggest on both backends (one run)."""
    require_extra("tpu")
    folder = tmp_path_factory.mktemp("suggest")
    (folder / "cases.py").write_text(MODULE)
    argv = ["check"]
    for name, factory in CASES.items():
        argv += [f"cases.py:{name}", f"cases.py:{name}_jit", "--args", f"cases:{factory}"]
    argv += ["--suggest", "--backend", ",".join(BACKENDS), "--min-bytes", str(MIN), "--no-cache"]
    argv += ["-f", "json", "-o", str(folder / "r.json")]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.syspath_prepend(str(folder))
        result = CliRunner().invoke(app, argv, env={"COLUMNS": "120"})
        assert result.exit_code in (0, 1), result.output
        reports = {b: load_report(folder / f"r.{b.replace(':', '-')}.json") for b in BACKENDS}
        import cases  # the module the brute force compiles, apart from fieldmem

    return {"reports": reports, "module": cases, "table": result.stdout}


_TOPOLOGY: list[Any] = []


def _on(backend: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    if backend == "cpu":
        return args
    if not _TOPOLOGY:
        from jax.experimental import topologies

        _TOPOLOGY.append(topologies.get_topology_desc("v5e:1x1", "tpu", chips_per_host_bounds=[1, 1, 1]).devices[0])
    on = jax.sharding.SingleDeviceSharding(_TOPOLOGY[0])
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=on), args)


def _brute_force(fn: Any, args: tuple[Any, ...], backend: str) -> dict[tuple[str, ...], int]:
    """Every donation of the array arguments, by argument names, with its footprint on ``backend``."""
    import inspect

    names = list(inspect.signature(fn).parameters)
    arrays = [i for i, a in enumerate(args) if getattr(a, "ndim", 1) > 0 or jax.tree.leaves(a)[1:]]
    placed = _on(backend, args)
    found: dict[tuple[str, ...], int] = {}
    for n in range(len(arrays) + 1):
        for subset in itertools.combinations(arrays, n):
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=UNUSABLE_WARNING)
                m = jax.jit(fn, donate_argnums=subset).trace(*placed).lower().compile().memory_analysis()
            size = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
            found[tuple(names[i] for i in subset)] = int(size)
    return found


def _result(report: Any, name: str) -> Any:
    (found,) = [r for r in report.results if r.name == name]
    assert found.status == "ok", found.error
    return found


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_backends_suggestion_is_named_agrees_and_is_brute_forces_best(
    checked: dict[str, Any], case: str, backend: str
) -> None:
    report = checked["reports"][backend]
    plain, jitted = _result(report, f"cases.py:{case}"), _result(report, f"cases.py:{case}_jit")
    for result in (plain, jitted):
        suggestion = result.suggestion
        assert suggestion is not None and suggestion.memory is not None, result.name
        assert suggestion.backend == backend and suggestion.summary.startswith(f"on {backend}, "), suggestion
    # a function and its undonated jit: one program, one answer
    assert plain.suggestion.spec == jitted.suggestion.spec, (plain.suggestion.summary, jitted.suggestion.summary)
    assert plain.suggestion.memory.footprint_bytes == jitted.suggestion.memory.footprint_bytes
    module = checked["module"]
    fp = _brute_force(getattr(module, case), getattr(module, CASES[case])(), backend)
    gain = plain.suggestion.memory.footprint_bytes - plain.variants["plain"].memory.footprint_bytes
    best = min(fp.values()) - fp[()]
    assert gain - best < MIN, (backend, plain.suggestion.summary, fp)
    chosen = tuple(a.argument for a in plain.suggestion.arguments if a.donate)
    assert fp[chosen] - fp[()] == gain, (chosen, fp)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_donation_best_across_both_backends_is_brute_forces(checked: dict[str, Any], case: str) -> None:
    reports = checked["reports"]
    comparison = compare_reports([(b, reports[b]) for b in BACKENDS])
    (row,) = [r for r in comparison.rows if r.name == f"cases.py:{case}"]
    across = row.suggestion
    assert across is not None and across.complete, row
    module = checked["module"]
    args = getattr(module, CASES[case])()
    brute = {b: _brute_force(getattr(module, case), args, b) for b in BACKENDS}
    total = {spec: sum(brute[b][spec] - brute[b][()] for b in BACKENDS) for spec in brute["cpu"]}
    chosen = tuple(across.arguments)
    assert total[chosen] - min(total.values()) < len(BACKENDS) * MIN, (across.summary, total)
    # each backend's own best beside it, as that backend's suggestion gives it
    for n, backend in enumerate(BACKENDS):
        own = _result(reports[backend], f"cases.py:{case}").suggestion
        assert across.bests[n] == tuple(a.argument for a in own.arguments if a.donate), (backend, across, own)
    assert across.summary.startswith(f"across {', '.join(BACKENDS)}: donate "), across.summary
    assert f"suggest across {', '.join(BACKENDS)}" in " ".join(checked["table"].split())
