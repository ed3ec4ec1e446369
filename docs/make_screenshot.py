"""Regenerate docs/images/field-report.png: the HTML report of examples/field.py in headless Chromium.

    .venv/bin/python docs/make_screenshot.py            # or: make screenshot

Checks the Field example (one compile of each variant), renders the page
with fieldmem's HTML renderer, and has Chromium screenshot it at 1280 px
wide. Needs Chromium or Chrome on PATH (Debian: ``apt-get install chromium``).
The page is also kept next to the image as ``field-report.html`` only when
``--keep-html`` is given, so the docs folder holds just the picture.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the browser helper shared with the tests

from browser import BrowserError, find_browser, screenshot  # noqa: E402

import fieldmem  # noqa: E402
from fieldmem.files import write_atomic  # noqa: E402
from fieldmem.render import RenderOptions, get_renderer  # noqa: E402

IMAGE = ROOT / "docs" / "images" / "field-report.png"
WINDOW = (1280, 1340)  # the header, the summary, the verdict, the chart and both live-at-peak tables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=IMAGE, help=f"the PNG to write (default {IMAGE.relative_to(ROOT)})")
    parser.add_argument("--keep-html", action="store_true", help="also write the page next to the PNG")
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
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fieldmem-screenshot-") as folder:
        html = Path(folder) / "field-report.html"
        html.write_text(page, encoding="utf-8")
        shot = Path(folder) / "field-report.png"
        try:
            screenshot(browser, html, shot, window=WINDOW)
        except BrowserError as exc:
            print(f"make_screenshot: {exc}", file=sys.stderr)
            return 2
        # written through a rename, so an interrupted run never leaves a broken image in the docs
        temporary = output.with_name(f".{output.name}.tmp")
        temporary.write_bytes(shot.read_bytes())
        temporary.replace(output)
    if options.keep_html:
        write_atomic(output.with_suffix(".html"), page)
    print(f"wrote {output} ({output.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
