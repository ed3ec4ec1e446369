"""The pieces every renderer shares: pass/fail marks, Markdown escaping and code spans,
``plain → donated`` byte pairs, block eighths, plurals, the words for a chain step's status, the
transfers section in words.

Renderers import this module; it imports no renderer (and not rich), so no renderer
needs another one for a helper. Each piece formats the values it is given and decides
nothing about a report.
"""

from __future__ import annotations

import re

from fieldmem.model.chain import Chain, ChainStep
from fieldmem.model.copies import Copy
from fieldmem.model.memory import HostFromShardings, LiveBuffer
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult, Variant
from fieldmem.model.units import format_bytes
from fieldmem.model.vocabulary import copy_kind_label, copy_kind_word, copy_words

__all__ = [
    "FAIL",
    "HOST_FIGURES",
    "PASS",
    "SPARK_BLOCKS",
    "STATUS_WORDS",
    "VERDICT_WORDS",
    "WARN",
    "block",
    "chain_transfer_line",
    "code",
    "count",
    "deviceless_label",
    "escape",
    "footprint_curve",
    "host_figure_label",
    "host_figure_lines",
    "host_figures_shown",
    "host_memory_line",
    "judged_text",
    "libraries_text",
    "module_settings_text",
    "moves_line",
    "moves_text",
    "pair",
    "plugins_text",
    "plural",
    "slot_input_text",
    "slot_value_text",
    "source_text",
    "space_label",
    "transfer_lines",
    "verdict_words",
]

PASS, FAIL, WARN = "✅", "❌", "⚠️"

SPARK_BLOCKS = "▁▂▃▄▅▆▇█"

#: a verdict's kind (fieldmem.findings.verdict) -> its words, its rich style, and the class the HTML page gives it
VERDICT_WORDS = {
    "in-place": ("in place", "green", "in-place"),
    "in-place-as-written": ("in place as written", "yellow", "in-place as-written"),
    "not-in-place": ("not in place", "red", "not-in-place"),
    "nothing-to-update": ("nothing to update", "yellow", "nothing-to-update"),
    "does-not-fit": ("does not fit", "red", "not-in-place does-not-fit"),
}


def verdict_words(kind: str | None) -> tuple[str, str, str]:
    """The words, style and HTML class of a verdict's kind; one a newer fieldmem wrote is an unknown verdict."""
    return VERDICT_WORDS.get(kind or "", ("unknown verdict", "yellow", "unknown"))


#: a chain step's status -> its words, and the rich style the terminal shows them in
STATUS_WORDS = {
    "in-place": ("in place", "green"),
    "grows": ("grows", "cyan"),
    "breaks": ("BREAKS", "bold red"),
    "error": ("error", "bold red"),
    "not-checked": ("not checked", "dim"),
}

_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&])")


def escape(text: str) -> str:
    """Prose safe in a paragraph, a list item or a table cell: Markdown punctuation escaped,
    line breaks folded (a table row is one line)."""
    return _SPECIAL.sub(r"\\\1", " ".join(text.splitlines()))


def code(text: str) -> str:
    """``text`` as an inline code span, also inside a table cell.

    The fence is one backtick longer than the longest run of backticks in the
    text, padded with a space when the text starts or ends with one; ``|`` is
    escaped because GitHub splits table cells before it reads code spans.
    """
    text = " ".join(text.splitlines())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text.replace('|', chr(92) + '|')}{pad}{fence}"


def source_text(source: str | None, call_site: str | None) -> str | None:
    """A source line, and the user's line that led there when the report names one (library code)."""
    if not source:
        return None
    return f"{source} (called from {call_site})" if call_site else source


def pair(plain: int | None, donated: int | None) -> str:
    """``8.0 MiB → 4.0 MiB``: a figure of the plain variant, then of the donated one."""
    return f"{format_bytes(plain)} → {format_bytes(donated)}"


def plural(n: int, noun: str) -> str:
    """``noun`` for one, ``nouns`` for any other count: ``plural(2, "target")`` -> ``targets``."""
    return noun if n == 1 else f"{noun}s"


def count(n: int, noun: str) -> str:
    """``1 regression``, ``3 regressions``."""
    return f"{n} {plural(n, noun)}"


def block(value: int, scale: int) -> str:
    """``value`` as one block character in eighths of ``scale``: the nearest eighth, rounded half up
    in integers, at least one for anything above zero; zero (or less) is a blank."""
    if value <= 0 or scale <= 0:
        return " "
    level = min(len(SPARK_BLOCKS), max(1, (2 * value * len(SPARK_BLOCKS) + scale) // (2 * scale)))
    return SPARK_BLOCKS[level - 1]


def footprint_curve(steps: tuple[ChainStep, ...], variant: str = "donated") -> str:
    """One block per step: its footprint in eighths of the chain's largest (a blank: no figure)."""
    values = [s.footprint.get(variant) for s in steps]
    scale = max((v for v in values if v is not None), default=0)
    if scale <= 0:
        return ""
    return "".join(" " if v is None else block(v, scale) for v in values)


def libraries_text(report: Report) -> str:
    """`` (flax 0.12.0, optax 0.2.5)``: the libraries built on jax that the worker imported for a report's
    targets, after its jax version; "" where they import none."""
    if not report.library_versions:
        return ""
    return " (" + ", ".join(f"{name} {version}" for name, version in sorted(report.library_versions.items())) + ")"


def plugins_text(report: Report) -> str:
    """`` (libtpu 0.0.42.1)``: the compiler plugins the report was made with, after its backend; ""
    where none (the CPU)."""
    if not report.plugin_versions:
        return ""
    return " (" + ", ".join(f"{name} {version}" for name, version in sorted(report.plugin_versions.items())) + ")"


def slot_input_text(buffer: LiveBuffer) -> str:
    """The input column of a slot live at the peak: the input the value is, or, for another value written into
    a donated input's buffer, ``in field.u's buffer`` (never the input's name alone beside another value)."""
    if buffer.input:
        return buffer.input
    return f"in {buffer.buffer_of}'s buffer" if buffer.buffer_of else ""


def slot_value_text(buffer: LiveBuffer) -> str:
    """The value column of a slot live at the peak: the output it is returned as, with its instruction
    (``out.u (broadcast_add_fusion)``), else the instruction."""
    instruction = buffer.instruction or "?"
    return f"{buffer.output} ({instruction})" if buffer.output else instruction


def judged_text(report: Report) -> str | None:
    """The header line that says which backends the run judges and who named them (None: jax's default
    backend, named by no one): ``judged on cpu, tpu:v5e, the deploy backends [tool.fieldmem] names``."""
    if not report.judged_backends or report.judged_by is None:
        return None
    if not report.judged_by.startswith("[tool.fieldmem]") and len(report.judged_backends) < 2:
        return None  # the one backend --backend named: the header's backend already
    names = ", ".join(report.judged_backends)
    several = len(report.judged_backends) > 1
    if report.judged_by.startswith("[tool.fieldmem]"):
        who = f"the deploy backend{'s' if several else ''} [tool.fieldmem] names"
    else:
        who = f"as {report.judged_by} asks"
    tail = " (a report each; the run fails where any fails)" if several else ""
    return f"judged on {names}, {who}{tail}"


def deviceless_label(report: Report) -> str | None:
    """The line that says a report was compiled without the device, and what that changes (None: a real one).

    ``tpu:v5e:2x2 · 4 × TPU v5 lite (topology 2x2) · compiled without the device: ...``
    """
    d = report.deviceless
    if d is None:
        return None
    kind = d.device_kind or d.kind
    topology = f" (topology {d.topology})" if d.topology else ""
    return f"{d.backend} · {d.chips} × {kind}{topology} · compiled without the device: {d.note}"


def module_settings_text(report: Report) -> str | None:
    """What the targets' modules set for jax at import, for the report's header line (None: none set any).

    ``flags4.py set XLA_FLAGS=--xla_force_host_platform_device_count=4; x64.py set jax_enable_x64=True``;
    ``patch.py replaced jax.jit with patch.my_jit (for its own targets)``
    """
    parts = []
    for settings in report.module_settings:
        said = [
            f"{name}={value}" if value is not None else f"{name} unset" for name, value in settings.environment.items()
        ]
        said += [f"{name}={value}" for name, value in settings.config.items()]
        text = f"{settings.target} set {', '.join(said)}" if said else settings.target
        if settings.replaced:
            swapped = ", ".join(f"{name} with {value}" for name, value in settings.replaced.items())
            text += f"{' and' if said else ''} replaced {swapped} (for its own targets)"
        parts.append(text + (f" ({settings.note})" if settings.note else ""))
    return "; ".join(parts) or None


def space_label(variant: Variant, space: int) -> str:
    """A memory space as the renderers name it: what the report says it is (``HBM``, ``VMEM``), else its number."""
    named = next((s.name for s in variant.memory.memory_spaces if s.memory_space == space and s.name), None)
    return named if named is not None else f"memory space {space}"


def copy_kind_text(copy: Copy, variant: Variant | None = None) -> str:
    """A copy's kind as the renderers show it, as its declaration says (:class:`~fieldmem.model.vocabulary.
    CopyKindWord`): a move between memory spaces (a staging copy) the spaces it moves the value between, named
    where ``variant`` names them; a kind with words for one copy (a conditional one: its branch) with them."""
    word = copy_kind_word(copy.kind)
    if word is not None and word.move:
        if variant is not None:
            return f"{space_label(variant, copy.source_memory_space)} → {space_label(variant, copy.memory_space)}"
        return f"staging, memory space {copy.source_memory_space} → {copy.memory_space}"
    label = copy_kind_label(copy.kind)
    detail = copy_words(word.detail, copy, label=label) if word is not None else None
    return detail if detail is not None else label


def copy_per_call_text(copy: Copy) -> str | None:
    """What a copy's kind declares for its cost per call where its bytes per call are not known (a
    conditional copy: ``when branch 1 runs``); None: nothing."""
    word = copy_kind_word(copy.kind)
    return copy_words(word.per_call, copy) if word is not None else None


def moves_text(variant: Variant) -> str | None:
    """A variant's moves between memory spaces in a few words (``51 moves, 5.8 MiB: 50 HBM → VMEM (5.5 MiB),
    1 HBM → memory space 6 (1.5 KiB)``), the directions largest first; None: it has none."""
    if not variant.moves:
        return None
    by_way: dict[str, list[int]] = {}
    for move in variant.moves:
        way = copy_kind_text(move, variant)
        counted = by_way.setdefault(way, [0, 0])
        counted[0] += 1
        counted[1] += move.bytes
    ways = sorted(by_way.items(), key=lambda item: (-item[1][1], item[0]))
    total = sum(move.bytes for move in variant.moves)
    parts = ", ".join(f"{count} {way} ({format_bytes(size)})" for way, (count, size) in ways)
    return f"{len(variant.moves)} {plural(len(variant.moves), 'move')}, {format_bytes(total)}: {parts}"


def moves_line(plain: Variant, donated: Variant) -> str | None:
    """One line on the copies that only move values between memory spaces (a TPU's HBM → VMEM prefetches),
    plain and donated: they make no second buffer in device memory and are counted apart from the copies;
    None where neither variant has any."""
    said = [(v.name, moves_text(v)) for v in (plain, donated)]
    if all(text is None for _, text in said):
        return None
    words = "; ".join(f"{name} {text if text is not None else 'none'}" for name, text in said)
    return f"moves between memory spaces (no second buffer in device memory; not copies): {words}"


def memory_space_lines(plain: Variant, donated: Variant) -> list[str]:
    """One line per memory space when the buffer assignment has more than one (a TPU's VMEM):
    its allocated bytes and live peak, plain and donated; nothing for a single space."""
    spaces = sorted({s.memory_space for v in (plain, donated) for s in v.memory.memory_spaces})
    if len(spaces) < 2:
        return []
    lines = []
    for space in spaces:
        figures = [next((s for s in v.memory.memory_spaces if s.memory_space == space), None) for v in (plain, donated)]
        allocated = pair(*(f.allocated_bytes if f is not None else None for f in figures))
        peak = pair(*(f.live_peak_bytes if f is not None else None for f in figures))
        known = next((f for f in figures if f is not None), None)
        name = f" ({known.name})" if known is not None and known.name else ""
        if known is not None and known.device:
            what = " — device memory: the footprint and the live peak count it"
        elif known is not None and known.name is not None and known.name != "host memory":
            what = " — on the chip: the footprint and the live peak leave it out"
        else:
            what = ""
        lines.append(f"memory space {space}{name}{what}: allocated {allocated}, live peak {peak}")
    return lines


#: XLA's figures of host memory (``memory_analysis()``'s ``host_*``), in the order a table shows them
HOST_FIGURES = ("host_argument_bytes", "host_output_bytes", "host_alias_bytes", "host_temp_bytes")

_KIND = {"host-to-device": "from the host", "across-devices": "across devices", "memory-kind": "across memories"}


def transfer_lines(result: TargetResult, verbose: bool = True) -> list[str]:
    """The section as lines: its summary, then (``verbose``) a line per leaf copied, and what a run logged."""
    transfers = result.transfers
    if transfers is None:
        return []
    lines = [f"transfers: {transfers.summary}"] if transfers.summary else []
    if verbose:
        for t in transfers.leaves:
            lost = (
                "; donated as the moved copy: its own buffer stays alive"
                if t.donated and t.kind != "host-to-device"
                else ""
            )
            each = f" ({format_bytes(t.device_bytes)} on each of {t.devices} devices)" if t.devices > 1 else ""
            lines.append(
                f"  {t.input}: {format_bytes(t.bytes)} {_KIND.get(t.kind, t.kind)} per call{each}, given {t.given}, "
                f"taken as {t.wanted or '?'}{lost}"
            )
    if transfers.run is not None:
        lines.append(f"  run: {transfers.run.detail}")
    return lines


def host_figures_shown(result: TargetResult) -> bool:
    """Whether the ``host_*`` figures have something to say for ``result``: one is not 0 in a variant, or the
    program holds leaves in host memory (then the figures are shown, XLA's or read from its shardings)."""
    if result.transfers is not None and (result.transfers.offloaded_inputs or result.transfers.offloaded_outputs):
        return True
    return any(getattr(v.memory, name, None) for v in result.variants.values() for name in HOST_FIGURES)


def _host_read(result: TargetResult) -> dict[str, HostFromShardings]:
    """The ``host_*`` figures of ``result`` read from the program's shardings, by figure: the donated
    variant's, then the plain one's."""
    read: dict[str, HostFromShardings] = {}
    for name in ("donated", "plain"):
        variant = result.variants.get(name)
        for r in variant.memory.host_from_shardings if variant is not None else ():
            read.setdefault(r.figure, r)
    return read


def host_figure_label(result: TargetResult, name: str) -> str:
    """A memory figure's name as a table of figures shows it: a ``host_*`` figure read from the program's
    shardings says so, and a device figure that counts host bytes (XLA:CPU's) says that."""
    read = _host_read(result)
    if name in read:
        return f"{name} (program's shardings)"
    if any(r.counted_in == name for r in read.values()):
        return f"{name} (incl. host)"
    return name


def host_figure_lines(result: TargetResult) -> list[str]:
    """A line per ``host_*`` figure read from the program's shardings: where from, and XLA's own figure."""
    return [f"{r.figure} {format_bytes(r.bytes)}: {r.note}" for r in _host_read(result).values()]


def host_memory_line(result: TargetResult) -> str | None:
    """The donated variant's ``host_*`` figures in one line, and where they come from (None where they have
    nothing to say)."""
    donated = result.variants.get("donated")
    if donated is None or not host_figures_shown(result):
        return None
    read = {r.figure for r in donated.memory.host_from_shardings}
    figures = ", ".join(
        f"{name} {format_bytes(getattr(donated.memory, name))}{'*' if name in read else ''}" for name in HOST_FIGURES
    )
    if not read:
        return f"host memory (donated, per device; XLA's memory_analysis()): {figures}"
    return (
        f"host memory (donated, per device): {figures} (* read from the program's shardings, where XLA's "
        "memory_analysis() gives 0)"
    )


def chain_transfer_line(chain: Chain) -> str | None:
    """The chain's copies before each call, per step and per pass, in one line (None where none copies)."""
    steps = [s for s in chain.steps if s.transfer_bytes]
    if not steps:
        return None
    each = ", ".join(f"step {s.index + 1} {format_bytes(s.transfer_bytes)}" for s in steps)
    total = f"; {format_bytes(chain.transfer_bytes)} per pass through the steps" if chain.transfer_bytes else ""
    return f"transfers before each call: {each}{total}"
