"""fieldmem's words, each declared once: what a copy kind, a copy's cause or a finding code is called, means,
weighs and how a table shows it.

The report types them as ``Literal`` sets (:data:`fieldmem.model.report.CopyKind`,
:data:`~fieldmem.model.report.CopyCause`, :data:`~fieldmem.model.report.FindingCode`, for the
codec and mypy); the declarations here give each word its meaning (the schema's
entry: docs/report-schema.md's tables are written from them), its label where a
table shows something shorter or longer than the name, and, for a finding code,
its severity. ``tests/model/test_words.py`` holds the three together: a word added to a
``Literal`` without its declaration here, or the other way round, fails, and so does
a schema page that no longer says what is declared here. A word a newer fieldmem wrote
(read as ``"unknown"``) has a declaration too.

The codec and the schema writer read each of the three sets from here (a word declared here is one
of its set: :func:`copy_kind_names`, :func:`copy_cause_names`, :func:`finding_code_names`), and a copy
kind's declaration (:class:`CopyKindWord`) holds what the findings and the renderers read of it: its
label, whether it is a move between memory spaces, the words a renderer adds for one copy of it and
for its cost per call, and the finding a copy of it makes. So a kind declared here is read, written,
described in the schema and shown by the table, Markdown and HTML with nothing else changed
(tests/model/test_words.py declares one in a test); a kind whose finding needs words of its own (a loop's,
a conditional's) has them in :mod:`fieldmem.findings.copy_findings`.

Shared ground: plain data, no imports beyond the standard library.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

__all__ = [
    "COPY_CAUSE_WORDS",
    "COPY_KIND_WORDS",
    "FINDING_WORDS",
    "CopyKindWord",
    "FindingWord",
    "Word",
    "copy_cause_names",
    "copy_kind_label",
    "copy_kind_names",
    "copy_kind_word",
    "copy_words",
    "finding_code_names",
    "finding_word",
    "is_move",
]


@dataclass(frozen=True)
class Word:
    """One word of the report: its name, what it means (the schema's entry), and how a table shows it."""

    name: str
    meaning: str
    label: str | None = None  # None: the name itself

    @property
    def shown(self) -> str:
        return self.label if self.label is not None else self.name


@dataclass(frozen=True)
class FindingWord(Word):
    """A finding code, with the severities a finding of it is made with (its first is the usual one)."""

    severities: tuple[str, ...] = ("warning",)


@dataclass(frozen=True)
class CopyKindWord(Word):
    """A copy kind, with what the findings and the renderers read of it (none of them branches on its name).

    ``move``: it moves a value between memory spaces without a second buffer of it in device memory (a
    variant's ``moves``, never its ``copies``: no finding of its own; renderers name the spaces). ``detail``:
    how a renderer names one copy of it (``{label}`` and the copy's fields, ``{branch}``), where every field it
    names is set; ``per_call``: what a renderer shows for its cost per call where the bytes per call are not
    known, the same way. ``finding``: the code of the finding a copy of it of at least ``min_bytes`` that feeds
    no output makes (with the severity declared for that code; ``finding_words``: what its message adds after
    where the copy is); None: the findings make its findings in words of their own
    (:mod:`fieldmem.findings.copy_findings`), or none.
    """

    move: bool = False
    detail: str | None = None
    per_call: str | None = None
    finding: str | None = None
    finding_words: str = ""


# a conditional copy, and a copy of a kind a newer fieldmem wrote that names a branch: made only when it runs
_BRANCH_ONLY = "{label}, branch {branch} only"
_WHEN_BRANCH_RUNS = "when branch {branch} runs"

COPY_KIND_WORDS: tuple[CopyKindWord, ...] = (
    CopyKindWord("parameter", "a copy of an input"),
    CopyKindWord("loop", "inside a while/scan body: paid every iteration"),
    CopyKindWord(
        "conditional",
        "inside a branch of a `lax.cond`/`lax.switch`, in a loop or not: paid only when that branch runs",
        detail=_BRANCH_ONLY,
        per_call=_WHEN_BRANCH_RUNS,
    ),
    CopyKindWord("layout", "changes the layout", finding="layout-copy", finding_words=" to change its layout"),
    CopyKindWord("other", "any other copy XLA kept", finding="other-copy"),
    CopyKindWord(
        "staging",
        "moves a value between memory spaces without making a second buffer of it in device memory: a TPU "
        "prefetching an input into VMEM, or copying a value computed in VMEM back into its buffer, an offload to "
        "the host; listed among a variant's `moves`, never its `copies`: no copy count, finding, regression or "
        "advice to donate comes of it — a copy of an input *through* VMEM into a new buffer in device memory is "
        "a `parameter` copy, counted at the copy back",
        move=True,
    ),
    CopyKindWord(
        "unknown",
        "a kind a newer fieldmem wrote, which this one does not know",
        label="unknown kind",
        detail=_BRANCH_ONLY,
        per_call=_WHEN_BRANCH_RUNS,
    ),
)

COPY_CAUSE_WORDS: tuple[Word, ...] = (
    Word("input-kept-intact", "an undonated or still-read input"),
    Word(
        "old-carry-read-after-update",
        "a loop copy of the carry the body was given: a view of the body's parameter",
    ),
    Word(
        "new-value-via-temporary",
        "a loop copy that becomes the carry the body returns: the body computes the new carry while reading the "
        "old one and copies it back",
    ),
    Word("output-via-temporary", "an output computed into a temporary and copied into its buffer"),
    Word("layout-change", "a copy that changes the layout"),
    Word("unknown", "a cause a newer fieldmem wrote, which this one does not know"),
)

FINDING_WORDS: tuple[FindingWord, ...] = (
    FindingWord(
        "new-buffer",
        "an output of at least `min_bytes` is written to a new buffer although an input could hold it: a donated "
        "input of its per-device byte size that no output reuses (XLA aliases by size, across dtype and shape), or "
        "an input not donated with its shape and dtype (when the output is at least as large as the smallest "
        "reused state leaf: a small output beside a state in place is a new output), or a donated input no output "
        "reuses with its shape in another dtype (the state, cast) (the reason says which: not donated, donation "
        "unusable, not reused)",
        severities=("error",),
    ),
    FindingWord(
        "new-output",
        "an output of at least `min_bytes` that no donated input could hold (none of its size, or every one already "
        "reused by another output: fresh logits, a loss), or that the user declared new (`--new`, `new=`; the "
        'message says "declared new"): counted in the figures, not a break of in place; the summary counts them '
        '("N new output(s)")',
        severities=("info",),
    ),
    FindingWord("new-unmatched", "a `--new` / `new=` pattern names no output of this target", severities=("warning",)),
    FindingWord(
        "parameter-copy",
        "the donated variant still copies an input because the code keeps its old value (returned beside its "
        "update, or read by something that also needs the update; the message says which and the line to change). "
        "A copy only the compiler's order makes is a `compiler-copy`",
        severities=("error",),
    ),
    FindingWord(
        "loop-copy",
        "a loop copies a value every iteration (the carry, with the cause; or another value the body computes)",
        severities=("error",),
    ),
    FindingWord(
        "conditional-copy",
        "a copy of at least `min_bytes` made only when a branch of a conditional runs: the message names the branch "
        'and the `cond`\'s line and, in a loop, says "at most x*N* per call"',
        severities=("warning",),
    ),
    FindingWord(
        "output-copy",
        "an output is computed into a temporary and copied into its buffer, where the code does more than write a "
        "slice of it (a slice update written through a temporary is a `compiler-copy`)",
        severities=("error",),
    ),
    FindingWord(
        "compiler-copy",
        "a copy the compiler keeps by its own choice, which no line of the code asks for: a donated input copied "
        "although every read of its old value could come before its update, or a slice update "
        "(`dynamic-update-slice`, `scatter`) written through a temporary and copied into its output. The code is in "
        "place as written (the verdict is `in-place-as-written`, and `--expect in-place` passes); the message names "
        "the compiler (`XLA:CPU`) and how to check the backend you train on (`--backend tpu:v5e`, `gpu:h100`, or "
        "`[tool.fieldmem] backends`), where another compiler may write it in place",
        severities=("warning",),
    ),
    FindingWord(
        "donation-dropped",
        "jax dropped the donation (a backend or a wrapper that cannot donate)",
        severities=("error",),
    ),
    FindingWord(
        "unusable-donation",
        "a donated leaf of at least `min_bytes` no output reuses; an error when the user chose it by argument (a "
        "list, a jit's `donate_argnums`) while other outputs reuse theirs, a warning under a blanket donation (the "
        "default, `--donate all`) or when nothing is reused (then the verdict is nothing to update)",
        severities=("error", "warning"),
    ),
    FindingWord(
        "state-grows",
        "an output of at least `min_bytes` that no donated input can hold is at least as large as a donated input "
        "nothing reuses: the state grows into a new buffer",
        severities=("error",),
    ),
    FindingWord("layout-copy", "a copy of at least `min_bytes` that changes the layout", severities=("warning",)),
    FindingWord("other-copy", "another copy of at least `min_bytes`", severities=("warning",)),
    FindingWord("plain-copy", "what the plain variant copies (what donation saves)", severities=("info",)),
    FindingWord(
        "constant",
        "an array (not a scalar) of at least `min_bytes` is compiled into the program as a constant (a "
        "closed-over array); `source` is where it is read. Pass it as an argument to donate or share it. The five "
        "largest are named, the rest counted in one more finding",
        severities=("warning",),
    ),
    FindingWord(
        "run-alias-missing",
        "with `--run`: an alias the plan predicts did not happen at run time",
        severities=("error",),
    ),
    FindingWord(
        "run-alias-not-comparable",
        "with `--run`: an alias the plan predicts that cannot be compared at run time (no device buffer to read)",
        severities=("info",),
    ),
    FindingWord(
        "run-not-made",
        "with `--run`: the run left the call out, and says why (over several devices, a donated array the call "
        "also gives again, which jax 0.10.2 on CPU can die of); here no output reuses the donation, so jax would "
        "make the call: the figures are the compile's",
        severities=("info",),
    ),
    FindingWord(
        "run-unplanned-alias",
        "with `--run`: an output came back in an input's buffer that the plan does not alias",
        severities=("info",),
    ),
    FindingWord(
        "run-peak-above-plan",
        "with `--run`: a device's measured peak is more than 10% above the planned footprint",
        severities=("warning",),
    ),
    FindingWord(
        "probe-whole-buffer",
        "with `--probe`: an aliased slice update's call grows with its buffer by 0.3 or more of an in-place pass over "
        "the added bytes, timed beside it (it touches the whole buffer); a fact about time beside the verdict's about "
        "memory",
        severities=("warning",),
    ),
    FindingWord(
        "made-static",
        "a Python scalar is held static because tracing needs its value (see *MadeStatic*)",
        severities=("info",),
    ),
    FindingWord(
        "exceeds-device-memory",
        "the program needs more memory per device than the device has: its footprint (where XLA gives none, its "
        "arguments and outputs alone) is above the memory of the device kind compiled for without the device "
        "(a GPU's target config, what libtpu leaves a program of a TPU chip's HBM) or of jax's allocator on a "
        "local device, or the compiler refused it for that (libtpu's RESOURCE_EXHAUSTED; the message quotes it). "
        "An error for the donated variant (the verdict is then does not fit); a note when only the plain one "
        "does not fit (donating is what makes it fit)",
        severities=("error", "info"),
    ),
    FindingWord(
        "resharded-donation",
        "a donated leaf of at least `min_bytes` that an output reuses in the compiled plan is given on another "
        "device, sharding or memory kind than the program takes it (an uncommitted array on one device for a "
        "program sharded over several): jax moves it there before every call and donates the moved copy, so the "
        "leaf's own buffer stays alive beside it. The message gives the copy's bytes and the fix (put it where the "
        "program takes it once); `--run` shows the leaf not deleted",
        severities=("error",),
    ),
    FindingWord(
        "shared-donation",
        "one array is given more than once in the call (the same buffer under two paths: `f(x, x)`, or "
        "`jax.device_put(x, device)` of an `x` already there), the program takes it more than once, and jax "
        "donates it where an output reuses it: jax refuses a call that donates a buffer it also reads "
        "(`INVALID_ARGUMENT` when it is called), so the donated call fails with these arguments. Any size. "
        "`--run` makes the same call on one device, and fails as it does; over several devices, where jax 0.10.2 on "
        "CPU kills the process instead, it does not make it and says why",
        severities=("error",),
    ),
    FindingWord(
        "shared-argument",
        "one array of at least `min_bytes` (on one device) is given more than once in the call and the program "
        "takes it more than once, with no donation of it made: the devices hold it once, but XLA's figures (the "
        "footprint, the argument bytes) count it once per parameter. `bytes`: what they count beyond the one buffer",
        severities=("info",),
    ),
    FindingWord(
        "transfer",
        "an argument leaf of at least `min_bytes` (on one device) that jax copies onto the devices before every "
        "call (see *Transfers*): a warning for one moved across devices or memory kinds, a note for one copied "
        "from the host (a NumPy array, a Python number the program takes as an array)",
        severities=("warning", "info"),
    ),
    FindingWord(
        "run-transfer-mismatch",
        "with `--run`: the copies jax's transfer guard logged during the call are not the transfers the plan "
        "predicts (see *Transfers*)",
        severities=("warning",),
    ),
    FindingWord(
        "unknown",
        "a code a newer fieldmem wrote, which this one does not know",
        severities=("error", "warning", "info"),
    ),
)

# The declarations are read where they are used, not copied into tables at import: a test may declare a word.


def copy_kind_names() -> tuple[str, ...]:
    """Every declared copy kind: the words of :data:`fieldmem.model.report.CopyKind` the codec reads and the
    schema lists."""
    return tuple(word.name for word in COPY_KIND_WORDS)


def copy_cause_names() -> tuple[str, ...]:
    """Every declared copy cause (:data:`fieldmem.model.report.CopyCause`)."""
    return tuple(word.name for word in COPY_CAUSE_WORDS)


def finding_code_names() -> tuple[str, ...]:
    """Every declared finding code (:data:`fieldmem.model.report.FindingCode`)."""
    return tuple(word.name for word in FINDING_WORDS)


def copy_kind_word(kind: str) -> CopyKindWord | None:
    """The declaration of copy kind ``kind``; None: no declaration names it."""
    return next((word for word in COPY_KIND_WORDS if word.name == kind), None)


def copy_kind_label(kind: str) -> str:
    """How a table shows copy kind ``kind`` (a kind no declaration names: as its name)."""
    word = copy_kind_word(kind)
    return word.shown if word is not None else kind


def is_move(kind: str) -> bool:
    """Whether a copy of kind ``kind`` moves a value between memory spaces (a ``staging`` one): a move, not a copy."""
    word = copy_kind_word(kind)
    return word is not None and word.move


def copy_words(template: str | None, copy: object, **extra: object) -> str | None:
    """``template`` (a :class:`CopyKindWord`'s ``detail`` or ``per_call``) filled from ``extra`` and the fields
    of ``copy``; None where there is no template or a field it names is not set."""
    if template is None:
        return None
    values: dict[str, object] = {}
    for _, name, _, _ in string.Formatter().parse(template):
        if name:
            value = extra[name] if name in extra else getattr(copy, name, None)
            if value is None:
                return None
            values[name] = value
    return template.format(**values)


def finding_word(code: str) -> FindingWord:
    """The declaration of finding code ``code`` (one no declaration names: ``unknown``'s)."""
    found = next((word for word in FINDING_WORDS if word.name == code), None)
    return found if found is not None else next(word for word in FINDING_WORDS if word.name == "unknown")
