"""The JSON Schemas of the report and the baseline (fieldmem/schemas): made from the records, shipped as made,
and as strict as the readers.

Every report and baseline the rest of the suite writes is checked against them by tests/conftest.py
(``documents_match_their_schema``); here: the shipped files are what the records make now, the generator
follows type hints (a record or a field added is in the schema on the next ``make schema``), the schema
refuses what the readers refuse, and the conftest hook fails a test whose document does not match.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jsonschema
import pytest

from fieldmem.gate.baseline import BaselineError, load_baseline, save_baseline
from fieldmem.model.codec import encode, read_unknown_as
from fieldmem.model.errors import ReportError
from fieldmem.model.report import Report
from fieldmem.render import schema as schema_module
from fieldmem.render.schema import DOCUMENTS, Document, document_schema, schema_text

from factories import make_copy, make_report, make_result, make_variant

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]


def validator(name: str) -> jsonschema.Draft202012Validator:
    document = next(d for d in DOCUMENTS if d.name == name)
    return jsonschema.Draft202012Validator(json.loads(document.file.read_text(encoding="utf-8")))


def refused(name: str, document: Any) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator(name).iter_errors(document)]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: d.name)
def test_the_shipped_schema_is_what_the_records_make_now(document: Document) -> None:
    shipped = document.file.read_text(encoding="utf-8")
    assert shipped == schema_text(document), (
        f"{document.file.relative_to(ROOT)} is not what the records make now: run make schema "
        "(python -m fieldmem.render.schema) and commit the file"
    )
    jsonschema.Draft202012Validator.check_schema(json.loads(shipped))
    assert json.loads(shipped)["title"] == document.schemas[-1]


# -- the generator, on records of its own -----------------------------------------------------------------

Mood = Literal["calm", "busy"]
Weather = Literal["sun", "rain", "unknown"]
read_unknown_as(Weather, "unknown")


@dataclass(frozen=True)
class Leaf:
    """A leaf.

    With a second paragraph."""

    name: str
    bytes: int
    mood: Mood = "calm"


@dataclass(frozen=True)
class Tree:
    leaves: tuple[Leaf, ...]
    weather: Weather | None
    shape: tuple[int, ...] = ()
    pair: tuple[str, int] = ("a", 1)
    figures: dict[str, int | None] = field(default_factory=dict)
    savings: dict[str, int | None] = field(default_factory=dict)  # differences: may be negative
    delta_bytes: int = 0
    ratio: float | None = None
    schema: str = "tree/1"
    path: str = ""  # where it was read from, never written


TREE = Document("tree", Tree, ("tree/1",), summary="A tree.", docs="here", omitted=("path",))


def tree_document(**changes: Any) -> dict[str, Any]:
    document = encode(
        Tree(
            leaves=(Leaf("a", 4),),
            weather="rain",
            shape=(2, 3),
            figures={"temp_bytes": 8, "count": -1},
            savings={"temp_bytes": -8},
            delta_bytes=-4,
            ratio=0.5,
        )
    )
    del document["path"]
    document.update(changes)
    return document


def tree_errors(document: dict[str, Any]) -> list[str]:
    return [e.message for e in jsonschema.Draft202012Validator(document_schema(TREE)).iter_errors(document)]


def test_the_schema_follows_the_records_type_hints() -> None:
    schema = document_schema(TREE)
    assert schema["title"] == "tree/1" and schema["$schema"].endswith("2020-12/schema")
    assert set(schema["properties"]) == {f for f in Tree.__dataclass_fields__ if f != "path"}
    assert schema["required"] == ["schema", "leaves", "weather"]
    assert schema["additionalProperties"] is False
    leaf = schema["$defs"]["Leaf"]
    assert leaf["description"] == "A leaf.\nWith a second paragraph."
    assert leaf["required"] == ["name", "bytes"] and leaf["properties"]["mood"] == {
        "enum": ["calm", "busy"],
        "default": "calm",
    }
    assert "open set" in schema["properties"]["weather"]["anyOf"][0]["description"]
    assert "Tree" not in schema["$defs"] and schema["description"].startswith("A tree. A tree/1 document")
    assert tree_errors(tree_document()) == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"leaves": [{"name": "a", "bytes": -1}]}, "-1 is less than the minimum of 0"),
        ({"leaves": [{"name": "a", "bytes": 2**63}]}, "is greater than the maximum"),
        ({"leaves": [{"name": "a", "bytes": 4, "mood": "sad"}]}, "'sad' is not one of ['calm', 'busy']"),
        ({"leaves": [{"name": "a", "bytes": 4, "colour": "green"}]}, "Additional properties are not allowed"),
        ({"leaves": [{"name": "a"}]}, "'bytes' is a required property"),
        ({"weather": "snow"}, "is not valid under any of the given schemas"),
        ({"figures": {"temp_bytes": -8}}, "-8 is not valid under any of the given schemas"),
        ({"figures": {"temp_bytes": "8"}}, "is not valid under any of the given schemas"),
        ({"pair": ["a", 1, 2]}, "Expected at most 2 items"),
        ({"shape": [2.5]}, "2.5 is not of type 'integer'"),
        ({"schema": "tree/2"}, "'tree/2' is not one of ['tree/1']"),
        ({"path": "/tmp/tree.json"}, "Additional properties are not allowed"),
    ],
)
def test_the_schema_refuses_a_wrong_value(changes: dict[str, Any], expected: str) -> None:
    errors = tree_errors(tree_document(**changes))
    assert any(expected in e for e in errors), errors


def test_differences_and_list_items_are_no_byte_counts() -> None:
    """As fieldmem.model.report reads them: a difference (``savings``, ``delta_bytes``) may be negative, and so
    may an item of a list (``shape``); a key named as a size (``temp_bytes``) in a dict may not."""
    assert tree_errors(tree_document(savings={"temp_bytes": -1}, delta_bytes=-1, shape=[-1])) == []
    assert tree_errors(tree_document(figures={"count": -1})) == []


def test_a_hint_the_generator_does_not_know_is_an_error_naming_it() -> None:
    @dataclass(frozen=True)
    class Odd:
        when: set[str]

    with pytest.raises(TypeError, match="no JSON Schema for the type hint set"):
        document_schema(Document("odd", Odd, ("odd/1",), summary="", docs=""))


# -- as strict as the readers ------------------------------------------------------------------------------


def report_document() -> dict[str, Any]:
    copies = (make_copy(kind="loop", of="u", trip_count=3),)
    return make_report((make_result(donated=make_variant("donated", copies=copies)),)).to_dict()


def set_at(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    *parents, last = path.split(".")
    node: Any = changed
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return changed


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("results.0.status", "fine"),  # a closed set
        ("min_bytes", -1),
        ("results.0.variants.donated.copies.0.bytes", -4),
        ("results.0.variants.donated.memory.temp_bytes", "4"),
        ("results.0.name", KeyError),
        ("devices.0.id", 2**63),
        ("schema", "fieldmem.report/9"),
    ],
)
def test_what_the_report_reader_refuses_the_schema_refuses(path: str, value: Any) -> None:
    document = report_document()
    assert refused("report", document) == []
    changed = set_at(document, path, value)
    with pytest.raises(ReportError):
        Report.from_dict(changed)
    assert refused("report", changed)


def test_a_word_or_key_a_newer_fieldmem_wrote_is_read_but_not_this_schemas() -> None:
    """The reader takes a newer report (an open set's new word reads as "unknown", a new key is dropped);
    the schema describes what this fieldmem reads in full, so it names both."""
    newer = set_at(report_document(), "results.0.variants.donated.copies.0.kind", "teleport")
    newer["results"][0]["flame"] = {}
    unknown: list[str] = []
    Report.from_dict(newer, unknown)
    assert unknown
    errors = refused("report", newer)
    assert any("'teleport' is not one of" in e for e in errors), errors
    assert any("'flame' was unexpected" in e for e in errors), errors


def test_what_the_baseline_reader_refuses_the_schema_refuses(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    save_baseline(path, make_report((make_result(),)))
    document = json.loads(path.read_text())
    assert refused("baseline", document) == []
    for where, value in (("entries.0.min_bytes", -1), ("entries.0.name", KeyError), ("schema", "fieldmem.baseline/0")):
        changed = set_at(document, where, value)
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(changed))
        with pytest.raises(BaselineError):
            load_baseline(bad)
        assert refused("baseline", changed), where


# -- make schema --------------------------------------------------------------------------------------------


def test_make_schema_writes_and_checks_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema_module, "SCHEMA_FOLDER", tmp_path / "schemas")
    said: list[str] = []
    assert schema_module.main(["--check"], said.append) == 1
    assert "run make schema" in said[-1]
    assert schema_module.main([], said.append) == 0
    names = sorted(p.name for p in (tmp_path / "schemas").iterdir())
    assert names == ["baseline.schema.json", "fit.schema.json", "report.schema.json", "reports.schema.json"]
    assert schema_module.main(["--check"], said.append) == 0
    stale = tmp_path / "schemas" / "report.schema.json"
    stale.write_text(stale.read_text().replace('"min_bytes"', '"minimum_bytes"'))
    assert schema_module.main(["--check"], said.append) == 1
    assert "report.schema.json" in said[-1] and "baseline.schema.json" not in said[-1]
    assert schema_module.main(["--fix"], said.append) == 2


# -- the conftest hook ---------------------------------------------------------------------------------------

HOOKED = """
import json, os, subprocess, sys
from factories import make_report, make_result

def test_written_here():
    make_report((make_result(),), min_bytes=-1).to_dict()

def test_written_by_another_process(tmp_path):
    code = (
        "import sys; sys.path.insert(0, sys.argv[2]);"
        "from factories import make_report, make_result;"
        "from fieldmem.render.jsonout import document_text;"
        "open(sys.argv[1], 'w').write(document_text(make_report((make_result(),), min_bytes=-2).to_dict()))"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "r.json"), os.environ["TESTS"]], check=True)

def test_written_by_the_test_itself(tmp_path):
    from fieldmem.render.jsonout import document_text
    hostile = {**make_report((make_result(),)).to_dict(), "min_bytes": -3}
    (tmp_path / "r.json").write_text(document_text(hostile))

def test_valid():
    make_report((make_result(),)).to_dict()
"""


def test_the_hook_fails_a_test_whose_report_the_schema_refuses(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the conftest as it is: a document made in the test's process, one another process wrote into
    its tmp_path; not one the test wrote by hand (hostile inputs are written so on purpose)."""
    pytester.makeconftest((Path(__file__).parents[1] / "conftest.py").read_text())
    shutil.copy(Path(__file__).parents[1] / "factories.py", pytester.path / "factories.py")
    pytester.makepyfile(test_hooked=HOOKED)
    monkeypatch.setenv("TESTS", str(pytester.path))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    output = result.stdout.str()
    result.assert_outcomes(passed=4, errors=2)
    assert "ERROR at teardown of test_written_here" in output and "report $.min_bytes: -1" in output
    assert "ERROR at teardown of test_written_by_another_process" in output and "min_bytes: -2" in output
    assert "min_bytes: -3" not in output


def test_python_m_fieldmem_schema_check_passes_on_the_shipped_files() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem.render.schema", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "")
