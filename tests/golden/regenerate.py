"""Regenerate the golden HLO texts from real compiles.

Run from anywhere: ``python tests/golden/regenerate.py`` (or ``make golden``).
Writes ``tests/golden/<name>.<plain|donated>.hlo`` for every case of
``functions.py``. Absolute paths in the text (the source file recorded in the
metadata) are rewritten relative to the repository root, so the goldens do
not depend on where the repository is checked out.

The hand-written goldens (``hand_*.hlo``) are not touched.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VARIANTS = ("plain", "donated")


def _stable(text: str) -> str:
    functions = str(HERE / "functions.py")
    text = text.replace(functions, "tests/golden/functions.py")
    text = text.replace(str(ROOT) + os.sep, "")
    if not text.endswith("\n"):
        text += "\n"
    return text


def main() -> int:
    sys.path.insert(0, str(HERE))
    import functions
    import jax

    written = []
    for name in sorted(functions.CASES):
        for variant in VARIANTS:
            with warnings.catch_warnings():
                # "Some donated buffers were not usable" is expected for some cases
                warnings.simplefilter("ignore")
                text = functions.compiled_text(name, variant)
            path = HERE / f"{name}.{variant}.hlo"
            path.write_text(_stable(text))
            written.append(path.name)
    print(f"jax {jax.__version__}: wrote {len(written)} golden texts to {HERE}", *written, sep="\n  ")
    # the TPU and GPU compiles (acc_*.hlo): tests/golden_buffers/accelerators.py, in a process of its own
    accelerators = ROOT / "tests" / "golden_buffers" / "accelerators.py"
    return os.spawnv(os.P_WAIT, sys.executable, [sys.executable, str(accelerators), "hlo"])


if __name__ == "__main__":
    raise SystemExit(main())
