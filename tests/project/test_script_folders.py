"""benchmarks/ and hardware/: few scripts, each one documented, and no path in the docs or the Makefile to a
script that is gone.

Issue 51 reduced benchmarks/ to what the ``make`` targets run plus one shared runner (``runner.py``), the
one-off studies summarised in benchmarks/README.md and deleted, and moved the checks on real hardware to
hardware/. These tests keep it so: a new study does not creep back in as a script of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The most scripts benchmarks/ may hold (issue 51: "at most 15 benchmark scripts"), .py and .sh together.
MOST_BENCHMARK_SCRIPTS = 15
FOLDERS = ("benchmarks", "hardware")
#: What names a script by its path: ``benchmarks/naive.py``, ``hardware/tpu_check_device.sh``.
SCRIPT_PATH = re.compile(r"\b(?:benchmarks|hardware)/[\w/.-]*?\.(?:py|sh)\b")
#: The current docs and the Makefile (CHANGELOG.md is history: it names scripts as they were).
NAMING = [
    ROOT / "Makefile",
    ROOT / "README.md",
    ROOT / "ARCHITECTURE.md",
    *(ROOT / folder / "README.md" for folder in FOLDERS),
    *sorted((ROOT / "docs").glob("*.md")),
]


def _scripts(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".sh") and "__pycache__" not in p.parts)


def test_benchmarks_holds_at_most_15_scripts() -> None:
    scripts = [str(p.relative_to(ROOT)) for p in _scripts("benchmarks")]
    assert len(scripts) <= MOST_BENCHMARK_SCRIPTS, (
        f"benchmarks/ holds {len(scripts)} scripts, at most {MOST_BENCHMARK_SCRIPTS}: a one-off study is summarised "
        f"in benchmarks/README.md and its script deleted, a hardware check goes to hardware/: {scripts}"
    )


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_script_is_named_in_its_folder_s_readme(folder: str) -> None:
    readme = (ROOT / folder / "README.md").read_text(encoding="utf-8")
    unnamed = [str(p.relative_to(ROOT)) for p in _scripts(folder) if f"`{p.name}" not in readme]
    assert not unnamed, f"{folder}/README.md does not say what these are: {unnamed}"


def test_every_script_the_docs_and_the_makefile_name_exists() -> None:
    missing = [
        f"{doc.relative_to(ROOT)}: {path}"
        for doc in NAMING
        for path in sorted(set(SCRIPT_PATH.findall(doc.read_text(encoding="utf-8"))))
        if not (ROOT / path).is_file()
    ]
    assert not missing, "paths to scripts that are not there (moved or deleted):\n" + "\n".join(missing)
