"""The output formats of ``-o``/``--output``, as kubectl has them.

``table`` is for people (``wide``: the same with more columns, where a command has them);
``json`` is the command's versioned report (:mod:`xtask.reports`), one document on stdout;
``yaml`` is that same document in YAML (same keys, same order: it is made from the JSON, so
the two can never differ); ``name`` is one ``kind/name`` line per object the command is about,
as ``kubectl get -o name`` prints them (``inferenceprovider.agn.dev/p-one``), for
``xargs`` and ``kubectl get $(...)``. What each command names is in its ``--help``.

Results only ever go to stdout; progress goes to stderr (:func:`xtask.cli.output.progress`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any

from xtask.cli.output import emit_json, printable

TABLE, WIDE, JSON, YAML, NAME = "table", "wide", "json", "yaml", "name"
REPORT_FORMATS = (JSON, YAML, NAME)


def choices(*, wide: bool = False) -> list[str]:
    """The values ``-o`` takes: ``table`` first (the default), ``wide`` where a table has more columns."""
    return [TABLE, *([WIDE] if wide else []), *REPORT_FORMATS]


def plain(data: Any) -> Any:
    """``data`` as the JSON document carries it (values JSON cannot hold written as text)."""
    return json.loads(json.dumps(data, default=str))


def yaml_text(data: Any) -> str:
    """The JSON document of ``data`` in YAML: same keys in the same order, safe_dump."""
    import yaml

    return yaml.safe_dump(plain(data), sort_keys=False, width=1_000_000)


def emit_report(report: dict[str, Any], output: str, names: Iterable[str] = ()) -> None:
    """Print ``report`` on stdout as ``output`` says (``json``, ``yaml``; ``name``: the lines of ``names``)."""
    if output == JSON:
        emit_json(report)
    elif output == YAML:
        sys.stdout.write(yaml_text(report))
        sys.stdout.flush()
    elif output == NAME:
        emit_names(names)
    else:
        raise ValueError(f"not a report format: {output!r}")


def emit_names(names: Iterable[str]) -> None:
    """One ``kind/name`` per line (names are data: shown with control characters escaped)."""
    sys.stdout.write("".join(f"{printable(n)}\n" for n in names))
    sys.stdout.flush()
