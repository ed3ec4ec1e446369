"""The docs show what the code does: the README's demo block, and the HTML report's screenshot.

The README's demo block is what the first commands of ``make demo`` print at
the width the README states, without colour. The commands are read from the
Makefile's ``demo`` recipe (each one it shows, ``echo '$$ fieldmem ...'``, is
checked to be the one it runs), run here in a copy of ``examples/`` and
compared with the block, line by line, after writing the volatile parts (the
fieldmem version, timings) the same way on both sides. When the output
changes on purpose, ``python tests/project/test_docs.py --update`` rewrites the block.

``docs/images/field-report.png`` is made by ``make screenshot``
(``docs/make_screenshot.py``), which records beside it, in
``field-report.png.source``, a hash of the HTML renderer and of the image: a
renderer changed since is a screenshot to make again.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAKEFILE = ROOT / "Makefile"
# a paragraph, then a block that starts with a shown command: the demo block is the one whose paragraph
# names `make demo` and the width (``at 100 columns``)
_SHOWN_BLOCK = re.compile(r"\n\n(?P<intro>[^\n]+(?:\n[^\n]+)*)\n\n```\n(?P<block>\$ fieldmem [^`]*?)```\n")
# the environment variables that would colour the output or change its width
_TERMINAL_ENV = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES", "TERM")


def demo_commands(makefile: str) -> list[str]:
    """The fieldmem commands of the Makefile's ``demo`` recipe as it shows them (``fieldmem check ...``).

    Each shown command (``@echo '$$ COMMAND'``) must be followed by a line that runs the same command
    (``@$(BIN)/COMMAND``, up to a ``;``): what the demo says it runs is what it runs.
    """
    lines = makefile.split("\n")
    start = next(n for n, line in enumerate(lines) if line.startswith("demo:"))
    recipe: list[str] = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        if recipe and recipe[-1].endswith("\\"):
            recipe[-1] = recipe[-1][:-1].rstrip() + " " + line.strip()
        else:
            recipe.append(line.strip())
    shown: list[str] = []
    run: list[str] = []
    for step in recipe:
        for part in step.split("; "):  # `@echo; echo '$$ ...'` shows a blank line, then the command
            part = part.strip().removeprefix("@")
            echoed = re.fullmatch(r"echo '\$\$ (.*)'", part)
            if echoed:
                shown.append(echoed.group(1))
            elif part.startswith("$(BIN)/fieldmem "):
                run.append(part.removeprefix("$(BIN)/"))
    assert shown and shown == run, f"the demo shows {shown}\nbut runs {run}"
    return shown


def readme_demo() -> tuple[str, int, list[str], str]:
    """The README's demo block: the paragraph before it, the width it states, the commands it shows, and
    its text."""
    found = [
        (m, width)
        for m in _SHOWN_BLOCK.finditer(README.read_text(encoding="utf-8"))
        if "make demo" in m.group("intro") and (width := re.search(r"\bat (\d+) columns\b", m.group("intro")))
    ]
    assert len(found) == 1, "README.md: one block of `$ fieldmem ...` after a paragraph on `make demo` at N columns"
    match, width = found[0]
    block = match.group("block")
    commands = [line[2:] for line in block.splitlines() if line.startswith("$ ")]
    return match.group("intro"), int(width.group(1)), commands, block


def demo_output(commands: list[str], width: int, folder: Path) -> str:
    """What ``make demo`` prints for ``commands`` at ``width`` columns, without colour, run in ``folder``
    (a copy of ``examples/`` is made there): the commands as the demo shows them, each followed by its
    output, a blank line between two."""
    shutil.copytree(ROOT / "examples", folder / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in _TERMINAL_ENV}
    env["COLUMNS"] = str(width)
    env["FIELDMEM_CACHE_DIR"] = "none"  # every compile as a fresh clone makes it
    parts = []
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "fieldmem", command
        ran = subprocess.run(
            [sys.executable, "-m", "fieldmem", *argv[1:]],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=600,
        )
        assert ran.returncode in (0, 1), f"{command}: exit {ran.returncode}\n{ran.stderr}"
        parts.append(f"$ {command}\n{ran.stdout}")
    return "\n".join(parts)


def normalised(text: str) -> list[str]:
    """``text``'s lines without what changes from run to run or release to release: the fieldmem version
    in a report's header, and timings (``1.1 ms``, ``95 µs``, ``0.25 s``)."""
    text = re.sub(r"^fieldmem \S+ ·", "fieldmem VERSION ·", text, flags=re.MULTILINE)
    text = re.sub(r"\b\d+(?:\.\d+)? (?:ms|µs|s)\b", "TIME", text)
    return [line.rstrip() for line in text.splitlines()]


@pytest.mark.compile
def test_the_readme_demo_block_is_what_make_demo_prints(tmp_path: Path) -> None:
    intro, width, commands, block = readme_demo()
    ran = demo_commands(MAKEFILE.read_text(encoding="utf-8"))
    assert commands and commands == ran[: len(commands)], (
        f"the README's demo block shows {commands}: the first commands of `make demo` are {ran[: len(commands)]}"
    )
    stated = re.search(r"\bjax (\d[\w.]*\d)", intro)
    installed = importlib.metadata.version("jax")
    if stated is not None and stated.group(1) != installed:
        pytest.skip(f"the README's demo block is jax {stated.group(1)}'s output; this is jax {installed}")
    actual = demo_output(commands, width, tmp_path)
    if normalised(actual) != normalised(block):
        diff = "\n".join(
            difflib.unified_diff(normalised(block), normalised(actual), "README.md", "make demo", lineterm="")
        )
        pytest.fail(
            f"README.md's demo block is not what `make demo` prints at {width} columns "
            f"(`python tests/project/test_docs.py --update` rewrites it):\n{diff}",
            pytrace=False,
        )


def test_the_demo_commands_are_read_from_the_makefile() -> None:
    makefile = (
        "demo: $(STAMP)\n"
        "\t@echo '$$ fieldmem check a.py --html r.html'\n"
        "\t@$(BIN)/fieldmem check a.py \\\n"
        "\t  --html r.html; status=$$?; [ $$status -le 1 ] || exit $$status\n"
        "\t@echo; echo '$$ fieldmem check b.py -v'\n"
        "\t@$(BIN)/fieldmem check b.py -v\n"
        "\n"
        "test:\n\t@echo '$$ fieldmem check c.py'\n"
    )
    assert demo_commands(makefile) == ["fieldmem check a.py --html r.html", "fieldmem check b.py -v"]
    drifted = makefile.replace("check b.py -v\n\n", "check b.py\n\n")
    with pytest.raises(AssertionError, match="but runs"):
        demo_commands(drifted)


def test_the_normalisation_keeps_everything_but_versions_and_timings() -> None:
    a = "fieldmem 0.1.0 · jax 0.10.2 · cpu\n  run (donated, 1.1 ms): took 95 µs   \n  footprint 4.0 MiB"
    b = "fieldmem 0.2.0.dev3 · jax 0.10.2 · cpu\n  run (donated, 2.25 s): took 120 µs\n  footprint 4.0 MiB"
    assert normalised(a) == normalised(b)
    assert normalised(a) != normalised(a.replace("4.0 MiB", "4.5 MiB"))
    assert normalised(a) != normalised(a.replace("jax 0.10.2", "jax 0.10.3"))


# ---- the screenshot -----------------------------------------------------------------------------


def _screenshot_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_screenshot", ROOT / "docs" / "make_screenshot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_screenshots_are_not_older_than_the_html_renderer() -> None:
    script = _screenshot_script()
    image: Path = script.IMAGE
    records = sorted(image.parent.glob("*.png.source"))
    assert image.with_name(image.name + ".source") in records, f"{image.name}: run `make screenshot`"
    for record in records:
        picture = record.with_suffix("")  # field-report.png.source -> field-report.png
        assert picture.is_file(), f"{record.name} without its picture: run `make screenshot`"
        recorded = script.read_sources(record)
        current = script.sources(picture)
        stale = sorted(name for name in current if recorded.get(name) != current[name])
        assert not stale, (
            f"{picture.relative_to(ROOT)} was made from another version of {', '.join(stale)}: "
            "run `make screenshot` (it rewrites the pictures and their .source records)"
        )


def test_the_screenshot_record_names_each_file_it_hashes(tmp_path: Path) -> None:
    script = _screenshot_script()
    image = tmp_path / "shot.png"
    image.write_bytes(b"\x89PNG not really")
    record = tmp_path / "shot.png.source"
    script.write_sources(image, record)
    recorded = script.read_sources(record)
    assert set(recorded) == {*script.SOURCES, "shot.png"}  # each source exists (a renamed one is noticed)
    assert recorded == script.sources(image)
    assert recorded["shot.png"] == hashlib.sha256(image.read_bytes()).hexdigest()
    image.write_bytes(b"\x89PNG another picture")  # an image swapped without `make screenshot`
    assert script.read_sources(record) != script.sources(image)


def main(argv: list[str]) -> int:
    """``--update``: rewrite the README's demo block with what the commands it shows print now."""
    if argv != ["--update"]:
        print("usage: python tests/project/test_docs.py --update", file=sys.stderr)
        return 2
    import tempfile

    _, width, commands, block = readme_demo()
    with tempfile.TemporaryDirectory(prefix="fieldmem-readme-") as folder:
        actual = demo_output(commands, width, Path(folder))
    text = README.read_text(encoding="utf-8")
    README.write_text(text.replace(f"```\n{block}```\n", f"```\n{actual}```\n", 1), encoding="utf-8")
    print(f"README.md: the demo block at {width} columns, {len(actual.splitlines())} lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
