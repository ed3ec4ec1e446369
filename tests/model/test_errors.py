"""Every FieldmemError is where fieldmem/model/errors.py says it is; ReportError is one (no jax)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fieldmem.model import errors
from fieldmem.model.errors import FieldmemError, ReportError
from fieldmem.model.report import Report

PACKAGE = Path(errors.__file__).resolve().parents[1]


def _fieldmem_errors() -> dict[str, str]:
    """Each FieldmemError subclass defined in fieldmem/, by name: the file that defines it, relative to the
    package (read from the source: importing every module would import jax)."""
    bases: dict[str, tuple[str, list[str]]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                bases[node.name] = (path.relative_to(PACKAGE).as_posix(), names)
    found = {"FieldmemError": "model/errors.py"}
    grew = True
    while grew:
        grew = False
        for name, (where, parents) in bases.items():
            if name not in found and any(parent in found for parent in parents):
                found[name] = where
                grew = True
    return found


def test_errors_py_lists_every_fieldmem_error_where_it_lives() -> None:
    listed = errors.__doc__ or ""
    found = _fieldmem_errors()
    assert len(found) > 15  # the scan found them
    for name, where in found.items():
        if where == "model/errors.py":
            assert name == "FieldmemError" or f":class:`{name}`" in listed, name
            assert name in errors.__all__, name
        else:
            assert f"``{where}``" in listed and f"``{name}``" in listed, f"{name} ({where})"


def test_a_report_error_is_a_fieldmem_error_and_still_a_value_error() -> None:
    assert issubclass(ReportError, FieldmemError) and issubclass(ReportError, ValueError)
    with pytest.raises(ValueError, match="is not one this fieldmem reads") as raised:
        Report.from_dict({"schema": "other/1"})
    assert isinstance(raised.value, FieldmemError) and raised.value.exit_code == 2
    assert str(raised.value) == (
        "schema 'other/1' is not one this fieldmem reads (fieldmem.report/1, fieldmem.report/2)"
    )
