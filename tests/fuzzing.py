"""A seeded mutator over the golden inputs of the HLO parser and the buffer decoder, and the check
each mutant must pass: any failure is the reader's own error, and no input takes more than 2 s.

Used by tests/xla/test_fuzz.py (a few seconds in ``make test``) and by ``make fuzz``
(``python tests/fuzzing.py --seconds 120``: a longer run that writes every
mutant that breaks the rule to ``tests/golden_fuzz/`` to be kept with a test).
No jax: the readers are pure text and bytes.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from fieldmem.xla import buffers, hlo  # noqa: E402
from fieldmem.xla._proto import BufferAssignmentProto  # noqa: E402

GOLDEN_HLO = sorted((HERE / "golden").glob("*.hlo")) + sorted((HERE / "golden_buffers").glob("*.hlo.txt"))
GOLDEN_BUFFERS = sorted((HERE / "golden_buffers").glob("*.buffer_assignment.pb"))
SLOW = 2.0  # seconds: an input that takes longer is a failure
_NAME = re.compile(r"%[\w.\-]+")
_NUMBER = re.compile(r"\b\d+\b")
_WEIRD = [
    "",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    '"',
    "\\",
    ",",
    "=",
    "%",
    "\x00",
    "\u2028",
    "\xff",
    "ENTRY ",
    "HloModule x\n",
]
_BIG = ["0", "-1", "9223372036854775807", "9223372036854775808", "4611686018427387904", "1" * 400]


class Failure(AssertionError):
    """A mutant the reader failed on with an error not its own, or too slowly."""

    def __init__(self, what: str, data: str | bytes, error: str) -> None:
        super().__init__(f"{what}: {error}")
        self.data = data


# ----------------------------------------------------------------------------
# HLO text


def mutate_text(text: str, rng: random.Random) -> str:
    """One to three random edits of ``text``: lines cut, repeated, swapped; names, numbers and
    computations swapped for others (an instruction reading itself, a loop calling its own caller)."""
    for _ in range(rng.randint(1, 3)):
        lines = text.split("\n")
        kind = rng.randrange(10)
        n = rng.randrange(len(lines))
        if kind == 0:
            del lines[n]
        elif kind == 1:
            lines.insert(n, lines[rng.randrange(len(lines))])
        elif kind == 2:
            m = rng.randrange(len(lines))
            lines[n], lines[m] = lines[m], lines[n]
        elif kind in (3, 4):  # an operand or a callee renamed: to another name, to itself, to nothing known
            names = _NAME.findall(lines[n])
            if names:
                old = rng.choice(names)
                pool = _NAME.findall(text) or [old]
                new = rng.choice([rng.choice(pool), names[0], "%nowhere", "%" + "x" * rng.randint(1, 300)])
                lines[n] = lines[n].replace(old, new, rng.choice([1, 99]))
        elif kind == 5:
            numbers = list(_NUMBER.finditer(lines[n]))
            if numbers:
                found = rng.choice(numbers)
                lines[n] = lines[n][: found.start()] + rng.choice(_BIG) + lines[n][found.end() :]
        elif kind == 6:
            at = rng.randrange(len(lines[n]) + 1)
            lines[n] = lines[n][:at] + rng.choice(_WEIRD) + lines[n][at:]
        elif kind == 7:
            at = rng.randrange(len(lines[n]) + 1)
            lines[n] = lines[n][:at] + lines[n][at + rng.randint(1, 20) :]
        elif kind == 8:
            text = text[: rng.randrange(len(text) + 1)]
            continue
        else:  # a computation made to call the one that calls it
            computations = re.findall(r"^(?:ENTRY )?(%?[\w.\-]+) ", text, re.MULTILINE)
            callees = re.findall(r"(?:body|condition|calls|to_apply)=(%?[\w.\-]+)", text)
            if computations and callees:
                lines = text.replace(rng.choice(callees), rng.choice(computations), 1).split("\n")
        text = "\n".join(lines)
    return text


def read_text(text: str) -> None:
    """What the product does with HLO text: parse, then every query the findings ask."""
    module = hlo.parse_hlo_module(text)  # no parser: nothing kept between mutants
    hlo.find_copies(module)
    hlo.loop_bodies(module)
    hlo.conditional_branches(module)
    hlo.find_constants(module)
    hlo.output_values(module)
    hlo.output_parameters(module)


def check_text(text: str) -> None:
    """Raise :class:`Failure` unless ``text`` is read, or refused with ``HloParseError``, within :data:`SLOW`."""
    began = time.perf_counter()
    try:
        read_text(text)
    except hlo.HloParseError:
        pass
    except RecursionError as exc:  # the message of a RecursionError is no help: say where
        raise Failure("HLO text", text, f"RecursionError: {exc}") from None
    except Exception as exc:
        raise Failure("HLO text", text, f"{type(exc).__name__}: {exc}") from None
    seconds = time.perf_counter() - began
    if seconds > SLOW:
        raise Failure("HLO text", text, f"took {seconds:.1f} s")


# ----------------------------------------------------------------------------
# Buffer assignments


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """Random bytes changed, cut or inserted, or (half the time) a field of the decoded message set to an
    odd value: an allocation smaller than its slices, a negative offset, an id that names nothing."""
    if rng.random() < 0.5:
        proto = BufferAssignmentProto()
        proto.ParseFromString(data)
        odd = [0, 1, -1, -(2**40), 2**40, 2**62, rng.randint(0, 4096)]
        target = rng.randrange(4)
        if target == 0 and len(proto.buffer_allocations):
            allocation = rng.choice(proto.buffer_allocations)
            allocation.size = rng.choice(odd)
        elif target == 1 and len(proto.buffer_allocations):
            allocation = rng.choice(proto.buffer_allocations)
            if len(allocation.assigned):
                slot = rng.choice(allocation.assigned)
                setattr(slot, rng.choice(["offset", "size", "logical_buffer_id"]), rng.choice(odd))
        elif target == 2 and len(proto.logical_buffers):
            buffer = rng.choice(proto.logical_buffers)
            setattr(buffer, rng.choice(["size", "id"]), rng.choice(odd))
        elif len(proto.logical_buffers):
            buffer = rng.choice(proto.logical_buffers)
            buffer.defined_at.instruction_id = rng.choice(odd)
        return proto.SerializeToString()
    raw = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(raw) + 1)
        kind = rng.randrange(3)
        if kind == 0 and at < len(raw):
            raw[at] = rng.randrange(256)
        elif kind == 1:
            del raw[at : at + rng.randint(1, 16)]
        else:
            raw[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return bytes(raw)


def check_buffers(data: bytes, module_proto: bytes, hlo_text: str) -> None:
    """Raise :class:`Failure` unless the bytes are read (decoded, live ranges and peak) or refused with
    ``BufferAssignmentError``, within :data:`SLOW`, and a peak read lies within all allocations."""
    began = time.perf_counter()
    try:
        assignment = buffers.decode_buffer_assignment(data, module_proto)
        live = buffers.analyze_liveness(assignment, hlo.parse_hlo_module(hlo_text))
    except buffers.BufferAssignmentError:
        live = None
    except Exception as exc:
        raise Failure("buffer assignment", data, f"{type(exc).__name__}: {exc}") from None
    seconds = time.perf_counter() - began
    if seconds > SLOW:
        raise Failure("buffer assignment", data, f"took {seconds:.1f} s")
    if live is not None:
        total = sum(a.size for a in assignment.allocations if a.counts_as_memory)
        if live.live_peak_bytes > total:
            raise Failure("buffer assignment", data, f"live peak {live.live_peak_bytes} > all allocations {total}")


# ----------------------------------------------------------------------------
# Runs


def _cases(seed: int) -> Iterator[tuple[str, Callable[[], None], Callable[[], str | bytes]]]:
    """Endless mutants, alternating HLO texts and buffer assignments, from one seed."""
    rng = random.Random(seed)
    texts = [p.read_text() for p in GOLDEN_HLO]
    assignments = [
        (
            p.read_bytes(),
            p.with_name(p.name.replace(".buffer_assignment.pb", ".hlo_module.pb")).read_bytes(),
            p.with_name(p.name.replace(".buffer_assignment.pb", ".hlo.txt")).read_text(),
        )
        for p in GOLDEN_BUFFERS
    ]
    while True:
        text = mutate_text(rng.choice(texts), rng)
        yield "hlo", (lambda t=text: check_text(t)), (lambda t=text: t)
        data, module, hlo_text = rng.choice(assignments)
        mutant = mutate_bytes(data, rng)
        yield "buffers", (lambda d=mutant, m=module, h=hlo_text: check_buffers(d, m, h)), (lambda d=mutant: d)


def fuzz(seconds: float, seed: int = 0, keep: Path | None = None) -> tuple[int, list[Failure]]:
    """Check mutants for ``seconds``; the number checked and the failures (each written to ``keep``)."""
    stop = time.perf_counter() + seconds
    checked, failures = 0, []
    for kind, check, data in _cases(seed):
        if time.perf_counter() > stop:
            break
        checked += 1
        try:
            check()
        except Failure as failure:
            failures.append(failure)
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                value = data()
                name = f"found_{kind}_{seed}_{checked}." + ("hlo" if isinstance(value, str) else "pb")
                path = keep / name
                if isinstance(value, str):
                    path.write_text(value, encoding="utf-8")
                else:
                    path.write_bytes(value)
    return checked, failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--keep", default=str(HERE / "golden_fuzz" / "new"))
    options = parser.parse_args()
    checked, failures = fuzz(options.seconds, options.seed, Path(options.keep))
    for failure in failures[:20]:
        print(str(failure)[:300])
    print(f"seed {options.seed}: {checked} mutants in {options.seconds:g} s, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
