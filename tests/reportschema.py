"""Every ``--output json`` report a test reads goes through :func:`parse_report`, which checks it
against its JSON Schema in ``schemas/`` (picked by the report's ``kind``). A report that drifts
from its schema fails the test that produced it."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from xtask.reports import API_VERSION, SCHEMA_FILES

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


@functools.cache
def validator(kind: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / SCHEMA_FILES[kind]).read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def check_report(report: Any, kind: str | None = None) -> dict:
    """``report`` if it is a valid report (of ``kind``, when given); AssertionError naming every problem."""
    assert isinstance(report, dict), f"a report is a JSON object, got {type(report).__name__}"
    assert report.get("apiVersion") == API_VERSION, f"apiVersion {report.get('apiVersion')!r}"
    assert report.get("kind") in SCHEMA_FILES, f"unknown report kind {report.get('kind')!r}"
    if kind is not None:
        assert report["kind"] == kind, f"expected a {kind}, got a {report['kind']}"
    errors = sorted(validator(report["kind"]).iter_errors(report), key=lambda e: list(e.path))
    assert not errors, f"{report['kind']} does not match its schema:\n" + "\n".join(
        f"  at /{'/'.join(map(str, e.path))}: {e.message}" for e in errors
    )
    return report


def parse_report(text: str, kind: str | None = None) -> dict:
    """Parse a command's stdout as one JSON report and validate it."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise AssertionError(f"no JSON report on stdout: {text[-2000:]!r}") from exc
    return check_report(data, kind)
