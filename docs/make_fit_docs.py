"""Write docs/fit.md's blocks and docs/images/fit-frontier.svg again from the stored ``fieldmem fit`` documents.

    .venv/bin/python docs/make_fit_docs.py            # rewrite them
    .venv/bin/python docs/make_fit_docs.py --check    # exit 1 when one differs (tests/project/test_fit_scripts.py)

The documents are ``hardware/results/fit-block-*.json``: ``fieldmem fit`` of ``examples/fit/block.py`` for
each backend, written with ``-f json -o`` (the command is in each file's section of docs/fit.md). A block of
docs/fit.md sits between ``<!-- fit: KIND FILES -->`` and ``<!-- end fit -->`` (FILES relative to the checkout):

- ``output FILE``: what ``fieldmem fit`` printed for that document, at 100 columns (its table renderer);
- ``backends FILE...``: each row's largest batch that fits on each backend, the footprint there and the
  compiles it took, one column per document;
- ``verify FILE...``: the plain-jax compiles of ``hardware/fit_verify.py``, per backend and point;
- ``chip FILE``: what ``hardware/fit_chip.py`` saw on a real TPU v5e, per point.

The picture is the SVG renderer's, of the ``tpu:v5e`` document. Nothing here compiles.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fieldmem.model.fit_report import FitReport, knob_text, values_text  # noqa: E402
from fieldmem.model.units import format_bytes  # noqa: E402
from fieldmem.render import RenderOptions  # noqa: E402
from fieldmem.render.fit import render_svg, render_table  # noqa: E402

DOC = ROOT / "docs" / "fit.md"
PICTURE = ROOT / "docs" / "images" / "fit-frontier.svg"
PICTURED = "hardware/results/fit-block-tpu-v5e.json"
BLOCK = re.compile(r"(<!-- fit: (?P<kind>\w+) (?P<files>[^>]*?) -->\n)(?P<body>.*?)(<!-- end fit -->)", re.S)


def _report(name: str) -> FitReport:
    return FitReport.from_dict(json.loads((ROOT / name).read_text(encoding="utf-8")))


def _output(name: str) -> str:
    text = render_table(_report(name), RenderOptions(width=100))
    lines = [line.rstrip() for line in text.splitlines()]
    return "```text\n" + "\n".join(lines).strip("\n") + "\n```\n"


def _backends(names: list[str]) -> str:
    reports = [_report(name) for name in names]
    searches = [report.searches[0] for report in reports]
    knob = searches[0].searched or "value"
    header = "| " + " | ".join(["row", *(f"`{s.backend}`" for s in searches)]) + " |"
    lines = [header, "|---|" + "---|" * len(searches)]
    for row in searches[0].rows:
        cells = [values_text(row.fixed)]
        for search in searches:
            mine = search.row_for(row.fixed)
            if mine is None:
                cells.append("—")
                continue
            point = mine.point_at(mine.largest, knob) if mine.largest is not None else None
            largest = knob_text(mine.largest) if mine.largest is not None else "none"
            need = f" ({format_bytes(point.footprint_bytes)})" if point is not None and point.footprint_bytes else ""
            cells.append(f"{knob} {largest}{need}, {mine.compiles} of ≤ {mine.bound} compiles")
        lines.append("| " + " | ".join(cells) + " |")
    totals = ["compiles in all", *(f"{s.compiles} (at most {s.bound})" for s in searches)]
    lines.append("| " + " | ".join(totals) + " |")
    memories = ["memory per device", *(s.capacity.split(" (")[0] for s in searches)]
    lines.append("| " + " | ".join(memories) + " |")
    return "\n".join(lines) + "\n"


def _quoted(message: str, limit: int = 110) -> str:
    """An error's first words as inline code in a table cell."""
    return "`" + message[:limit].replace("`", "'").replace("|", "\\|") + "`"


def _verify(names: list[str]) -> str:
    lines = ["| backend | point | fieldmem fit | plain jax |", "|---|---|---|---|"]
    for name in names:
        found = json.loads((ROOT / name).read_text(encoding="utf-8"))
        for point in found["points"]:
            plain = point["plain_jax"]
            if plain.get("compiled"):
                said = f"compiles, {format_bytes(plain['footprint_bytes'])}"
                if plain.get("does_not_fit"):
                    said += f", above the {format_bytes(plain['capacity_bytes'])} of the GPU"
            else:
                said = f"refused: {_quoted(plain.get('error', ''))}"
            values = " ".join(f"{k}={knob_text(v)}" for k, v in point["values"].items())
            lines.append(f"| `{point['backend']}` | {values} | {point['reported']} | {said} |")
    return "\n".join(lines) + "\n"


def _chip(name: str) -> str:
    found = json.loads((ROOT / name).read_text(encoding="utf-8"))
    lines = ["| point | fieldmem fit | on the chip |", "|---|---|---|"]
    for point in found["points"]:
        values = " ".join(f"{k}={knob_text(v)}" for k, v in point["values"].items())
        reported = point["reported"]
        if point.get("reported_footprint_bytes"):
            reported += f" ({format_bytes(point['reported_footprint_bytes'])})"
        outcome = point.get("outcome", "error")
        if outcome == "ran":
            said = "ran, twice"
        else:
            said = f"{outcome} ({point.get('stage', 'in its process')}): {_quoted(point.get('error', ''), 150)}"
        lines.append(f"| {values} | {reported} | {said} |")
    return "\n".join(lines) + "\n"


def blocks(text: str) -> str:
    """``text`` with every block made again from its documents."""

    def made(match: re.Match[str]) -> str:
        kind, files = match.group("kind"), match.group("files").split()
        body = {
            "output": lambda: _output(files[0]),
            "backends": lambda: _backends(files),
            "verify": lambda: _verify(files),
            "chip": lambda: _chip(files[0]),
        }[kind]()
        return match.group(1) + body + match.group(5)

    return BLOCK.sub(made, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a block or the picture differs")
    options = parser.parse_args(argv)
    text = DOC.read_text(encoding="utf-8")
    wanted = blocks(text)
    picture = render_svg(_report(PICTURED), RenderOptions())
    stale = [
        path
        for path, now, new in (
            (DOC, text, wanted),
            (PICTURE, PICTURE.read_text(encoding="utf-8") if PICTURE.exists() else "", picture),
        )
        if now != new
    ]
    if options.check:
        for path in stale:
            sys.stderr.write(
                f"{path.relative_to(ROOT)}: not what docs/make_fit_docs.py makes of the stored documents\n"
            )
        return 1 if stale else 0
    DOC.write_text(wanted, encoding="utf-8")
    PICTURE.write_text(picture, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
