"""JSON Schemas (draft 2020-12) of the documents fieldmem writes, made from their records.

``fieldmem.report/N`` is :class:`fieldmem.model.report.Report` as :mod:`fieldmem.model.codec` writes it,
``fieldmem.baseline/N`` is :class:`fieldmem.gate.baseline.Baseline` and ``fieldmem.fit/N`` is
:class:`fieldmem.model.fit_report.FitReport`; each schema is read off the
records' type hints, so a field or a record added there is in the schema on the next ``make schema``.
The files are shipped in the package (``fieldmem/schemas/*.schema.json``) and
``tests/render/test_schema.py`` fails when they differ from what this module makes now.

A schema accepts a document exactly when this fieldmem reads all of it: every required field there
(one without a default: a missing optional field takes its default), no key it does not know (the
reader would drop it), every word of a ``Literal`` set one it knows (an open set's ``"unknown"``
included: a newer word would read as it), every integer a 64-bit one and every byte count 0 or more
(``fieldmem.model.report``'s rule: a field or key named ``*bytes*`` or ``trip_count``, not a difference).
A document a newer fieldmem wrote may hold more keys and words under the same schema name: check it
against the schema of the fieldmem that wrote it. docs/report-schema.md says more.

Run ``python -m fieldmem.render.schema`` to write the files again, ``--check`` to compare them (exit 1 when
they differ). Nothing here imports jax.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

import fieldmem.model.fit_report as _fit
from fieldmem.gate import baseline as _baseline
from fieldmem.model.codec import stand_in_for, words_of
from fieldmem.model.report import DIFFERENCES, REPORTS_SCHEMA, SUPPORTED_SCHEMAS, Report, Reports, is_size

__all__ = ["DOCUMENTS", "SCHEMA_FOLDER", "Document", "document_schema", "main", "schema_text"]

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_FOLDER = Path(__file__).resolve().parent.parent / "schemas"
_INT64 = {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}
_SIZE = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
# a dict key that holds a byte count (fieldmem.model.report.is_size, as a pattern; JSON Schema patterns search)
_SIZE_KEY = "^(?!saved|marginal|delta).*bytes|^trip_count$"


@dataclass(frozen=True)
class Document:
    """One kind of document: its root record, the schema names a reader accepts (the newest last) and the
    root's fields the file leaves out (a baseline's ``path`` is where it was read from)."""

    name: str  # the file: fieldmem/schemas/NAME.schema.json
    root: type
    schemas: tuple[str, ...]
    summary: str
    docs: str
    omitted: tuple[str, ...] = ()

    @property
    def file(self) -> Path:
        return SCHEMA_FOLDER / f"{self.name}.schema.json"


DOCUMENTS: tuple[Document, ...] = (
    Document(
        "report",
        Report,
        SUPPORTED_SCHEMAS,
        summary="The JSON report of fieldmem check (--format json, -o FILE.json, the pytest plugin's --fieldmem-report).",
        docs="docs/report-schema.md",
    ),
    Document(
        "baseline",
        _baseline.Baseline,
        tuple(sorted(_baseline.SUPPORTED_SCHEMAS)),
        summary="A baseline file of fieldmem check --save-baseline, which --baseline gates against.",
        docs="docs/baselines.md",
        omitted=("path",),
    ),
    Document(
        "reports",
        Reports,
        (REPORTS_SCHEMA,),
        summary="Several reports in one document: fieldmem check --format json on stdout for several backends or "
        "jax releases.",
        docs="docs/report-schema.md",
    ),
    Document(
        "fit",
        _fit.FitReport,
        _fit.SUPPORTED_FIT_SCHEMAS,
        summary="The document of fieldmem fit (--format json, -o FILE.json, --save-baseline FILE): the frontier "
        "of each search.",
        docs="docs/fit.md",
    ),
)


def document_schema(document: Document) -> dict[str, Any]:
    """The JSON Schema of ``document`` (a dict ready for ``json.dumps``)."""
    walker = _Walker()
    root = walker.record(document.root, omitted=document.omitted)
    # the schema name is required (a reader refuses a document without one) and one the readers accept
    root["properties"]["schema"] = {
        "enum": list(document.schemas),
        "description": f"the document's schema; this fieldmem writes {document.schemas[-1]!r}",
    }
    root["required"] = ["schema", *[name for name in root["required"] if name != "schema"]]
    root.pop("description", None)
    newest, older = document.schemas[-1], document.schemas[:-1]
    return {
        "$schema": DIALECT,
        "title": newest,
        "description": (
            f"{document.summary} A {newest} document"
            + (f" (or {', '.join(older)})" if older else "")
            + f" that this fieldmem reads in full; made from its records by fieldmem.render.schema ({document.docs})."
        ),
        **root,
        "$defs": dict(sorted(walker.defs.items())),
    }


def schema_text(document: Document) -> str:
    """The schema as the shipped file holds it."""
    return json.dumps(document_schema(document), indent=2, ensure_ascii=False) + "\n"


class _Walker:
    """Turns type hints into schemas; each record other than the root becomes one ``$defs`` entry."""

    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}
        self._classes: dict[str, type] = {}

    def record(self, cls: type, omitted: Sequence[str] = ()) -> dict[str, Any]:
        hints = typing.get_type_hints(cls)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for item in dataclasses.fields(cls):
            if item.name in omitted:
                continue
            sizes = item.name not in DIFFERENCES
            schema = self.hint(hints[item.name], size=sizes and is_size(item.name), size_keys=sizes)
            default = _default(item)
            if default is not dataclasses.MISSING:
                schema = {**schema, "default": default}
            else:
                required.append(item.name)
            properties[item.name] = schema
        result: dict[str, Any] = {"type": "object"}
        description = _description(cls)
        if description:
            result["description"] = description
        result.update(properties=properties, required=required, additionalProperties=False)
        return result

    def ref(self, cls: type) -> dict[str, Any]:
        name = cls.__name__
        known = self._classes.get(name)
        if known is None:
            self._classes[name] = cls
            self.defs[name] = {}  # a placeholder first: a record that refers to itself finds its own entry
            self.defs[name] = self.record(cls)
        elif known is not cls:
            raise TypeError(f"two records named {name}: {known.__module__} and {cls.__module__}")
        return {"$ref": f"#/$defs/{name}"}

    def hint(self, hint: Any, size: bool = False, size_keys: bool = True) -> dict[str, Any]:
        """The schema of a value of type ``hint``; ``size``: an integer here is a byte count; ``size_keys``: so is
        an integer under a dict key named as one. As the reader checks them: a field's or a key's own integer,
        not the items of a list."""
        origin = typing.get_origin(hint)
        if origin is Literal:
            words = list(words_of(hint))  # a declared word too (fieldmem.model.vocabulary)
            schema: dict[str, Any] = {"enum": words}
            stand_in = stand_in_for(hint)
            if stand_in is not None:
                schema["description"] = f"open set: a word a newer fieldmem adds reads as {stand_in!r}"
            return schema
        if origin in (Union, types.UnionType):
            options = [self.hint(a, size, size_keys) for a in typing.get_args(hint) if a is not type(None)]
            if type(None) in typing.get_args(hint):
                options.append({"type": "null"})
            return options[0] if len(options) == 1 else {"anyOf": options}
        if hint is bool:
            return {"type": "boolean"}
        if hint is int:
            return dict(_SIZE if size else _INT64)
        if hint is float:
            return {"type": "number"}
        if hint is str:
            return {"type": "string"}
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            return self.ref(hint)
        if origin is tuple:
            args = typing.get_args(hint)
            if len(args) == 2 and args[1] is Ellipsis:
                return {"type": "array", "items": self.hint(args[0])}
            if not args:
                return {"type": "array"}
            return {
                "type": "array",
                "prefixItems": [self.hint(a) for a in args],
                "items": False,
                "minItems": len(args),
            }
        if origin is dict:
            key, value = typing.get_args(hint)
            if key is not str:
                raise TypeError(f"a dict's keys are written as strings, not {key}")
            schema = {"type": "object", "additionalProperties": self.hint(value)}
            sized = self.hint(value, size=True)
            if size_keys and sized != schema["additionalProperties"]:
                schema["patternProperties"] = {_SIZE_KEY: sized}
            return schema
        if hint is Any:
            return {}
        raise TypeError(f"no JSON Schema for the type hint {hint!r}: teach fieldmem.render.schema it")


def _default(item: dataclasses.Field[Any]) -> Any:
    """The field's default as JSON (a tuple as a list, an empty dict), or MISSING when it has none."""
    if item.default is not dataclasses.MISSING:
        value = item.default
    elif item.default_factory is not dataclasses.MISSING:
        value = item.default_factory()
    else:
        return dataclasses.MISSING
    if isinstance(value, tuple):
        return list(value)
    return value


def _description(cls: type) -> str:
    """The record's docstring as one paragraph per line; none for dataclass's made-up ``Name(a: int, ...)``."""
    doc = inspect.getdoc(cls) or ""
    if not cls.__dict__.get("__doc__") or doc.startswith(f"{cls.__name__}("):
        return ""
    paragraphs = [" ".join(p.split()) for p in doc.split("\n\n")]
    return "\n".join(p for p in paragraphs if p)


def main(argv: Sequence[str] | None = None, write: Callable[[str], object] = sys.stderr.write) -> int:
    """``python -m fieldmem.render.schema [--check]``: write the shipped schemas, or say which differ (exit 1)."""
    args = list(sys.argv[1:] if argv is None else argv)
    check = args == ["--check"]
    if args and not check:
        write("usage: python -m fieldmem.render.schema [--check]\n")
        return 2
    stale = []
    for document in DOCUMENTS:
        text = schema_text(document)
        current = document.file.read_text(encoding="utf-8") if document.file.exists() else None
        if current == text:
            continue
        stale.append(document.file)
        if not check:
            document.file.parent.mkdir(exist_ok=True)
            document.file.write_text(text, encoding="utf-8")
            write(f"wrote {document.file}\n")
    if check and stale:
        names = ", ".join(str(path) for path in stale)
        write(f"{names}: not what the records make now; run make schema (python -m fieldmem.render.schema)\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
