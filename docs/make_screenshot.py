"""Regenerate docs/images/field-report.png: the HTML report of examples/field.py in headless Chromium.

    .venv/bin/python docs/make_screenshot.py            # or: make screenshot

Checks the Field example (one compile of each variant), renders the page
with fieldmem's HTML renderer, and has Chromium screenshot it at 1280 px
wide. Needs Chromium or Chrome on PATH (Debian: ``apt-get install chromium``).
The page is also kept next to the image as ``field-report.html`` only when
``--keep-html`` is given, so the docs folder holds just the picture.

Beside each image it records, in ``IMAGE.source``, the sha256 of the HTML
renderer (its layout, CSS and script: ``fieldmem/render/html*.py`` and ``render/assets/``, and the
flame graph's in ``fieldmem/render/flame.py``) and of the image:
``tests/project/test_docs.py`` fails once the renderer differs from the one the
picture shows, and this script (``make screenshot``) is the fix.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the browser helper shared with the tests

import fieldmem  # noqa: E402
from fieldmem.model.files import write_atomic  # noqa: E402
from fieldmem.model.report import Report  # noqa: E402
from fieldmem.render import RenderOptions, get_renderer  # noqa: E402

from browser import BrowserError, find_browser, screenshot  # noqa: E402

IMAGE = ROOT / "docs" / "images" / "field-report.png"
WINDOW = (1280, 1340)  # the header, the summary, the verdict, the chart and both live-at-peak tables
# the files the pictures show the work of (relative to the repository), hashed into each .source record: the
# page's HTML, CSS and script, and the flame graph's CSS and script, which the page embeds
SOURCES = (
    "fieldmem/render/html.py",
    "fieldmem/render/html_chart.py",
    "fieldmem/render/html_tables.py",
    "fieldmem/render/flame.py",
    "fieldmem/render/assets/report.css",
    "fieldmem/render/assets/report.js",
    "fieldmem/render/assets/flame.css",
    "fieldmem/render/assets/flame.js",
)


def _sha256(path: Path, text: bool) -> str:
    data = path.read_bytes()
    if text:  # the same source whichever line ends a checkout writes
        data = data.replace(b"\r\n", b"\n")
    return hashlib.sha256(data).hexdigest()


def sources(image: Path) -> dict[str, str]:
    """The sha256 of each of :data:`SOURCES` as they are now, and of ``image`` (by its file name)."""
    hashes = {name: _sha256(ROOT / name, text=True) for name in SOURCES if (ROOT / name).is_file()}
    hashes[image.name] = _sha256(image, text=False)
    return hashes


def write_sources(image: Path, record: Path) -> None:
    """Record what ``image`` was made from: one ``SHA256  NAME`` line per file (``sha256sum``'s layout)."""
    lines = [f"{digest}  {name}" for name, digest in sources(image).items()]
    heading = "# what the picture was made from (docs/make_screenshot.py writes this; tests/project/test_docs.py reads it)"
    write_atomic(record, "\n".join([heading, *lines]) + "\n")


def read_sources(record: Path) -> dict[str, str]:
    """The hashes :func:`write_sources` recorded, by file name."""
    recorded = {}
    for line in record.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        if name and not line.startswith("#"):
            recorded[name] = digest
    return recorded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=IMAGE, help=f"the PNG to write (default {IMAGE.relative_to(ROOT)})")
    parser.add_argument("--keep-html", action="store_true", help="also write the page next to the PNG")
    parser.add_argument(
        "--flame-output",
        type=Path,
        default=FLAME_IMAGE,
        help=f"the flame graph's PNG (default {FLAME_IMAGE.relative_to(ROOT)})",
    )
    options = parser.parse_args(argv)
    output: Path = options.output.resolve()  # before the chdir below

    browser = find_browser()
    if browser is None:
        print("make_screenshot: no chromium / google-chrome on PATH (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    os.chdir(ROOT)  # the page shows the target as a user types it: examples/field.py
    report = fieldmem.check("examples/field.py")
    if any(result.status != "ok" for result in report.results):
        print(f"make_screenshot: the Field example did not check: {report.results}", file=sys.stderr)
        return 2
    page = get_renderer("html").render(report, RenderOptions())
    if _shoot(browser, page, output, WINDOW):
        return 2
    if options.keep_html:
        write_atomic(output.with_suffix(".html"), page)
    return flame_screenshot(browser, options.flame_output.resolve())


def _shoot(browser: str, page: str, output: Path, window: tuple[int, int]) -> int:
    """Write ``output``, the picture of ``page`` in a ``window``, and the record of what it was made from;
    1 (said on stderr) where the browser fails."""
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fieldmem-screenshot-") as folder:
        html = Path(folder) / "page.html"
        html.write_text(page, encoding="utf-8")
        shot = Path(folder) / "page.png"
        try:
            screenshot(browser, html, shot, window=window)
        except BrowserError as exc:
            print(f"make_screenshot: {exc}", file=sys.stderr)
            return 1
        # written through a rename, so an interrupted run never leaves a broken image in the docs
        temporary = output.with_name(f".{output.name}.tmp")
        temporary.write_bytes(shot.read_bytes())
        temporary.replace(output)
    write_sources(output, output.with_name(output.name + ".source"))
    print(f"wrote {output} ({output.stat().st_size // 1024} KiB)")
    return 0


# The second picture: the flame graph of a real train step's live peak (docs/peaks.md, docs/html-report.md).
FLAME_IMAGE = ROOT / "docs" / "images" / "train-step-flame.png"
FLAME_WINDOW = (1280, 760)  # the target's heading, both icicles, the legend and the top of the peak-by-line table
# shown in the picture: the page's header, the target's heading, its flame graph and its peak-by-line table (the
# page's own HTML, CSS and script; the summary, the timeline and the other tables hidden so they fit)
_FLAME_ONLY = (
    "<style>main>:not(details.target),details.target>:not(summary):not(section.flame):not(table.peak-lines)"
    "{display:none!important}</style>"
)


def flame_screenshot(browser: str, output: Path) -> int:
    """Write ``output``: the flame graph of ``examples/train_step.py`` (flax linen + optax) in Chromium."""
    with tempfile.TemporaryDirectory(prefix="fieldmem-screenshot-") as folder:
        # checked as `fieldmem check` checks it, in its worker, as a user would run it
        written = Path(folder) / "report.json"
        subprocess.run(
            [sys.executable, "-m", "fieldmem", "check", "examples/train_step.py", "-f", "json", "-o", str(written)],
            cwd=ROOT,
            capture_output=True,
            check=False,
        )
        report = Report.from_dict(json.loads(written.read_text(encoding="utf-8"))) if written.is_file() else None
    if report is None or any(result.status != "ok" for result in report.results):
        print(f"make_screenshot: the train step example did not check: {report}", file=sys.stderr)
        return 2
    page = get_renderer("html").render(report, RenderOptions())
    return 2 if _shoot(browser, page.replace("</head>", _FLAME_ONLY + "</head>", 1), output, FLAME_WINDOW) else 0


if __name__ == "__main__":
    raise SystemExit(main())
