"""JSON renderer: the ``fieldmem.report/2`` document (named so as not to shadow ``json``)."""

from __future__ import annotations

import json

from fieldmem.render import RenderOptions
from fieldmem.report import Report


def render(report: Report, options: RenderOptions) -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"
