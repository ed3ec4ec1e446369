"""What ``import fieldmem`` costs a user's module: registering cases imports no jax and nothing heavy.

A module that registers cases (``fieldmem.case``, ``fieldmem.chain``) imports
fieldmem in the user's own processes too (a training script, a notebook),
where fieldmem must cost next to nothing beside jax. Checked in a fresh
interpreter: what is in ``sys.modules`` after the import and a registration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# never imported by `import fieldmem` and a registration: jax and its native parts, the CLI's libraries,
# the protobuf reader, and fieldmem's checking layers (they come with a check, not with a case)
HEAVY = (
    "jax",
    "jaxlib",
    "numpy",
    "ml_dtypes",
    "typer",
    "rich",
    "pydantic",
    "google.protobuf",
    "msgspec",
    "fieldmem.frontends.api",
    "fieldmem.frontends.cli",
    "fieldmem.frontends.output",
    "fieldmem.driver",
    "fieldmem.parent",
    "fieldmem.xla",
    "fieldmem.findings",
    "fieldmem.render",
    "fieldmem.gate",
)

REGISTER = """
import fieldmem

def update(u):
    return u

def double(u):
    return u

fieldmem.case(update, args=lambda: ((),), donate="all", expect="in-place", max_peak="64MiB", new="out[0]")
fieldmem.chain(update, double, args=lambda: ((),))
"""


def _env() -> dict[str, str]:
    """This environment, with this checkout first on the path."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _modules_after(code: str) -> list[str]:
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_import_fieldmem_and_registering_cases_import_no_jax_and_nothing_heavy() -> None:
    modules = _modules_after(REGISTER)
    assert "fieldmem.request.registry" in modules  # the registration ran here
    assert _heavy(modules) == []


def test_the_checking_api_is_imported_on_first_use() -> None:
    """The names of fieldmem.frontends.api are the package's still, and the first one used brings the API (and no jax)."""
    modules = _modules_after("import fieldmem\nfieldmem.check_function")
    assert "fieldmem.frontends.api" in modules
    assert [m for m in _heavy(modules) if m != "fieldmem.frontends.api"] == []


@pytest.mark.parametrize("name", ["NotInPlaceError", "assert_in_place", "check_chain", "check_function"])
def test_every_public_name_resolves(name: str) -> None:
    import fieldmem
    from fieldmem.frontends import api

    assert name in fieldmem.__all__ and name in dir(fieldmem)
    assert getattr(fieldmem, name) is getattr(api, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    import fieldmem

    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        fieldmem.nothing_here  # noqa: B018
    assert _modules_after("from fieldmem import *\nassert callable(check_function) and callable(case)")


def test_the_package_loads_nothing_so_the_command_starts_its_worker_first() -> None:
    """The ``fieldmem`` command spawns its worker from fieldmem.frontends.entry before anything else loads: importing
    the package on the way there brings only its version (in fieldmem.model's ``__init__``; the registry,
    the report and the rest load when first used), so the worker starts that much sooner."""
    modules = _modules_after("import fieldmem.frontends.entry, fieldmem.parent.spawn")
    assert [m for m in modules if m.split(".")[0] == "fieldmem"] == [
        "fieldmem",
        "fieldmem.frontends",
        "fieldmem.frontends.entry",
        "fieldmem.model",
        "fieldmem.parent",
        "fieldmem.parent.spawn",
    ]
    assert _heavy(modules) == ["fieldmem.parent", "fieldmem.parent.spawn"]  # the spawner only: standard library
    names = _modules_after("import fieldmem\nfrom fieldmem import FieldmemError, case\nfieldmem.Case")
    assert "fieldmem.request.registry" in names and "fieldmem.model.errors" in names


# what a worker never loads: fieldmem fit's plan and document, the report's records (built by the parent), the parent
NOT_IN_WORKER = ("fieldmem.request.fit", "fieldmem.model.fit_report", "fieldmem.model.report", "fieldmem.parent")


def test_the_worker_loads_no_record_it_never_builds() -> None:
    """The worker imports its modules before jax, one after the other, while the check waits: ``fieldmem fit``'s
    plan and document and the report's records (built by the parent) are not among them (they were, for one
    environment variable's name, about 60 ms a check)."""
    modules = _modules_after(
        "import fieldmem.worker.main, fieldmem.worker.serve, fieldmem.worker.local_readers, fieldmem.driver"
    )
    assert [m for m in modules if m.startswith(NOT_IN_WORKER)] == []


def test_the_worker_loads_what_every_check_needs_while_it_waits_and_no_jax() -> None:
    """While it waits for its request, the worker loads numpy and jaxlib and fieldmem's modules every check runs
    (``AHEAD``), not jax: the user's module is imported before jax starts. Each name is one it imports later."""
    modules = _modules_after("import fieldmem.worker.main as m\nm._warm_up()")
    from fieldmem.worker.main import AHEAD

    assert [m for m in AHEAD if m not in modules] == []
    assert "jaxlib.xla_client" in modules and [m for m in modules if m == "jax" or m.startswith("jax.")] == []
    assert [m for m in modules if m.startswith(NOT_IN_WORKER)] == []


SENT = """
import json, sys
from fieldmem.parent.worker_process import WorkerProcess
LATER = ("fieldmem.frontends.output", "fieldmem.gate.baseline", "fieldmem.render.jsonout", "fieldmem.parent.decide")
seen = []
send = WorkerProcess.send
def sending(self, request):
    seen.append([m for m in LATER if m in sys.modules])
    send(self, request)
WorkerProcess.send = sending
from fieldmem.frontends.cli import main
code = main(["check", "examples/field.py", "--no-cache", "-f", "json", "-o", sys.argv[1]])
print(json.dumps({"code": code, "at_send": seen, "after": [m for m in LATER if m in sys.modules]}))
"""


@pytest.mark.compile
def test_the_command_sends_its_request_before_it_loads_its_output(tmp_path: Path) -> None:
    """A real ``fieldmem check``: when its request goes to the worker, the parent has not loaded its output (the
    gate, the baselines, the renderers) nor the brain's findings; they load after it, while the worker loads jax."""
    done = subprocess.run(
        [sys.executable, "-c", SENT, str(tmp_path / "report.json")],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["code"] == 0 and (tmp_path / "report.json").is_file()
    assert seen["at_send"] == [[]]  # one request, sent before any of them loaded
    assert len(seen["after"]) == 4  # and all of them loaded by the end of the check
