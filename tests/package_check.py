"""``make package-check``: build fieldmem's wheel and sdist as a user would, install the wheel into a fresh
virtual environment with the tpu and gpu extras, and run the demo from it.

Each step prints one line with its time; a failing one shows its log and exits 1. It checks that:

- ``python -m build`` makes both (``dist/``), and each holds what it must: the shipped data (the JSON
  Schemas, the GPU target configs), the README; the sdist the examples and no half a test suite;
- the wheel installs with ``[tpu,gpu,examples]`` into a new venv (the versions ``requirements-test.txt``
  pins, from pip's cache after ``make test``), and ``import fieldmem`` there is the installed package,
  not this checkout;
- from a folder outside the checkout, ``fieldmem check examples/field.py`` exits 0 or 1 (as ``make demo``
  accepts) and writes a report the installed JSON Schema accepts, and a deviceless compile for a TPU and
  a GPU (the extras) works.

Needs the package index (or pip's cache) for the build backend and the extras. About a minute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "build" / "package-check"
DIST = ROOT / "dist"
VENV = WORK / "venv"
LOG = WORK / "log.txt"

# what each archive must hold (paths inside it, below its top folder for the sdist)
IN_BOTH = (
    "fieldmem/schemas/report.schema.json",
    "fieldmem/schemas/baseline.schema.json",
    "fieldmem/model/specs/gpu/NOTICE.md",
    "fieldmem/model/specs/gpu/h100_sxm.txtpb",
    "fieldmem/render/assets/report.css",
    "fieldmem/render/assets/report.js",
    "fieldmem/render/assets/flame.css",
    "fieldmem/render/assets/flame.js",
    "fieldmem/__main__.py",
)
IN_SDIST = ("README.md", "pyproject.toml", "examples/field.py")
ENTRY_POINTS = (
    "fieldmem = fieldmem.frontends.entry:main",
    "fieldmem = fieldmem.pytest_plugin",
)  # the command, the plugin


class Failed(Exception):
    """A step failed; its message says which, and the log has the rest."""


def run(command: Sequence[str | os.PathLike[str]], cwd: Path = ROOT, ok: Sequence[int] = (0,)) -> str:
    """Run ``command``, its output appended to the log; raise Failed on an exit code not in ``ok``."""
    with LOG.open("a", encoding="utf-8") as log:
        log.write(f"\n$ {' '.join(map(str, command))}\n")
        log.flush()
        done = subprocess.run(
            [str(c) for c in command], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        log.write(done.stdout)
    if done.returncode not in ok:
        raise Failed(f"{' '.join(map(str, command))} exited {done.returncode}")
    return done.stdout


def step(name: str, started: float) -> None:
    print(f"package-check: {name} ({time.monotonic() - started:.1f} s)", flush=True)


def missing(names: Sequence[str], wanted: Sequence[str]) -> list[str]:
    return [w for w in wanted if w not in names]


def main() -> int:
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    LOG.write_text("")
    try:
        check()
    except Failed as exc:
        sys.stdout.write(LOG.read_text(encoding="utf-8", errors="replace")[-20_000:])
        print(f"package-check: error: {exc} (log: {LOG.relative_to(ROOT)})", file=sys.stderr)
        return 1
    return 0


def check() -> None:
    started = time.monotonic()
    for old in DIST.glob("fieldmem-*"):  # an earlier build's; nothing else of dist/ is touched
        old.unlink()
    run([sys.executable, "-m", "build", "--outdir", DIST, "."])
    wheels, sdists = sorted(DIST.glob("fieldmem-*.whl")), sorted(DIST.glob("fieldmem-*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise Failed(f"python -m build made {[p.name for p in DIST.iterdir()]}, not one wheel and one sdist")
    wheel, sdist = wheels[0], sdists[0]
    step(f"built {wheel.name} and {sdist.name}", started)

    with zipfile.ZipFile(wheel) as archive:
        in_wheel = archive.namelist()
        entry_points = next(archive.read(n).decode() for n in in_wheel if n.endswith(".dist-info/entry_points.txt"))
    with tarfile.open(sdist) as archive:
        in_sdist = [n.split("/", 1)[1] for n in archive.getnames() if "/" in n]
    lacking = [f"wheel: {n}" for n in missing(in_wheel, IN_BOTH)]
    lacking += [f"sdist: {n}" for n in missing(in_sdist, IN_BOTH + IN_SDIST)]
    lacking += [f"wheel entry point: {n}" for n in ENTRY_POINTS if n not in entry_points]
    stray = [f"sdist: {n}" for n in in_sdist if n.startswith("tests/") or "__pycache__" in n]
    if lacking or stray:
        raise Failed("; ".join([f"missing {n}" for n in lacking] + [f"should not ship {n}" for n in stray[:5]]))
    step("the wheel and the sdist hold the package data, the README and the examples", started)

    run([sys.executable, "-m", "venv", "--clear", VENV])
    python = VENV / "bin" / "python"
    pip = [python, "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "install", "--quiet", "--upgrade", "pip"])
    run([*pip, "install", "--quiet", "-c", ROOT / "requirements-test.txt", f"{wheel}[tpu,gpu,examples]"])
    step(f"installed {wheel.name}[tpu,gpu,examples] into a fresh venv ({VENV.relative_to(ROOT)})", started)

    with tempfile.TemporaryDirectory(prefix="fieldmem-package-check-") as folder:
        elsewhere = Path(folder)
        where = run([python, "-c", "import fieldmem; print(fieldmem.__file__)"], cwd=elsewhere).strip()
        if not Path(where).is_relative_to(VENV):
            raise Failed(f"import fieldmem in the fresh venv found {where}, not the installed package")
        fieldmem = VENV / "bin" / "fieldmem"
        report = elsewhere / "report.json"
        # the table on stdout, the JSON report into the file
        shown = run([fieldmem, "check", ROOT / "examples" / "field.py", "-f", "json", "-o", report], elsewhere, (0, 1))
        print(shown, end="", flush=True)
        step("fieldmem check examples/field.py, from the installed wheel", started)
        validate(report, Path(where).parent / "schemas" / "report.schema.json")
        step("its JSON report matches the schema the wheel ships", started)
        run(
            [fieldmem, "check", ROOT / "examples" / "interior.py", "--backend", "gpu:h100,tpu:v5e"],
            elsewhere,
            ok=(0, 1),
        )
        step("fieldmem check examples/interior.py --backend gpu:h100,tpu:v5e (the extras)", started)


def validate(report: Path, schema: Path) -> None:
    """The report against the installed schema, with this interpreter's jsonschema (the test requirements)."""
    import jsonschema

    try:
        validator = jsonschema.Draft202012Validator(json.loads(schema.read_text(encoding="utf-8")))
        errors = [f"{e.json_path}: {e.message[:200]}" for e in validator.iter_errors(json.loads(report.read_text()))]
    except (OSError, ValueError) as exc:
        raise Failed(f"cannot read {report} or {schema}: {exc}") from None
    if errors:
        raise Failed(f"the report does not match {schema}: {'; '.join(errors[:5])}")


if __name__ == "__main__":
    raise SystemExit(main())
