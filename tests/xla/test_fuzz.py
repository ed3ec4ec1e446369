"""A bounded fuzz run of the HLO parser and the buffer decoder in every ``make test``.

Mutants of the golden texts (tests/golden, tests/golden_buffers) from a fixed
seed, for :data:`SECONDS` seconds: each must be read, or refused with the
reader's own error (``HloParseError``, ``BufferAssignmentError``), within 2 s,
and a live peak read must lie within all allocations. ``make fuzz`` runs the
same check longer with a fresh seed (tests/fuzzing.py). The mutants that
found bugs are kept in tests/golden_fuzz and tested in tests/frontends/test_hostile_inputs.py.
"""

from __future__ import annotations

import os
import random

from fuzzing import GOLDEN_BUFFERS, GOLDEN_HLO, SLOW, fuzz, mutate_bytes, mutate_text

SECONDS = float(os.environ.get("FIELDMEM_FUZZ_SECONDS", "3"))


def test_mutants_fail_only_with_the_readers_own_errors() -> None:
    checked, failures = fuzz(SECONDS, seed=19)
    assert checked > 200, checked  # a few seconds check thousands on one core
    assert not failures, [str(f)[:300] for f in failures[:5]]


def test_the_mutator_mutates_and_is_seeded() -> None:
    text = GOLDEN_HLO[0].read_text()
    data = GOLDEN_BUFFERS[0].read_bytes()
    first = [mutate_text(text, random.Random(n)) for n in range(20)]
    assert first == [mutate_text(text, random.Random(n)) for n in range(20)]
    assert sum(m != text for m in first) >= 15
    assert sum(mutate_bytes(data, random.Random(n)) != data for n in range(20)) >= 15
    assert SLOW == 2.0
