"""Checking an env file against ``schemas/env.schema.json`` (plus each runtime's section), and
wording every problem as ``<field>: <what it must be>, got <value>``.

The schema says what a field must be; this module turns jsonschema's errors into the messages
:mod:`xtask.envdef` has always given: the field as a path (``providers[1].rank``), the rule in
words (the schema's ``x-must``), the value found. Every problem is returned, in the order of the
file, so the user fixes them all in one go.

Pure: reads the schema file once; knows no runtime (the sections are handed in) and no rule the
schema does not state (:mod:`xtask.envdef` checks those).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, ValidationError, validators

from agn.names import is_label, is_subdomain
from agn.yamltext import show
from xtask.resources import data_dir

SCHEMA_FILE = data_dir("schemas") / "env.schema.json"
# What an image reference may look like (registry/path:tag or @sha256:digest; no spaces,
# quotes or control characters).
IMAGE_REF = re.compile(r"[a-z0-9][A-Za-z0-9._\-/:]{0,254}(@sha256:[0-9a-f]{64})?")

Path_ = tuple[str | int, ...]  # a field's place in the file: ("providers", 1, "rank")


def endpoint_problem(value: Any) -> str | None:
    """Why ``value`` is not an http(s) URL with a host (and a valid port, if any), or None."""
    import urllib.parse

    if not isinstance(value, str) or not value:
        return f"must be an http(s) URL, got {show(value)}"
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError as exc:
        return f"must be an http(s) URL, got {value!r} ({exc})"
    if parts.scheme not in ("http", "https"):
        return f"must be an http(s) URL, got {value!r} (scheme {parts.scheme or 'missing'!r})"
    if not parts.hostname:
        return f"must be an http(s) URL with a host, got {value!r}"
    if port == 0:
        return f"must be an http(s) URL with a usable port, got {value!r} (port 0)"
    return None


# The schema's formats: whether a string is one. Non-strings pass (the schema's `type` says).
FORMATS: dict[str, Callable[[str], bool]] = {
    "dns1123-label": is_label,
    "dns1123-subdomain": is_subdomain,
    "image-reference": lambda value: IMAGE_REF.fullmatch(value) is not None,
    "http-url": lambda value: endpoint_problem(value) is None,
}
# Formats whose problem is worded by a function (it says which part is wrong), not by `x-must`.
FORMAT_PROBLEMS: dict[str, Callable[[Any], str | None]] = {"http-url": endpoint_problem}


def _integer(_checker: object, value: object) -> bool:
    # YAML's `true` and `4.0` are not counts: the operator's flags take whole numbers only.
    return isinstance(value, int) and not isinstance(value, bool)


def _number(_checker: object, value: object) -> bool:
    # JSON has no NaN or infinity; YAML's `.nan` and `.inf` would pass every minimum.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


_Validator = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many({"integer": _integer, "number": _number}),
)


def _format_checker() -> FormatChecker:
    checker = FormatChecker(formats=())
    for name, ok in FORMATS.items():
        checker.checks(name)(functools.partial(lambda ok, value: not isinstance(value, str) or ok(value), ok))
    return checker


@functools.cache
def file_schema() -> dict[str, Any]:
    """``schemas/env.schema.json`` as it is on disk."""
    return json.loads(SCHEMA_FILE.read_text())


def env_schema(sections: Iterable[tuple[str, Mapping[str, Any]]], *, versioned: bool = True) -> dict[str, Any]:
    """The file's schema with each runtime's section (key, schema of its value) added: under
    ``runtimes`` in a versioned file (``apiVersion``/``kind: Environment``), at the top level in
    an unversioned one, which has no ``apiVersion``, ``kind`` (but the kind runtime's) or ``runtimes``."""
    schema = copy.deepcopy(file_schema())
    properties = schema["properties"]
    if versioned:
        schema["required"] = ["apiVersion", "kind", *schema["required"]]
    else:
        for key in ("apiVersion", "kind", "runtimes"):
            del properties[key]
    for key, section in sections:
        (properties["runtimes"]["properties"] if versioned else properties)[key] = dict(section)
    # `$ref`s filled in once: resolving them per item costs seconds on a 10,000-provider file.
    return _inlined(schema, schema)


def _inlined(root: Mapping[str, Any], node: Any) -> Any:
    if isinstance(node, Mapping):
        return {k: _inlined(root, v) for k, v in _deref(root, node).items() if k != "$defs"}
    if isinstance(node, list):
        return [_inlined(root, v) for v in node]
    return node


def problems(data: Any, schema: Mapping[str, Any]) -> list[tuple[Path_, str]]:
    """Every problem of ``data`` under ``schema``, in the order of the file: (field, message)."""
    validator = _Validator(schema, format_checker=_format_checker())
    found: dict[tuple[Path_, str], tuple] = {}
    for error in validator.iter_errors(data):
        for path, message, rank in _worded(error, schema, data):
            found.setdefault((path, message), (_order(data, path[:-1] if rank < 2 else path), rank, where(path)))
    return [key for key, _ in sorted(found.items(), key=lambda item: item[1])]


def where(path: Path_) -> str:
    """A field as messages name it: ``providers[1].rank``; ``(top level)`` for the file itself."""
    text = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".")
    return text or "(top level)"


def _worded(error: ValidationError, root: Mapping[str, Any], data: Any) -> list[tuple[Path_, str, int]]:
    """(field, message, rank) of one jsonschema error. Rank orders the problems of one mapping:
    unknown fields, then missing ones, then the fields' own."""
    at: Path_ = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and error.validator_value is False:
        allowed = ", ".join(sorted(error.schema.get("properties", {})))
        extra = sorted((k for k in error.instance if k not in error.schema.get("properties", {})), key=str)
        return [((*at, key), f"unknown field (allowed: {allowed})", 0) for key in extra]
    if error.validator == "required":
        return [((*at, key), "is required", 1) for key in sorted(set(error.validator_value) - set(error.instance))]
    depth, site = _message_site(error, root)
    if site is not None:
        return [(at[:depth], _message(site, _walk(data, at[:depth])), 2)]
    wanted = error.validator_value if error.validator == "type" else None
    wanted = [wanted] if isinstance(wanted, str) else wanted or []
    if "object" in wanted or "array" in wanted:
        return [(at, f"must be a {'mapping' if 'object' in wanted else 'list'}, got {show(error.instance)}", 2)]
    return [(at, error.message, 2)]  # a rule the schema has no words for: jsonschema's own


def _message(site: Mapping[str, Any], value: Any) -> str:
    describe = FORMAT_PROBLEMS.get(site.get("format", ""))
    if describe is not None:
        return describe(value) or f"is not a valid {site['format']}, got {show(value)}"
    return f"{site['x-must'].format_map(site)}, got {show(value)}"


def _message_site(error: ValidationError, root: Mapping[str, Any]) -> tuple[int, Mapping[str, Any] | None]:
    """The innermost schema on the error's way down that words its problems (``x-must``, or a
    format of :data:`FORMAT_PROBLEMS`), with how deep into the document it applies."""
    steps: list[Any] = list(error.absolute_schema_path)[:-1]  # the last step is the failing keyword
    node, depth = _deref(root, root), 0
    found: tuple[int, Mapping[str, Any] | None] = _speaks(node, depth, (0, None))
    i = 0
    while i < len(steps):
        step = steps[i]
        if step in ("properties", "patternProperties"):
            i += 1
            node, depth = node[step][steps[i]], depth + 1
        elif step in ("items", "additionalProperties"):
            node, depth = node[step], depth + 1
        else:  # propertyNames and the like: the same place in the document
            node = node[step]
        node = _deref(root, node)
        found = _speaks(node, depth, found)
        i += 1
    return found


def _deref(root: Mapping[str, Any], node: Any) -> Any:
    """``node`` with its ``$ref`` (a ``#/$defs/...`` of the same schema) filled in; its own keywords win."""
    while isinstance(node, Mapping) and "$ref" in node:
        target: Any = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _speaks(node: Any, depth: int, found: tuple[int, Any]) -> tuple[int, Any]:
    if isinstance(node, Mapping) and ("x-must" in node or node.get("format") in FORMAT_PROBLEMS):
        return depth, node
    return found


def _walk(data: Any, path: Path_) -> Any:
    for part in path:
        data = data[part]
    return data


def _order(data: Any, path: Path_) -> tuple[int, ...]:
    """Where ``path`` is in the file: each key by its place in its mapping, each item by index."""
    out = []
    for part in path:
        if isinstance(data, Mapping):
            keys = list(data)
            out.append(keys.index(part) if part in keys else len(keys))
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            out.append(part)
            data = data[part]
        else:
            out.append(0)
            data = None
    return tuple(out)
