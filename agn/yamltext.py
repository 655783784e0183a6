"""Parsing YAML that a person wrote (kubeconfigs, environment files) with one-line errors.

PyYAML's messages span several lines and quote the input back; users get one line that says
what is wrong and where. Callers prefix the file name. Pure: text in, data out.
"""

from __future__ import annotations

from typing import Any

import yaml


class YamlProblem(ValueError):
    """The text is not UTF-8 or not YAML; ``str()`` is one line without the file name."""


def parse_yaml(data: bytes | str) -> Any:
    """One YAML document (``None`` for an empty one). Raises :class:`YamlProblem`."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise YamlProblem(f"not UTF-8 text (byte {exc.start})") from None
    try:
        return yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise YamlProblem(f"not valid YAML ({describe(exc)})") from None


def describe(exc: yaml.YAMLError) -> str:
    """``line L, column C: problem`` (1-based), on one line."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["unreadable"])[0]
    context = getattr(exc, "context", None)
    if context and not context.startswith("while "):  # "while parsing a block mapping" adds nothing
        problem = f"{context}, {problem}"
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + " ".join(str(problem).split())


def show(value: Any, *, limit: int = 60) -> str:
    """A value for an error message: its repr, shortened, with the type when that helps."""
    text = repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    if isinstance(value, (dict, list)) or value is None:
        return f"{type(value).__name__} {text}" if value is not None else "nothing (null)"
    return text
