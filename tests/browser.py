"""Headless Chromium for the HTML report's tests and the docs screenshot.

Finds a Chromium or Chrome on ``PATH`` and runs it once per page, headless,
with a fresh profile and every background service that would reach for the
network switched off: on a machine without network, Chromium otherwise
waits for those services and hangs. Each run has a timeout, after which the
browser's whole process group (and only it) is killed.

No pytest here: ``docs/make_screenshot.py`` uses it too.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

__all__ = ["BROWSER_NAMES", "BrowserError", "dump_dom", "find_browser", "require_browser", "screenshot"]

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT_S = 90.0
WINDOW = (1280, 1800)

_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)


class BrowserError(RuntimeError):
    """The browser failed, or did not finish in time."""


def find_browser() -> str | None:
    """The first of chromium / chromium-browser / google-chrome found on PATH, or None."""
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def require_browser() -> str:
    """The browser, for a test; without one, skip saying why — or fail, where CI requires one
    (``FIELDMEM_REQUIRE_BROWSER=1``)."""
    import pytest

    found = find_browser()
    if found is None:
        reason = f"no headless browser: none of {', '.join(BROWSER_NAMES)} is on PATH (apt-get install chromium)"
        if os.environ.get("FIELDMEM_REQUIRE_BROWSER") == "1":
            pytest.fail(f"FIELDMEM_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    return found


def _run(browser: str, arguments: list[str], url: str, timeout: float) -> str:
    """Run the browser once on ``url`` and return its stdout; raise BrowserError on failure."""
    with tempfile.TemporaryDirectory(prefix="fieldmem-chromium-") as profile:
        command = [browser, *_FLAGS, f"--user-data-dir={profile}", *arguments, url]
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, so a hang is killed with its helpers
        )
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise BrowserError(
                f"{Path(browser).name} did not finish within {timeout:.0f} s: {' '.join(command)}"
            ) from None
        if process.returncode != 0:
            tail = "\n".join(stderr.strip().splitlines()[-15:])
            raise BrowserError(f"{Path(browser).name} exited with {process.returncode}:\n{tail}")
        return stdout


def dump_dom(browser: str, page: Path, window: tuple[int, int] = WINDOW, timeout: float = TIMEOUT_S) -> str:
    """The page's DOM after its scripts ran, serialized by the browser (``--dump-dom``)."""
    return _run(
        browser,
        [f"--window-size={window[0]},{window[1]}", "--virtual-time-budget=5000", "--dump-dom"],
        page.resolve().as_uri(),
        timeout,
    )


def screenshot(
    browser: str, page: Path, png: Path, window: tuple[int, int] = WINDOW, timeout: float = TIMEOUT_S
) -> Path:
    """A PNG of the page's first ``window`` pixels, written to ``png``."""
    png = png.resolve()
    _run(
        browser,
        [f"--window-size={window[0]},{window[1]}", "--virtual-time-budget=5000", f"--screenshot={png}"],
        page.resolve().as_uri(),
        timeout,
    )
    if not png.is_file():
        raise BrowserError(f"{Path(browser).name} ran but wrote no screenshot to {png}")
    return png
