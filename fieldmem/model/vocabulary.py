"""fieldmem's words, each declared once: what a copy kind, a copy's cause or a finding code is called, means,
weighs and how a table shows it.

The report types them as ``Literal`` sets (:data:`fieldmem.model.report.CopyKind`,
:data:`~fieldmem.model.report.CopyCause`, :data:`~fieldmem.model.report.FindingCode`, for the
codec and mypy); the declarations here give each word its meaning (the schema's
entry: docs/report-schema.md's tables are written from them), its label where a
table shows something shorter or longer than the name, and, for a finding code,
its severity. ``tests/test_words.py`` holds the three together: a word added to a
``Literal`` without its declaration here, or the other way round, fails, and so does
a schema page that no longer says what is declared here. Renderers take labels from
:func:`copy_kind_label`. A word a newer fieldmem wrote (read as ``"unknown"``) has a
declaration too.

Shared ground: plain data, no imports beyond the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "COPY_CAUSE_WORDS",
    "COPY_KIND_WORDS",
    "FINDING_WORDS",
    "FindingWord",
    "Word",
    "copy_kind_label",
    "finding_word",
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


COPY_KIND_WORDS: tuple[Word, ...] = (
    Word("parameter", "a copy of an input"),
    Word("loop", "inside a while/scan body: paid every iteration"),
    Word(
        "conditional",
        "inside a branch of a `lax.cond`/`lax.switch`, in a loop or not: paid only when that branch runs",
    ),
    Word("layout", "changes the layout"),
    Word("other", "any other copy XLA kept"),
    Word(
        "staging",
        "moves a value between memory spaces without making a second buffer of it in device memory: a TPU "
        "prefetching an input into VMEM, or copying a value computed in VMEM back into its buffer, an offload to "
        "the host; listed among a variant's `moves`, never its `copies`: no copy count, finding, regression or "
        "advice to donate comes of it — a copy of an input *through* VMEM into a new buffer in device memory is "
        "a `parameter` copy, counted at the copy back",
    ),
    Word("unknown", "a kind a newer fieldmem wrote, which this one does not know", label="unknown kind"),
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

_KINDS = {word.name: word for word in COPY_KIND_WORDS}
_FINDINGS = {word.name: word for word in FINDING_WORDS}


def copy_kind_label(kind: str) -> str:
    """How a table shows copy kind ``kind`` (a kind no declaration names: as its name)."""
    word = _KINDS.get(kind)
    return word.shown if word is not None else kind


def finding_word(code: str) -> FindingWord:
    """The declaration of finding code ``code`` (one no declaration names: ``unknown``'s)."""
    return _FINDINGS.get(code, _FINDINGS["unknown"])
