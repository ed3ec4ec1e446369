"""``--suggest`` never advises a donation worse than the one checked, and finds what brute force finds.

For each case every subset of its array arguments is compiled with ``jax.jit(fn, donate_argnums=subset)``
apart from fieldmem, and its footprint taken from ``memory_analysis()`` (argument + output + temp − alias;
the constants are the same in every subset). The suggestion's footprint, less the plain one's, must be
within ``--min-bytes`` of the best subset's and never ``--min-bytes`` or more above the donation the check
used (the user's own, or fieldmem's default).
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from verdict_cases import CASES, Case
from verdict_cases import leaves as _leaves

from fieldmem.parent.checker import check_targets
from fieldmem.request.options import CheckOptions

from helpers_compile import UNUSABLE_WARNING, make_target

pytestmark = pytest.mark.compile

MIN = 1024


def _kv(cache, pos, kv):
    return cache.at[:, pos].set(kv), kv.sum()


def _decode(cache, pos, x, w):
    cache = cache.at[:, pos].set(jnp.tanh(x @ w))
    return cache, cache.sum(axis=1) @ w.T


EXTRA = (
    Case(
        "kv_bf16",
        _kv,
        lambda: (jnp.zeros((4, 256, 64), jnp.bfloat16), jnp.int32(3), jnp.ones((4, 64), jnp.bfloat16)),
        (0,),
        "in-place-as-written",
    ),
    Case(
        "decode",
        _decode,
        lambda: (jnp.zeros((4, 128, 64)), jnp.int32(3), jnp.ones((4, 64)), jnp.ones((64, 64))),
        (0,),
        "in-place",
    ),
    Case("kv_not_donated", _kv, lambda: (jnp.zeros((4, 256, 64)), jnp.int32(3), jnp.ones((4, 64))), (), "not-in-place"),
)


def _mlp_loss(params, x):
    h = jnp.tanh(x @ params["dense1"]["kernel"] + params["dense1"]["bias"])
    return jnp.mean((h @ params["dense2"]["kernel"] + params["dense2"]["bias"]) ** 2)


def _optax_case(name: str, make_tx, donate: tuple[int, ...]) -> Case:
    """An optax step over a dict MLP, as users write it (tests/system/test_library_steps.py holds it to the runtime)."""
    import optax

    tx = make_tx()

    def step(params, opt_state, x):
        loss, grads = jax.value_and_grad(_mlp_loss)(params, x)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def args():
        k1, k2 = jax.random.split(jax.random.key(0))
        params = {
            "dense1": {"kernel": jax.random.normal(k1, (32, 64)), "bias": jnp.zeros(64)},
            "dense2": {"kernel": jax.random.normal(k2, (64, 8)), "bias": jnp.zeros(8)},
        }
        return params, tx.init(params), jnp.ones((4, 32))

    return Case(name, step, args, donate, "in-place")


def _library_cases() -> tuple[Case, ...]:
    import optax

    return (
        # the donation users write, and one that forgets the optimizer state
        _optax_case("optax_adamw", lambda: optax.adamw(1e-3, weight_decay=1e-4), (0, 1)),
        _optax_case("optax_clip_adam", lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3)), (0,)),
    )


EXTRA += _library_cases()
BRUTE = CASES + EXTRA  # every case of the verdict corpus, and the ones above


def _footprint(case: Case, donate: tuple[int, ...]) -> int:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=UNUSABLE_WARNING)
        m = jax.jit(case.fn, donate_argnums=donate).lower(*case.args()).compile().memory_analysis()
    return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes)


@pytest.fixture(scope="module")
def suggested() -> dict[str, Any]:
    targets = [
        make_target(
            case.jitted if case.jitted is not None else case.fn,
            (lambda case=case: case.args()),
            donate=list(case.donate) if case.donate is not None else None,
            name=case.name,
        )
        for case in BRUTE
    ]
    report = check_targets(targets, CheckOptions(min_bytes=MIN, isolate=False, suggest=True))
    return {r.name: r for r in report.results}


@pytest.mark.parametrize("case", BRUTE, ids=lambda c: c.name)
def test_the_suggestion_is_never_worse_and_equals_brute_force(case: Case, suggested: dict[str, Any]) -> None:
    args = case.args()
    arrays = [i for i, a in enumerate(args) if _leaves(a)]
    fp = {s: _footprint(case, s) for n in range(len(arrays) + 1) for s in itertools.combinations(arrays, n)}
    if case.jitted is not None:  # the user's jit object: its own donation is the one checked
        current = tuple(case.jit_donates)
    else:
        current = case.donate if case.donate is not None else tuple(arrays)
    result = suggested[case.name]
    suggestion = result.suggestion
    assert suggestion is not None and suggestion.memory is not None, result.suggestion
    plain = result.variants["plain"].memory.footprint_bytes
    # fieldmem's figures and jax's agree on every compile it shares with brute force
    assert result.variants["donated"].memory.footprint_bytes - plain == fp[current] - fp[()]
    gain = suggestion.memory.footprint_bytes - plain
    best = min(fp.values()) - fp[()]
    assert gain - best < MIN, (suggestion.summary, fp)
    assert gain - (fp[current] - fp[()]) < MIN, (suggestion.summary, fp)
    assert fp[tuple(sorted(suggestion.donate_argnums))] - fp[()] == gain


def test_a_worse_pick_is_never_advised(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the advisor's prediction picks a donation that measures worse than the one checked (here it is
    made to pick the gradients alone instead of the parameters), the suggestion is the donation checked."""
    import fieldmem.findings.advisor as advisor

    real = advisor.paying

    def wrong(arguments, outcomes, min_bytes):  # type: ignore[no-untyped-def]
        picked = real(arguments, outcomes, min_bytes)
        return [a for a in arguments if a.name == "g"] if picked and picked[0].name == "p" else picked

    monkeypatch.setattr(advisor, "paying", wrong)
    monkeypatch.setattr(advisor, "EXHAUSTIVE_ARGUMENTS", 0)  # the prediction, not the search of every donation

    def sgd(p, g):  # no output has the size of g: donating it alone saves nothing
        return p - 0.1 * g[:64]

    target = make_target(sgd, lambda: (jnp.ones((64, 64)), jnp.ones((128, 64))), donate=[0], name="sgd")
    (result,) = check_targets([target], CheckOptions(min_bytes=MIN, isolate=False, suggest=True)).results
    suggestion = result.suggestion
    assert suggestion is not None
    assert suggestion.spec == "p" and suggestion.verified_by == "donated", suggestion
    assert suggestion.memory == result.variants["donated"].memory
    assert any("so that one is suggested: it is the best found" in note for note in suggestion.notes), suggestion.notes
